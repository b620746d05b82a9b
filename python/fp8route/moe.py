"""Mixture of experts (docs/moe.md): the grouped scaled GEMM and the Fp8MoE layer.

grouped_scaled_mm works on any DLPack tensor given out=; the routing helpers, Fp8MoE and
reference_moe need torch. Everything the layer does after the router logits runs on the device with
shapes fixed by the number of tokens, so a decode step (the masked path) captures in one CUDA graph.
"""
from ._native import lib, plain
from .ops import _bits, _is_torch, _out_name, _NOT_TORCH

try:
    import torch
except ImportError:  # grouped_scaled_mm still works on any DLPack tensor, given out=
    torch = None

if torch is not None:
    # Routing, dispatch and the float reference: pure torch, in moe_routing (importable without the
    # native module, for fp8route.models).
    from .moe_routing import (_combine, contiguous_dispatch, dequantize_weight, grouped_topk,  # noqa: F401
                              masked_dispatch, reference_moe, softmax_topk)

_LAYOUTS = ("row_major", "col_major", "col_major_tma")
# Bounds of the decode glue kernels (moe.h: kMoeDispatchMaxEntries, kMoeMaxExperts, kMoeMaxTopK).
_GLUE_MAX_ENTRIES, _GLUE_MAX_EXPERTS, _GLUE_MAX_TOPK = 4096, 1024, 16
# Up to this many tokens moe_route_masked_dispatch routes them all at once (one warp each).
_ROUTE_DISPATCH_MAX_TOKENS = 32


def _infer_scale(b, scale_b):
    """The scale kind scale_b's shape implies: [E, N] or [E, N, 1] row; [E] or [E, 1] tensor; any
    other 3-D shape ([E, ceil(N/128), ceil(K/128)]) block."""
    e, n = b.shape[0], b.shape[1]
    shape = tuple(scale_b.shape)
    if shape in ((e, n), (e, n, 1)):
        return "row"
    if shape in ((e,), (e, 1)):
        return "tensor"
    return "block"


def grouped_scaled_mm(a, b, scale_a, scale_b, offsets=None, masked_m=None, out_dtype=None, scale=None,
                      scale_a_layout="col_major_tma", out=None, backend=""):
    """Grouped scaled FP8 GEMM, out[r] = (a[r] @ b[e]^T) * scale_a * scale_b[e] for each row r of expert e.

    Contiguous form (offsets given): a [M_total, K] with rows grouped by expert, offsets int32 [E + 1]
    (start of expert 0, then each expert's end) or [E] (the ends: torch._scaled_grouped_mm's offs),
    out [M_total, N]. Masked form (masked_m given): a [E, M_max, K], masked_m int32 [E], out
    [E, M_max, N]; rows past masked_m[e] are never written and reach no output. b e4m3 [E, N, K].
    scale: "tensor" (scale_a one element or [E], scale_b [E]), "row" (scale_a per token [M_total] or
    [E, M_max], scale_b [E, N]), "block" (scale_a the s of fp8route's group quant of a with group
    128, in scale_a_layout, f32 or int32 packed UE8M0; scale_b [E, ceil(N/128), ceil(K/128)]); None
    infers it from scale_b. The device counts are never read on the host: values out of range are
    clamped (docs/moe.md), and the call is CUDA-graph capturable."""
    if (offsets is None) == (masked_m is None):
        raise ValueError("offsets, masked_m: give exactly one (offsets: the contiguous form, masked_m: the masked form)")
    if scale_a_layout not in _LAYOUTS:
        raise ValueError(f"scale_a_layout: one of {', '.join(_LAYOUTS)}, got {scale_a_layout!r}")
    form = "contiguous" if offsets is not None else "masked"
    groups = offsets if offsets is not None else masked_m
    kind = scale if scale is not None else _infer_scale(b, scale_b)
    name = _out_name(out_dtype if out_dtype is not None else "bf16")
    if torch is not None and torch.compiler.is_compiling():
        r = torch.ops.fp8route.grouped_scaled_mm(a, b, scale_a, scale_b, groups, form, kind, scale_a_layout,
                                                 _TORCH_OUT[name], backend)
        return r if out is None else out.copy_(r)
    return _grouped(a, b, scale_a, scale_b, groups, form, kind, scale_a_layout, name, out, backend)


def _grouped(a, b, scale_a, scale_b, groups, form, kind, layout, name, out, backend):
    if out is None:
        if not _is_torch(a):
            raise ValueError(_NOT_TORCH)
        shape = tuple(a.shape[:-1]) + (b.shape[1],)
        out = torch.empty(size=shape, dtype=_TORCH_OUT[name], device=a.device)
    lib.grouped_scaled_mm(_bits(a), _bits(b), scale_a, scale_b, groups, out, form, kind, layout, backend)
    return out


def explain_grouped(form, scale, experts, rows, n, k, out_dtype="bf16"):
    """Which backend grouped_scaled_mm runs a problem with when none is named, and why: the grouped
    routing table's entry, measured rows and times, or the rule (docs/moe.md, Routing). rows is
    M_max (masked) or M_total (contiguous)."""
    return str(lib.explain_grouped(form, scale, int(experts), int(rows), int(n), int(k), _out_name(out_dtype)))


def load_grouped_table(path):
    """Route grouped calls by this grouped routing table from now on (ValueError naming the file if it
    does not load; the table in use stays). "" drops the table: the rule routes every grouped call."""
    lib.load_grouped_table(str(path))


def grouped_table_info():
    """The grouped routing table in use: {"path" ("" none), "entries", "stamp", "load_error"}."""
    return plain(lib.grouped_table_info())


# ------------------------------------------------------------------------------------------------
# The glue (docs/moe.md, "The glue kernels"): the fused forms of moe_routing's softmax_topk,
# grouped_topk, masked_dispatch, contiguous_dispatch and _combine (which stay the references, and the
# code of calls past the kernels' bounds)
# ------------------------------------------------------------------------------------------------

def moe_softmax_topk(logits, top_k, renormalize=True):
    """softmax_topk in one kernel: logits [T, E] (bf16, f16 or f32; E <= 1024) -> p = softmax in fp32,
    the top_k (1 <= top_k <= min(E, 16)) largest p in decreasing order, renormalized to sum to 1 when
    renormalize. Returns (weights f32 [T, top_k], ids int32 [T, top_k]). Equal probabilities: the lower
    expert index first (torch.topk on CUDA promises no order for ties). The ids equal softmax_topk's
    where p has no ties among the chosen; weights agree within 1e-6 relative (the softmax sum is added
    in another order)."""
    if torch is not None and torch.compiler.is_compiling():
        return torch.ops.fp8route.moe_softmax_topk(logits, top_k, bool(renormalize))
    return _softmax_topk(logits, top_k, renormalize)


def _softmax_topk(logits, top_k, renormalize):
    w, ids = _topk_outputs(logits, top_k, "min(E, 16)")
    lib.moe_softmax_topk(logits, w, ids, bool(renormalize))
    return w, ids


def _topk_outputs(logits, top_k, bound, *more):
    """The routing kernels' outputs (weights f32, ids int32 [T, top_k]) after the Python-side checks."""
    if not _is_torch(logits) or not all(_is_torch(m) for m in more):
        raise ValueError(_NOT_TORCH)
    if logits.dim() != 2:
        raise ValueError(f"logits: expected 2 dims [T, E], got {tuple(logits.shape)}")
    if not 1 <= top_k <= 16:
        raise ValueError(f"top_k: must be in [1, {bound}], got {top_k}")
    t, device = logits.shape[0], logits.device
    return (torch.empty(size=(t, top_k), dtype=torch.float32, device=device),
            torch.empty(size=(t, top_k), dtype=torch.int32, device=device))


def moe_grouped_topk(logits, top_k, bias, n_group, topk_group, renormalize=True, scaling_factor=1.0):
    """grouped_topk (DeepSeek-V3's routing) in one kernel: logits [T, E] (bf16, f16 or f32; 2 <= E <= 1024),
    bias [E] (the load-balancing correction, taken as f32), n_group <= 32 groups of E / n_group >= 2
    experts, 1 <= topk_group <= n_group, 1 <= top_k <= min(topk_group * E / n_group, 16). Returns
    (weights f32 [T, top_k], ids int32 [T, top_k]) in decreasing choice score; equal scores: the lower
    group and the lower expert index first (torch.topk on CUDA promises no order for ties). The ids
    equal grouped_topk's where no scores tie; weights agree within 1e-6 relative (their sum is added in
    another order)."""
    if torch is not None and torch.compiler.is_compiling():
        return torch.ops.fp8route.moe_grouped_topk(logits, top_k, bias, int(n_group), int(topk_group),
                                                   bool(renormalize), float(scaling_factor))
    return _grouped_topk(logits, top_k, bias, n_group, topk_group, renormalize, scaling_factor)


def _grouped_topk(logits, top_k, bias, n_group, topk_group, renormalize, scaling_factor):
    w, ids = _topk_outputs(logits, top_k, "min(topk_group * E / n_group, 16)", bias)
    lib.moe_grouped_topk(logits, bias.float().contiguous(), w, ids, int(n_group), int(topk_group), bool(renormalize),
                         float(scaling_factor))
    return w, ids


def moe_masked_dispatch(ids, experts, m_max, expert_map=None):
    """masked_dispatch in one kernel: ids int32 [T, top_k] (T * top_k <= 4096), mapped first through
    expert_map (int32 [E_global]: global id -> local id or -1) when given. Entry (t, j) goes to row
    e * m_max + pos of the [experts * m_max] masked rows, pos = the earlier entries (row-major) of
    the same expert; -1 when pos >= m_max or the expert is outside [0, experts) (-1 included). Returns
    (src2dst int32 [T, top_k], masked_m int32 [experts], each count clamped to m_max), equal to
    masked_dispatch(expert_map[ids], experts, m_max) element for element, the same on every run."""
    if torch is not None and torch.compiler.is_compiling():
        return torch.ops.fp8route.moe_masked_dispatch(ids, experts, m_max, expert_map)
    return _masked_dispatch(ids, experts, m_max, expert_map)


def _masked_dispatch(ids, experts, m_max, expert_map):
    if not _is_torch(ids):
        raise ValueError(_NOT_TORCH)
    if ids.dim() != 2:
        raise ValueError(f"ids: expected 2 dims [T, top_k], got {tuple(ids.shape)}")
    if experts < 0:
        raise ValueError(f"experts: must be >= 0, got {experts}")
    t, device = ids.shape[0], ids.device
    src2dst = torch.empty(size=tuple(ids.shape), dtype=torch.int32, device=device)
    # T = 0 launches nothing: the counts are the zeros allocated here.
    masked_m = (torch.zeros if t == 0 else torch.empty)(size=(experts,), dtype=torch.int32, device=device)
    mapped = expert_map is not None
    lib.moe_masked_dispatch(ids, mapped, expert_map if mapped else ids, int(m_max), src2dst, masked_m)
    return src2dst, masked_m


def moe_route_masked_dispatch(logits, top_k, experts, m_max, bias=None, n_group=1, topk_group=1, renormalize=True,
                              scaling_factor=1.0, expert_map=None):
    """Routing and masked dispatch in one kernel, for decode batches: moe_softmax_topk(logits, top_k,
    renormalize) (bias None) or moe_grouped_topk(logits, top_k, bias, n_group, topk_group, renormalize,
    scaling_factor), then moe_masked_dispatch(ids, experts, m_max, expert_map). Returns (weights,
    ids, src2dst, masked_m), bit for bit what those calls return, within the bounds of both. Up to 32
    tokens are routed at once (fewer for large E); past that the separate calls are faster."""
    if torch is not None and torch.compiler.is_compiling():
        return torch.ops.fp8route.moe_route_masked_dispatch(logits, top_k, experts, m_max, bias, int(n_group),
                                                            int(topk_group), bool(renormalize),
                                                            float(scaling_factor), expert_map)
    return _route_masked_dispatch(logits, top_k, experts, m_max, bias, n_group, topk_group, renormalize,
                                  scaling_factor, expert_map)


def _route_masked_dispatch(logits, top_k, experts, m_max, bias, n_group, topk_group, renormalize, scaling_factor,
                           expert_map):
    sigmoid = bias is not None
    w, ids = _topk_outputs(logits, top_k, "min(topk_group * E / n_group, 16)" if sigmoid else "min(E, 16)",
                           *([bias] if sigmoid else []))
    if experts < 0:
        raise ValueError(f"experts: must be >= 0, got {experts}")
    t, device = logits.shape[0], logits.device
    src2dst = torch.empty(size=(t, top_k), dtype=torch.int32, device=device)
    # T = 0 launches nothing: the counts are the zeros allocated here.
    masked_m = (torch.zeros if t == 0 else torch.empty)(size=(experts,), dtype=torch.int32, device=device)
    mapped = expert_map is not None
    lib.moe_route_masked_dispatch(logits, sigmoid, bias.float().contiguous() if sigmoid else logits, int(n_group),
                                  int(topk_group), bool(renormalize), float(scaling_factor), mapped,
                                  expert_map if mapped else logits, int(m_max), w, ids, src2dst, masked_m)
    return w, ids, src2dst, masked_m


def moe_contiguous_dispatch(ids, experts, expert_map=None):
    """contiguous_dispatch in three kernels, for any T: ids int32 [T, top_k], mapped first through
    expert_map (int32 [E_global]: global id -> local id or -1) when given; 1 <= experts <= 1024.
    Entries grouped by expert in row-major order: returns (src2dst int32 [T, top_k] = offsets[e] + the
    earlier entries of the same expert, -1 for an expert outside [0, experts); offsets int32
    [experts + 1], offsets[0] = 0), equal to contiguous_dispatch(expert_map[ids], experts) element
    for element, the same on every run."""
    if torch is not None and torch.compiler.is_compiling():
        return torch.ops.fp8route.moe_contiguous_dispatch(ids, experts, expert_map)
    return _contiguous_dispatch(ids, experts, expert_map)


def _contiguous_dispatch(ids, experts, expert_map):
    if not _is_torch(ids):
        raise ValueError(_NOT_TORCH)
    if ids.dim() != 2:
        raise ValueError(f"ids: expected 2 dims [T, top_k], got {tuple(ids.shape)}")
    if not 1 <= experts <= _GLUE_MAX_EXPERTS:
        raise ValueError(f"experts: must be in [1, {_GLUE_MAX_EXPERTS}], got {experts}")
    device = ids.device
    src2dst = torch.empty(size=tuple(ids.shape), dtype=torch.int32, device=device)
    offsets = torch.empty(size=(experts + 1,), dtype=torch.int32, device=device)
    ws = torch.empty(size=(int(lib.moe_contiguous_dispatch_workspace(ids.numel(), experts)),), dtype=torch.int32,
                     device=device)
    mapped = expert_map is not None
    lib.moe_contiguous_dispatch(ids, mapped, expert_map if mapped else ids, src2dst, offsets, ws)
    return src2dst, offsets


_COMBINE_OUT = {"f32": "f32", "float32": "f32", "bf16": "bf16", "bfloat16": "bf16", "f16": "f16", "float16": "f16"}


def moe_combine(down_rows, src2dst, weights, out_dtype=None, out=None):
    """_combine in one kernel: out[t] = sum over j of weights[t, j] * down_rows[src2dst[t, j]],
    accumulated in fp32 in j order (each product and sum rounded once), rounded once to out_dtype
    (down_rows' dtype by default, or f32). down_rows [R, H] bf16 or f16 (H % 8 == 0), src2dst int32
    [T, top_k], weights f32 [T, top_k]; an entry outside [0, R) (-1) adds nothing and its row is never
    read (masked rows past masked_m may hold anything, NaN included). Bit for bit equal to
    _combine(down_rows, src2dst, weights).to(out_dtype) when _combine sums the j terms in that order
    and no dropped entry's clamped row is inf or NaN (which _combine multiplies by 0)."""
    if torch is not None and torch.compiler.is_compiling():
        r = torch.ops.fp8route.moe_combine(down_rows, src2dst, weights, _combine_dtype(down_rows, out_dtype))
        return r if out is None else out.copy_(r)
    return _fused_combine(down_rows, src2dst, weights, out_dtype, out)


def _combine_dtype(down_rows, out_dtype):
    if out_dtype is None:
        return down_rows.dtype
    if torch is not None and isinstance(out_dtype, torch.dtype):
        if out_dtype in (torch.float32, torch.bfloat16, torch.float16):
            return out_dtype
    elif str(out_dtype) in _COMBINE_OUT:
        return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[_COMBINE_OUT[str(out_dtype)]]
    raise ValueError(f"out_dtype: f32 or down_rows' dtype (bf16, f16), got {out_dtype!r}")


def _fused_combine(down_rows, src2dst, weights, out_dtype, out):
    if out is None:
        if not _is_torch(down_rows):
            raise ValueError(_NOT_TORCH)
        out = torch.empty(size=(src2dst.shape[0], down_rows.shape[-1]), dtype=_combine_dtype(down_rows, out_dtype),
                          device=down_rows.device)
    lib.moe_combine(down_rows, src2dst, weights, out)
    return out


if torch is not None:
    _TORCH_OUT = {"bf16": torch.bfloat16, "f16": torch.float16}
    _OUT_NAME = {torch.bfloat16: "bf16", torch.float16: "f16"}

    # torch.ops.fp8route.grouped_scaled_mm, for torch.compile (a fragment of its own: the other ops
    # are defined in torch_ops.py).
    _LIB = torch.library.Library("fp8route", "FRAGMENT")
    _LIB.define("grouped_scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor groups, str form, "
                "str scale, str scale_a_layout, ScalarType out_dtype, str backend) -> Tensor")

    def _grouped_op(a, b, scale_a, scale_b, groups, form, scale, scale_a_layout, out_dtype, backend):
        return _grouped(a, b, scale_a, scale_b, groups, form, scale, scale_a_layout, _OUT_NAME[out_dtype], None,
                        backend)

    def _grouped_fake(a, b, scale_a, scale_b, groups, form, scale, scale_a_layout, out_dtype, backend):
        return a.new_empty(tuple(a.shape[:-1]) + (b.shape[1],), dtype=out_dtype)

    _LIB.impl("grouped_scaled_mm", _grouped_op, "CompositeExplicitAutograd")
    torch.library.register_fake("fp8route::grouped_scaled_mm", _grouped_fake, lib=_LIB)

    # The decode glue's ops.
    _LIB.define("moe_softmax_topk(Tensor logits, int top_k, bool renormalize) -> (Tensor, Tensor)")
    _LIB.impl("moe_softmax_topk", _softmax_topk, "CompositeExplicitAutograd")
    torch.library.register_fake(
        "fp8route::moe_softmax_topk",
        lambda logits, top_k, renormalize: (logits.new_empty((logits.shape[0], top_k), dtype=torch.float32),
                                            logits.new_empty((logits.shape[0], top_k), dtype=torch.int32)),
        lib=_LIB)
    _LIB.define("moe_grouped_topk(Tensor logits, int top_k, Tensor bias, int n_group, int topk_group, "
                "bool renormalize, float scaling_factor) -> (Tensor, Tensor)")
    _LIB.impl("moe_grouped_topk", _grouped_topk, "CompositeExplicitAutograd")
    torch.library.register_fake(
        "fp8route::moe_grouped_topk",
        lambda logits, top_k, bias, n_group, topk_group, renormalize, scaling_factor: (
            logits.new_empty((logits.shape[0], top_k), dtype=torch.float32),
            logits.new_empty((logits.shape[0], top_k), dtype=torch.int32)),
        lib=_LIB)
    _LIB.define("moe_masked_dispatch(Tensor ids, int experts, int m_max, Tensor? expert_map) -> (Tensor, Tensor)")
    _LIB.impl("moe_masked_dispatch", _masked_dispatch, "CompositeExplicitAutograd")
    torch.library.register_fake(
        "fp8route::moe_masked_dispatch",
        lambda ids, experts, m_max, expert_map: (ids.new_empty(ids.shape, dtype=torch.int32),
                                                 ids.new_empty((experts,), dtype=torch.int32)),
        lib=_LIB)
    _LIB.define("moe_route_masked_dispatch(Tensor logits, int top_k, int experts, int m_max, Tensor? bias, "
                "int n_group, int topk_group, bool renormalize, float scaling_factor, Tensor? expert_map) "
                "-> (Tensor, Tensor, Tensor, Tensor)")
    _LIB.impl("moe_route_masked_dispatch", _route_masked_dispatch, "CompositeExplicitAutograd")
    torch.library.register_fake(
        "fp8route::moe_route_masked_dispatch",
        lambda logits, top_k, experts, m_max, *rest: (
            logits.new_empty((logits.shape[0], top_k), dtype=torch.float32),
            logits.new_empty((logits.shape[0], top_k), dtype=torch.int32),
            logits.new_empty((logits.shape[0], top_k), dtype=torch.int32),
            logits.new_empty((experts,), dtype=torch.int32)),
        lib=_LIB)
    _LIB.define("moe_contiguous_dispatch(Tensor ids, int experts, Tensor? expert_map) -> (Tensor, Tensor)")
    _LIB.impl("moe_contiguous_dispatch", _contiguous_dispatch, "CompositeExplicitAutograd")
    torch.library.register_fake(
        "fp8route::moe_contiguous_dispatch",
        lambda ids, experts, expert_map: (ids.new_empty(ids.shape, dtype=torch.int32),
                                          ids.new_empty((experts + 1,), dtype=torch.int32)),
        lib=_LIB)
    _LIB.define("moe_combine(Tensor down_rows, Tensor src2dst, Tensor weights, ScalarType out_dtype) -> Tensor")
    _LIB.impl("moe_combine", lambda down_rows, src2dst, weights, out_dtype:
              _fused_combine(down_rows, src2dst, weights, out_dtype, None), "CompositeExplicitAutograd")
    torch.library.register_fake(
        "fp8route::moe_combine",
        lambda down_rows, src2dst, weights, out_dtype: down_rows.new_empty((src2dst.shape[0], down_rows.shape[-1]),
                                                                           dtype=out_dtype),
        lib=_LIB)
else:
    _TORCH_OUT = {}


# ------------------------------------------------------------------------------------------------
# The layer
# ------------------------------------------------------------------------------------------------

if torch is not None:

    class Fp8MoE(torch.nn.Module):
        """A mixture-of-experts FFN on FP8 expert weights: routing -> permute + quant -> grouped gate_up
        -> fused SiLU-and-mul + quant -> grouped down -> weighted combine (+ shared expert, a module).

        w13 e4m3 [E, 2I, H] (gate rows first, then up), w2 e4m3 [E, H, I]. scale "block": w13_scale
        [E, ceil(2I/128), H/128] and w2_scale [E, ceil(H/128), I/128] (weight_scale_inv of the FP8
        checkpoints), activations quantized per 1x128 group; "row": w13_scale [E, 2I], w2_scale [E, H],
        activations per token. routing "softmax" (Qwen3-MoE, Mixtral) or "sigmoid" (DeepSeek-V3:
        e_score_correction_bias, n_group, topk_group, routed_scaling_factor).

        forward(x [T, H] bf16, router_logits [T, E]) -> [T, H] bf16. masked_m_max=None runs the
        contiguous form (prefill); an int runs the masked form with that M_max (decode; pass T or more
        and nothing is dropped), whose shapes depend on T alone: it captures in a CUDA graph. The glue of
        either form runs as the fused kernels (moe_softmax_topk or moe_grouped_topk, moe_masked_dispatch
        or moe_contiguous_dispatch, scatter_per_token_quant, moe_combine) within their bounds, else
        moe_routing's torch code (docs/moe.md).

        expert_map (int32 [E_global], optional): this GPU holds E of an expert-parallel layer's E_global
        experts; router_logits are over E_global, expert_map[g] is global expert g's index in w13/w2 or
        -1. Entries on experts held elsewhere are dropped: the output is this GPU's part of the sum,
        which the caller adds up over the GPUs (an all-reduce, or its own combine)."""

        def __init__(self, w13, w13_scale, w2, w2_scale, top_k, scale="block", routing="softmax",
                     renormalize=True, e_score_correction_bias=None, n_group=1, topk_group=1,
                     routed_scaling_factor=1.0, shared_expert=None, masked_m_max=None, expert_map=None):
            super().__init__()
            if scale not in ("block", "row"):
                raise ValueError(f"scale: 'block' or 'row', got {scale!r}")
            if routing not in ("softmax", "sigmoid"):
                raise ValueError(f"routing: 'softmax' or 'sigmoid', got {routing!r}")
            e, two_i, h = w13.shape
            if w2.shape != (e, h, two_i // 2) or two_i % 2:
                raise ValueError(f"w2: expected [E, H, I] = [{e}, {h}, {two_i // 2}] for w13 {tuple(w13.shape)}, "
                                 f"got {tuple(w2.shape)}")
            if routing == "sigmoid" and e_score_correction_bias is None:
                raise ValueError("e_score_correction_bias: required by routing='sigmoid'")
            self.experts, self.hidden, self.intermediate = e, h, two_i // 2
            self.top_k, self.scale, self.routing, self.renormalize = top_k, scale, routing, renormalize
            self.n_group, self.topk_group, self.routed_scaling_factor = n_group, topk_group, routed_scaling_factor
            self.masked_m_max = masked_m_max
            self.shared_expert = shared_expert
            self.register_buffer("w13", w13)
            self.register_buffer("w13_scale", w13_scale)
            self.register_buffer("w2", w2)
            self.register_buffer("w2_scale", w2_scale)
            self.register_buffer("e_score_correction_bias", e_score_correction_bias)
            if expert_map is not None and (expert_map.dim() != 1 or int(expert_map.max()) >= e):
                raise ValueError(f"expert_map: int [E_global] of local indices < {e} or -1, got {tuple(expert_map.shape)}")
            self.register_buffer("expert_map", None if expert_map is None else expert_map.to(torch.int32))
            # The glue runs as the fused kernels (moe_softmax_topk or moe_grouped_topk for the routing,
            # moe_masked_dispatch or moe_contiguous_dispatch, scatter_per_token_quant for row scales,
            # moe_combine) where they take the call; False runs moe_routing's torch code instead (the
            # tests' reference for them).
            self._fused_glue = True

        def route(self, router_logits):
            if self.routing == "softmax":
                return softmax_topk(router_logits, self.top_k, self.renormalize)
            return grouped_topk(router_logits, self.top_k, self.e_score_correction_bias, self.n_group,
                                self.topk_group, self.renormalize, self.routed_scaling_factor)

        def _glue_fits(self, t, router_logits, masked):
            """Whether this call's glue runs as the fused kernels (their bounds: docs/moe.md): masked,
            T * top_k <= 4096 (one dispatch block); contiguous, at most 1024 local experts; softmax
            routing over at most 1024 experts, top_k <= 16."""
            fits = t * self.top_k <= _GLUE_MAX_ENTRIES if masked else self.experts <= _GLUE_MAX_EXPERTS
            return (self._fused_glue and fits and self.hidden % 8 == 0
                    and (self.routing != "softmax" or (router_logits.shape[-1] <= _GLUE_MAX_EXPERTS
                                                       and self.top_k <= _GLUE_MAX_TOPK)))

        def _grouped_topk_fits(self, router_logits):
            """Whether sigmoid routing runs as moe_grouped_topk (its bounds: docs/moe.md)."""
            e, g = router_logits.shape[-1], self.n_group
            return (2 <= e <= _GLUE_MAX_EXPERTS and 1 <= g <= 32 and e % g == 0 and e // g >= 2
                    and 1 <= self.topk_group <= g and self.top_k <= min(16, self.topk_group * (e // g)))

        def forward(self, x, router_logits):
            from . import ops
            t, h, e = x.shape[0], self.hidden, self.experts
            block = self.scale == "block"
            masked = self.masked_m_max is not None
            fused = self._glue_fits(t, router_logits, masked)
            sigmoid_fits = self.routing == "sigmoid" and self._grouped_topk_fits(router_logits)
            one_kernel = fused and masked and t <= _ROUTE_DISPATCH_MAX_TOKENS and (self.routing == "softmax"
                                                                                   or sigmoid_fits)
            if one_kernel:  # routing and the masked dispatch together
                sig = self.routing == "sigmoid"  # softmax takes no groups, no bias and no scaling
                weights, ids, src2dst, counts = moe_route_masked_dispatch(
                    router_logits.contiguous(), self.top_k, e, self.masked_m_max,
                    bias=self.e_score_correction_bias if sig else None, n_group=self.n_group if sig else 1,
                    topk_group=self.topk_group if sig else 1, renormalize=self.renormalize,
                    scaling_factor=self.routed_scaling_factor if sig else 1.0, expert_map=self.expert_map)
            elif fused and self.routing == "softmax":
                weights, ids = moe_softmax_topk(router_logits.contiguous(), self.top_k, self.renormalize)
            elif fused and sigmoid_fits:
                weights, ids = moe_grouped_topk(router_logits.contiguous(), self.top_k, self.e_score_correction_bias,
                                                self.n_group, self.topk_group, self.renormalize,
                                                self.routed_scaling_factor)
            else:
                weights, ids = self.route(router_logits)
            if self.expert_map is not None and not fused:  # the fused dispatch maps the ids itself
                ids = self.expert_map[ids.long()]
            if masked:
                m_max = self.masked_m_max
                if one_kernel:
                    pass  # dispatched with the routing above
                elif fused:
                    src2dst, counts = moe_masked_dispatch(ids, e, m_max, self.expert_map)
                else:
                    src2dst, counts = masked_dispatch(ids, e, m_max)
                rows, kw = e * m_max, {"masked_m": counts}
                # Row-major group scales of rows [E * M_max] are the masked layout [E, M_max, G].
                layout = "row_major"
            else:
                if fused:
                    src2dst, counts = moe_contiguous_dispatch(ids, e, self.expert_map)
                else:
                    src2dst, counts = contiguous_dispatch(ids, e)
                rows, kw, layout = t * self.top_k, {"offsets": counts}, "col_major_tma"

            def shaped(q, s, width):  # the masked form's [E, M_max, ...] views of row buffers
                if not masked:
                    return q, s
                return q.view(e, m_max, width), (s.view(e, m_max, *s.shape[1:]) if s.dim() > 1 else s.view(e, m_max))

            # A dispatch names each row at most once (unique_rows: no search for a row's writer), and
            # rows no entry maps to lie past masked_m (past offsets[E]) and reach no output: they stay
            # unwritten, so the group form's outputs need no zeroing (eager calls pass them unzeroed).
            if block:
                out = None if torch.compiler.is_compiling() else ops._group_outputs(
                    x, rows, h, 0, 128, "e4m3", "none", "f32", layout, None)
                q, s = ops.scatter_per_token_group_quant(x, src2dst, rows, layout=layout, out=out, unique_rows=True)
            elif fused:
                q, s = ops.scatter_per_token_quant(x, src2dst, rows, unique_rows=True)
            else:
                # Per-token quant once, then each entry's codes and scale copied to its row; dropped
                # entries (-1) go to one extra row that is cut off, so no row is written twice.
                qx, sx = ops.per_token_quant(x)
                idx = src2dst.reshape(-1).long()
                idx = torch.where(idx >= 0, idx, torch.full_like(idx, rows))
                token = torch.arange(t, device=x.device).repeat_interleave(self.top_k)
                q = qx.new_zeros((rows + 1, h))
                q.view(torch.uint8)[idx] = qx.view(torch.uint8)[token]
                s = sx.new_zeros((rows + 1,))
                s[idx] = sx.reshape(-1)[token]
                q, s = q[:rows], s[:rows]
            q, s = shaped(q, s, h)
            gate_up = grouped_scaled_mm(q, self.w13, s, self.w13_scale, scale=self.scale, scale_a_layout=layout, **kw)
            if block:
                if masked:
                    q2, s2 = ops.masked_silu_and_mul_per_token_group_quant(gate_up, counts, layout=layout)
                else:
                    q2, s2 = ops.silu_and_mul_per_token_group_quant(gate_up, layout=layout)
            elif masked:  # only the rows each expert holds (the others reach no output)
                q2, s2 = ops.masked_silu_and_mul_per_token_quant(gate_up, counts)
            else:
                q2, s2 = ops.silu_and_mul_per_token_quant(gate_up)
            down = grouped_scaled_mm(q2, self.w2, s2, self.w2_scale, scale=self.scale, scale_a_layout=layout, **kw)
            if fused:
                direct = self.shared_expert is None and x.dtype == down.dtype  # else f32, then the sum
                y = moe_combine(down.reshape(-1, h), src2dst, weights, out_dtype=x.dtype if direct else torch.float32)
                if direct:
                    return y
            else:
                y = _combine(down.reshape(-1, h), src2dst, weights)
            if self.shared_expert is not None:
                y = y + self.shared_expert(x).float()
            return y.to(x.dtype)

else:
    Fp8MoE = None
