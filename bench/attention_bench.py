#!/usr/bin/env python3
"""Decode attention of one layer, fp8route's fused kernel against the torch path a decoder runs
without it, side by side in one run, on the attention shapes of real models:

  fused  fp8route.decode_attention: per-head norms (Qwen3), RoPE, KV-cache append and grouped-query
         attention in one kernel, over the positions each sequence has
  torch  RoPE of q and k under torch.compile, the cache write with index_put_, SDPA over the
         cache's first kv_len positions with a position mask (what fp8route.models runs with
         attention="sdpa")

  python3 bench/attention_bench.py                      # the default grid, about a minute on an H200
  python3 bench/attention_bench.py --batches 1,64 --kv-lens 1024,8192 --json attn.json

Each case runs as a CUDA graph of `layers` calls on separate caches (as a decoder's layers are), with
enough layers that their caches exceed the L2 cache, so every call reads its K and V from memory;
time per call = graph time / layers (median of --iters replays). GB/s = bytes of K and V read (and
the new rows written) per call over that time; the fraction is of the device-to-device copy
bandwidth measured in the same run.
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e import copy_bandwidth  # noqa: E402

# name: (query heads, kv heads, head dim, per-head q/k norms) of one tensor-parallel rank
SHAPES = {
    "llama-3.1-8b": (32, 8, 128, False),
    "llama-3.1-70b-tp8": (8, 1, 128, False),
    "qwen2.5-72b-tp4": (16, 2, 128, False),
    "qwen3-32b": (64, 8, 128, True),
}


def int_list(text):
    return [int(v) for v in text.split(",") if v.strip()]


def _rope(x, cos, sin):
    d = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., d:], x[..., :d]), dim=-1) * sin


def _rope_qk(q, k, cos_table, sin_table, pos):
    cos, sin = cos_table[pos].unsqueeze(2), sin_table[pos].unsqueeze(2)
    return _rope(q, cos, sin), _rope(k, cos, sin)


_rope_qk_compiled = torch.compile(_rope_qk)


def torch_attention(qkv, kc, vc, cos, sin, pos, hq, hk, kv_len, qn, kn, eps, seq_index):
    """The SDPA path of fp8route.models at a decode step (s = 1)."""
    b, d = qkv.shape[0], kc.shape[-1]
    q = qkv[:, :hq * d].view(b, 1, hq, d)
    k = qkv[:, hq * d:(hq + hk) * d].view(b, 1, hk, d)
    v = qkv[:, (hq + hk) * d:].view(b, 1, hk, d)
    if qn is not None:
        q = F.rms_norm(q, (d,), qn, eps)
        k = F.rms_norm(k, (d,), kn, eps)
    p2 = pos.view(b, 1)
    q, k = _rope_qk_compiled(q, k, cos, sin, p2)
    rows = seq_index[:b, None]
    kc[rows, :, p2] = k
    vc[rows, :, p2] = v
    g = hq // hk
    kh, vh = kc[:, :, :kv_len], vc[:, :, :kv_len]
    mask = (seq_index[:kv_len] <= p2[:, :, None])[:, None]
    o = F.scaled_dot_product_attention(q.reshape(b, hk, g, d), kh, vh, attn_mask=mask)
    return o.reshape(b, hq * d)


def graph_us(fn, layers, iters):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            for i in range(layers):
                fn(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(layers):
            fn(i)
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / layers)
    del graph
    return statistics.median(times)


def run_case(name, batch, kv_len, args, bw):
    import fp8route
    hq, hk, d, norm = SHAPES[name]
    seq = kv_len + 1  # the step writes position kv_len and attends over kv_len + 1 positions
    kv_bytes = 2 * batch * hk * seq * d * 2
    layers = max(4, min(64, math.ceil(args.l2_multiple * 50e6 / kv_bytes)))
    dt = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(batch * 7 + kv_len)
    caches = [torch.randn(2, batch, hk, seq, d, device="cuda", generator=g).to(dt) for _ in range(layers)]
    qkv = torch.randn(batch, (hq + 2 * hk) * d, device="cuda", generator=g).to(dt)
    inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    ang = torch.cat((ang, ang), -1)
    cos, sin = ang.cos().to("cuda", dt), ang.sin().to("cuda", dt)
    pos = torch.full((batch,), kv_len, dtype=torch.long, device="cuda")
    pos32 = pos.to(torch.int32)
    qn = kn = None
    if norm:
        qn, kn = torch.ones(d, device="cuda", dtype=dt), torch.ones(d, device="cuda", dtype=dt)
    seq_index = torch.arange(max(seq, batch), device="cuda")
    fns = {
        "fused": lambda i: fp8route.decode_attention(qkv, caches[i][0], caches[i][1], cos, sin, pos32, hq, hk,
                                                     q_norm=qn, k_norm=kn),
        "torch": lambda i: torch_attention(qkv, caches[i][0], caches[i][1], cos, sin, pos, hq, hk, seq, qn, kn,
                                           1e-6, seq_index),
    }
    rows = []
    for v, fn in fns.items():
        us = graph_us(fn, layers, args.iters)
        gbs = kv_bytes / us / 1e3
        rows.append(dict(model=name, batch=batch, kv_len=kv_len, variant=v, us=us, layers=layers,
                         kv_bytes=kv_bytes, gb_s=gbs, fraction=gbs * 1e9 / bw))
    del caches
    torch.cuda.empty_cache()
    f, t = rows
    print(f"{name:18s} batch {batch:4d} kv {kv_len:6d}: fused {f['us']:8.2f} us ({f['gb_s']:6.0f} GB/s, "
          f"{100 * f['fraction']:4.1f}%)  torch {t['us']:8.2f} us ({t['gb_s']:6.0f} GB/s)  "
          f"speedup {t['us'] / f['us']:5.2f}x", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--batches", type=int_list, default=[1, 8, 32, 128])
    ap.add_argument("--kv-lens", type=int_list, default=[1024, 4096])
    ap.add_argument("--iters", type=int, default=20, help="timed graph replays per case")
    ap.add_argument("--l2-multiple", type=float, default=4.0,
                    help="the layers' caches together are at least this many times 50 MB (the L2)")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/attention_bench.py: needs a CUDA device")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in models if m not in SHAPES]
    if bad:
        sys.exit(f"--models: unknown {bad}; choose from {', '.join(SHAPES)}")
    bw = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}: copy {bw / 1e9:.0f} GB/s (read + write), torch {torch.__version__}")
    rows = []
    for name in models:
        for batch in args.batches:
            for kv_len in args.kv_lens:
                rows += run_case(name, batch, kv_len, args, bw)
    fused = [r["us"] for r in rows if r["variant"] == "fused"]
    torch_ = [r["us"] for r in rows if r["variant"] == "torch"]
    geo = math.exp(sum(math.log(t / f) for f, t in zip(fused, torch_)) / len(fused))
    print(f"geomean speedup of fused over torch: {geo:.2f}x over {len(fused)} cases")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), copy_bytes_per_s=bw, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
