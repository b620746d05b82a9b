"""Every wgmma config against the best of cuBLASLt and CUTLASS (block scales) and cuBLASLt's
per-tensor time, from one device call's gemm_bench JSON files: python3 compare.py callA (or callB),
in this folder. TFLOP/s per problem and config; geometric means of best-other time over config time."""
import collections
import gzip
import json
import math
import sys

p = sys.argv[1] if len(sys.argv) > 1 else "callA"


def load(name):
    return json.load(gzip.open(f"{p}_{name}.json.gz"))


def key(r):
    return (r["model"], r["layer"], r["m"], r["n"], r["k"])


W, O, T = collections.defaultdict(dict), collections.defaultdict(dict), {}
for r in load("wgmma"):
    W[key(r)][r["config"]] = r["us"]
for r in load("others"):
    O[key(r)][r["backend"] + ":" + r["config"]] = r["us"]
for r in load("tensor"):
    T[key(r)] = min(T.get(key(r), 1e9), r["us"])
cfgs = sorted({c for v in W.values() for c in v})
print(f"{'problem':34s}" + "".join(f"{c[:20]:>21s}" for c in cfgs) + f"{'best other':>11s}{'tensor':>8s}")
logs = collections.defaultdict(float)
for k in W:
    best_other = min(O[k].values())
    flop = 2.0 * k[2] * k[3] * k[4] / 1e6
    print(f"{k[0][:11]}/{k[1][:14]} m{k[2]:<5d}"[:34].ljust(34)
          + "".join(f"{flop / W[k][c]:21.0f}" if c in W[k] else " " * 21 for c in cfgs)
          + f"{flop / best_other:11.0f}{flop / T[k]:8.0f}")
    for c in cfgs:
        logs[c] += math.log(best_other / W[k][c])
    best_block = min(best_other, min(W[k].values()))
    logs["best wgmma config"] += math.log(best_other / min(W[k].values()))
    logs["per-tensor time / best block time"] += math.log(T[k] / best_block)
n = len(W)
print(f"\ngeometric means over {n} problems (best of cuBLASLt and CUTLASS time / config time):")
for c, v in logs.items():
    print(f"  {c:36s} {math.exp(v / n):.3f}")
