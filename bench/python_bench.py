#!/usr/bin/env python3
"""fp8route from Python against torch, side by side on the GPU machine:

  fp8route.scaled_mm      vs torch._scaled_mm          (per-tensor and rowwise scales)
  fp8route.Fp8Linear      vs the same layer in torch ops (per-token quant + torch._scaled_mm),
                             eager and torch.compile

on models.json layer shapes at decode and prefill M. Method as src/timing/measure.h: each op is
captured in a CUDA graph over rotation sets of inputs spanning >= 3x L2, and the ops of one problem
are replayed interleaved (shuffled order per round, an untimed L2 flush before each replay), median
of 20 replays.

  python3 bench/python_bench.py [--model llama-3.1-8b|LIST|all] [--tp 1] [--m 1,16,128,1024,4096]
                                [--ops all|tensor] [--json FILE]

--ops tensor times only scaled_mm with per-tensor scales against torch._scaled_mm (both cuBLASLt
where fp8route routes there), quick enough for every catalog model at the catalog's M grid.

--block instead times block scales (1x128 activation groups, 128x128 weight blocks): fp8route.scaled_mm
against torch._scaled_mm's blockwise form (scale_a [M, K/128] outer-dim-major, scale_b [K/128, N/128];
CUDA 12.9+ builds on SM90), with both per-tensor GEMMs in the same interleaved set, so that the
block-over-tensor time ratio of each comes from one run (--model accepts a comma-separated list).

  python3 bench/python_bench.py --block [--model llama-3.1-70b,deepseek-v3] [--m 4096,8192] [--json FILE]

--overhead instead measures host time per call (no GPU timing): for each op at M = 1, the native
call the op runs (outputs given), torch.empty of the outputs the implementation allocates, the
implementation (what the op runs, allocating), the public function (fp8route.per_token_quant,
Fp8Linear.forward, ...: eager calls skip the dispatcher), the Python function registered as the
torch op's implementation called directly, and torch.ops.fp8route.<op> (through the dispatcher, as
a compiled graph calls it). Calls are issued in bursts short enough that the launch queue never
fills, so the host is never waiting for the GPU; each round times one burst of every path in a
shuffled order, median over rounds. Target: the public function within 1 us of its implementation
per op; the summary also gives the torch op over the public function and the dispatcher's share,
and, as torch's floor, the dispatcher's cost for an op of the same schema that only allocates its
outputs.
--stub times the same Python paths on the CPU with the native module's calls replaced by no-ops
(no GPU needed: compare versions of the Python layers; CPU torch.empty stands in for CUDA's).

  python3 bench/python_bench.py --overhead [--stub] [--json FILE]
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


# The benchmark method's timing (interleaved CUDA-graph replays, cold L2) lives in the package, where
# fp8route.tune_grouped uses it too.
from fp8route._timing import l2_bytes, rotation_sets, time_interleaved  # noqa: E402,F401


def torch_per_token_quant(x):
    amax = x.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-10)
    q = (x.float() * (448.0 / amax)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, (amax / 448.0)


def torch_fp8_linear(x, w, w_scale):
    q, s = torch_per_token_quant(x)
    return torch._scaled_mm(q, w.t(), scale_a=s, scale_b=w_scale.view(1, -1), out_dtype=torch.bfloat16)


def catalog_models():
    with open(os.path.join(ROOT, "shapes", "models.json")) as f:
        return json.load(f)["models"]


def layers(model, tp, models=None):
    for l in (models or catalog_models())[model]:
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


def host_us(fns, sync, burst=100, rounds=50):
    """{name: median host microseconds per call of fn()} for fns {name: fn}: each round times one burst
    of calls of each fn, in a shuffled order (drift in the machine's speed falls on all alike), each
    burst followed by sync() (at most 3 launches a call: 300 queued launches, well under the queue's
    depth)."""
    times = {name: [] for name in fns}
    names = list(fns)
    rng = random.Random(12345)
    for i in range(rounds + 5):
        rng.shuffle(names)
        for name in names:
            fn = fns[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(burst):
                fn()
            t1 = time.perf_counter()
            if i >= 5:  # warm-up rounds (first calls, allocator) are not counted
                times[name].append((t1 - t0) / burst * 1e6)
    sync()
    return {name: statistics.median(v) for name, v in times.items()}


def _noop(*args):
    return None


class _StubPlan:
    """--stub: a LinearPlan whose run does nothing."""

    def run(self, a, a_scale, out):
        return None


class _StubLib:
    """--stub: the native module with each entry an op's call makes replaced by a no-op (quant_layout,
    a pure function of its arguments, and the rest are the real module's), so the Python layers are
    timed on CPU tensors without a GPU."""

    def __init__(self, real):
        self._real = real
        for name in ("per_token_quant", "per_token_group_quant", "masked_per_token_group_quant",
                     "scatter_per_token_group_quant", "per_tensor_quant", "rms_norm", "decode_attention",
                     "scaled_mm", "scaled_mm_bias"):
            setattr(self, name, _noop)

    def linear_plan_create(self, *args):
        return _StubPlan()

    def __getattr__(self, name):
        return getattr(self._real, name)


def overhead(args):
    from fp8route import ops as fops
    from fp8route import torch_ops
    from fp8route import _native
    if args.stub:
        real, stub = _native.lib, _StubLib(_native.lib)
        for mod in list(sys.modules.values()):  # every fp8route module that took the native module
            if getattr(mod, "__name__", "").startswith("fp8route") and getattr(mod, "lib", None) is real:
                mod.lib = stub
        dev, sync, burst, bursts = "cpu", _noop, 100, 300
        where = f"CPU with the native module stubbed ({os.cpu_count()} cores)"
    else:
        dev, sync, burst, bursts = DEV, torch.cuda.synchronize, 100, 50
        where = torch.cuda.get_device_name()
    lib = fops.lib
    k, n = 4096, 4096
    x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
    q = torch.empty(1, k, device=dev, dtype=torch.float8_e4m3fn)
    s = torch.empty(1, device=dev)
    y = torch.empty(1, n, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(n, k, device=dev) / 64).to(torch.bfloat16)
    layer = fp8route.Fp8Linear.from_float(w, act="row")
    qb = q.view(torch.uint8)
    lib.per_token_quant(x, qb, s, "none", False)
    wb, ws = layer.weight, layer.weight_scale
    wq = wb.view(torch.uint8)
    xdev, f8, bf16, f32 = x.device, torch.float8_e4m3fn, torch.bfloat16, torch.float32

    def alloc_quant():  # the outputs a per-token quant of x allocates
        return torch.empty(size=(1, k), dtype=f8, device=xdev), torch.empty(size=(1,), dtype=f32, device=xdev)

    def alloc_mm():
        return torch.empty(size=(1, n), dtype=bf16, device=xdev)

    def alloc_linear():
        return alloc_quant(), alloc_mm()

    key = layer.plan_key

    def native_linear():  # the two native calls forward makes, outputs given
        lib.per_token_quant(x, qb, s, "none", False)
        layer.plan.run(qb, s, y)

    # The dispatcher's own cost: for each op, an op of the same schema, defined and implemented as
    # fp8route's are (torch.library.Library define + impl), that allocates its outputs and does
    # nothing else (torch.empty inside a dispatched Python kernel costs more than outside it).
    bench_lib = torch.library.Library("fp8route_bench", "FRAGMENT")

    def noop_like(name, *call_args):
        schema = str(getattr(torch.ops.fp8route, name).default._schema).split("::", 1)[1]
        bench_lib.define(schema)
        outputs = getattr(torch.ops.fp8route, name)(*call_args)
        like = [(o.shape, o.dtype, o.device) for o in (outputs if isinstance(outputs, tuple) else (outputs,))]

        def fn(*a):  # allocates its outputs as the real implementation does (torch.empty), nothing else
            made = tuple(torch.empty(size=sh, dtype=dt, device=d) for sh, dt, d in like)
            return made if isinstance(outputs, tuple) else made[0]

        bench_lib.impl(name, fn, "CompositeExplicitAutograd")  # the key fp8route registers under
        op = getattr(torch.ops.fp8route_bench, name)
        return lambda: fn(*call_args), lambda: op(*call_args)

    floors = {
        "per_token_quant": noop_like("per_token_quant", x, "e4m3", "none", False),
        "scaled_mm": noop_like("scaled_mm", q, wb, s, ws, None, torch.bfloat16, "row"),
        "Fp8Linear.forward": noop_like("linear", x, wb, key, "row", torch.bfloat16),
        "Fp8Linear.forward_quantized": noop_like("linear_quantized", q, s, wb, key, torch.bfloat16),
    }
    floors["Fp8Linear (module call)"] = floors["Fp8Linear.forward"]

    cases = {
        # name: (the native module alone, outputs given; torch.empty of the outputs the implementation
        # allocates; the implementation the op runs, allocating its outputs; the public function; the
        # Python function registered as the torch op's implementation, called directly; the torch op)
        "per_token_quant": (lambda: lib.per_token_quant(x, qb, s, "none", False),
                            alloc_quant,
                            lambda: fops._token_quant(x, "e4m3", "none", None, False),
                            lambda: fp8route.per_token_quant(x),
                            lambda: torch_ops.per_token_quant(x, "e4m3", "none", False),
                            lambda: torch.ops.fp8route.per_token_quant(x, "e4m3", "none", False)),
        "scaled_mm": (lambda: lib.scaled_mm(qb, wq, s, ws, y, "row", "fast"),
                      alloc_mm,
                      lambda: fops._scaled_mm(q, wb, s, ws, None, "bf16", "row", None),
                      lambda: fp8route.scaled_mm(q, wb, s, ws, scale="row"),
                      lambda: torch_ops.scaled_mm(q, wb, s, ws, None, torch.bfloat16, "row"),
                      lambda: torch.ops.fp8route.scaled_mm(q, wb, s, ws, None, torch.bfloat16, "row")),
        # layer(x) adds nn.Module.__call__ (hooks) to forward: torch's cost, shown apart.
        "Fp8Linear.forward": (native_linear,
                              alloc_linear,
                              lambda: torch_ops.linear_forward(layer.plan, x, n, "row", torch.bfloat16),
                              lambda: layer.forward(x),
                              lambda: torch_ops.linear(x, wb, key, "row", torch.bfloat16),
                              lambda: torch.ops.fp8route.linear(x, wb, key, "row", torch.bfloat16)),
        "Fp8Linear (module call)": (native_linear,
                                    alloc_linear,
                                    lambda: torch_ops.linear_forward(layer.plan, x, n, "row", torch.bfloat16),
                                    lambda: layer(x),
                                    lambda: torch_ops.linear(x, wb, key, "row", torch.bfloat16),
                                    lambda: torch.ops.fp8route.linear(x, wb, key, "row", torch.bfloat16)),
        "Fp8Linear.forward_quantized": (lambda: layer.plan.run(qb, s, y),
                                        alloc_mm,
                                        lambda: torch_ops.linear_quantized_forward(layer.plan, q, s, n,
                                                                                   torch.bfloat16),
                                        lambda: layer.forward_quantized(q, s),
                                        lambda: torch_ops.linear_quantized(q, s, wb, key, torch.bfloat16),
                                        lambda: torch.ops.fp8route.linear_quantized(q, s, wb, key,
                                                                                    torch.bfloat16)),
    }
    kinds = ("native", "alloc", "impl", "public", "registered", "op", "floor_registered", "floor_op")
    for name, fns in cases.items():
        cases[name] = fns + floors[name]
    print(f"torch {torch.__version__}, {where}, fp8route {fp8route.__version__}: host us per call at M = 1 "
          f"(median of {bursts} rounds of interleaved bursts of {burst})")
    print("  native: the native module alone (outputs given); alloc: torch.empty of the outputs impl allocates;\n"
          "  impl: what the op runs, allocating; public: fp8route.X / Fp8Linear; registered: the torch op's Python\n"
          "  implementation called directly; torch.ops: through the dispatcher; ours = impl - native - alloc")
    print("  dispatcher: torch.ops over the registered function called directly; floor: the same for an op of\n"
          "  the same schema that only allocates its outputs (torch's share)")
    print(f"{'op':28} {'native':>7} {'alloc':>7} {'impl':>7} {'public':>7} {'registered':>10} {'torch.ops':>9} "
          f"{'ours':>6} {'public-impl':>11} {'op-public':>9} {'dispatcher':>10} {'floor':>6}")
    records = []
    with torch.inference_mode():
        timed = host_us({(name, kind): fn for name, fns in cases.items() for kind, fn in zip(kinds, fns) if fn},
                        sync, burst, bursts)
        for name in cases:
            t = {kind: timed.get((name, kind), float("nan")) for kind in kinds}
            ours = t["impl"] - t["native"] - t["alloc"]
            print(f"{name:28} {t['native']:7.2f} {t['alloc']:7.2f} {t['impl']:7.2f} {t['public']:7.2f} "
                  f"{t['registered']:10.2f} {t['op']:9.2f} {ours:6.2f} {t['public'] - t['impl']:11.2f} "
                  f"{t['op'] - t['public']:9.2f} {t['op'] - t['registered']:10.2f} "
                  f"{t['floor_op'] - t['floor_registered']:6.2f}")
            records.append({"op": name, **{f"{kind}_us": v for kind, v in t.items()}})
    if args.stub:
        print("(CPU-harness figures: the stubbed native call and CPU torch.empty stand in for the GPU host's)")
    rest = [r for r in records if r["op"] != "Fp8Linear (module call)"]
    worst = max(rest, key=lambda r: r["public_us"] - r["impl_us"])
    gap = worst["public_us"] - worst["impl_us"]
    print(f"target, the public function over its implementation <= 1 us per op: at most {gap:.2f} us "
          f"({worst['op']}), {'met' if gap <= 1.0 else 'NOT met'}")
    over = [r["op_us"] - r["public_us"] for r in rest]
    disp = [r["op_us"] - r["registered_us"] for r in rest]
    excess = [(r["op_us"] - r["registered_us"]) - (r["floor_op_us"] - r["floor_registered_us"]) for r in rest]
    print(f"torch.ops.fp8route.X over the public function: {min(over):.2f} to {max(over):.2f} us, of which the "
          f"dispatcher (torch.ops over the registered function called directly) {min(disp):.2f} to {max(disp):.2f} us, "
          f"{min(excess):.2f} to {max(excess):.2f} us more than for an op of the same schema that only allocates "
          f"its outputs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


def block_scales(args):
    """--block: block-scaled GEMMs, fp8route against torch._scaled_mm, per-tensor alongside."""
    records = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8route {fp8route.__version__}")
    print(f"{'layer':40} {'M':>5} {'fp8route block':>14} {'torch block':>11} {'fp8route tensor':>15} "
          f"{'torch tensor':>12} {'block TFLOP/s':>13} {'vs torch':>8} {'block/tensor':>12}")
    for model in args.model.split(","):
        for label, n, k in layers(model, args.tp):
            for m in map(int, args.m.split(",")):
                if n % 128 or k % 128:
                    print(f"{label:40} {m:5d}  skipped: N and K must be multiples of 128 for torch's block form")
                    continue
                sets = rotation_sets(m * k + n * k + 2 * m * n)
                a = [(torch.randn(m, k, device=DEV) * 4).to(torch.float8_e4m3fn) for _ in range(sets)]
                b = [(torch.randn(n, k, device=DEV) * 4).to(torch.float8_e4m3fn) for _ in range(sets)]
                one = torch.ones(1, device=DEV)
                # scale_a: [M, K/128] with the M index contiguous (fp8route's [K/128, M] storage);
                # scale_b: [N/128, K/128] row-major, handed to torch as its [K/128, N/128] transpose.
                sa = (torch.rand(k // 128, m, device=DEV) + 0.5).t()
                sb = torch.rand(n // 128, k // 128, device=DEV) + 0.5
                ops = {
                    "fp8route block": lambda i: fp8route.scaled_mm(a[i], b[i], sa, sb, scale="block"),
                    "torch block": lambda i: torch._scaled_mm(a[i], b[i].t(), scale_a=sa, scale_b=sb.t(),
                                                              out_dtype=torch.bfloat16),
                    "fp8route tensor": lambda i: fp8route.scaled_mm(a[i], b[i], one, one, scale="tensor"),
                    "torch tensor": lambda i: torch._scaled_mm(a[i], b[i].t(), scale_a=one, scale_b=one,
                                                               out_dtype=torch.bfloat16),
                }
                try:
                    ops["torch block"](0)
                except RuntimeError as e:  # a torch build without the blockwise form
                    print(f"  torch block unavailable: {str(e).splitlines()[0]}")
                    del ops["torch block"]
                t = time_interleaved(ops, sets)
                ours, theirs = t["fp8route block"], t.get("torch block")
                tflops = 2.0 * m * n * k / ours / 1e6
                ratio = ours / t["fp8route tensor"]
                print(f"{label:40} {m:5d} {ours:14.2f} {(f'{theirs:.2f}' if theirs else '-'):>11} "
                      f"{t['fp8route tensor']:15.2f} {t['torch tensor']:12.2f} {tflops:13.1f} "
                      f"{(f'{theirs / ours:.3f}x' if theirs else '-'):>8} {ratio:11.3f}x")
                records.append({"layer": label, "m": m, "n": n, "k": k, "fp8route_block_us": ours,
                                "torch_block_us": theirs, "fp8route_tensor_us": t["fp8route tensor"],
                                "torch_tensor_us": t["torch tensor"], "block_tflops": tflops})
                del a, b
                torch.cuda.empty_cache()
    if records:
        def gm(v):
            return math.exp(sum(map(math.log, v)) / len(v))
        ratios = [r["fp8route_block_us"] / r["fp8route_tensor_us"] for r in records]
        print(f"\nfp8route block / fp8route tensor time: geometric mean {gm(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) over {len(ratios)} problems")
        vs = [r["torch_block_us"] / r["fp8route_block_us"] for r in records if r["torch_block_us"]]
        if vs:
            print(f"torch block / fp8route block time: geometric mean {gm(vs):.3f} ({min(vs):.3f}-{max(vs):.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-8b", help="catalog models, comma-separated, or all")
    ap.add_argument("--ops", choices=("all", "tensor"), default="all",
                    help="tensor: only scaled_mm with per-tensor scales against torch._scaled_mm (a quick pass "
                    "over many shapes)")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--m", default="1,16,128,1024,4096")
    ap.add_argument("--json")
    ap.add_argument("--overhead", action="store_true", help="host time per call of the Python paths (see above)")
    ap.add_argument("--stub", action="store_true", help="with --overhead: on the CPU, the native module's calls "
                    "replaced by no-ops (times the Python layers without a GPU)")
    ap.add_argument("--block", action="store_true", help="block scales against torch's blockwise _scaled_mm "
                    "(see above)")
    args = ap.parse_args()
    if args.overhead:
        return overhead(args)
    if args.block:
        return block_scales(args)
    records = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8route {fp8route.__version__}")
    print(f"{'layer':32} {'M':>5} {'op':28} {'fp8route us':>12} {'torch us':>10} {'torch.compile us':>17} {'speed-up':>9}")
    # One compiled graph per problem shape (static shapes, as an engine's captured decode/prefill
    # graphs are), so raise the recompile limit above the number of problems.
    torch._dynamo.config.cache_size_limit = 256
    compiled_linear = torch.compile(torch_fp8_linear, dynamic=False)
    catalog = catalog_models()
    models = list(catalog) if args.model == "all" else args.model.split(",")
    shapes = [s for model in models for s in layers(model, args.tp, catalog)]
    for label, n, k in shapes:
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
            layers_fp8 = []
            pairs = [("scaled_mm tensor", "fp8route tensor", "torch tensor", None)]
            if args.ops == "all":
                w_scale = torch.rand(n, device=DEV) + 0.5
                layers_fp8 = [fp8route.Fp8Linear(b[i], w_scale, act="row") for i in range(sets)]
                ops["fp8route Fp8Linear"] = lambda i: layers_fp8[i](x[i])
                ops["torch linear"] = lambda i: torch_fp8_linear(x[i], b[i], w_scale)
                ops["torch.compile linear"] = lambda i: compiled_linear(x[i], b[i], w_scale)
                pairs += [("scaled_mm row", "fp8route row", "torch row", None),
                          ("Fp8Linear (row)", "fp8route Fp8Linear", "torch linear", "torch.compile linear")]
            else:
                ops = {name: ops[name] for name in ("fp8route tensor", "torch tensor")}
            t = time_interleaved(ops, sets)
            for op, ours, theirs, comp in ((op, t[o], t[th], t[c] if c else None) for op, o, th, c in pairs):
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
