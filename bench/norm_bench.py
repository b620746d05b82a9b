#!/usr/bin/env python3
"""The fused RMSNorm -> quant ops against what a torch user writes at best, side by side on the GPU:

  fp8route fused      rms_norm(x + residual) -> quant in one kernel (rms_norm_per_token_quant /
                      rms_norm_per_token_group_quant with residual=)
  fp8route unfused    fp8route.rms_norm, then fp8route.per_token_quant / per_token_group_quant
  torch.compile       the same arithmetic written in torch (residual add, RMSNorm in fp32, per-token
                      or 1x128-group E4M3 quant), compiled by torch.compile (inductor fuses it)

for the hidden sizes of models.json at decode and prefill T. Each op is graph-captured over
rotation sets spanning >= 3x L2 and replayed interleaved with an untimed L2 flush before each replay,
median of 20 (bench/python_bench.py's method). Also prints each op's bandwidth: bytes it must move
(x, residual in and out, weight, codes, scales) over its time.

  python3 bench/norm_bench.py [--hidden 4096,8192] [--t 1,16,256,4096] [--json FILE]
"""
import argparse
import json
import math
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import fp8route  # noqa: E402
from python_bench import rotation_sets, time_interleaved  # noqa: E402

DEV = "cuda"


def torch_norm(x, r, w, eps):
    h = (x.float() + r.float()).to(x.dtype)
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
    return y, h


def torch_token(x, r, w, eps):
    y, h = torch_norm(x, r, w, eps)
    amax = y.float().abs().amax(-1, keepdim=True).clamp(min=1e-10)
    return (y.float() * (448.0 / amax)).clamp(-448, 448).to(torch.float8_e4m3fn), amax / 448.0, h


def torch_group(x, r, w, eps):
    y, h = torch_norm(x, r, w, eps)
    t, n = y.shape
    g = y.float().view(t, n // 128, 128)
    amax = g.abs().amax(-1, keepdim=True).clamp(min=1e-10)
    q = (g * (448.0 / amax)).clamp(-448, 448).to(torch.float8_e4m3fn).view(t, n)
    return q, (amax / 448.0).view(t, n // 128).t().contiguous(), h


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", default="4096,8192")
    ap.add_argument("--t", default="1,16,256,4096")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch._dynamo.config.cache_size_limit = 256
    c_token = torch.compile(torch_token, dynamic=False)
    c_group = torch.compile(torch_group, dynamic=False)
    eps = 1e-6
    records = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8route {fp8route.__version__}")
    print(f"{'H':>6} {'T':>5} {'format':6} {'fused us':>9} {'unfused us':>11} {'compile us':>11} {'fused/compile':>14} "
          f"{'fused GB/s':>11}")
    for hdim in map(int, args.hidden.split(",")):
        for t in map(int, args.t.split(",")):
            moved = t * hdim * (2 + 2 + 2 + 1) + hdim * 2  # x, residual in/out, codes, weight
            sets = rotation_sets(moved)
            xs = [torch.randn(t, hdim, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
            rs = [torch.randn(t, hdim, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
            w = torch.rand(hdim, device=DEV, dtype=torch.bfloat16) + 0.5
            hs = [torch.empty_like(x) for x in xs]
            ys = [torch.empty_like(x) for x in xs]
            for fmt in ("token", "group"):
                if fmt == "token":
                    outs = [(torch.empty(t, hdim, device=DEV, dtype=torch.float8_e4m3fn),
                             torch.empty(t, device=DEV)) for _ in range(sets)]
                    fused = lambda i: fp8route.rms_norm_per_token_quant(  # noqa: E731
                        xs[i], w, eps, residual=rs[i], residual_out=hs[i], out=outs[i])
                    unfused = lambda i: fp8route.per_token_quant(  # noqa: E731
                        fp8route.rms_norm(xs[i], w, eps, residual=rs[i], out=ys[i], residual_out=hs[i])[0],
                        out=outs[i])
                    compiled = lambda i: c_token(xs[i], rs[i], w, eps)  # noqa: E731
                else:
                    outs = [fp8route.rms_norm_per_token_group_quant(xs[0], w, eps, layout="col_major_tma")
                            for _ in range(sets)]
                    fused = lambda i: fp8route.rms_norm_per_token_group_quant(  # noqa: E731
                        xs[i], w, eps, residual=rs[i], residual_out=hs[i], layout="col_major_tma", out=outs[i])
                    unfused = lambda i: fp8route.per_token_group_quant(  # noqa: E731
                        fp8route.rms_norm(xs[i], w, eps, residual=rs[i], out=ys[i], residual_out=hs[i])[0],
                        layout="col_major_tma", out=outs[i])
                    compiled = lambda i: c_group(xs[i], rs[i], w, eps)  # noqa: E731
                us = time_interleaved({"fused": fused, "unfused": unfused, "compile": compiled}, sets)
                gbs = moved / (us["fused"] * 1e-6) / 1e9
                print(f"{hdim:6d} {t:5d} {fmt:6} {us['fused']:9.2f} {us['unfused']:11.2f} {us['compile']:11.2f} "
                      f"{us['compile'] / us['fused']:13.2f}x {gbs:11.0f}", flush=True)
                records.append({"hidden": hdim, "t": t, "format": fmt, "bytes": moved, **{k + "_us": v for k, v in us.items()}})
    for fmt in ("token", "group"):
        v = [r["compile_us"] / r["fused_us"] for r in records if r["format"] == fmt]
        u = [r["unfused_us"] / r["fused_us"] for r in records if r["format"] == fmt]
        gm = lambda a: math.exp(sum(map(math.log, a)) / len(a))  # noqa: E731
        print(f"{fmt}: fused vs torch.compile {gm(v):.2f}x ({min(v):.2f}-{max(v):.2f}); "
              f"vs fp8route unfused {gm(u):.2f}x ({min(u):.2f}-{max(u):.2f})")
    if args.json:
        json.dump(records, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
