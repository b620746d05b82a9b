import csv, sys, gzip, io
f = sys.argv[1]
txt = gzip.open(f, 'rt').read() if f.endswith('.gz') else open(f).read()
lines = txt.splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
minexec = int(sys.argv[2]) if len(sys.argv) > 2 else 0
stalls = [k for k in rows[0] if k.startswith('stall_') and 'Not Issued' not in k]
tot = sum(int(r['Warp Stall Sampling (All Samples)'] or 0) for r in rows)
print('instructions', len(rows), 'samples', tot, 'executed', sum(int(r['Instructions Executed'] or 0) for r in rows))
for r in rows:
    ex = int(r['Instructions Executed'] or 0)
    if ex < minexec: continue
    s = int(r['Warp Stall Sampling (All Samples)'] or 0)
    main = sorted(((int(r[k] or 0), k[6:]) for k in stalls), reverse=True)[:2]
    print(f"{r['Address'][-5:]} {ex:9d} {s:6d} {r['Source'][:90]:90s} {main[0][1]}:{main[0][0]} {main[1][1]}:{main[1][0]}")
