import csv, sys, gzip, io
for f in sys.argv[1:]:
    txt = gzip.open(f, 'rt').read() if f.endswith('.gz') else open(f).read()
    lines = txt.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    stalls = [k for k in rows[0] if k.startswith('stall_') and 'Not Issued' not in k]
    tot = sum(int(r['Warp Stall Sampling (All Samples)'] or 0) for r in rows)
    hot = [r for r in rows if int(r['Instructions Executed'] or 0) > 1000000]
    hs = sum(int(r['Warp Stall Sampling (All Samples)'] or 0) for r in hot)
    hex_ = sum(int(r['Instructions Executed'] or 0) for r in hot)
    agg = {k[6:]: sum(int(r[k] or 0) for r in hot) for k in stalls}
    print(f, 'total samples', tot, 'hot-loop samples', hs, 'hot instr', hex_, 'n hot', len(hot))
    print('  ', ' '.join(f"{k}:{v}" for k, v in sorted(agg.items(), key=lambda x: -x[1])[:12]))
