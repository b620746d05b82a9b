#!/usr/bin/env python3
"""PyTorch baselines for fp8route's activation quantization kernels.

Times a PyTorch-eager and a torch.compile version of each op so they can be put side by side with
fp8route's own kernels (same timing method and the same JSON record shape as fp8route's C++
benchmark; merge the files with bench/quant_table.py).

Ops (x bf16; arithmetic of docs/numerics.md, E4M3 codes, group size 128):
  group           x [T, H] -> codes [T, H] + scales; --layouts row_major, col_major,
                  col_major_tma (fp32) and ue8m0_tma (pow2 scales, packed UE8M0, MN-major)
  silu_group      x [T, 2H] -> act = silu(x[:, :H]) * x[:, H:] in fp32, then group (row_major)
  token           one fp32 scale per row
  tensor_dynamic  one fp32 scale for the whole tensor

Timing, per (op, layout, shape, impl), the method of fp8route's src/timing/measure.h:
R rotation sets of fresh random normal inputs with R * bytes >= 3 * L2 (R = ceil(3 * L2 / bytes)
clamped to [3, 512]; bytes = the call's bytes moved, L2 = the device's); each set called once
outside the graph and at least 5 calls in all (torch.compile compiles here); one CUDA graph that
calls the op once on each set in turn; 5 warm-up replays, then >= 20 replays, each between its own
pair of CUDA events; per-call time = replay time / R, median reported (mean of the middle two for
an even count). If the graph cannot be captured the same loop is timed without one and the record
says "graph": false.
bytes = input bytes read + code bytes + scale bytes written (scale buffer including its padding);
GB/s = bytes / time.

Only the standard library and torch are imported.

    python3 bench/quant_torch.py --quick --json bench/results/torch_quick.json
    python3 bench/quant_torch.py --ops group --layouts ue8m0_tma --T 1,16384 --H 7168
    python3 bench/quant_torch.py --check          # eager == compiled == docs/numerics.md reference
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# Constants (docs/numerics.md and the benchmark method shared with fp8route's C++ benchmark)

FP8 = torch.float8_e4m3fn
QMAX = 448.0             # largest finite E4M3
AMAX_FLOOR = 1e-10       # amax = max(amax, 1e-10f)
GROUP = 128              # group size of the group ops
# Measuring: as fp8route's MeasureOptions (src/timing/measure.h)
L2_FALLBACK_BYTES = 60 * 1024 * 1024   # H200, if torch cannot tell the device's L2 size
L2_MULTIPLE = 3          # rotation sets span this many L2 sizes ...
MIN_SETS = 3
MAX_SETS = 512           # ... but at most this many sets
MIN_CALLS = 5            # calls before capture (each set at least once)
WARMUP_REPLAYS = 5       # untimed replays
DEFAULT_REPLAYS = 20     # timed replays (at least 20)

OPS = ("group", "silu_group", "token", "tensor_dynamic")
LAYOUTS = ("row_major", "col_major", "col_major_tma", "ue8m0_tma")
IMPLS = {"eager": "torch_eager", "compile": "torch_compile"}
DEFAULT_T = (1, 2, 4, 8, 16, 32, 64, 16384)
DEFAULT_H = (4096, 7168)
QUICK_T = (1, 64, 16384)
QUICK_H = (7168,)


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def cdiv(n: int, d: int) -> int:
    return (n + d - 1) // d


# ----------------------------------------------------------------------------------------------
# The ops, as plain functions of torch ops. torch.compile(fn, fullgraph=True, dynamic=False) of the
# very same functions is the compiled variant.
#
# Exactness notes (why the code looks the way it does):
# - s = amax / 448 and m = 448 / amax are computed in fp64 and rounded once to fp32. Both eager
#   CUDA (division by a CPU scalar becomes a multiplication by its reciprocal) and Inductor
#   (division by a constant becomes a multiplication by the reciprocal; fp32 division in Triton is
#   the approximate div.full) would otherwise not give the correctly rounded fp32 quotient. In
#   fp64 either form rounds to the correctly rounded fp32 quotient (the quotients of fp32 values
#   by/into 448 are never close enough to an fp32 rounding boundary for the fp64 error to matter),
#   and eager and compiled compute the same fp64 expression.
# - .to(float8_e4m3fn) does not saturate, so v is clamped to +-448 first; NaN -> 0 before that.
# - pow2 scales are made from the fp32 bits of amax / 448 (exact ceil to a power of two).


def _finite_amax(x: torch.Tensor, dim=-1) -> torch.Tensor:
    """max |x| over the finite elements (NaN/inf count as 0), floored at 1e-10, as fp32.

    dim=None reduces everything (0-dim result); otherwise keepdim along `dim`. abs and max are exact,
    so this runs in x's own dtype and converts at the end.
    """
    a = torch.where(torch.isfinite(x), x.abs(), 0.0)
    a = a.amax() if dim is None else a.amax(dim=dim, keepdim=True)
    return a.float().clamp_min(AMAX_FLOOR)


def _scale_and_mult(amax: torch.Tensor):
    """rounding none: s = amax / 448, m = 448 / amax, both correctly rounded fp32."""
    a = amax.double()
    return (a / QMAX).float(), (QMAX / a).float()


def _pow2_exp_and_mult(amax: torch.Tensor):
    """rounding pow2: e = biased exponent of ceil_pow2(amax / 448) in [1, 254], m = 2^(127 - e)."""
    r = (amax.double() / QMAX).float()
    bits = r.view(torch.int32)                       # r > 0: sign bit clear
    e = (bits >> 23) & 0xFF
    e = e + ((bits & 0x7FFFFF) != 0).to(torch.int32)  # mantissa bits set: round up
    e = e.clamp(1, 254)
    # 2^(127 - e) has biased exponent 254 - e; e == 254 gives 2^-127, an fp32 subnormal.
    m_bits = torch.where(e < 254, (254 - e) << 23, 1 << 22)
    return e, m_bits.view(torch.float32)


def _codes(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """E4M3 codes of x * m (fp32): NaN -> 0, clamp to +-448, round to nearest even."""
    v = x.float() * m
    v = torch.where(torch.isnan(v), 0.0, v).clamp(-QMAX, QMAX)
    return v.to(FP8)


def _pack_ue8m0_mn(e: torch.Tensor) -> torch.Tensor:
    """e [T, G] (values 1..254) -> int32 words [ceil(G/4), align(T, 4)]: byte b of word w is group
    4w + b (little-endian); bytes past the last group and the padded tokens are 0."""
    t, g = e.shape
    w = cdiv(g, 4)
    b = F.pad(e, (0, 4 * w - g)).to(torch.int64).reshape(t, w, 4)
    words = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
    # into int32 range without relying on how a narrowing conversion wraps
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return F.pad(words.t(), (0, align(t, 4) - t)).contiguous()


def group_quant(x: torch.Tensor, layout: str, group_size: int = GROUP):
    """Per-token-group quant of x [T, H] -> (codes [T, H] e4m3, scales in `layout`)."""
    t, h = x.shape
    g = h // group_size
    xg = x.reshape(t, g, group_size)
    amax = _finite_amax(xg)                       # [T, G, 1]
    if layout == "ue8m0_tma":
        e, m = _pow2_exp_and_mult(amax)
        return _codes(xg, m).reshape(t, h), _pack_ue8m0_mn(e.reshape(t, g))
    s, m = _scale_and_mult(amax)
    codes = _codes(xg, m).reshape(t, h)
    s = s.reshape(t, g)
    if layout == "row_major":
        return codes, s
    if layout == "col_major":
        return codes, s.t().contiguous()
    if layout == "col_major_tma":
        return codes, F.pad(s.t(), (0, align(t, 4) - t)).contiguous()
    raise ValueError(f"unknown layout {layout!r}")


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [T, 2H] -> silu(x[:, :H]) * x[:, H:] in fp32, silu(g) = g / (1 + exp(-g))."""
    h = x.shape[-1] // 2
    gate = x[:, :h].float()
    up = x[:, h:].float()
    return gate / (1.0 + torch.exp(-gate)) * up


def silu_group_quant(x: torch.Tensor):
    return group_quant(silu_and_mul(x), "row_major")


def token_quant(x: torch.Tensor):
    """One scale per row: (codes [T, H], scales [T, 1] fp32)."""
    s, m = _scale_and_mult(_finite_amax(x))
    return _codes(x, m), s


def tensor_dynamic_quant(x: torch.Tensor):
    """One scale for the whole tensor: (codes [T, H], scale [1] fp32)."""
    s, m = _scale_and_mult(_finite_amax(x, dim=None))
    return _codes(x, m), s.reshape(1)


def make_op(op: str, layout: str | None):
    """The eager function of (op, layout), taking the input tensor only."""
    if op == "group":
        def fn(x):
            return group_quant(x, layout)
        return fn
    if op == "silu_group":
        return silu_group_quant
    if op == "token":
        return token_quant
    if op == "tensor_dynamic":
        return tensor_dynamic_quant
    raise ValueError(f"unknown op {op!r}")


def compile_op(fn):
    # Every (op, layout, shape) is compiled afresh: drop Dynamo's caches so the recompile limit
    # (per code object) is never reached and compiled code of earlier shapes is freed.
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, dynamic=False)


def op_layout(op: str, layout: str | None) -> str | None:
    """The scale layout an op writes (silu_group: row_major; token/tensor: None)."""
    if op == "group":
        return layout
    if op == "silu_group":
        return "row_major"
    return None


def record_layout(op: str, layout: str | None) -> str | None:
    """The layout field of a JSON record: as fp8route's quant_bench, only op group names one."""
    return layout if op == "group" else None


def input_shape(op: str, t: int, h: int):
    return (t, 2 * h) if op == "silu_group" else (t, h)


def scale_bytes(op: str, layout: str | None, t: int, h: int) -> int:
    g = h // GROUP
    if op in ("group", "silu_group"):
        if layout in ("row_major", "col_major"):
            return t * g * 4
        if layout == "col_major_tma":
            return g * align(t, 4) * 4
        if layout == "ue8m0_tma":
            return cdiv(g, 4) * align(t, 4) * 4
        raise ValueError(f"unknown layout {layout!r}")
    if op == "token":
        return t * 4
    return 4


def bytes_moved(op: str, layout: str | None, t: int, h: int, in_itemsize: int = 2) -> int:
    a, b = input_shape(op, t, h)
    return a * b * in_itemsize + t * h + scale_bytes(op, layout, t, h)


# ----------------------------------------------------------------------------------------------
# Timing


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def l2_bytes() -> int:
    size = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()),
                   "L2_cache_size", 0)
    return int(size) if size else L2_FALLBACK_BYTES


def rotation_sets(bytes_per_call: int, max_sets: int = MAX_SETS) -> int:
    want = math.ceil(L2_MULTIPLE * l2_bytes() / max(1, bytes_per_call))
    return int(min(max(want, MIN_SETS), max_sets))


def time_op(fn, shape, sets: int, replays: int):
    """Times fn over `sets` rotation sets of fresh bf16 inputs of `shape`.
    Returns (median, min, max us per call, graph used). Raises if the op itself fails."""
    xs = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]

    # first calls outside the graph (lazy init; torch.compile compiles here), on a side stream
    # as recommended before capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(max(MIN_CALLS, sets)):
            fn(xs[i % sets])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = None
    outs = None
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = [fn(x) for x in xs]
        torch.cuda.synchronize()
        run = graph.replay
        used_graph = True
    except Exception as exc:  # capture failed: time the same loop without a graph
        first = str(exc).strip().splitlines()
        log(f"    graph capture failed ({type(exc).__name__}: {first[0] if first else ''}); "
            "timing without a graph")
        graph = None
        outs = None
        try:
            torch.cuda.synchronize()
        except Exception:
            pass

        def run():
            for x in xs:
                fn(x)

        used_graph = False

    for _ in range(WARMUP_REPLAYS):
        run()
    n = max(20, replays)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        starts[i].record()
        run()
        ends[i].record()
    torch.cuda.synchronize()
    per_call = [a.elapsed_time(b) * 1000.0 / sets for a, b in zip(starts, ends)]
    del graph, outs, xs
    return statistics.median(per_call), min(per_call), max(per_call), used_graph


def _write_json(path: str, records) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def run_bench(args) -> int:
    ops = _parse_list(args.ops, OPS, "--ops")
    layouts = _parse_list(args.layouts, LAYOUTS, "--layouts")
    impls = [IMPLS[i] for i in _parse_list(args.impls, tuple(IMPLS), "--impls")]
    if args.quick:
        ts, hs = list(QUICK_T), list(QUICK_H)
    else:
        ts, hs = list(DEFAULT_T), list(DEFAULT_H)
    if args.T:
        ts = _parse_ints(args.T, "--T")
    if args.H:
        hs = _parse_ints(args.H, "--H")
    for h in hs:
        if h % GROUP:
            log(f"quant_torch: --H {h} is not a multiple of the group size {GROUP}")
            return 2
    if args.max_sets < MIN_SETS:
        log(f"quant_torch: --max-sets must be at least {MIN_SETS}")
        return 2
    if not torch.cuda.is_available():
        log("quant_torch: no CUDA device; the benchmark needs one (--check runs on CPU too)")
        return 2
    torch.manual_seed(args.seed)
    # belt and braces besides the reset in compile_op (the name changed across torch versions)
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(64, getattr(cfg, name)))
            break

    cases = []
    for op in ops:
        for layout in (layouts if op == "group" else [None]):
            for h in hs:
                for t in ts:
                    for impl in impls:
                        cases.append((op, op_layout(op, layout), t, h, impl))

    dev = torch.cuda.get_device_name()
    log(f"quant_torch: torch {torch.__version__}, {dev}, L2 {l2_bytes() >> 20} MiB, "
        f"{len(cases)} cases")
    hdr = (f"{'op':<15} {'layout':<14} {'T':>6} {'H':>6} {'impl':<14} {'R':>3} {'graph':>5} "
           f"{'us':>10} {'GB/s':>8}")
    print(hdr)
    print("-" * len(hdr), flush=True)

    records = []
    failures = 0
    t_start = time.time()
    for i, (op, layout, t, h, impl) in enumerate(cases):
        log(f"[{i + 1}/{len(cases)}] {op} {layout or '-'} T={t} H={h} {impl} "
            f"({time.time() - t_start:.0f} s)")
        fn = make_op(op, layout)
        nbytes = bytes_moved(op, layout, t, h)
        r = rotation_sets(nbytes, args.max_sets)
        try:
            if impl == "torch_compile":
                fn = compile_op(fn)
            us, us_min, us_max, graph = time_op(fn, input_shape(op, t, h), r, args.replays)
        except Exception as exc:
            failures += 1
            msg = str(exc).strip().splitlines()
            log(f"    FAILED: {type(exc).__name__}: {msg[0] if msg else ''}")
            print(f"{op:<15} {layout or '-':<14} {t:>6} {h:>6} {impl:<14} failed: "
                  f"{type(exc).__name__}", flush=True)
            continue
        finally:
            gc.collect()
            torch.cuda.empty_cache()
        gbps = nbytes / (us * 1e3)
        rec = {"op": op, "layout": record_layout(op, layout), "T": t, "H": h, "impl": impl,
               "us": us, "gbps": gbps, "bytes": nbytes, "graph": graph,
               "us_min": us_min, "us_max": us_max, "sets": r, "reps": max(20, args.replays),
               "gpu": dev, "torch": torch.__version__}
        records.append(rec)
        print(f"{op:<15} {layout or '-':<14} {t:>6} {h:>6} {impl:<14} {r:>3} "
              f"{'yes' if graph else 'NO':>5} {us:>10.3f} {gbps:>8.1f}", flush=True)
        if args.json:
            _write_json(args.json, records)   # after every record: a killed run keeps its rows
    if args.json:
        _write_json(args.json, records)
        log(f"quant_torch: wrote {len(records)} records to {args.json}")
    log(f"quant_torch: done in {time.time() - t_start:.0f} s, {failures} failed")
    return 1 if failures else 0


# ----------------------------------------------------------------------------------------------
# --check: eager == compiled, and eager == a pure-Python reference of docs/numerics.md


def _f32(v: float) -> float:
    """Round a Python float (double) to fp32, to nearest even; overflow gives inf."""
    if not math.isfinite(v):
        return v
    try:
        return struct.unpack("<f", struct.pack("<f", v))[0]
    except OverflowError:
        return math.copysign(math.inf, v)


def _f32_bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _ref_e4m3_value(v: float) -> float:
    """v fp32, NaN already 0, |v| <= 448: the E4M3 value, round to nearest even, sign of 0 kept."""
    a = abs(v)
    if a == 0.0:
        return v
    step = 2.0 ** -9 if a < 2.0 ** -6 else 2.0 ** (math.frexp(a)[1] - 4)
    return math.copysign(round(a / step) * step, v)   # round(): half to even, exact here


def _ref_group(vals, pow2: bool):
    """vals: Python floats (exact fp32 values) of one group -> (scale s or exponent e, codes)."""
    amax = max((abs(v) for v in vals if math.isfinite(v)), default=0.0)
    amax = max(amax, _f32(AMAX_FLOOR))
    if pow2:
        r = _f32(amax / QMAX)
        bits = _f32_bits(r)
        e = (bits >> 23) & 0xFF
        if bits & 0x7FFFFF:
            e += 1
        e = min(max(e, 1), 254)
        sc, m = e, math.ldexp(1.0, 127 - e)
    else:
        sc, m = _f32(amax / QMAX), _f32(QMAX / amax)
    codes = []
    for x in vals:
        v = _f32(x * m)
        if math.isnan(v):
            v = 0.0
        v = min(max(v, -QMAX), QMAX)
        codes.append(_ref_e4m3_value(v))
    return sc, codes


def _ref_silu_mul_rows(x: torch.Tensor):
    h = x.shape[1] // 2
    rows = x.float().tolist()
    out = []
    for row in rows:
        o = []
        for gate, up in zip(row[:h], row[h:]):
            if -gate > 700.0:
                ex = math.inf
            else:
                ex = _f32(math.exp(-gate)) if not math.isnan(gate) else math.nan
            d = _f32(1.0 + ex)
            sg = _f32(gate / d) if not (math.isinf(gate) and math.isinf(d)) else math.nan
            o.append(_f32(sg * up))
        out.append(o)
    return out


def reference(op: str, layout: str | None, x: torch.Tensor):
    """(codes uint8 [T, H], scales tensor in the layout's dtype and shape) per docs/numerics.md."""
    if op == "silu_group":
        rows = _ref_silu_mul_rows(x)
        op, layout = "group", "row_major"
    else:
        rows = x.float().tolist()
    t, h = len(rows), len(rows[0])
    pow2 = layout == "ue8m0_tma"
    gsz = {"group": GROUP, "token": h}.get(op)
    if op == "tensor_dynamic":
        flat = [v for row in rows for v in row]
        sc, codes = _ref_group(flat, False)
        code_vals = [codes[i * h:(i + 1) * h] for i in range(t)]
        scales = torch.tensor([sc], dtype=torch.float32)
    else:
        g = h // gsz
        sc = [[None] * g for _ in range(t)]
        code_vals = []
        for i, row in enumerate(rows):
            cr = []
            for j in range(g):
                s, c = _ref_group(row[j * gsz:(j + 1) * gsz], pow2)
                sc[i][j] = s
                cr.extend(c)
            code_vals.append(cr)
        if op == "token":
            scales = torch.tensor(sc, dtype=torch.float32)            # [T, 1]
        elif layout == "row_major":
            scales = torch.tensor(sc, dtype=torch.float32)
        elif layout in ("col_major", "col_major_tma"):
            tp = t if layout == "col_major" else align(t, 4)
            scales = torch.zeros(g, tp, dtype=torch.float32)
            for i in range(t):
                for j in range(g):
                    scales[j, i] = sc[i][j]
        else:  # ue8m0_tma
            w = cdiv(g, 4)
            scales = torch.zeros(w, align(t, 4), dtype=torch.int32)
            for i in range(t):
                for k in range(w):
                    word = 0
                    for b in range(4):
                        if 4 * k + b < g:
                            word |= sc[i][4 * k + b] << (8 * b)
                    scales[k, i] = word - 2**32 if word >= 2**31 else word
    codes = torch.tensor(code_vals, dtype=torch.float32).to(FP8).view(torch.uint8)
    return codes, scales


def _ordinal(c: torch.Tensor) -> torch.Tensor:
    """E4M3 code (uint8) -> signed ordinal: adjacent values differ by 1, +0 and -0 are both 0."""
    c = c.to(torch.int32)
    mag = c & 0x7F
    return torch.where(c >= 0x80, -mag, mag)


def _compare(name, codes_a, scales_a, codes_b, scales_b, exact: bool, problems: list):
    """Codes as uint8, scales bit for bit (exact) or within docs/numerics.md's silu tolerance."""
    ca = codes_a.view(torch.uint8).cpu()
    cb = codes_b.view(torch.uint8).cpu()
    sa, sb = scales_a.cpu(), scales_b.cpu()
    if ca.shape != cb.shape or sa.shape != sb.shape or sa.dtype != sb.dtype:
        problems.append(f"{name}: shapes/dtypes differ: codes {tuple(ca.shape)} vs "
                        f"{tuple(cb.shape)}, scales {tuple(sa.shape)} {sa.dtype} vs "
                        f"{tuple(sb.shape)} {sb.dtype}")
        return
    if exact:
        sbits_a = sa.view(torch.int32) if sa.dtype == torch.float32 else sa
        sbits_b = sb.view(torch.int32) if sb.dtype == torch.float32 else sb
        nc = int((ca != cb).sum())
        ns = int((sbits_a != sbits_b).sum())
        if nc or ns:
            idx = (ca != cb).nonzero()[:3].tolist()
            problems.append(f"{name}: {nc} codes and {ns} scales differ (first codes at {idx})")
        return
    rel = ((sa.double() - sb.double()).abs() / sb.double().abs().clamp_min(1e-30)).max().item()
    step = (_ordinal(ca) - _ordinal(cb)).abs()
    frac = float((step > 0).float().mean())
    worst = int(step.max())
    print(f"    {name}: scales max rel diff {rel:.2e}, codes differing {frac * 100:.3f}% "
          f"(max {worst} step)")
    if rel > 1e-6 or worst > 1 or frac > 0.01:
        problems.append(f"{name}: outside tolerance (scale rel {rel:.2e}, code steps <= {worst}, "
                        f"{frac * 100:.3f}% of codes differ)")


def _check_input(op: str, t: int, h: int, dtype, device, gen) -> torch.Tensor:
    """Random normal data, a random power-of-two magnitude per group, NaN, +-inf, an all-zero
    group, a huge and a tiny group."""
    cols = 2 * h if op == "silu_group" else h
    x = torch.randn(t, cols, generator=gen, dtype=torch.float32)
    if op != "silu_group":
        g = cols // GROUP
        mags = torch.randint(-12, 12, (t, g), generator=gen).to(torch.float32).exp2()
        x = (x.reshape(t, g, GROUP) * mags[..., None]).reshape(t, cols)
        if dtype == torch.float16:
            x = x.clamp(-60000.0, 60000.0)
    x = x.to(dtype)
    x[0, 3] = float("nan")
    x[0, 5] = float("inf")
    x[t - 1, cols - 1] = float("-inf")
    x[t - 1, 7] = float("nan")
    x[1 % t, GROUP:2 * GROUP] = 0.0                       # an all-zero group
    if op != "silu_group" and dtype == torch.bfloat16:
        x[t - 1, 2 * GROUP:3 * GROUP] *= 1e30                 # large values (amax near 1e30)
    x[t - 1, 0:GROUP] *= 1e-3 if dtype == torch.float16 else 1e-20   # tiny group
    return x.to(device)


def run_check(args) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    ops = _parse_list(args.ops, OPS, "--ops")
    layouts = _parse_list(args.layouts, LAYOUTS, "--layouts")
    gen = torch.Generator().manual_seed(args.seed)
    # T = 5: TMA padding of the token dimension; G = 6 groups: two padding bytes in the last
    # UE8M0 word; T = 8, G = 2: no token padding, one word half empty
    shapes = [(5, 6 * GROUP), (8, 2 * GROUP)]
    problems: list = []
    print(f"quant_torch --check on {device}, torch {torch.__version__}, seed {args.seed}",
          flush=True)
    passed = failed = 0
    for op in ops:
        for layout in (layouts if op == "group" else [None]):
            lay = op_layout(op, layout)
            # fp16 too where it is cheap to add: tiny fp16 groups must quantize like bf16 ones
            dtypes = [torch.bfloat16]
            if op in ("token", "tensor_dynamic") or (op == "group" and lay == "row_major"):
                dtypes.append(torch.float16)
            for dtype in dtypes:
                for t, h in shapes:
                    name = f"{op} {lay or '-'} {str(dtype)[6:]} T={t} H={h}"
                    x = _check_input(op, t, h, dtype, device, gen)
                    fn = make_op(op, lay)
                    exact = op != "silu_group"
                    before = len(problems)
                    try:
                        ce, se = fn(x)
                        cc, sc = compile_op(fn)(x)
                    except Exception as exc:
                        problems.append(f"{name}: raised {type(exc).__name__}: {exc}")
                        ce = None
                    if ce is not None:
                        # shapes, dtypes, contiguity, sizes against the byte accounting
                        if ce.dtype != FP8 or tuple(ce.shape) != (t, h) or not ce.is_contiguous():
                            problems.append(f"{name}: codes {ce.dtype} {tuple(ce.shape)}")
                        want_sdtype = torch.int32 if lay == "ue8m0_tma" else torch.float32
                        nbytes = se.numel() * se.element_size()
                        if (se.dtype != want_sdtype or not se.is_contiguous()
                                or nbytes != scale_bytes(op, lay, t, h)):
                            problems.append(f"{name}: scales {se.dtype} {tuple(se.shape)} "
                                            f"contiguous={se.is_contiguous()} {nbytes} bytes")
                        _compare(f"{name} eager vs compile", ce, se, cc, sc, exact, problems)
                        rc, rs = reference(op, lay, x.cpu())
                        _compare(f"{name} eager vs reference", ce, se, rc, rs, exact, problems)
                    ok = len(problems) == before
                    passed += ok
                    failed += not ok
                    print(f"  {'ok  ' if ok else 'FAIL'} {name}", flush=True)
    for p in problems:
        print(f"MISMATCH {p}", flush=True)
    print(f"check: {passed} passed, {failed} failed", flush=True)
    return 1 if problems else 0


# ----------------------------------------------------------------------------------------------


def _parse_list(value, allowed, flag):
    if not value:
        return list(allowed)
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise SystemExit(f"quant_torch: {flag}: unknown {', '.join(bad)} "
                         f"(choose from {', '.join(allowed)})")
    return items


def _parse_ints(value, flag):
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"quant_torch: {flag} takes a comma list of integers, got {value!r}")
    if not out or any(v <= 0 for v in out):
        raise SystemExit(f"quant_torch: {flag} takes positive integers, got {value!r}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description="Time PyTorch eager and torch.compile FP8 quantization baselines "
                    "(same method and JSON records as fp8route's C++ benchmark).")
    p.add_argument("--ops", help=f"comma list of {', '.join(OPS)} (default: all)")
    p.add_argument("--T", help="comma list of token counts (default: "
                               f"{','.join(map(str, DEFAULT_T))})")
    p.add_argument("--H", help="comma list of hidden sizes, multiples of 128 (default: "
                               f"{','.join(map(str, DEFAULT_H))}; silu_group: output width)")
    p.add_argument("--layouts", help=f"scale layouts of op group: {', '.join(LAYOUTS)} "
                                     "(default: all)")
    p.add_argument("--impls", help="comma list of eager, compile (default: both)")
    p.add_argument("--json", metavar="FILE", help="write the records to FILE")
    p.add_argument("--quick", action="store_true",
                   help=f"T in {list(QUICK_T)}, H {list(QUICK_H)} (--T/--H still override)")
    p.add_argument("--replays", type=int, default=DEFAULT_REPLAYS,
                   help=f"timed graph replays per case (at least 20; default {DEFAULT_REPLAYS})")
    p.add_argument("--max-sets", type=int, default=MAX_SETS,
                   help=f"cap on the rotation sets (default {MAX_SETS}, as fp8route's benchmark)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--check", action="store_true",
                   help="correctness self-check instead of timing: eager == compiled (bitwise; "
                        "silu_group within docs/numerics.md's tolerance) == docs/numerics.md reference")
    p.add_argument("--device", help="--check only: cuda or cpu (default: cuda if available)")
    args = p.parse_args(argv)
    if args.check:
        return run_check(args)
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())
