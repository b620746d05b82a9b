#!/usr/bin/env python3
"""The decode chain, kernel by kernel: what each boundary of a batch-1 decode step costs, and how far
each GEMM runs above its weight read, read from the kernels' own %globaltimer stamps (the chain
trace, include/fp8route/tuning/chain_trace.h; needs a build configured with -DFP8ROUTE_CHAIN_TRACE=ON, the
calibrations run in any build).

  python3 bench/decode_chain.py                                   # 8B and 70B-TP8 rank, 8 layers
  python3 bench/decode_chain.py --models llama-3.1-8b --layers 8 --reps 200 --json chain.json
  python3 bench/decode_chain.py --skip-models --split 4096x4096:1,2,4,8 --empty 64

Sections, all in one process on one GPU:
  tick         the smallest %globaltimer step one thread sees: the resolution of every figure.
  empty chain  (a) n kernels that trigger, wait, read one word the previous one wrote and store one,
               with and without PDL, 1 block and one block per SM, in one CUDA graph: time per kernel
               and the traced boundary, the release-latency floor of a chain.
  split        (b) one [N, K] FP8 GEMM (Fp8Linear at M = 1, as the model routes it) against the same
               weight cut into s row chunks chained one after another, R weight copies rotated so the
               weights stream from HBM: (T_s - T_1) / (s - 1) is the HBM idle per GEMM boundary.
  models       Llama-3.1-8B and one Llama-3.1-70B TP-8 rank (bench/e2e.py's configs), --layers layers
               of random FP8 weights (8 x the 8B layer is 1.7 GB, well over L2), batch 1, KV length
               --kv-len, the fp8route backend as bench/e2e.py runs it, one decode step in a CUDA graph.

Per traced kernel (in launch order; `prev` is the previous traced kernel):
  lead      its first wait release - its first block start (how early PDL launched it)
  boundary  its first wait release - prev's last block exit (the chain's cost of the boundary)
  post      its last block exit - its first wait release (its path after the dependency)
  incr      its last block exit - prev's last block exit (what it adds to the step)
  GEMMs:    read = weight bytes / copy bandwidth; above = incr - read and above_post = post - read.
The per-token quant before o_proj and the fused silu_and_mul + quant before down_proj are traced as
their own rows (o_quant, silu_quant). The embedding and lm_head are torch kernels, not traced. The
table shows each kernel of a layer as the median over layers 1 .. L-1 and over --trace-reps
replays; --json keeps every kernel of every replay's median.

--ring own,deep (the default) captures the model twice: with each decode GEMM config's own weight
ring, and with the deep ring (one-block-per-SM configs in one-wave grids request up to their whole
K slice before griddepcontrol.wait; include/fp8route/tuning/gemm_knobs.h), and prints both.

Step times are medians of --reps graph replays with CUDA events (bench/e2e.py's interleaved method),
of the graph captured with the trace armed and of one captured without it (in a trace build the
difference is the trace's own cost); every variant's graphs are timed side by side. Copy bandwidth
and roofline as bench/e2e.py defines them.
The trace perturbs what it measures by one block barrier and six 64-bit atomics per block.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)

import e2e  # noqa: E402  (bench/e2e.py: the model configs, the copy bandwidth, the timing method)

TRACED_BACKENDS = ("decode", "skinny")
L2_BYTES = 60 << 20  # H200; the split test's weights overflow it by rotation


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, w=7):
    return f"{v:{w}.2f}" if v is not None else " " * (w - 1) + "-"


# ---- the trace, per replay ---------------------------------------------------------------------

def traced_replays(replay, reps):
    """reps replays of a graph captured while armed: [[record per slot] per replay]."""
    from fp8route import chain_trace as ct
    out = []
    for _ in range(reps):
        ct.reset()
        replay()
        out.append(ct.read())
    return out


def metrics(recs):
    """Per slot: lead, boundary, post, incr in us (None where an event is missing)."""
    rows = []
    for i, r in enumerate(recs):
        p = recs[i - 1] if i > 0 else None
        us = lambda a, b: (a - b) / 1e3 if a and b else None  # noqa: E731
        rows.append(dict(lead=us(r["release_first"], r["start_first"]),
                         boundary=us(r["release_first"], p["exit_last"]) if p else None,
                         post=us(r["exit_last"], r["release_first"]),
                         incr=us(r["exit_last"], p["exit_last"]) if p else None,
                         span=us(r["exit_last"], r["start_first"])))
    return rows


def median_rows(replays):
    """Per slot, the median over replays of each metric."""
    per = [metrics(recs) for recs in replays]
    return [{k: med(p[i][k] for p in per) for k in per[0][i]} for i in range(len(per[0]))]


# ---- (a) the empty chain -----------------------------------------------------------------------

def empty_chain(args, sms):
    from fp8route import chain_trace as ct
    n = args.empty
    buf = torch.zeros(n + 1, dtype=torch.int32, device="cuda")
    rows = []
    print(f"\n== (a) empty chain: {n} kernels (trigger, wait, one dependent load and store), one CUDA graph")
    print(f"{'variant':>22} {'us/kernel':>9} {'boundary':>9} {'lead':>7} {'post':>7}")
    for pdl in (True, False):
        for blocks in (1, sms):
            name = f"{'pdl' if pdl else 'no pdl'}, {blocks} block{'s' if blocks > 1 else ''}"
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                ct.empty_chain(buf, n, blocks, pdl)
            torch.cuda.current_stream().wait_stream(side)
            ct.arm(n)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                ct.empty_chain(buf, n, blocks, pdl)
            ct.disarm()
            ms = e2e.interleaved_ms({"g": g.replay}, args.reps, 5)["g"]
            traced = median_rows(traced_replays(g.replay, args.trace_reps))
            inner = traced[1:]
            row = dict(variant=name, pdl=pdl, blocks=blocks, us_per_kernel=ms * 1e3 / n,
                       boundary=med(r["boundary"] for r in inner), lead=med(r["lead"] for r in inner),
                       post=med(r["post"] for r in inner))
            rows.append(row)
            print(f"{name:>22} {row['us_per_kernel']:9.2f} {fmt(row['boundary'], 9)} {fmt(row['lead'])} "
                  f"{fmt(row['post'])}")
    return rows


# ---- (b) the split test ------------------------------------------------------------------------

def parse_split(text):
    shape, _, counts = text.partition(":")
    n, k = (int(v) for v in shape.lower().split("x"))
    return n, k, [int(c) for c in counts.split(",")] if counts else [1, 2, 4, 8]


def split_test(args, bw):
    import fp8route
    from fp8route import chain_trace as ct
    from fp8route.linear import Fp8Linear
    out = []
    for spec in args.split:
        n, k, counts = parse_split(spec)
        copies = max(2, math.ceil(2.5 * L2_BYTES / (n * k)))
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        ws = [(torch.randn(n, k, device="cuda", generator=gen) * 0.1).to(torch.float8_e4m3fn) for _ in range(copies)]
        scale = torch.full((n,), 0.01, device="cuda")
        x = torch.randn(1, k, device="cuda", generator=gen).to(torch.bfloat16)
        read_us = n * k / bw * 1e6
        print(f"\n== (b) split test {n}x{k} at M = 1: {copies} weight copies rotated ({copies * n * k / 2**20:.0f} MiB), "
              f"weight read {read_us:.2f} us")
        print(f"{'s':>3} {'route of a chunk':>28} {'us/GEMM':>8} {'above read':>10} {'idle/bdry':>9} "
              f"{'trace bdry':>10}")
        t1 = None
        for s in counts:
            if n % s or (n // s) % 16:
                print(f"{s:>3} skipped: N / s must be a multiple of 16")
                continue
            rows = n // s
            layers = [[Fp8Linear(w[i * rows:(i + 1) * rows].contiguous(), scale[i * rows:(i + 1) * rows].contiguous(),
                                 act="row") for i in range(s)] for w in ws]
            q, qs = fp8route.per_token_quant(x)  # once, outside the graph: the chain is GEMMs only

            def step():
                for chain in layers:
                    for lin in chain:
                        lin.forward_quantized(q, qs)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()
                step()
            torch.cuda.current_stream().wait_stream(side)
            traced = ct.compiled_in()
            if traced:
                ct.arm(8192)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            ct.disarm()
            ms = e2e.interleaved_ms({"g": g.replay}, args.reps, 5)["g"]
            per = ms * 1e3 / copies
            if s == 1:
                t1 = per
            idle = (per - t1) / (s - 1) if s > 1 and t1 is not None else None
            bdry = None
            if traced:
                recs = median_rows(traced_replays(g.replay, args.trace_reps))
                bdry = med(r["boundary"] for r in recs[1:])
            route = layers[0][0].route(1)
            print(f"{s:>3} {route:>28} {per:8.2f} {per - read_us:10.2f} {fmt(idle, 9)} {fmt(bdry, 10)}")
            out.append(dict(n=n, k=k, s=s, copies=copies, route=route, us=per, read_us=read_us, idle_per_boundary=idle,
                            trace_boundary=bdry))
            layers = g = None  # free the chunks before the next count
            torch.cuda.empty_cache()
    return out


# ---- the models --------------------------------------------------------------------------------

def layer_roles(model):
    """The traced kernels of one layer, in launch order: (role, linear or None, note)."""
    routes = model.routes(1)
    layer = model.layers[0]
    traced = lambda name: routes[name].split("/")[0] in TRACED_BACKENDS  # noqa: E731
    roles = [("input_norm", None, "")]
    if traced("qkv"):
        roles.append(("qkv", layer.qkv, ""))
    roles.append(("attention", None, ""))
    roles.append(("o_quant", None, ""))  # the per-token quant of the attention's output
    if traced("o"):
        roles.append(("o", layer.o, ""))
    roles.append(("post_norm", None, ""))
    if traced("gate_up"):
        roles.append(("gate_up", layer.gate_up, ""))
    roles.append(("silu_quant", None, ""))  # the fused SiLU-and-mul per-token quant
    if traced("down"):
        roles.append(("down", layer.down, ""))
    return roles, routes


def capture(model, armed, capacity=4096):
    """DecodeGraph's capture (bench/e2e.py's step: batch 1 at the last cache slot), with the trace
    armed for the capture alone when `armed`. Returns (graph, the traced kernels' names in slot
    order); a later arm() reuses the slots, so the names are kept here."""
    from fp8route import chain_trace as ct
    dev = model.device
    tokens = torch.zeros(1, dtype=torch.long, device=dev)
    positions = torch.full((1,), model.max_seq - 1, dtype=torch.long, device=dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(2):
            model.decode_step(tokens, positions)
    torch.cuda.current_stream(dev).wait_stream(side)
    if armed:
        ct.arm(capacity)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            model.decode_step(tokens, positions)
    finally:
        ct.disarm()
    return g, [r["kernel"] for r in ct.read()] if armed else []


def run_model(name, args, bw, L):
    from fp8route import chain_trace as ct
    entry = e2e.MODELS[name]
    cfg_dict = dict(entry["config"], num_hidden_layers=args.layers)
    cfg = L.LlamaConfig.from_hf(cfg_dict)
    tp = entry["tp"]
    weights = L.RankWeights.random(cfg, rank=0, world=tp, seed=args.seed, weight_format="channel", device="cuda")
    model = L.LlamaModel(cfg, weights, backend="fp8route", act="row", device="cuda", max_batch=1,
                         max_seq=args.kv_len + 1, skip_collectives=tp > 1)
    roles, routes = layer_roles(model)
    traced = ct.compiled_in()
    # Each ring variant's graphs are captured with the decode backend's deep ring set as it says
    # (launches read it at capture); all graphs are then timed side by side.
    graphs, fns = {}, {}
    for ring in args.ring:
        ct.set_decode_deep_ring(ring == "deep")
        plain, _ = capture(model, armed=False)
        graphs[ring] = (plain, capture(model, armed=True) if traced else None)
        fns[ring] = plain.replay
        if traced:
            fns[ring + " traced"] = graphs[ring][1][0].replay
    ct.set_decode_deep_ring(False)
    step_ms = e2e.interleaved_ms(fns, args.reps, 10)
    roofline_us = model.weight_bytes() / bw * 1e6
    print(f"\n== {name}: {args.layers} layers, batch 1, KV {args.kv_len}; routes {routes}")
    result = dict(model=name, layers=args.layers, kv_len=args.kv_len, routes=routes, roofline_us=roofline_us,
                  variants={})
    for ring in args.ring:
        untraced_us = step_ms[ring] * 1e3
        traced_us = step_ms[ring + " traced"] * 1e3 if traced else None
        print(f"\n-- ring {ring}: step {untraced_us:.1f} us untraced" +
              (f", {traced_us:.1f} us traced" if traced_us else "") +
              f"; weight read {roofline_us:.1f} us: {roofline_us / untraced_us * 100:.1f}% of the roofline")
        res = dict(step_us=untraced_us, step_traced_us=traced_us)
        result["variants"][ring] = res
        if not traced:
            print("  (no per-kernel trace: the library was built without FP8ROUTE_CHAIN_TRACE)")
            continue
        res.update(trace_table(graphs[ring][1], roles, model, args, bw))
    return result


def trace_table(traced_graph, roles, model, args, bw):
    """Replays the traced graph, prints the per-role table; returns the rows for --json."""
    graph, kinds = traced_graph
    replays = traced_replays(graph.replay, args.trace_reps)
    rows = median_rows(replays)
    per_layer = len(roles)
    expected = per_layer * args.layers + 1  # + the final norm
    out = dict(kernels=[dict(kernel=k, grid=r["grid"], **m) for k, r, m in zip(kinds, replays[0], rows)])
    if len(kinds) != expected:
        print(f"  traced {len(kinds)} kernels, expected {expected} ({per_layer} a layer + the final norm): the table "
              f"by role is skipped; --json has every kernel")
        return out
    print(f"{'kernel':>12} {'[grid]':>10} {'launch':>28} {'lead':>7} {'boundary':>9} {'post':>7} {'incr':>7} "
          f"{'read':>6} {'above':>7} {'above_post':>10}")
    by_role = []
    for j, (role, lin, note) in enumerate(roles):
        idx = [layer * per_layer + j for layer in range(1, args.layers)]
        pick = lambda key: med(rows[i][key] for i in idx)  # noqa: E731
        read = lin.nbytes / bw * 1e6 if lin is not None else None
        incr, post = pick("incr"), pick("post")
        row = dict(role=role, kernel=kinds[idx[0]], grid=replays[0][idx[0]]["grid"], lead=pick("lead"),
                   boundary=pick("boundary"), post=post, incr=incr, read=read,
                   above=incr - read if read is not None and incr is not None else None,
                   above_post=post - read if read is not None and post is not None else None, note=note)
        by_role.append(row)
        grid = "[" + ",".join(str(v) for v in row["grid"][:2]) + "]"
        print(f"{role + note:>12} {grid:>10} {row['kernel'][:28]:>28} {fmt(row['lead'])} {fmt(row['boundary'], 9)} "
              f"{fmt(post)} {fmt(incr)} {fmt(read, 6)} {fmt(row['above'])} {fmt(row['above_post'], 10)}")
    layers = [[rows[i]["incr"] for i in range(layer * per_layer, (layer + 1) * per_layer)]
              for layer in range(1, args.layers)]
    layer_us = [sum(v) for v in layers if all(x is not None for x in v)]
    first = model.layers[0]
    layer_read = sum(lin.nbytes for lin in (first.qkv, first.o, first.gate_up, first.down)) / bw * 1e6
    if layer_us:
        lu = med(layer_us)
        print(f"layer (median of layers 1..{args.layers - 1}): {lu:.2f} us, weight read {layer_read:.2f} us, "
              f"overhead {lu - layer_read:.2f} us ({lu / layer_read * 100 - 100:.0f}% above the read)")
        out.update(layer_us=lu, layer_read_us=layer_read)
    out["by_role"] = by_role
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=e2e.name_list(list(e2e.MODELS)), default=["llama-3.1-8b", "llama-3.1-70b-tp8"])
    ap.add_argument("--skip-models", action="store_true", help="calibrations only")
    ap.add_argument("--layers", type=int, default=8, help="decoder layers per model (distinct weights)")
    ap.add_argument("--kv-len", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=200, help="timed graph replays per variant")
    ap.add_argument("--trace-reps", type=int, default=50, help="traced replays (each read back) per graph")
    ap.add_argument("--empty", type=int, default=64, help="kernels in the empty chain; 0 skips it")
    ap.add_argument("--split", action="append", default=None,
                    help="NxK:s1,s2,... for the split test (repeatable; default 4096x4096:1,2,4,8 and "
                         "14336x4096:1,2,4,8); 'none' skips it")
    ap.add_argument("--ring", type=e2e.name_list(["own", "deep"]), default=["own", "deep"],
                    help="the decode GEMM's weight ring: own (each config's stages) and/or deep (up to the whole K "
                         "slice before the wait, include/fp8route/tuning/gemm_knobs.h), side by side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write everything to this file")
    args = ap.parse_args()
    if args.split is None:
        args.split = ["4096x4096:1,2,4,8", "14336x4096:1,2,4,8"]
    args.split = [s for s in args.split if s != "none"]
    if args.layers < 2:
        sys.exit("--layers: at least 2 (layer 0 follows the embedding; the table is over layers 1 ..)")
    if not torch.cuda.is_available():
        sys.exit("bench/decode_chain.py: needs a CUDA device")
    from fp8route import chain_trace as ct
    from fp8route.models import llama as L

    t0 = time.time()
    dev = torch.cuda.get_device_name()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bw = e2e.copy_bandwidth()
    tick = ct.tick_ns()
    print(f"{dev}: copy {bw / 1e9:.0f} GB/s (read + write); %globaltimer tick {tick} ns; chain trace "
          f"{'compiled in' if ct.compiled_in() else 'NOT compiled in (calibrations only; -DFP8ROUTE_CHAIN_TRACE=ON)'}")
    out = dict(device=dev, torch=torch.__version__, copy_bytes_per_s=bw, globaltimer_tick_ns=tick,
               compiled_in=ct.compiled_in())
    if args.empty:
        out["empty_chain"] = empty_chain(args, sms)
    if args.split:
        out["split"] = split_test(args, bw)
    if not args.skip_models:
        out["models"] = []
        for name in args.models:
            out["models"].append(run_model(name, args, bw, L))
            torch.cuda.empty_cache()
    print(f"\ntotal {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
