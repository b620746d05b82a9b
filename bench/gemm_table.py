#!/usr/bin/env python3
"""Summarise gemm_bench JSON records: per problem the best config of each backend, the ratio of the
best of our own backends (CUTLASS, skinny) to cuBLASLt, and the aggregate figures the GEMM
backends issue asks for.

  python3 bench/gemm_table.py gemm_tp1.json[.gz] gemm_tp8.json[.gz] [--markdown table.md]
"""
import argparse
import gzip
import json
import math
from collections import defaultdict


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+")
    ap.add_argument("--markdown", help="write the per-problem table here")
    args = ap.parse_args()
    rows = [r for path in args.json for r in json.load(gzip.open(path) if path.endswith(".gz") else open(path))]
    best = defaultdict(dict)  # (scale, n, k, m) -> backend -> record
    label = {}
    for r in rows:
        key = (r["scale"], r["n"], r["k"], r["m"])
        label.setdefault(key, f'{r["model"]}/{r["layer"]} tp{r["tp"]}')
        b = best[key].get(r["backend"])
        if b is None or r["us"] < b["us"]:
            best[key][r["backend"]] = r

    lines = ["| scale | layer | N | K | M | cuBLASLt µs | ours µs | our best backend/config | ours / cuBLASLt speed | best TFLOP/s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    ratios = defaultdict(list)  # (scale, band) -> cublaslt_us / cutlass_us
    worst = {}
    for key in sorted(best):
        scale, n, k, m = key
        d = best[key]
        lt = d.get("cublaslt")
        own = [r for b, r in d.items() if b not in ("cublaslt", "floor", "reference")]
        ct = min(own, key=lambda r: r["us"]) if own else None
        ratio = lt["us"] / ct["us"] if lt and ct else float("nan")
        top = min(d.values(), key=lambda r: r["us"])
        lines.append(f'| {scale} | {label[key]} | {n} | {k} | {m} | {lt["us"]:.2f} | ' if lt else f'| {scale} | {label[key]} | {n} | {k} | {m} | — | ')
        ratio_s = f"{ratio:.2f}x" if lt and ct else "—"
        lines[-1] += (f'{ct["us"]:.2f} | {ct["backend"]}/{ct["config"]} | {ratio_s} | {top["tflops"]:.0f} |' if ct else "— | — | — | |")
        if lt and ct:
            band = "decode (M<=16)" if m <= 16 else "middle (32-512)" if m <= 512 else "prefill (>=1024)"
            ratios[(scale, band)].append(ratio)
            if scale not in worst or ratio < worst[scale][0]:
                worst[scale] = (ratio, key)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")

    print("best of our backends (CUTLASS, skinny) vs cuBLASLt (speed ratio = cuBLASLt µs / ours µs; >1: ours faster)")
    print(f'{"scale":7} {"M band":18} {"problems":>8} {"geomean":>8} {"min":>6} {"max":>6} {"ours>=cuBLASLt":>18}')
    for (scale, band), rs in sorted(ratios.items()):
        wins = sum(r >= 1 for r in rs)
        print(f"{scale:7} {band:18} {len(rs):8d} {geomean(rs):8.3f} {min(rs):6.2f} {max(rs):6.2f} {wins:11d} of {len(rs)}")
    for scale, (r, key) in sorted(worst.items()):
        print(f"worst {scale}: {r:.2f}x at {label[key]} n={key[1]} k={key[2]} m={key[3]}")
    # Large prefill (M = 4096): the best TFLOP/s of each backend per scale kind.
    for scale in ("tensor", "row", "block"):
        for be in ("cublaslt", "cutlass_sm90", "skinny"):
            t = [d[be]["tflops"] for (s, n, k, m), d in best.items() if s == scale and m >= 4096 and be in d]
            if t:
                print(f"M>=4096 {scale:6} {be:13} TFLOP/s: max {max(t):.0f}, median {sorted(t)[len(t)//2]:.0f} over {len(t)} shapes")
    uncovered = [label[k] + f" {k}" for k, d in best.items() if "cublaslt" not in d]
    print(f"problems cuBLASLt could not run: {len(uncovered)} (block with M % 4 != 0 or ceil(K/128) % 4 != 0, or no heuristic algorithm)")


if __name__ == "__main__":
    main()
