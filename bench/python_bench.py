#!/usr/bin/env python3
"""fp8route from Python against torch, side by side on the GPU machine:

  fp8route.scaled_mm      vs torch._scaled_mm          (per-tensor and rowwise scales)
  fp8route.Fp8Linear      vs the same layer in torch ops (per-token quant + torch._scaled_mm),
                             eager and torch.compile

on models.json layer shapes at decode and prefill M. Method as src/timing/measure.h: each op is
captured in a CUDA graph over rotation sets of inputs spanning >= 3x L2, and the ops of one problem
are replayed interleaved (shuffled order per round, an untimed L2 flush before each replay), median
of 20 replays.

  python3 bench/python_bench.py [--model llama-3.1-8b] [--tp 1] [--m 1,16,128,1024,4096] [--json FILE]

--overhead instead measures host time per call (no GPU timing): for each op at M = 1, the native
call the op runs, the public function (fp8route.per_token_quant, Fp8Linear.__call__, ...: eager
calls skip the dispatcher) and torch.ops.fp8route.<op> (through the dispatcher, as a compiled graph
calls it). Calls are issued in bursts short enough that the launch queue never fills, so the host
is never waiting for the GPU; median over bursts. Target: the public function within 1 us of the
native call.

  python3 bench/python_bench.py --overhead [--json FILE]
"""
import argparse
import json
import math
import os
import random
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import fp8route  # noqa: E402

DEV = "cuda"


def l2_bytes():
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 60 << 20)


def rotation_sets(nbytes):
    return int(min(max(math.ceil(3 * l2_bytes() / max(1, nbytes)), 3), 512))


def time_interleaved(ops, sets, reps=20, warmup=5):
    """ops: {name: fn(set_index)}. Returns {name: median us per call}."""
    flush = torch.empty(2 * l2_bytes() // 4, dtype=torch.float32, device=DEV)
    graphs = {}
    for name, fn in ops.items():
        for i in range(sets):  # first calls outside capture (workspaces, torch.compile)
            fn(i)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(sets):
                fn(i)
        graphs[name] = g
    for _ in range(warmup):
        for g in graphs.values():
            g.replay()
    times = {name: [] for name in graphs}
    rng = random.Random(12345)
    names = list(graphs)
    events = []
    for _ in range(reps):
        rng.shuffle(names)
        for name in names:
            flush.sum()  # untimed: the previous op's dirty lines are written back here
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[name].replay()
            end.record()
            events.append((name, start, end))
    torch.cuda.synchronize()
    for name, start, end in events:
        times[name].append(start.elapsed_time(end) * 1000.0 / sets)
    return {name: statistics.median(v) for name, v in times.items()}


def torch_per_token_quant(x):
    amax = x.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-10)
    q = (x.float() * (448.0 / amax)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, (amax / 448.0)


def torch_fp8_linear(x, w, w_scale):
    q, s = torch_per_token_quant(x)
    return torch._scaled_mm(q, w.t(), scale_a=s, scale_b=w_scale.view(1, -1), out_dtype=torch.bfloat16)


def layers(model, tp):
    cat = json.load(open(os.path.join(ROOT, "shapes", "models.json")))
    for l in cat["models"][model]:
        n, k = l["n"], l["k"]
        if l["parallel"] == "column":
            n //= tp
        elif l["parallel"] == "row":
            k //= tp
        yield f'{model}/{l["name"]} tp{tp}', n, k


def summarize(records):
    """Speed-up of fp8route over the faster torch way per op and M band (geometric mean, min-max)."""
    print("\nSpeed-up of fp8route over the best torch way (geometric mean, min-max; decode M <= 16, middle, prefill >= 1024)")
    groups = {}
    for r in records:
        band = "decode" if r["m"] <= 16 else "middle" if r["m"] < 1024 else "prefill"
        groups.setdefault((r["op"], band), []).append(r["speedup_vs_best_torch"])
    for (op, band), v in sorted(groups.items()):
        gm = math.exp(sum(map(math.log, v)) / len(v))
        print(f"  {op:20} {band:8} n={len(v):3d}  {gm:.3f}x ({min(v):.3f}-{max(v):.3f})")


def host_us(fn, burst=100, bursts=50):
    """Median host microseconds per call of fn(), over bursts of calls each followed by a sync (at
    most 3 launches a call: 300 queued launches, well under the queue's depth)."""
    times = []
    for i in range(bursts + 5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        t1 = time.perf_counter()
        if i >= 5:  # warm-up bursts (first calls, allocator) are not counted
            times.append((t1 - t0) / burst * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def overhead(args):
    from fp8route import ops as fops
    from fp8route import torch_ops
    from fp8route._native import lib
    k, n = 4096, 4096
    x = torch.randn(1, k, device=DEV, dtype=torch.bfloat16)
    q = torch.empty(1, k, device=DEV, dtype=torch.float8_e4m3fn)
    s = torch.empty(1, device=DEV)
    y = torch.empty(1, n, device=DEV, dtype=torch.bfloat16)
    w = (torch.randn(n, k, device=DEV) / 64).to(torch.bfloat16)
    layer = fp8route.Fp8Linear.from_float(w, act="row")
    qb = q.view(torch.uint8)
    lib.per_token_quant(x, qb, s, "none", False)
    wb, ws = layer.weight, layer.weight_scale
    wq = wb.view(torch.uint8)
    cases = {
        # name: (the native module alone, outputs given; the implementation the op runs, allocating its
        # outputs; the public function; the torch op)
        "per_token_quant": (lambda: lib.per_token_quant(x, qb, s, "none", False),
                            lambda: fops._token_quant(x, "e4m3", "none", None, False),
                            lambda: fp8route.per_token_quant(x),
                            lambda: torch.ops.fp8route.per_token_quant(x, "e4m3", "none", False)),
        "scaled_mm": (lambda: lib.scaled_mm(qb, wq, s, ws, y, "row", "fast"),
                      lambda: fops._scaled_mm(q, wb, s, ws, None, "bf16", "row", None),
                      lambda: fp8route.scaled_mm(q, wb, s, ws, scale="row"),
                      lambda: torch.ops.fp8route.scaled_mm(q, wb, s, ws, None, torch.bfloat16, "row")),
        # layer(x) adds nn.Module.__call__ (hooks) to forward: torch's cost, shown apart.
        "Fp8Linear.forward": (None,
                              lambda: torch_ops.linear_forward(layer.plan, x, n, "row", torch.bfloat16),
                              lambda: layer.forward(x),
                              lambda: torch.ops.fp8route.linear(x, wb, layer.plan_key, "row", torch.bfloat16)),
        "Fp8Linear (module call)": (None,
                                    lambda: torch_ops.linear_forward(layer.plan, x, n, "row", torch.bfloat16),
                                    lambda: layer(x),
                                    lambda: torch.ops.fp8route.linear(x, wb, layer.plan_key, "row", torch.bfloat16)),
        "Fp8Linear.forward_quantized": (lambda: layer.plan.run(qb, s, y),
                                        lambda: torch_ops.linear_quantized_forward(layer.plan, q, s, n,
                                                                                   torch.bfloat16),
                                        lambda: layer.forward_quantized(q, s),
                                        lambda: torch.ops.fp8route.linear_quantized(q, s, wb, layer.plan_key,
                                                                                    torch.bfloat16)),
    }
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8route {fp8route.__version__}: host us per "
          f"call at M = 1 (median of bursts)")
    print(f"{'op':28} {'native':>7} {'impl':>7} {'public':>7} {'torch.ops':>9} {'public-impl':>11} {'op-impl':>8}")
    records = []
    with torch.inference_mode():
        for name, fns in cases.items():
            t = {kind: host_us(fn) if fn else float("nan")
                 for kind, fn in zip(("native", "impl", "public", "op"), fns)}
            print(f"{name:28} {t['native']:7.2f} {t['impl']:7.2f} {t['public']:7.2f} {t['op']:9.2f} "
                  f"{t['public'] - t['impl']:11.2f} {t['op'] - t['impl']:8.2f}")
            records.append({"op": name, **{f"{kind}_us": v for kind, v in t.items()}})
    worst = max(r["public_us"] - r["impl_us"] for r in records if r["op"] != "Fp8Linear (module call)")
    print(f"public function over the implementation: at most {worst:.2f} us "
          f"({'within' if worst <= 1.0 else 'over'} the 1 us target)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--m", default="1,16,128,1024,4096")
    ap.add_argument("--json")
    ap.add_argument("--overhead", action="store_true", help="host time per call of the Python paths (see above)")
    args = ap.parse_args()
    if args.overhead:
        return overhead(args)
    records = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8route {fp8route.__version__}")
    print(f"{'layer':32} {'M':>5} {'op':28} {'fp8route us':>12} {'torch us':>10} {'torch.compile us':>17} {'speed-up':>9}")
    # One compiled graph per problem shape (static shapes, as an engine's captured decode/prefill
    # graphs are), so raise the recompile limit above the number of problems.
    torch._dynamo.config.cache_size_limit = 256
    compiled_linear = torch.compile(torch_fp8_linear, dynamic=False)
    for label, n, k in layers(args.model, args.tp):
        for m in map(int, args.m.split(",")):
            sets = rotation_sets(m * k + n * k + 2 * m * n)
            a = [(torch.randn(m, k, device=DEV) * 4).to(torch.float8_e4m3fn) for _ in range(sets)]
            b = [(torch.randn(n, k, device=DEV) * 4).to(torch.float8_e4m3fn) for _ in range(sets)]
            x = [torch.randn(m, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
            one = torch.ones(1, device=DEV)
            sa, sb = torch.rand(m, 1, device=DEV) + 0.5, torch.rand(1, n, device=DEV) + 0.5
            ops = {
                "fp8route tensor": lambda i: fp8route.scaled_mm(a[i], b[i], one, one, scale="tensor"),
                "torch tensor": lambda i: torch._scaled_mm(a[i], b[i].t(), scale_a=one, scale_b=one,
                                                           out_dtype=torch.bfloat16),
                "fp8route row": lambda i: fp8route.scaled_mm(a[i], b[i], sa.view(-1), sb.view(-1), scale="row"),
                "torch row": lambda i: torch._scaled_mm(a[i], b[i].t(), scale_a=sa, scale_b=sb,
                                                        out_dtype=torch.bfloat16),
            }
            w_scale = torch.rand(n, device=DEV) + 0.5
            layers_fp8 = [fp8route.Fp8Linear(b[i], w_scale, act="row") for i in range(sets)]
            ops["fp8route Fp8Linear"] = lambda i: layers_fp8[i](x[i])
            ops["torch linear"] = lambda i: torch_fp8_linear(x[i], b[i], w_scale)
            ops["torch.compile linear"] = lambda i: compiled_linear(x[i], b[i], w_scale)
            t = time_interleaved(ops, sets)
            for op, ours, theirs, comp in (("scaled_mm tensor", t["fp8route tensor"], t["torch tensor"], None),
                                           ("scaled_mm row", t["fp8route row"], t["torch row"], None),
                                           ("Fp8Linear (row)", t["fp8route Fp8Linear"], t["torch linear"],
                                            t["torch.compile linear"])):
                best = min(theirs, comp) if comp else theirs
                print(f"{label:32} {m:5d} {op:28} {ours:12.2f} {theirs:10.2f} "
                      f"{(f'{comp:.2f}' if comp else '-'):>17} {best / ours:8.2f}x")
                records.append({"layer": label, "m": m, "n": n, "k": k, "op": op, "fp8route_us": ours,
                                "torch_us": theirs, "torch_compile_us": comp, "speedup_vs_best_torch": best / ours})
            del layers_fp8, a, b, x
            torch.cuda.empty_cache()
    summarize(records)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
