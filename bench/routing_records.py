#!/usr/bin/env python3
"""Compact gemm_bench results into the records a routing table is built from.

  python3 bench/routing_records.py -o routes/h200-measurements.json \
      bench/results/2026-11-30-gemm-h200/gemm_tp1.json.gz bench/results/2026-11-30-gemm-h200/gemm_tp8.json.gz \
      bench/results/2026-11-30-decode-h200/decode_*.json

Output: [[scale, out, n, k, m, backend, config, us], ...], sorted. "floor" (a roofline, not a kernel)
and "reference" (never a routing choice) are dropped; a point measured in several files (tp1 and
tp8 share shapes, decode repeats small M) keeps its minimum, the same rule as min over repeats.
Bias and model are not kept: the routing key is (scale, out, N, K) and then M.
"""
import argparse, gzip, json


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    best = {}
    for path in args.inputs:
        for r in load(path):
            if r["backend"] in ("floor", "reference") or r.get("bias"):
                continue
            key = (r["scale"], r["out"], r["n"], r["k"], r["m"], r["backend"], r["config"])
            best[key] = min(best.get(key, float("inf")), r["us"])
    rows = [[*key, round(us, 4)] for key, us in sorted(best.items())]
    with open(args.output, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    print(f"{args.output}: {len(rows)} records from {len(args.inputs)} files")


if __name__ == "__main__":
    main()
