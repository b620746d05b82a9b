"""wgmma against the best other backend in block-scale tune raw files (each problem's fastest time
per backend): python3 tune_compare.py OLD.raw.jsonl.gz NEW.raw.jsonl.gz"""
import gzip, json, math, sys, collections
def load(p):
    best = collections.defaultdict(dict)  # (m,n,k) -> backend -> min us over rows (last final round wins? use min)
    for line in gzip.open(p, 'rt'):
        r = json.loads(line)
        if 'backend' not in r: continue
        key = (r['m'], r['n'], r['k'])
        b = r['backend']
        best[key][b] = min(best[key].get(b, 1e30), r['us'])
    return best
for p in sys.argv[1:]:
    d = load(p)
    bym = collections.defaultdict(list); wins = 0
    for key, v in d.items():
        if 'wgmma' not in v: continue
        other = min(t for b, t in v.items() if b != 'wgmma')
        bym[key[0]].append(other / v['wgmma']); wins += v['wgmma'] < other
    print(p, 'wgmma fastest on', wins, 'of', sum(len(x) for x in bym.values()),
          ' geomean best-other/wgmma by M:', {m: round(math.exp(sum(map(math.log, x)) / len(x)), 3) for m, x in sorted(bym.items())})
