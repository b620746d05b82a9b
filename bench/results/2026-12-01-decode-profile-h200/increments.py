import json, gzip, sys, collections
tr = json.load(gzip.open(sys.argv[1]))
ks = sorted([e for e in tr["traceEvents"] if e.get("cat") == "kernel"], key=lambda e: e["ts"])
reps, cur = [], []
for ev in ks:
    if cur and ev["ts"] - (cur[-1]["ts"] + cur[-1]["dur"]) > 1000: reps.append(cur); cur = []
    cur.append(ev)
reps.append(cur); r = reps[-1]
per = int(sys.argv[2]); first = int(sys.argv[3])
inc = collections.defaultdict(list); dur = collections.defaultdict(list); names = {}
for i in range(first, len(r)):
    j = (i - first) % per
    if i - first >= per * ((len(r) - first) // per): break
    end = r[i]["ts"] + r[i]["dur"]; pend = max(e["ts"] + e["dur"] for e in r[:i])
    inc[j].append(end - pend); dur[j].append(r[i]["dur"]); names[j] = r[i]["name"].split("<")[0].split("(")[0][-45:] + " " + str(r[i]["args"].get("grid"))
tot = 0
for j in range(per):
    a = sorted(inc[j])[len(inc[j])//2]; tot += a
    print(f"{j:2d} {names[j]:70s} incr median {a:7.2f}  dur median {sorted(dur[j])[len(dur[j])//2]:7.2f}")
print("sum of median increments per layer", round(tot, 1))
