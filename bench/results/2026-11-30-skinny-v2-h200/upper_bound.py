#!/usr/bin/env python3
"""The most any decode kernel could gain over the best of cuBLASLt and CUTLASS (issue 5's 1.5x target).

A kernel must read the weight once, and the `floor` of gemm_bench is a kernel that does only that
(same method, same run: graph replay, rotation through >= 3x L2). So best(cuBLASLt, CUTLASS) / floor
bounds the speed-up of any GEMM kernel on that problem; its geometric mean over the row-scale
problems of decode_row.json (every models.json layer, TP 1, 2, 4, 8, M = 1, 2, 4, 8, 16) bounds the
issue's geomean. Sensitivity: DEVICE.md measured the floor at 15.2 us for 58.7 MB where ours took
16.2 us here, so the bound is also given with every floor time scaled by 15.2 / 16.2.

  python3 upper_bound.py   (in this folder)
"""
import collections, gzip, json, math

pts = collections.defaultdict(dict)
for r in json.load(gzip.open("decode_row.json.gz", "rt")):
    if r.get("bias"):
        continue
    key = (r["model"], r["layer"], r["tp"], r["m"], r["n"], r["k"])
    pts[key][r["backend"]] = min(pts[key].get(r["backend"], math.inf), r["us"])


def geomean(v):
    return math.exp(sum(map(math.log, v)) / len(v))


for label, scale in (("floor as measured", 1.0), ("floor x 15.2/16.2 (DEVICE.md's figure)", 15.2 / 16.2)):
    by_tp = collections.defaultdict(list)
    for (model, layer, tp, m, n, k), t in pts.items():
        by_tp[tp].append(min(t["cublaslt"], t["cutlass_sm90"]) / (t["floor"] * scale))
    allv = [x for v in by_tp.values() for x in v]
    print(f"{label}: {len(allv)} row problems, M <= 16: best(cuBLASLt, CUTLASS) / floor geomean {geomean(allv):.3f}"
          f" (max {max(allv):.2f}); per TP: " + ", ".join(f"TP {tp} {geomean(v):.3f} ({len(v)})" for tp, v in sorted(by_tp.items())))
skinny = [min(t["cublaslt"], t["cutlass_sm90"]) / t["skinny"] for t in pts.values()]
print(f"skinny today: best(cuBLASLt, CUTLASS) / skinny geomean {geomean(skinny):.3f}")
