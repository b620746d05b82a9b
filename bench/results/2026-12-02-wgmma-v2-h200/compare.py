"""Old against new wgmma (best of the two interleaved rounds each) and against the best of cuBLASLt
and CUTLASS from the same call: python3 compare.py (in this folder)."""
import math
import re


def parse(f):
    d, cur = {}, None
    for line in open(f):
        m = re.match(r'\[\d+/\d+.*?\] (\S+) tp1\s+block bf16 m=(\d+) n=(\d+) k=(\d+)', line)
        if m:
            cur = (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)))
            continue
        m = re.match(r'\s+(\w+)\s+([\d.]+)\s+([\d.]+)\s', line)
        if m and cur:
            d.setdefault(cur, {})[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return d


n1, n2, o1, o2, ot = [parse(f"call14_bench_{x}.txt") for x in ("new1", "new2", "old1", "old2", "others")]
gn = gb = go = 0.0
print(f"{'problem':36s} {'new us':>8s} {'old us':>8s} {'old/new':>7s} {'best other':>10s} {'other/new':>9s} {'TFLOP/s':>8s}")
for k in n1:
    new = min(n1[k]["wgmma"][0], n2[k]["wgmma"][0])
    old = min(o1[k]["wgmma"][0], o2[k]["wgmma"][0])
    best = min(v[0] for v in ot[k].values())
    tflops = 2.0 * k[1] * k[2] * k[3] / new / 1e6
    gn += math.log(old / new); gb += math.log(best / new); go += math.log(best / old)
    print(f"{k[0][:24]:24s} m{k[1]:<5d}n{k[2]:<6d}{new:8.1f} {old:8.1f} {old / new:7.3f} {best:10.1f} {best / new:9.3f} {tflops:8.1f}")
c = len(n1)
print(f"geometric mean over {c}: new {math.exp(gn / c):.3f}x faster than old; best other / new {math.exp(gb / c):.3f}, "
      f"best other / old {math.exp(go / c):.3f}")
