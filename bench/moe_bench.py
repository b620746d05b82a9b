#!/usr/bin/env python3
"""Grouped scaled FP8 GEMM (docs/moe.md) on the GPU machine: each fp8route grouped backend (simt,
decode, wgmma, and the default choice) and torch._scaled_grouped_mm side by side, on the catalog's
expert shapes, masked (decode) and contiguous (decode and prefill) forms.

For each point: E experts of which A are active with m rows each (the others empty), every backend
that supports the problem, row and block scales (torch runs row only). Method as bench/python_bench.py:
each op is captured in a CUDA graph (over rotation sets of weights when they are small enough to
stay in L2), replays interleaved in a shuffled order with an untimed L2 flush before each, median
of 20. Prints the time, the weight-read bandwidth of the active experts (A x N x K bytes / time) and
its fraction of the device copy bandwidth (measured here, bytes read + written per second, the
figure the decode roofline uses), and TFLOP/s. The simt backend (a correctness reference, never
routed) runs only with --backends naming it.

  python3 bench/moe_bench.py [--layers deepseek_v3.gate_up,...] [--m 1,2,4,8,16,32,64] [--active 8,all]
                             [--prefill 128,512,2048] [--backends default,decode,wgmma,cutlass,simt] [--m-max N]
                             [--decode-splits 1,2,4,8] [--json FILE]

--decode-splits adds the decode backend with each of those K split counts per item (where they fit;
else its rule's), named decode@sN, beside the rule's own choice: what the split rule chooses between.
"""
import argparse
import json
import math
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import fp8route  # noqa: E402
from fp8route import chain_trace, tune_grouped  # noqa: E402  (launch knobs; the operands of a grouped call)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e  # noqa: E402  (bench/e2e.py: copy_bandwidth)
from python_bench import l2_bytes, time_interleaved  # noqa: E402  (the interleaved graph timing)

DEV = "cuda"

# (experts on one GPU, N, K) of the catalog's MoE projections (docs/moe.md, shapes/).
LAYERS = {
    "deepseek_v3.gate_up": (32, 4096, 7168),
    "deepseek_v3.down": (32, 7168, 2048),
    "qwen3_30b_a3b.gate_up": (128, 1536, 2048),
    "qwen3_30b_a3b.down": (128, 2048, 768),
    "qwen3_235b_a22b.gate_up": (128, 3072, 4096),
    "qwen3_235b_a22b.down": (128, 4096, 1536),
}
BACKENDS = ["", "decode", "wgmma", "cutlass"]  # "" = the default rule


def counts_for(e, active, m, gen):
    """m rows on each of `active` experts drawn at random, 0 on the others."""
    c = torch.zeros(e, dtype=torch.int32)
    c[torch.randperm(e, generator=gen)[:active]] = m
    return c


def make_set(form, scale, e, n, k, counts, m_max):
    """Operands of one rotation set (weights of its own): fp8route's arguments and torch's (row scales only)."""
    return tune_grouped.operands(form, scale, e, n, k, counts, m_max, *tune_grouped.weights(scale, e, n, k))


def ours(s, form, scale, backend):
    kw = dict(offsets=s["groups"]) if form == "contiguous" else dict(masked_m=s["groups"])
    backend, _, splits = backend.partition("@s")  # decode@sN: N K splits (a launch knob, set around the call)
    splits = int(splits or 0)

    def call():
        chain_trace.set_grouped_decode_splits(splits)
        try:
            return fp8route.grouped_scaled_mm(s["a"], s["b"], s["sa"], s["sb"], scale=scale, out=s["out"],
                                              backend=backend, **kw)
        finally:
            chain_trace.set_grouped_decode_splits(0)
    return call


def torch_grouped(s, form):
    """torch._scaled_grouped_mm, row scales: b as [E, K, N] (a column-major view of [E, N, K])."""
    bt = s["b"].transpose(-2, -1)
    if form == "contiguous":
        offs = s["groups"][1:].contiguous()  # the ends
        return lambda: torch._scaled_grouped_mm(s["a"], bt, s["sa"], s["sb"], offs=offs, out_dtype=torch.bfloat16)
    # 3-D x 3-D (batched); a torch build that wants another scale_a shape is reported, not timed.
    return lambda: torch._scaled_grouped_mm(s["a"], bt, s["sa"], s["sb"], out_dtype=torch.bfloat16)


def run_point(layer, form, scale, m, active, gen, copy_gbs, m_max=None):  # masked: M_max, default m
    e, n, k = LAYERS[layer]
    active = min(active, e)
    counts = counts_for(e, active, m, gen)
    m_max = (m_max or m) if form == "masked" else None
    weight = e * n * k
    # Rotation: enough sets that the active weights of one replay exceed 3x L2, within ~6 GB.
    active_bytes = active * n * k
    sets = max(1, min(math.ceil(3 * l2_bytes() / active_bytes), (6 << 30) // weight, 16))
    data = [make_set(form, scale, e, n, k, counts, m_max) for _ in range(sets)]
    ops = {}
    for be in BACKENDS:
        ops["fp8route:" + (be or "default")] = (lambda be: lambda i: ours(data[i], form, scale, be)())(be)
    if scale == "row":
        ops["torch._scaled_grouped_mm"] = lambda i: torch_grouped(data[i], form)()
    errors = {}
    times = time_interleaved(ops, sets, errors=errors)
    flops = 2.0 * active * m * n * k
    rows = []
    for name, us in sorted(times.items(), key=lambda kv: kv[1]):
        gbs = active_bytes / (us * 1e-6) / 1e9
        rows.append(dict(layer=layer, form=form, scale=scale, m=m, active=active, experts=e, n=n, k=k, op=name,
                         us=us, weight_gbs=gbs, of_copy=gbs / copy_gbs, tflops=flops / (us * 1e-6) / 1e12))
        print(f"  {name:28s} {us:9.2f} us  {gbs:7.0f} GB/s of active weights ({gbs / copy_gbs:5.1%} of copy)"
              f"  {rows[-1]['tflops']:7.1f} TFLOP/s")
    for name, why in errors.items():
        print(f"  {name:28s} not run: {why}")
    del data
    torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--m", default="1,2,4,8,16,32,64", help="rows per active expert at decode")
    ap.add_argument("--active", default="8,all", help="active experts per point ('all' = every expert)")
    ap.add_argument("--prefill", default="256,1024", help="rows per expert, contiguous form, every expert active")
    ap.add_argument("--scales", default="row,block")
    ap.add_argument("--backends", default="default,decode,wgmma,cutlass",
                    help="fp8route grouped backends ('default' = the layer's rule; simt is the slow reference)")
    ap.add_argument("--m-max", type=int, default=0,
                    help="masked form: M_max (the bound a caller allocates, e.g. the batch size) when larger "
                    "than m; default m (every active expert full, the worst case of a kernel whose time "
                    "follows the rows an expert holds)")
    ap.add_argument("--decode-splits", default="",
                    help="also time the decode backend with each of these K split counts per item (decode@sN)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    BACKENDS[:] = ["" if b == "default" else b for b in args.backends.split(",") if b]
    BACKENDS.extend(f"decode@s{int(x)}" for x in args.decode_splits.split(",") if x)
    gen = torch.Generator().manual_seed(0)
    copy_gbs = e2e.copy_bandwidth(1 << 30, 10) / 1e9  # bytes read + written
    print(f"device copy bandwidth {copy_gbs:.0f} GB/s; L2 {l2_bytes() >> 20} MB")
    records = []
    for layer in args.layers.split(","):
        e = LAYERS[layer][0]
        for scale in args.scales.split(","):
            for form in ("masked", "contiguous"):
                for act in args.active.split(","):
                    a = e if act == "all" else int(act)
                    for m in (int(x) for x in args.m.split(",")):
                        mm = max(m, args.m_max) if form == "masked" else None
                        print(f"{layer} {form} {scale} active={min(a, e)}/{e} m={m}" + (f" M_max={mm}" if mm != m and mm else ""))
                        records += run_point(layer, form, scale, m, a, gen, copy_gbs, mm)
            for m in (int(x) for x in args.prefill.split(",") if x):
                print(f"{layer} contiguous {scale} prefill active={e}/{e} m={m}")
                records += run_point(layer, "contiguous", scale, m, e, gen, copy_gbs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
