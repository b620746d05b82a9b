"""fp8route ops registered with torch.library (imported by fp8route when torch is installed).

torch.ops.fp8route.scaled_mm, .per_token_group_quant, .per_token_quant, .rms_norm,
.rms_norm_per_token_group_quant, .rms_norm_per_token_quant, .decode_attention, .linear and
.linear_quantized are custom ops with fake (meta) implementations, so torch.compile traces them
without running them and CUDA graphs capture them like any op (a call under capture gets scratch
owned by the graph being captured, allocated in relaxed capture mode as PyTorch's allocator does)."""
from typing import Optional, Tuple

import torch

from . import ops
from ._native import lib


@torch.library.custom_op("fp8route::scaled_mm", mutates_args=())
def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: Optional[torch.Tensor] = None, out_dtype: torch.dtype = torch.bfloat16,
              scale: str = "auto") -> torch.Tensor:
    """fp8route.scaled_mm in torch._scaled_mm's argument order; scale "auto" infers the kind."""
    return ops.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, scale=scale)


@scaled_mm.register_fake
def _(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, scale="auto"):
    return a.new_empty((a.shape[0], ops._b_cols(a, b)), dtype=out_dtype)


def _layout_shapes(t, h, group_size, dtype, rounding, storage, layout):
    lay = ops.quant_layout(t, h, group_size, dtype, rounding, storage, layout)
    return lay["q"], lay["s"], torch.int32 if lay["s_dtype"] == "i32" else torch.float32


_CODE = {"e4m3": torch.float8_e4m3fn, "i8": torch.int8}


@torch.library.custom_op("fp8route::per_token_group_quant", mutates_args=())
def per_token_group_quant(x: torch.Tensor, group_size: int, dtype: str, rounding: str, storage: str, layout: str,
                          fused: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    f = ops.silu_and_mul_per_token_group_quant if fused else ops.per_token_group_quant
    return f(x, group_size=group_size, dtype=dtype, rounding=rounding, storage=storage, layout=layout)


@per_token_group_quant.register_fake
def _(x, group_size, dtype, rounding, storage, layout, fused):
    return _group_fake(x, group_size, dtype, storage, layout, fused)


def _group_fake(x, group_size, dtype, storage, layout, fused=False):
    h = x.shape[1] // 2 if fused else x.shape[1]
    # Shapes depend on T only through align(T, 4) of col_major_tma; symbolic T is fine elsewhere.
    groups = h // group_size
    cols = (groups + 3) // 4 if storage == "ue8m0_packed" else groups
    t = x.shape[0]
    t_pad = (t + 3) // 4 * 4 if layout == "col_major_tma" else t
    s_shape = (t, cols) if layout == "row_major" else (cols, t_pad)
    s_dtype = torch.int32 if storage == "ue8m0_packed" else torch.float32
    return x.new_empty((t, h), dtype=_CODE[dtype]), x.new_empty(s_shape, dtype=s_dtype)


@torch.library.custom_op("fp8route::per_token_quant", mutates_args=())
def per_token_quant(x: torch.Tensor, dtype: str, rounding: str,
                    fused: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """fused: x [T, 2H], silu_and_mul first (ops.silu_and_mul_per_token_quant)."""
    f = ops.silu_and_mul_per_token_quant if fused else ops.per_token_quant
    return f(x, dtype=dtype, rounding=rounding)


@per_token_quant.register_fake
def _(x, dtype, rounding, fused=False):
    h = x.shape[1] // 2 if fused else x.shape[1]
    return x.new_empty((x.shape[0], h), dtype=_CODE[dtype]), x.new_empty((x.shape[0],), dtype=torch.float32)


def _norm_h(x, residual):
    """The residual sum returned by the fused norm ops: x-shaped, or [0, H] without a residual."""
    return x.new_empty(x.shape if residual is not None else (0, x.shape[1]))


@torch.library.custom_op("fp8route::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(y, h): y = rms_norm(h) * weight, h = x (+ residual); h is [0, H] without a residual."""
    if residual is None:
        return ops.rms_norm(x, weight, eps), _norm_h(x, None)
    return ops.rms_norm(x, weight, eps, residual=residual)


@rms_norm.register_fake
def _(x, weight, eps, residual):
    return x.new_empty(x.shape), _norm_h(x, residual)


@torch.library.custom_op("fp8route::rms_norm_per_token_group_quant", mutates_args=())
def rms_norm_per_token_group_quant(x: torch.Tensor, weight: torch.Tensor, eps: float,
                                   residual: Optional[torch.Tensor], group_size: int, dtype: str, rounding: str,
                                   storage: str, layout: str) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, s, h): the fused rms_norm -> per-token-group quant; h is [0, H] without a residual."""
    r = ops.rms_norm_per_token_group_quant(x, weight, eps, residual=residual, group_size=group_size, dtype=dtype,
                                           rounding=rounding, storage=storage, layout=layout)
    return r if residual is not None else (*r, _norm_h(x, None))


@rms_norm_per_token_group_quant.register_fake
def _(x, weight, eps, residual, group_size, dtype, rounding, storage, layout):
    q, s = _group_fake(x, group_size, dtype, storage, layout)
    return q, s, _norm_h(x, residual)


@torch.library.custom_op("fp8route::rms_norm_per_token_quant", mutates_args=())
def rms_norm_per_token_quant(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: Optional[torch.Tensor],
                             dtype: str, rounding: str) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, s, h): the fused rms_norm -> per-token quant; h is [0, H] without a residual."""
    r = ops.rms_norm_per_token_quant(x, weight, eps, residual=residual, dtype=dtype, rounding=rounding)
    return r if residual is not None else (*r, _norm_h(x, None))


@rms_norm_per_token_quant.register_fake
def _(x, weight, eps, residual, dtype, rounding):
    return (x.new_empty(x.shape, dtype=_CODE[dtype]), x.new_empty((x.shape[0],), dtype=torch.float32),
            _norm_h(x, residual))


@torch.library.custom_op("fp8route::linear", mutates_args=())
def linear(x: torch.Tensor, weight: torch.Tensor, plan: int, act: str, out_dtype: torch.dtype) -> torch.Tensor:
    """Fp8Linear's forward: quantize x [..., K] for the plan's activation scale kind, then the
    plan's routed GEMM. `weight` is passed for its shape and device (the plan already holds it)."""
    k = x.shape[-1]
    x2 = x.reshape(-1, k)
    if act == "row":
        q, s = ops.per_token_quant(x2)
    elif act == "tensor":
        q, s = ops.per_tensor_quant(x2)
    else:  # block: 1x128 groups, scales [ceil(K/128), align(M, 4)] as the block GEMM reads them
        q, s = ops.per_token_group_quant(x2, group_size=128, layout="col_major_tma")
    y = torch.empty((x2.shape[0], weight.shape[0]), dtype=out_dtype, device=x.device)
    lib.linear_plan_run(plan, ops._bits(q), s, y)
    return y.reshape(*x.shape[:-1], weight.shape[0])


@linear.register_fake
def _(x, weight, plan, act, out_dtype):
    return x.new_empty((*x.shape[:-1], weight.shape[0]), dtype=out_dtype)


@torch.library.custom_op("fp8route::linear_quantized", mutates_args=())
def linear_quantized(q: torch.Tensor, s: torch.Tensor, weight: torch.Tensor, plan: int,
                     out_dtype: torch.dtype) -> torch.Tensor:
    """Fp8Linear.forward_quantized: the plan's routed GEMM on activations already quantized for its
    act kind (q e4m3 [M, K]; s f32 [M] for row, one element for tensor, [ceil(K/128), align(M, 4)]
    col_major_tma group scales for block), so a fused producer (rms_norm_per_token_quant,
    silu_and_mul_per_token_group_quant) feeds the GEMM without a second pass over the activations."""
    y = torch.empty((q.shape[0], weight.shape[0]), dtype=out_dtype, device=q.device)
    lib.linear_plan_run(plan, ops._bits(q), s, y)
    return y


@linear_quantized.register_fake
def _(q, s, weight, plan, out_dtype):
    return q.new_empty((q.shape[0], weight.shape[0]), dtype=out_dtype)


@torch.library.custom_op("fp8route::decode_attention", mutates_args=("k_cache", "v_cache"))
def decode_attention(qkv: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cos: torch.Tensor,
                     sin: torch.Tensor, positions: torch.Tensor, num_q_heads: int, num_kv_heads: int, scale: float,
                     window: int, q_norm: Optional[torch.Tensor], k_norm: Optional[torch.Tensor],
                     eps: float) -> torch.Tensor:
    """ops.decode_attention (scale 0: 1 / sqrt(D)); writes the new rows of k_cache and v_cache."""
    return ops.decode_attention(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads,
                                scale=scale or None, window=window, q_norm=q_norm, k_norm=k_norm, eps=eps)


@decode_attention.register_fake
def _(qkv, k_cache, v_cache, cos, sin, positions, num_q_heads, num_kv_heads, scale, window, q_norm, k_norm, eps):
    d = k_cache.shape[-1]
    return qkv.new_empty((qkv.shape[0], num_q_heads * d))
