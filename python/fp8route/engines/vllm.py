"""vLLM's FP8 quantization and GEMM calls, backed by fp8route, with vLLM's signatures:
vllm.model_executor.layers.quantization.utils.fp8_utils.per_token_group_quant_fp8 and
vllm._custom_ops.scaled_fp8_quant / cutlass_scaled_mm. Differences (docs/python.md#engine-drop-ins):
eps must be the 1e-10 that every fp8route kernel floors amax at; use_ue8m0=None means False (vLLM
asks DeepGEMM, which on Hopper also answers False unless told otherwise); scale_ub is not supported."""
from .. import ops
from . import _common


def per_token_group_quant_fp8(x, group_size, eps=1e-10, dtype=None, column_major_scales=False,
                              tma_aligned_scales=False, out_q=None, use_ue8m0=None):
    """x [..., H] -> (q e4m3 of x's shape, s f32): one scale per group of group_size along H. Scales
    [..., H / group_size] row-major; with column_major_scales=True, x [T, H] and s the [T, G]
    transpose view of a [G, T] buffer (strides (1, T)), or with tma_aligned_scales=True of a
    [G, align(T, 4)] buffer (strides (1, align(T, 4))). use_ue8m0=True rounds each scale up to a
    power of two (stored as f32). out_q: the codes' tensor, x's shape."""
    _common.check_group_size(group_size)
    _common.check_eps(eps)
    code = _common.code(dtype)
    col = _common.flag(column_major_scales, "column_major_scales")
    tma = _common.flag(tma_aligned_scales, "tma_aligned_scales")
    pow2 = False if use_ue8m0 is None else _common.flag(use_ue8m0, "use_ue8m0")
    return _common.group_quant(x, group_size, code, col, tma, "pow2" if pow2 else "f32", out_q=out_q)


def scaled_fp8_quant(input, scale=None, num_token_padding=None, scale_ub=None, use_per_token_if_dynamic=False,
                     output=None):
    """input [T, H] -> (q e4m3, scale): static per tensor when scale (one f32 element) is given,
    else dynamic per token (scale f32 [T, 1]) with use_per_token_if_dynamic=True, else dynamic per
    tensor (scale f32 [1]). num_token_padding pads the rows of q (and of a per-token scale) to at
    least that many; output: q's tensor."""
    return _common.scaled_fp8_quant(input, scale, num_token_padding, scale_ub, use_per_token_if_dynamic, output)


def cutlass_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias=None):
    """y [M, N] = (a @ b) * scale_a * scale_b (+ bias) with vLLM's operands: a e4m3 [M, K], b the
    [K, N] column-major view of the [N, K] weight, scales per tensor, per token / channel or in
    128-blocks (fp8route.scaled_mm, routed; docs/engines.md#vllm)."""
    return ops.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)


__all__ = ["per_token_group_quant_fp8", "scaled_fp8_quant", "cutlass_scaled_mm"]
