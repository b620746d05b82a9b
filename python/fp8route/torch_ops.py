"""fp8route ops registered with torch.library (imported by fp8route when torch is installed).

Every tensor function of fp8route is an op here, torch.ops.fp8route.<name>, with a fake (meta)
implementation, so torch.compile traces it without running it and CUDA graphs capture it like any
op (a call under capture gets scratch owned by the graph being captured, allocated in relaxed
capture mode as PyTorch's allocator does). The public functions (ops.py) and Fp8Linear call these
ops while torch.compile traces them and the native module directly otherwise, so an eager call
pays no dispatcher.

The ops are defined with torch.library.Library (define, impl, register_fake) rather than
torch.library.custom_op, whose Python layers cost several microseconds per eager call on top of the
dispatcher's. The implementation is registered for every device (CompositeExplicitAutograd, as
custom_op does) so that a tensor outside CUDA memory reaches the C++ checks, which name it.

Fp8Linear's plan. The linear ops take `plan`, an integer key that names one fp8route.LinearPlan for
the life of the process (keys are never reused): a graph holds the key, and each call looks the
plan up here. The table holds plans weakly, so it never keeps a plan alive: the Fp8Linear (or
anything else holding the plan) does, and a graph called after every holder is gone gets a
ValueError naming the key, never freed memory. An integer is what every torch 2.x can carry through
torch.compile (fullgraph, dynamic shapes), CUDA graphs and opcheck (which runs ops on copies of
their tensor arguments, so a key derived from a tensor would not survive it); torch's opaque-object
API, which would let a graph hold the plan itself, is private and has changed between releases."""
import itertools
import weakref

import torch

from . import ops

_LIB = torch.library.Library("fp8route", "FRAGMENT")


def _define(schema, fake):
    """Defines fp8route::<schema> with the decorated function as its implementation and `fake` as its
    fake implementation; returns the function."""
    name = schema[:schema.index("(")]

    def register(impl):
        _LIB.define(schema)
        _LIB.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake("fp8route::" + name, fake, lib=_LIB)
        return impl

    return register


_CODE = {"e4m3": torch.float8_e4m3fn, "i8": torch.int8}
_OUT = {torch.bfloat16: "bf16", torch.float16: "f16"}
_F8, _F32 = torch.float8_e4m3fn, torch.float32
_ACCUMS = frozenset(ops._ACCUMS)


def _out_name(dtype):
    return _OUT.get(dtype) or ops._out_name(dtype)


# ------------------------------------------------------------------------------------------------
# Fp8Linear's plans
# ------------------------------------------------------------------------------------------------

# key -> weakref.ref(plan); the ref's callback drops the entry when the plan goes (a plain dict of
# refs: one lookup and one call per op call, fewer than WeakValueDictionary.get's).
_plans = {}
_keys = itertools.count(1)


def plan_key(plan):
    """A new key for `plan` (held weakly: the caller keeps the plan alive)."""
    key = next(_keys)
    _plans[key] = weakref.ref(plan, lambda _, key=key, plans=_plans: plans.pop(key, None))
    return key


def _plan(key):
    ref = _plans.get(key)
    plan = ref() if ref is not None else None
    if plan is None:
        raise ValueError(f"plan: no live LinearPlan has key {key} (its Fp8Linear is gone; keys are never reused)")
    return plan


def linear_forward(plan, x, n, act, out_dtype):
    """Fp8Linear's forward: x [..., K] quantized for the plan's activation scale kind, then the plan's
    routed GEMM -> [..., n] in out_dtype. An x of [M, K] (K > 0) is used as it is (no reshape in,
    no view out); act "row" allocates and quantizes here, without the generic helper's checks."""
    shape = x.shape
    flat = len(shape) == 2 and shape[1] != 0
    x2 = x if flat else x.reshape(-1, shape[-1])
    if act == "row":
        m, k = x2.shape if not flat else shape
        if not isinstance(x, torch.Tensor):
            raise ValueError(ops._NOT_TORCH)
        device = x.device
        q = torch.empty(size=(m, k), dtype=_F8, device=device)
        s = torch.empty(size=(m,), dtype=_F32, device=device)
        qb = ops._bits(q)
        ops.lib.per_token_quant(x2, qb, s, "none", False)
    else:
        if act == "tensor":
            q, s = ops._tensor_quant(x2, None, "e4m3", None)
        else:  # block: 1x128 groups, scales [ceil(K/128), align(M, 4)] as the block GEMM reads them
            q, s = ops._group_quant(x2, 128, "e4m3", "none", "f32", "col_major_tma", None, False)
        qb = ops._bits(q)
        m, device = x2.shape[0], x.device
    y = torch.empty(size=(m, n), dtype=out_dtype, device=device)
    plan.run(qb, s, y)
    return y if flat else y.view(*shape[:-1], n)


def linear_quantized_forward(plan, q, s, n, out_dtype):
    """Fp8Linear.forward_quantized: the plan's routed GEMM on q [M, K] and its scales."""
    y = torch.empty(size=(q.shape[0], n), dtype=out_dtype, device=q.device)
    plan.run(ops._bits(q), s, y)
    return y


def _linear_fake(x, weight, plan, act, out_dtype):
    return x.new_empty((*x.shape[:-1], weight.shape[0]), dtype=out_dtype)


@_define("linear(Tensor x, Tensor weight, int plan, str act, ScalarType out_dtype) -> Tensor", _linear_fake)
def linear(x, weight, plan, act, out_dtype):
    """Fp8Linear's forward (`weight`, which the plan holds, gives N and the device to the fake)."""
    return linear_forward(_plan(plan), x, weight.shape[0], act, out_dtype)


def _linear_quantized_fake(q, s, weight, plan, out_dtype):
    return q.new_empty((q.shape[0], weight.shape[0]), dtype=out_dtype)


@_define("linear_quantized(Tensor q, Tensor s, Tensor weight, int plan, ScalarType out_dtype) -> Tensor",
         _linear_quantized_fake)
def linear_quantized(q, s, weight, plan, out_dtype):
    """Fp8Linear.forward_quantized: the plan's routed GEMM on activations already quantized for its
    act kind (q e4m3 [M, K]; s f32 [M] for row, one element for tensor, 1x128 group scales for
    block: [ceil(K/128), align(M, 4)] col_major_tma, or an [M, ceil(K/128)] view as scaled_mm takes
    it), so a fused producer (rms_norm_per_token_quant, silu_and_mul_per_token_group_quant) feeds
    the GEMM without a second pass over the activations."""
    return linear_quantized_forward(_plan(plan), q, s, weight.shape[0], out_dtype)


# ------------------------------------------------------------------------------------------------
# scaled_mm
# ------------------------------------------------------------------------------------------------

def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, scale="auto", accum="fast"):
    ops._accum(accum, None)  # a bad value fails while tracing, as it would when run
    return a.new_empty((a.shape[0], ops._b_cols(a, b)), dtype=out_dtype)


@_define("scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
         "ScalarType out_dtype=bfloat16, str scale=\"auto\", str accum=\"fast\") -> Tensor", _scaled_mm_fake)
def scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, scale="auto", accum="fast"):
    """fp8route.scaled_mm in torch._scaled_mm's argument order; scale "auto" infers the kind; accum
    "fast" or "precise" (the accumulation class, gemm.h)."""
    return ops._scaled_mm(a, b, scale_a, scale_b, bias, _OUT.get(out_dtype) or ops._out_name(out_dtype), scale, None,
                          accum if accum in _ACCUMS else ops._accum(accum, None))


# ------------------------------------------------------------------------------------------------
# Quantization
# ------------------------------------------------------------------------------------------------

def _group_fake_shapes(t, h, group_size, storage, layout):
    """The scale shape and dtype of quant_layout for symbolic T (torch.compile's dynamic shapes): it
    depends on T only through align(T, 4) of col_major_tma."""
    groups = h // group_size
    cols = (groups + 3) // 4 if storage == "ue8m0_packed" else groups
    t_pad = (t + 3) // 4 * 4 if layout == "col_major_tma" else t
    s_shape = (t, cols) if layout == "row_major" else (cols, t_pad)
    return s_shape, torch.int32 if storage == "ue8m0_packed" else torch.float32


def _group_fake(x, group_size, dtype, storage, layout, fused=False):
    h = x.shape[1] // 2 if fused else x.shape[1]
    s_shape, s_dtype = _group_fake_shapes(x.shape[0], h, group_size, storage, layout)
    return x.new_empty((x.shape[0], h), dtype=_CODE[dtype]), x.new_empty(s_shape, dtype=s_dtype)


def _per_token_group_quant_fake(x, group_size, dtype, rounding, storage, layout, fused):
    return _group_fake(x, group_size, dtype, storage, layout, fused)


@_define("per_token_group_quant(Tensor x, int group_size, str dtype, str rounding, str storage, str layout, "
         "bool fused) -> (Tensor, Tensor)", _per_token_group_quant_fake)
def per_token_group_quant(x, group_size, dtype, rounding, storage, layout, fused):
    """per_token_group_quant, or with fused=True silu_and_mul_per_token_group_quant (x [T, 2H])."""
    return ops._group_quant(x, group_size, dtype, rounding, storage, layout, None, fused)


def _masked_fake(x, masked_m, group_size, dtype, rounding, storage, layout, fused):
    e, t = x.shape[0], x.shape[1]
    h = x.shape[2] // 2 if fused else x.shape[2]
    s_shape, s_dtype = _group_fake_shapes(t, h, group_size, storage, layout)
    return x.new_empty((e, t, h), dtype=_CODE[dtype]), x.new_empty((e, *s_shape), dtype=s_dtype)


@_define("masked_per_token_group_quant(Tensor x, Tensor masked_m, int group_size, str dtype, str rounding, "
         "str storage, str layout, bool fused) -> (Tensor, Tensor)", _masked_fake)
def masked_per_token_group_quant(x, masked_m, group_size, dtype, rounding, storage, layout, fused):
    """masked_per_token_group_quant (fused: masked_silu_and_mul_per_token_group_quant). Rows
    t >= masked_m[e] of the outputs are not written (their contents are unspecified)."""
    return ops._masked_group_quant(x, masked_m, group_size, dtype, rounding, storage, layout, None, fused)


def _scatter_fake(x, src2dst, rows, group_size, dtype, rounding, storage, layout, unique_rows=False):
    s_shape, s_dtype = _group_fake_shapes(rows, x.shape[1], group_size, storage, layout)
    return x.new_empty((rows, x.shape[1]), dtype=_CODE[dtype]), x.new_empty(s_shape, dtype=s_dtype)


@_define("scatter_per_token_group_quant(Tensor x, Tensor src2dst, SymInt rows, int group_size, str dtype, "
         "str rounding, str storage, str layout, bool unique_rows=False) -> (Tensor, Tensor)", _scatter_fake)
def scatter_per_token_group_quant(x, src2dst, rows, group_size, dtype, rounding, storage, layout, unique_rows=False):
    """scatter_per_token_group_quant: outputs [rows, ...] start zeroed."""
    return ops._scatter_group_quant(x, src2dst, rows, group_size, dtype, rounding, storage, layout, None,
                                    unique_rows)


def _scatter_token_fake(x, src2dst, rows, dtype, rounding, unique_rows=False):
    return x.new_empty((rows, x.shape[1]), dtype=_CODE[dtype]), x.new_empty((rows,), dtype=torch.float32)


@_define("scatter_per_token_quant(Tensor x, Tensor src2dst, SymInt rows, str dtype, str rounding, "
         "bool unique_rows=False) -> (Tensor, Tensor)", _scatter_token_fake)
def scatter_per_token_quant(x, src2dst, rows, dtype, rounding, unique_rows=False):
    """scatter_per_token_quant: rows no entry maps to are not written (their contents are unspecified)."""
    return ops._scatter_token_quant(x, src2dst, rows, dtype, rounding, None, unique_rows)


def _per_token_quant_fake(x, dtype, rounding, fused=False):
    h = x.shape[1] // 2 if fused else x.shape[1]
    return x.new_empty((x.shape[0], h), dtype=_CODE[dtype]), x.new_empty((x.shape[0],), dtype=torch.float32)


@_define("per_token_quant(Tensor x, str dtype, str rounding, bool fused=False) -> (Tensor, Tensor)",
         _per_token_quant_fake)
def per_token_quant(x, dtype, rounding, fused=False):
    """per_token_quant, or with fused=True silu_and_mul_per_token_quant (x [T, 2H])."""
    return ops._token_quant(x, dtype, rounding, None, fused)


def _masked_token_fake(x, masked_m, dtype, rounding):
    e, t, h = x.shape[0], x.shape[1], x.shape[2] // 2
    return x.new_empty((e, t, h), dtype=_CODE[dtype]), x.new_empty((e, t), dtype=torch.float32)


@_define("masked_silu_and_mul_per_token_quant(Tensor x, Tensor masked_m, str dtype, str rounding) -> (Tensor, Tensor)",
         _masked_token_fake)
def masked_silu_and_mul_per_token_quant(x, masked_m, dtype, rounding):
    """masked_silu_and_mul_per_token_quant: rows t >= masked_m[e] are not written (their contents are
    unspecified)."""
    return ops._masked_token_quant(x, masked_m, dtype, rounding, None)


def _per_tensor_quant_fake(x, dtype):
    return x.new_empty(x.shape, dtype=_CODE[dtype]), x.new_empty((1,), dtype=torch.float32)


@_define("per_tensor_quant(Tensor x, str dtype) -> (Tensor, Tensor)", _per_tensor_quant_fake)
def per_tensor_quant(x, dtype):
    """Dynamic per-tensor quant: (q, scale f32 [1])."""
    return ops._tensor_quant(x, None, dtype, None)


def _per_tensor_quant_static_fake(x, scale, dtype):
    return x.new_empty(x.shape, dtype=_CODE[dtype])


@_define("per_tensor_quant_static(Tensor x, Tensor scale, str dtype) -> Tensor", _per_tensor_quant_static_fake)
def per_tensor_quant_static(x, scale, dtype):
    """Per-tensor quant by a given scale (f32 [1] on the device): q."""
    return ops._tensor_quant(x, scale, dtype, None)[0]


# ------------------------------------------------------------------------------------------------
# RMSNorm, alone and fused with a quantization; each returns h = x (+ residual) last, [0, H]
# without a residual
# ------------------------------------------------------------------------------------------------

def _norm_h(x, residual):
    return x.new_empty(x.shape if residual is not None else (0, x.shape[1]))


def _h(x, residual, h):
    return h if residual is not None else _norm_h(x, None)


def _rms_norm_fake(x, weight, eps, residual, static_weight=False):
    return x.new_empty(x.shape), _norm_h(x, residual)


# static_weight (every norm op): ops.rms_norm's promise that the weight is written at load time.
@_define("rms_norm(Tensor x, Tensor weight, float eps, Tensor? residual, bool static_weight=False) -> (Tensor, Tensor)",
         _rms_norm_fake)
def rms_norm(x, weight, eps, residual, static_weight=False):
    """(y, h): y = rms_norm(h) * weight, h = x (+ residual)."""
    y, h = ops._rms_norm(x, weight, eps, residual, None, None, static_weight)
    return y, _h(x, residual, h)


def _rms_norm_group_fake(x, weight, eps, residual, group_size, dtype, rounding, storage, layout, static_weight=False):
    q, s = _group_fake(x, group_size, dtype, storage, layout)
    return q, s, _norm_h(x, residual)


@_define("rms_norm_per_token_group_quant(Tensor x, Tensor weight, float eps, Tensor? residual, int group_size, "
         "str dtype, str rounding, str storage, str layout, bool static_weight=False) -> (Tensor, Tensor, Tensor)",
         _rms_norm_group_fake)
def rms_norm_per_token_group_quant(x, weight, eps, residual, group_size, dtype, rounding, storage, layout,
                                   static_weight=False):
    """(q, s, h): the fused rms_norm -> per-token-group quant."""
    q, s, h = ops._rms_norm_group_quant(x, weight, eps, residual, None, group_size, dtype, rounding, storage, layout,
                                        None, static_weight)
    return q, s, _h(x, residual, h)


def _rms_norm_token_fake(x, weight, eps, residual, dtype, rounding, static_weight=False):
    return (x.new_empty(x.shape, dtype=_CODE[dtype]), x.new_empty((x.shape[0],), dtype=torch.float32),
            _norm_h(x, residual))


@_define("rms_norm_per_token_quant(Tensor x, Tensor weight, float eps, Tensor? residual, str dtype, str rounding, "
         "bool static_weight=False) -> (Tensor, Tensor, Tensor)", _rms_norm_token_fake)
def rms_norm_per_token_quant(x, weight, eps, residual, dtype, rounding, static_weight=False):
    """(q, s, h): the fused rms_norm -> per-token quant."""
    q, s, h = ops._rms_norm_token_quant(x, weight, eps, residual, None, dtype, rounding, None, static_weight)
    return q, s, _h(x, residual, h)


def _rms_norm_tensor_fake(x, weight, scale, eps, residual, dtype, static_weight=False):
    return x.new_empty(x.shape, dtype=_CODE[dtype]), _norm_h(x, residual)


@_define("rms_norm_per_tensor_quant(Tensor x, Tensor weight, Tensor scale, float eps, Tensor? residual, str dtype, "
         "bool static_weight=False) -> (Tensor, Tensor)", _rms_norm_tensor_fake)
def rms_norm_per_tensor_quant(x, weight, scale, eps, residual, dtype, static_weight=False):
    """(q, h): the fused rms_norm -> per-tensor quant by a static scale (f32 [1])."""
    q, h = ops._rms_norm_tensor_quant(x, weight, scale, eps, residual, None, dtype, None, static_weight)
    return q, _h(x, residual, h)


# ------------------------------------------------------------------------------------------------
# Decode attention
# ------------------------------------------------------------------------------------------------

def _decode_attention_fake(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads, scale, window,
                           q_norm, k_norm, eps, cache_ready=False):
    return qkv.new_empty((qkv.shape[0], num_q_heads * k_cache.shape[-1]))


@_define("decode_attention(Tensor qkv, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor cos, Tensor sin, "
         "Tensor positions, int num_q_heads, int num_kv_heads, float scale, int window, Tensor? q_norm, "
         "Tensor? k_norm, float eps, bool cache_ready=False) -> Tensor", _decode_attention_fake)
def decode_attention(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads, scale, window, q_norm,
                     k_norm, eps, cache_ready=False):
    """ops.decode_attention (scale 0: 1 / sqrt(D)); writes the new rows of k_cache and v_cache."""
    if positions.dtype == torch.int64:
        positions = positions.to(torch.int32)
    return ops._decode_attention(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads, scale or None,
                                 window, q_norm, k_norm, eps, None, cache_ready)

