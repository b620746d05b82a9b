#!/usr/bin/env python3
"""Error of the two accumulation classes by K, against an fp64 reference.

For each K: random activations a [M, K] and weights b [N, K] (bf16 normal values, the weights 50x
smaller, as a layer's are), each quantized per row to E4M3 with fp32 row scales (amax / 448), as
per-token activations and per-channel weights are. The reference is the fp64 product of the
dequantized operands. Compared with it, each as bf16 output:

  fp8route fast      fp8route.scaled_mm(accum="fast"): the routed choice among every config
  fp8route precise   fp8route.scaled_mm(accum="precise"): the routed choice among precise-class configs
  torch precise      torch._scaled_mm(use_fast_accum=False), torch's default
  torch fast         torch._scaled_mm(use_fast_accum=True)
  bf16 rounding      the reference rounded to bf16: the floor every method shares

Columns: max |y - ref| / max |ref| ("max err"), and mean |y - ref| / mean |ref| ("mean err"), each
the worst over --seeds draws; the routed backend/config of each fp8route call. --positive draws
operands of one sign (|x|), whose sums grow steadily: what exposes an accumulator that keeps fewer
bits. Needs torch with CUDA and an SM90 GPU (torch._scaled_mm's row-wise scales).

    python3 bench/accum_error.py --json bench/results/<date>-accum-h200/accum_error.json
    python3 bench/accum_error.py --k 18432 --m 1,64,512 --positive
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import fp8route

FP8 = torch.float8_e4m3fn
QMAX = 448.0


def quantize_rows(x):
    """E4M3 codes and fp32 per-row scales (amax / 448), saturating as the kernels do."""
    x = x.float()
    s = (x.abs().amax(dim=1) / QMAX).clamp(min=1e-10)
    q = (x / s[:, None]).clamp(-QMAX, QMAX).to(FP8)
    return q, s


def errors(y, ref):
    d = (y.double() - ref).abs()
    return d.max().item() / ref.abs().max().item(), d.mean().item() / ref.abs().mean().item()


def choice(m, n, k, accum):
    text = fp8route.explain(m, n, k, scale="row", accum=accum)
    return next((line[len("choice: "):] for line in text.splitlines() if line.startswith("choice: ")), "?")


def run(m, n, k, seeds, positive):
    rows = {}
    for seed in range(seeds):
        g = torch.Generator(device="cuda").manual_seed(1000 * seed + k)
        x = torch.randn(m, k, device="cuda", generator=g, dtype=torch.float32)
        w = torch.randn(n, k, device="cuda", generator=g, dtype=torch.float32) * 0.02
        if positive:
            x, w = x.abs(), w.abs()
        a, sa = quantize_rows(x.to(torch.bfloat16))
        b, sb = quantize_rows(w.to(torch.bfloat16))
        ref = (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).t()
        ys = {
            "fp8route fast": fp8route.scaled_mm(a, b, sa, sb, accum="fast"),
            "fp8route precise": fp8route.scaled_mm(a, b, sa, sb, accum="precise"),
            "torch precise": torch._scaled_mm(a, b.t(), sa[:, None].contiguous(), sb[None, :].contiguous(),
                                              out_dtype=torch.bfloat16, use_fast_accum=False),
            "torch fast": torch._scaled_mm(a, b.t(), sa[:, None].contiguous(), sb[None, :].contiguous(),
                                           out_dtype=torch.bfloat16, use_fast_accum=True),
            "bf16 rounding": ref.to(torch.bfloat16),
        }
        for name, y in ys.items():
            mx, mean = errors(y, ref)
            r = rows.setdefault(name, {"max_err": 0.0, "mean_err": 0.0})
            r["max_err"], r["mean_err"] = max(r["max_err"], mx), max(r["mean_err"], mean)
    rows["fp8route fast"]["route"] = choice(m, n, k, "fast")
    rows["fp8route precise"]["route"] = choice(m, n, k, "precise")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--k", default="1024,4096,8192,14336,18432,28672", help="comma-separated K")
    p.add_argument("--m", default="64", help="comma-separated M")
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--seeds", type=int, default=3, help="random draws per point (the worst is reported)")
    p.add_argument("--positive", action="store_true", help="operands of one sign")
    p.add_argument("--json", help="write the records here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("accum_error.py: needs a CUDA device")
    ks = [int(v) for v in args.k.split(",") if v]
    ms = [int(v) for v in args.m.split(",") if v]
    records = []
    print(f"N={args.n}, row scales, bf16 out, {'one-sign' if args.positive else 'normal'} operands, "
          f"worst of {args.seeds} draws; error against fp64")
    print(f"{'M':>5} {'K':>6}  {'method':<17} {'max err':>10} {'mean err':>10}  route")
    for m in ms:
        for k in ks:
            rows = run(m, args.n, k, args.seeds, args.positive)
            for name, r in rows.items():
                print(f"{m:>5} {k:>6}  {name:<17} {r['max_err']:>10.3e} {r['mean_err']:>10.3e}  {r.get('route', '')}")
                records.append({"m": m, "n": args.n, "k": k, "method": name, "positive": args.positive,
                                "seeds": args.seeds, **r})
            print()
    if args.json:
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "fp8route": fp8route.__version__}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
