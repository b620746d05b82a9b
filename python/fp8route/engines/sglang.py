"""SGLang's FP8 quantization and GEMM calls, backed by fp8route, with SGLang's signatures:
sglang.srt.layers.quantization.fp8_kernel.per_token_group_quant_fp8 (and its _8bit form),
sglang_per_token_group_quant_fp8 (and _8bit), sglang_per_token_quant_fp8, scaled_fp8_quant, and
sgl_kernel.fp8_scaled_mm. Differences (docs/python.md#engine-drop-ins): eps must be the 1e-10 that
every fp8route kernel floors amax at; enable_v2 (a choice between sgl-kernel's kernels) is accepted
and has no effect; the fused silu_and_mul and masked forms take any scale layout, not only the
column-major TMA-aligned UE8M0 one."""
from .. import ops
from . import _common

_FP8 = _common.FP8


def _group(x, group_size, eps, dtype, column_major_scales, scale_tma_aligned, scale_ue8m0, fuse_silu_and_mul=False,
           masked_m=None, int8=False, dtype_name="dtype"):
    _common.check_group_size(group_size)
    _common.check_eps(eps)
    code = _common.code(dtype, dtype_name, int8=int8)
    col = _common.flag(column_major_scales, "column_major_scales")
    tma = _common.flag(scale_tma_aligned, "scale_tma_aligned")
    ue8m0 = _common.flag(scale_ue8m0, "scale_ue8m0")
    fused = _common.flag(fuse_silu_and_mul, "fuse_silu_and_mul")
    return _common.group_quant(x, group_size, code, col, tma, "packed" if ue8m0 else "f32", fused=fused,
                               masked_m=masked_m)


def per_token_group_quant_fp8(x, group_size, eps=1e-10, dtype=_FP8, column_major_scales=False,
                              scale_tma_aligned=False, scale_ue8m0=False):
    """x [..., H] -> (q of x's shape, s): one scale per group of group_size along H. Scales
    [..., H / group_size] f32 row-major; column_major_scales=True: x [T, H] and s the [T, G]
    transpose view of a [G, T] buffer, or with scale_tma_aligned=True of a [G, align(T, 4)] buffer;
    scale_ue8m0=True (with both): power-of-two scales packed four per int32, the [T, ceil(G/4)]
    view of a [ceil(G/4), align(T, 4)] buffer, as DeepGEMM reads them."""
    return _group(x, group_size, eps, dtype, column_major_scales, scale_tma_aligned, scale_ue8m0)


def per_token_group_quant_8bit(x, group_size, dst_dtype, eps=1e-10, column_major_scales=False,
                               scale_tma_aligned=False, scale_ue8m0=False, fuse_silu_and_mul=False, masked_m=None):
    """per_token_group_quant_fp8 to dst_dtype (E4M3 or INT8), with the fused silu_and_mul
    (x [..., 2H] -> silu(x[..., :H]) * x[..., H:]) and the masked form (x [E, T_pad, H], masked_m
    int32 [E]: rows at or past masked_m[e] are neither read nor written)."""
    return _group(x, group_size, eps, dst_dtype, column_major_scales, scale_tma_aligned, scale_ue8m0,
                  fuse_silu_and_mul, masked_m, int8=True, dtype_name="dst_dtype")


def _check_v2(enable_v2):
    if enable_v2 is not None:
        _common.flag(enable_v2, "enable_v2")


def sglang_per_token_group_quant_fp8(x, group_size, eps=1e-10, column_major_scales=False, scale_tma_aligned=False,
                                     scale_ue8m0=False, fuse_silu_and_mul=False, masked_m=None, enable_v2=None):
    """The sgl-kernel form of per_token_group_quant_fp8 (E4M3), with fuse_silu_and_mul and masked_m
    as in per_token_group_quant_8bit."""
    _check_v2(enable_v2)
    return _group(x, group_size, eps, None, column_major_scales, scale_tma_aligned, scale_ue8m0, fuse_silu_and_mul,
                  masked_m)


def sglang_per_token_group_quant_8bit(x, group_size, dst_dtype, eps=1e-10, column_major_scales=False,
                                      scale_tma_aligned=False, scale_ue8m0=False, fuse_silu_and_mul=False,
                                      masked_m=None, enable_v2=None):
    """sglang_per_token_group_quant_fp8 to dst_dtype (E4M3 or INT8)."""
    _check_v2(enable_v2)
    return per_token_group_quant_8bit(x, group_size, dst_dtype, eps, column_major_scales, scale_tma_aligned,
                                      scale_ue8m0, fuse_silu_and_mul, masked_m)


def sglang_per_token_quant_fp8(x, dtype=_FP8):
    """x [T, H] -> (q e4m3 [T, H], s f32 [T, 1]): one scale per row."""
    _common.code(dtype)
    _common.need_torch("x")
    if x.dim() != 2:
        raise ValueError(f"x: [T, H] expected, got shape {tuple(x.shape)}")
    q, s = ops.per_token_quant(x)
    return q, s.view(-1, 1)


def scaled_fp8_quant(input, scale=None, num_token_padding=None, use_per_token_if_dynamic=False):
    """input [T, H] -> (q e4m3, scale): static per tensor when scale (one f32 element) is given,
    else dynamic per token (scale f32 [T, 1]) with use_per_token_if_dynamic=True, else dynamic per
    tensor (scale f32 [1]); num_token_padding pads the rows of q (and of a per-token scale)."""
    return _common.scaled_fp8_quant(input, scale, num_token_padding, None, use_per_token_if_dynamic, None)


def fp8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    """y [M, N] = (mat_a @ mat_b) * scales_a * scales_b (+ bias) with sgl-kernel's operands: mat_a
    e4m3 [M, K], mat_b the [K, N] column-major view of the weight, per-token / per-channel or
    per-tensor scales (fp8route.scaled_mm, routed; docs/engines.md#sglang)."""
    return ops.scaled_mm(mat_a, mat_b, scales_a, scales_b, bias=bias, out_dtype=out_dtype)


__all__ = ["per_token_group_quant_fp8", "per_token_group_quant_8bit", "sglang_per_token_group_quant_fp8",
           "sglang_per_token_group_quant_8bit", "sglang_per_token_quant_fp8", "scaled_fp8_quant", "fp8_scaled_mm"]
