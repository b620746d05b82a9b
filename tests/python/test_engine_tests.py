"""fp8route run through the public FP8 kernel tests of vLLM and SGLang, re-created here: each test
builds its operands the way the peer test builds them for its own kernel (shapes, dtypes, layouts,
scale forms, value distributions) and hands them to fp8route as they are, in the peer's argument
order. Nothing sits between the peer-style construction and the fp8route call: no transpose, copy,
reshape, padding or dtype conversion (docs/engines.md). Each GEMM result is then checked twice:

- by the peer test's own criterion and tolerance, against an independent torch computation from the
  dequantized operands (fp64 here; the peers use fp32), rounded as the peer's reference rounds it
  (product rounded to the output dtype, then the bias added in that dtype);
- by fp8route's documented contract (docs/numerics.md, GEMM): normwise error at most 1e-2 of the
  fp64 reference on every call, and, for precise-class accumulation (block scales always; tensor and
  row scales with torch._scaled_mm's use_fast_accum=False), every element within
  (2^-10 + K 2^-24) sum_k |a sa b sb| + 2^-8 |y| (2^-11 for f16 output) of it.

Quantization results are compared bit for bit with a torch transcription of fp8route's rules
(docs/numerics.md: amax floor 1e-10, s = amax / qmax and the multiplier qmax / amax, both correctly
rounded; the static per-tensor quotient x / scale correctly rounded; UE8M0 as a bit-exact ceiling),
and with the peer's own rule by the peer's criterion where that criterion allows the rounding
differences listed below, else by "every code within one step, fewer than 1e-3 of them one step
off".

| test here | public peer test it mirrors |
| --- | --- |
| test_vllm_cutlass_fp8_gemm | vLLM tests/kernels/quantization/test_cutlass_scaled_mm.py::test_cutlass_fp8_gemm |
| test_vllm_cutlass_fp8_gemm_unaligned | the same file's test_cutlass_fp8_gemm_padded (vLLM pads N and K to 16; fp8route takes them unpadded) |
| test_vllm_cutlass_fp8_gemm_output_dtype | the same file's test_cutlass_fp8_gemm_output_dtype |
| test_vllm_cutlass_fp8_gemm_m_sweep | the same file's test_cutlass_fp8_gemm_m_sweep |
| test_vllm_cutlass_fp8_blockwise_gemm | the same file's test_cutlass_fp8_blockwise_scale_gemm and _dtype |
| test_vllm_dynamic_per_token_fp8_quant | vLLM tests/kernels/quantization/test_fp8_quant.py::test_dynamic_per_token_fp8_quant |
| test_vllm_dynamic_per_tensor_fp8_quant | the same file's test_dynamic_per_tensor_fp8_quant and _strided_input |
| test_vllm_static_per_tensor_fp8_quant_large | the same file's test_fp8_quant_large |
| test_vllm_per_token_group_quant_fp8 | vLLM tests/kernels/quantization/test_block_fp8.py::test_per_token_group_quant_fp8 |
| test_vllm_w8a8_block_fp8_matmul | the same file's test_w8a8_block_fp8_matmul |
| test_vllm_w8a8_block_fp8_cutlass_matmul | the same file's test_w8a8_block_fp8_cutlass_matmul |
| test_sglang_fp8_scaled_mm | SGLang sgl-kernel/tests/test_fp8_gemm.py::test_accuracy |
| test_sglang_fp8_blockwise_scaled_mm | SGLang sgl-kernel/tests/test_fp8_blockwise_gemm.py::test_accuracy |
| test_sglang_per_token_group_quant_8bit, test_sglang_fused_silu_and_mul_group_quant | SGLang sgl-kernel/tests/test_per_token_group_quant_8bit.py |
| test_sglang_per_token_quant_fp8 | SGLang sgl-kernel/tests/test_per_token_quant_fp8.py |
| test_sglang_per_tensor_quant_fp8 | SGLang sgl-kernel/tests/test_per_tensor_quant_fp8.py |
| test_hidden_not_multiple_of_16 | the hidden sizes of vLLM's test_fp8_quant.py (17, 1025, 1026, 5137, 8193) and SGLang's test_per_token_quant_fp8.py (1368) through every per-token and per-tensor op, packed and strided |
| test_differs_* | the peers' forms fp8route does not take, pinned with the error it gives |

The peers' grids are subsampled (each list below says which of the peer's sizes it keeps) so that
the module runs in seconds on an H200.

Where fp8route differs from the peers on purpose (each pinned by a test here):
- quantization codes: fp8route multiplies by the correctly rounded qmax / amax; vLLM's dynamic
  kernels and SGLang's references multiply by the reciprocal of the rounded scale, vLLM's group
  reference divides by the scale; static per-tensor: fp8route divides (correctly rounded), vLLM and
  SGLang multiply by the scale's reciprocal. The codes differ by one step on rare elements;
- vLLM's per-token scale is clamped below at 1 / (448 * 512); fp8route floors amax at 1e-10;
- UE8M0: SGLang and DeepGEMM round with exp2(ceil(log2(s))), fp8route with a bit-exact ceiling (the
  two differ only just above powers of two);
- output forms: per-token scales are [T] (vLLM and SGLang [T, 1]); column-major group scales are the
  physical [G, T] / [G, align(T, 4)] buffers (vLLM and SGLang return their [T, G] views); scaled_mm
  takes both forms of each;
- not taken: group size 512, vLLM's scale_ub, static per-token/per-channel/group scales, the block_size argument of vLLM's
  block GEMM functions (fp8route's blocks are 128x128), f32 output, and a non-TMA column-major
  block scale_a buffer [G, M] with M % 4 != 0 (its [M, G] view is taken).

Skipped (with the reason) without torch, without a CUDA device, or on a GPU other than SM90 (the
kernels are built for sm_90a); test_differs_group_size_512 needs torch only."""
import math

import pytest

import fp8route

try:
    import torch
except ImportError:
    torch = None


def _gpu_skip_reason():
    if torch is None:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "needs torch and a CUDA device"
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return f"needs an SM90 (Hopper) GPU: fp8route's kernels are built for sm_90a, this GPU is sm_{cap[0]}{cap[1]}"
    return None


_GPU_SKIP = _gpu_skip_reason()
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
needs_sm90 = pytest.mark.skipif(_GPU_SKIP is not None, reason=_GPU_SKIP or "")

DEV = "cuda"
QMAX = 448.0
BLOCK = 128
TENSOR, PER_TOKEN, PER_CHANNEL = (-1, -1), (1, -1), (-1, 1)  # group shapes, -1: the whole extent


def _dtype(name):
    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[name]


def _e4m3():
    return torch.float8_e4m3fn


# ---- operands as the peer tests build them ------------------------------------------------------------

def _integer_fp8(t):
    """vLLM's GEMM operands: the values clamped to the E4M3 range and rounded to integers (randn
    input gives small integers), cast to E4M3. The cast keeps t's layout: a transposed view stays
    column-major."""
    return t.clamp(-QMAX, QMAX).round().to(_e4m3())


def _uniform_fp8(rows, cols):
    """SGLang's and vLLM's block GEMM operands: uniform over [-448, 448], cast to E4M3."""
    return ((torch.rand(rows, cols, device=DEV) * 2 - 1) * QMAX).clamp(-QMAX, QMAX).to(_e4m3())


def _grid_shape(shape, group):
    """The scale grid of a tensor quantized in groups (-1: the whole extent of that dim)."""
    return tuple(math.ceil(d / (d if g == -1 else g)) for d, g in zip(shape, group))


def _first_dim_contiguous(s):
    """The same values laid out with unit first stride (column-major): how the peer tests lay out
    block scales (M-major activation scales, the transposed weight-scale grid); [M, 1] and [1, N]
    scales keep their memory and only their strides change."""
    return s.t().contiguous().t()


# ---- references --------------------------------------------------------------------------------------

def _stretch(s, rows, cols):
    """A 2-D scale grid over [rows, cols] stretched to that shape: a dim of extent 1 broadcasts, one of
    the full extent is per row (column), any other has one entry per 128 (the last block may be
    partial)."""
    s = s.double()
    for dim, n in ((0, rows), (1, cols)):
        size = s.shape[dim]
        per = n if size == 1 else 1 if size == n else BLOCK
        assert math.ceil(n / per) == size, (tuple(s.shape), rows, cols)
        s = s.repeat_interleave(per, dim).narrow(dim, 0, n)
    return s


def _dequant_mm(a, b_kn, sa, sb):
    """fp64 (a * sa) @ (b * sb) for a [M, K], b as [K, N] and 2-D scale grids over each, and the
    magnitude sum_k |a sa b sb| the precise bound is stated in."""
    m, k = a.shape
    n = b_kn.shape[1]
    da = a.float().double() * _stretch(sa, m, k)
    db = b_kn.float().double() * _stretch(sb, k, n)
    return da @ db, da.abs() @ db.abs()


def _peer_rounding(exact, out_dtype, bias):
    """The peers' reference: the product rounded to the output dtype, the bias added in that dtype."""
    y = exact.to(out_dtype)
    return y if bias is None else y + bias


def _check_normwise(y, exact, bias=None):
    """docs/numerics.md: every backend is within 1e-2 normwise of the fp64 reference."""
    want = exact if bias is None else exact + bias.double()
    err = ((y.double() - want).norm() / want.norm()).item()
    assert err <= 1e-2, err


def _check_precise(y, exact, mag, k, bias=None):
    """docs/numerics.md: a precise-class result is within (2^-10 + K 2^-24) sum_k |a sa b sb| plus
    the output rounding of the fp64 reference (2^-8 relative for bf16, 2^-11 for f16, and half the
    smallest subnormal)."""
    want = exact if bias is None else exact + bias.double()
    rel, tiny = (2.0 ** -8, 2.0 ** -134) if y.dtype == torch.bfloat16 else (2.0 ** -11, 2.0 ** -25)
    yd = y.double()
    bound = (2.0 ** -10 + k * 2.0 ** -24) * mag + rel * torch.maximum(want.abs(), yd.abs()) + tiny
    over = (yd - want).abs() > bound
    assert not over.any(), f"{int(over.sum())} of {over.numel()} elements outside the precise bound"


def _e4m3_ordinal(q):
    """E4M3 codes as signed integers ordered like their values (adjacent codes differ by one)."""
    u = q.view(torch.uint8).int()
    mag = u & 0x7F
    return torch.where(u >= 0x80, -mag, mag)


def _code_steps(q, r):
    """How many code steps apart two code tensors are, element by element."""
    if q.dtype == torch.int8:
        return (q.int() - r.int()).abs()
    return (_e4m3_ordinal(q) - _e4m3_ordinal(r)).abs()


def _check_nearly_equal_codes(q, r, fraction=1e-3):
    """Rounding-rule differences: no code two or more steps (or a sign) away, fewer than `fraction`
    of them one step away."""
    steps = _code_steps(q, r)
    assert int(steps.max()) <= 1
    assert steps.float().mean().item() < fraction


def _same_codes(q, r):
    return torch.equal(q.view(torch.uint8), r.view(torch.uint8))


def _finite_amax(g):
    """Largest |x| over the finite elements of the last dim, floored at 1e-10 (docs/numerics.md)."""
    return torch.where(torch.isfinite(g), g.abs(), torch.zeros_like(g)).amax(-1).clamp(min=1e-10)


def _encode(v, qmax, code):
    """fp8route's encoding of fp32 values: NaN -> 0, saturate to +-qmax; E4M3 round to nearest even,
    INT8 round half to even."""
    v = torch.nan_to_num(v, nan=0.0).clamp(-qmax, qmax)
    return v.to(_e4m3()) if code == "e4m3" else torch.round(v).to(torch.int8)


def _pow2_from_exponent(e):
    """2^(e - 127) for biased exponents e in [1, 254], exactly (built from the float bits)."""
    return (e.to(torch.int32) << 23).view(torch.float32)


def _inverse_pow2_from_exponent(e):
    """2^(127 - e), exactly; e = 254 gives the subnormal 2^-127."""
    bits = torch.where(e >= 254, torch.full_like(e, 0x00400000), (254 - e) << 23)
    return bits.to(torch.int32).view(torch.float32)


def _ours_groups(x, group, code="e4m3", pow2=False):
    """fp8route's group quantization of x [T, H] (docs/numerics.md, in torch fp32): codes [T, H],
    scales [T, H / group] (f32), and with pow2 the UE8M0 exponent bytes [T, H / group]. Both
    divisions are tensor by tensor: torch computes tensor / python-scalar as a multiplication by a
    reciprocal, not the correctly rounded quotient."""
    t, h = x.shape
    g = x.float().reshape(t, h // group, group)
    amax = _finite_amax(g)
    qmax_value = QMAX if code == "e4m3" else 127.0
    qmax = torch.full_like(amax, qmax_value)
    if pow2:
        bits = (amax / qmax).view(torch.int32)
        e = (((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).int()).clamp(1, 254)
        s, mul = _pow2_from_exponent(e), _inverse_pow2_from_exponent(e)
    else:
        e, s, mul = None, amax / qmax, qmax / amax
    return _encode(g * mul[..., None], qmax_value, code).reshape(t, h), s, e


def _ours_tensor_dynamic(x):
    """fp8route's dynamic per-tensor quantization: (codes, scale [1])."""
    xf = x.float()
    amax = _finite_amax(xf.reshape(1, -1))
    qmax = torch.full_like(amax, QMAX)
    return _encode(xf * (qmax / amax), QMAX, "e4m3"), (amax / qmax).reshape(1)


def _ours_tensor_static(x, scale):
    """fp8route's static per-tensor quantization: x / scale correctly rounded, then encoded."""
    xf = x.float()
    return _encode(xf / scale.expand_as(xf), QMAX, "e4m3")


def _packed_ue8m0_tma(e, tokens):
    """UE8M0 exponents [T, G] packed four to an int32 word (byte b of word w: group 4w + b, unused
    bytes zero) in the col_major_tma layout [ceil(G / 4), align(T, 4)], padding zero."""
    t, groups = e.shape
    words = math.ceil(groups / 4)
    raw = torch.zeros(t, 4 * words, dtype=torch.uint8, device=e.device)
    raw[:, :groups] = e.to(torch.uint8)
    out = torch.zeros(words, (tokens + 3) // 4 * 4, dtype=torch.int32, device=e.device)
    out[:, :t] = raw.view(torch.int32).t()
    return out


# ---- vLLM: test_cutlass_scaled_mm.py -------------------------------------------------------------------

def _vllm_gemm_case(m, n, k, a_group, b_group, use_bias, out="bf16"):
    """Operands exactly as vLLM's cutlass FP8 helper makes them: a [M, K], b the column-major [K, N]
    view of an [N, K] tensor, f32 scales from randn (signed) with grids from the group shapes over
    a [M, K] and b [K, N], laid out with unit first stride, bias rand * 10 in the output dtype."""
    a = _integer_fp8(torch.randn(m, k, device=DEV))
    b = _integer_fp8(torch.randn(n, k, device=DEV).t())
    scale_a = _first_dim_contiguous(torch.randn(_grid_shape(a.shape, a_group), device=DEV))
    scale_b = _first_dim_contiguous(torch.randn(_grid_shape(b.shape, b_group), device=DEV))
    bias = torch.rand(n, device=DEV, dtype=_dtype(out)) * 10 if use_bias else None
    return a, b, scale_a, scale_b, bias


def _vllm_cutlass_fp8_gemm(m, n, k, a_group, b_group, use_bias, out="bf16", precise_too=True):
    a, b, scale_a, scale_b, bias = _vllm_gemm_case(m, n, k, a_group, b_group, use_bias, out)
    assert b.stride(0) == 1  # the [K, N] column-major view vLLM passes
    out_dtype = _dtype(out)
    y = fp8route.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)  # cutlass_scaled_mm's positional order
    assert y.shape == (m, n) and y.dtype == out_dtype
    exact, mag = _dequant_mm(a, b, scale_a, scale_b)
    torch.testing.assert_close(y, _peer_rounding(exact, out_dtype, bias), rtol=5e-1, atol=1.5e-1)
    _check_normwise(y, exact, bias)
    if precise_too:
        yp = fp8route.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype=out_dtype, use_fast_accum=False)
        _check_normwise(yp, exact, bias)
        _check_precise(yp, exact, mag, k, bias)


# From vLLM's MNK_FACTORS: 10 of its 19 shapes (odd M, K = 496, N up to 24576 kept).
VLLM_MNK = [(1, 256, 128), (1, 24576, 496), (16, 256, 496), (16, 16384, 128), (33, 1024, 1024),
            (64, 2048, 496), (100, 8192, 496), (256, 4096, 4096), (512, 256, 1024), (512, 24576, 128)]
GROUPS = {"per_token": PER_TOKEN, "per_tensor": TENSOR, "per_channel": PER_CHANNEL}


@needs_sm90
@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("b_group", ["per_channel", "per_tensor"])
@pytest.mark.parametrize("a_group", ["per_token", "per_tensor"])
@pytest.mark.parametrize("m,n,k", VLLM_MNK)
def test_vllm_cutlass_fp8_gemm(m, n, k, a_group, b_group, use_bias):
    torch.manual_seed(0)
    _vllm_cutlass_fp8_gemm(m, n, k, GROUPS[a_group], GROUPS[b_group], use_bias)


@needs_sm90
@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("b_group", ["per_channel", "per_tensor"])
@pytest.mark.parametrize("a_group", ["per_token", "per_tensor"])
@pytest.mark.parametrize("m,n,k", [(16, 100, 200), (33, 255, 513), (1, 3420, 1280), (64, 6840, 1280)])
def test_vllm_cutlass_fp8_gemm_unaligned(m, n, k, a_group, b_group, use_bias):
    # vLLM's padded test (4 of its 6 shapes): N or K not a multiple of 16, passed as they are.
    torch.manual_seed(1)
    _vllm_cutlass_fp8_gemm(m, n, k, GROUPS[a_group], GROUPS[b_group], use_bias)


@needs_sm90
@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("out", ["bf16", "f16"])
@pytest.mark.parametrize("b_group", ["per_channel", "per_tensor"])
@pytest.mark.parametrize("a_group", ["per_token", "per_tensor"])
def test_vllm_cutlass_fp8_gemm_output_dtype(a_group, b_group, out, use_bias):
    torch.manual_seed(2)
    _vllm_cutlass_fp8_gemm(512, 512, 512, GROUPS[a_group], GROUPS[b_group], use_bias, out)


@needs_sm90
@pytest.mark.parametrize("b_group", ["per_channel", "per_tensor"])
@pytest.mark.parametrize("a_group", ["per_token", "per_tensor"])
@pytest.mark.parametrize("nk", [32, 64, 96])
def test_vllm_cutlass_fp8_gemm_m_sweep(nk, a_group, b_group):
    # vLLM sweeps every M in 1..127 for N = K in 32, 64, 96; here 20 of those M, with and without bias.
    torch.manual_seed(3)
    for m in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 126, 127):
        for use_bias in (True, False):
            _vllm_cutlass_fp8_gemm(m, nk, nk, GROUPS[a_group], GROUPS[b_group], use_bias, precise_too=m % 8 == 1)


# vLLM's blockwise test runs its MNK_FACTORS with K and N multiples of 128: 8 of those 13 shapes.
VLLM_BLOCK_MNK = [(1, 256, 128), (1, 16384, 1024), (16, 16384, 128), (32, 8192, 4096), (33, 1024, 1024),
                  (33, 8192, 128), (256, 4096, 4096), (512, 256, 1024)]


@needs_sm90
@pytest.mark.parametrize("m,n,k,out", [(*s, "bf16") for s in VLLM_BLOCK_MNK] + [(512, 512, 512, "f16"),
                                                                             (512, 512, 512, "bf16")])
def test_vllm_cutlass_fp8_blockwise_gemm(m, n, k, out):
    # Group shapes (1, 128) over a and (128, 128) over b [K, N]: scale_a [M, K/128] M-major,
    # scale_b [K/128, N/128] with unit first stride (the transpose view of [N/128, K/128]); no bias.
    torch.manual_seed(4)
    a, b, scale_a, scale_b, _ = _vllm_gemm_case(m, n, k, (1, BLOCK), (BLOCK, BLOCK), False, out)
    assert scale_a.shape == (m, k // BLOCK) and scale_b.shape == (k // BLOCK, n // BLOCK)
    out_dtype = _dtype(out)
    y = fp8route.scaled_mm(a, b, scale_a, scale_b, out_dtype, None)
    exact, mag = _dequant_mm(a, b, scale_a, scale_b)
    torch.testing.assert_close(y, _peer_rounding(exact, out_dtype, None), rtol=5e-1, atol=1.5e-1)
    _check_normwise(y, exact)
    _check_precise(y, exact, mag, k)  # every block-scale config is of the precise class


# ---- vLLM: test_fp8_quant.py ----------------------------------------------------------------------------

@needs_sm90
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("tokens", [1, 7, 4096])
@pytest.mark.parametrize("hidden", [17, 1024, 1025, 8193])
def test_vllm_dynamic_per_token_fp8_quant(tokens, hidden, dtype):
    # vLLM's hidden sizes 17, 1024, 1025, 1026, 5137, 8193 (4 here; every one of them:
    # test_hidden_not_multiple_of_16); no scale_ub (vLLM's upper bound on the scale).
    torch.manual_seed(5)
    x = torch.rand(tokens, hidden, device=DEV, dtype=_dtype(dtype)) + 1e-6
    q, s = fp8route.per_token_quant(x)
    assert q.dtype == _e4m3() and s.shape == (tokens,)  # vLLM: [T, 1]
    rq, rs, _ = _ours_groups(x, hidden)
    assert _same_codes(q, rq) and torch.equal(s, rs[:, 0])
    # vLLM's rule: s = max(amax / 448, 1 / (448 * 512)), codes x * (1 / s). Every amax here is about 1,
    # above vLLM's clamp, so the scales are the same quotient; the codes differ on rare ties.
    amax = x.float().abs().amax(-1, keepdim=True)
    peer_s = torch.maximum(amax / torch.full_like(amax, QMAX), torch.full_like(amax, 1 / (QMAX * 512)))
    torch.testing.assert_close(s.view(-1, 1), peer_s)
    _check_nearly_equal_codes(q, _encode(x.float() * (1 / peer_s), QMAX, "e4m3"))


@needs_sm90
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("tokens", [1, 7, 4096])
@pytest.mark.parametrize("hidden", [1024, 1026, 5137])
def test_vllm_dynamic_per_tensor_fp8_quant(tokens, hidden, dtype):
    # vLLM's hidden sizes as in its per-token test (3 here; every one: test_hidden_not_multiple_of_16).
    torch.manual_seed(6)
    x = torch.rand(tokens, hidden, device=DEV, dtype=_dtype(dtype))
    q, scale = fp8route.per_tensor_quant(x)
    rq, rscale = _ours_tensor_dynamic(x)
    assert scale.shape == (1,) and torch.equal(scale, rscale) and _same_codes(q, rq)
    amax = x.float().abs().max()
    peer_s = amax / torch.full_like(amax, QMAX)  # vLLM's rule: amax / 448, codes x * (1 / s)
    torch.testing.assert_close(scale[0], peer_s)
    _check_nearly_equal_codes(q, _encode(x.float() * (1 / peer_s), QMAX, "e4m3"))
    # vLLM's strided-input test: rows padded by 8 and 16 elements; the same scale and bytes as contiguous.
    for pad in (8, 16):
        full = torch.rand(64, 4096 + pad, device=DEV, dtype=_dtype(dtype))
        xs = full[:, :4096]
        assert not xs.is_contiguous()
        q1, s1 = fp8route.per_tensor_quant(xs)
        q2, s2 = fp8route.per_tensor_quant(xs.contiguous())
        rq, rs = _ours_tensor_dynamic(xs)
        assert torch.equal(s1, s2) and torch.equal(s1, rs)
        assert _same_codes(q1, q2) and _same_codes(q1, rq)


@needs_sm90
def test_vllm_static_per_tensor_fp8_quant_large():
    # vLLM's large-activation test (1024000 x 1152 bf16, more elements than 2^30): a static scale
    # from the dynamic quantization of the same tensor.
    torch.manual_seed(7)
    x = torch.rand(1024000, 1152, device=DEV, dtype=torch.bfloat16)
    _, scale = fp8route.per_tensor_quant(x)
    q, scale_out = fp8route.per_tensor_quant(x, scale)
    assert scale_out is scale
    for start in range(0, x.shape[0], 128000):  # the reference in slices
        part = slice(start, start + 128000)
        rq = _ours_tensor_static(x[part], scale)
        assert _same_codes(q[part], rq)
        # vLLM and SGLang: codes x * (1 / scale)
        _check_nearly_equal_codes(q[part], _encode(x[part].float() * scale.reciprocal(), QMAX, "e4m3"))


# ---- vLLM: test_block_fp8.py ----------------------------------------------------------------------------

@needs_sm90
@pytest.mark.parametrize("layout", ["row_major", "col_major", "col_major_tma"])
@pytest.mark.parametrize("group", [64, 128])
@pytest.mark.parametrize("tokens,hidden", [(7, 512), (7, 5120), (2050, 4096), (2050, 13824)])
def test_vllm_per_token_group_quant_fp8(tokens, hidden, group, layout):
    # vLLM's grid: tokens 7, 2050; D 512, 4096, 5120, 13824 (4 pairs here); group 64, 128, 512 (512:
    # test_differs_group_size_512); column-major and TMA-aligned scales as the three layouts.
    torch.manual_seed(8)
    x = torch.rand(tokens, hidden, device=DEV, dtype=torch.bfloat16)
    q, s = fp8route.per_token_group_quant(x, group_size=group, layout=layout)
    rq, rs, _ = _ours_groups(x, group)
    groups = hidden // group
    assert _same_codes(q, rq)
    if layout == "row_major":
        assert s.shape == (tokens, groups) and torch.equal(s, rs)
        s_tg = s
    else:  # the physical buffer; vLLM returns its [T, G] view (stride(0) == 1, stride(1) = the row pitch)
        pitch = tokens if layout == "col_major" else (tokens + 3) // 4 * 4
        assert s.shape == (groups, pitch) and s.is_contiguous()
        assert torch.equal(s[:, :tokens].t(), rs) and torch.all(s[:, tokens:] == 0)
        s_tg = s[:, :tokens].t()
        assert s_tg.stride() == (1, pitch)
    # vLLM's reference: amax floored at 1e-10, s = amax / 448, codes x / s; its criterion: codes
    # within rtol 0.15, scales allclose. Where the two rules round a tie apart, a normal code is one
    # step (at most 12.5%) off, a subnormal one more than 15%: the criterion holds for the normal codes,
    # and every code is within one step.
    g = x.float().reshape(tokens, groups, group)
    peer_s = g.abs().amax(-1).clamp(min=1e-10) / QMAX
    peer_q = _encode((g / peer_s[..., None]).reshape(tokens, hidden), QMAX, "e4m3")
    normal = peer_q.float().abs() >= 2.0 ** -6
    assert torch.allclose(q.float()[normal], peer_q.float()[normal], rtol=0.15)
    _check_nearly_equal_codes(q, peer_q)
    assert torch.allclose(s_tg, peer_s)


def _vllm_block_case(m, n, k, scale_factor=1e-2):
    """vLLM's block matmul operands: A [M, K] and B [N, K] uniform over the E4M3 range, As [M, K/128]
    and Bs [N/128, K/128] (row-major, rand * 1e-2)."""
    a, b = _uniform_fp8(m, k), _uniform_fp8(n, k)
    kt, nt = math.ceil(k / BLOCK), math.ceil(n / BLOCK)
    As = torch.rand(m, kt, device=DEV) * scale_factor
    Bs = torch.rand(nt, kt, device=DEV) * scale_factor
    return a, b, As, Bs


def _mean_relative_difference(y, want):
    return ((y.double() - want).abs().mean() / want.abs().mean()).item()


@needs_sm90
@pytest.mark.parametrize("m,n,k", [(1, 128, 256), (1, 7168, 16384), (7, 576, 3884), (8, 13824, 4096),
                                   (83, 512, 13824), (83, 576, 256), (4096, 512, 4096), (4096, 7168, 256)])
def test_vllm_w8a8_block_fp8_matmul(m, n, k):
    # vLLM's grid: M 1, 7, 8, 83, 4096 x N 128, 512, 576, 7168, 13824 x K 256, 3884, 4096, 13824,
    # 16384 (8 of the 125 here; K = 3884 and N = 576 leave partial blocks). vLLM's call
    # w8a8_block_fp8_matmul(A, B, As, Bs, [128, 128], out_dtype): fp8route has no block_size argument.
    torch.manual_seed(9)
    a, b, As, Bs = _vllm_block_case(m, n, k)
    y = fp8route.scaled_mm(a, b, As, Bs, out_dtype=torch.bfloat16)
    exact, mag = _dequant_mm(a, b.t(), As, Bs.t())
    assert _mean_relative_difference(y, exact.to(torch.bfloat16).double()) < 1e-3  # vLLM's criterion
    _check_normwise(y, exact)
    _check_precise(y, exact, mag, k)


@needs_sm90
def test_vllm_w8a8_block_fp8_cutlass_matmul():
    # N = 576 is not a multiple of 128 (DeepSeek-V3's kv_a_proj_with_mqa). A in f32 is quantized in
    # 1x128 groups twice: row-major scales for the reference, column-major ones for the GEMM.
    torch.manual_seed(10)
    m, n, k = 32, 576, 7168
    a32 = (torch.rand(m, k, device=DEV) * 2 - 1) * QMAX
    b = _uniform_fp8(n, k)
    Bs = torch.rand(math.ceil(n / BLOCK), k // BLOCK, device=DEV) * 1e-2
    q, As = fp8route.per_token_group_quant(a32, BLOCK)
    q_cm, As_cm = fp8route.per_token_group_quant(a32, BLOCK, layout="col_major")
    assert _same_codes(q, q_cm)
    y = fp8route.scaled_mm(q_cm, b, As_cm, Bs, out_dtype=torch.bfloat16)
    exact, mag = _dequant_mm(q, b.t(), As, Bs.t())
    assert _mean_relative_difference(y, exact.to(torch.bfloat16).double()) < 1e-3
    _check_precise(y, exact, mag, k)
    assert torch.equal(y, fp8route.scaled_mm(q, b, As, Bs, out_dtype=torch.bfloat16))  # same GEMM, K-major As


# ---- SGLang: test_fp8_gemm.py, test_fp8_blockwise_gemm.py ---------------------------------------------

# SGLang's grid: M 1, 128, 512, 1024, 4096 x N 16, 128, 512, 1024, 4096 x K 512 .. 16384 (7 of 125 here).
SGL_MNK = [(1, 16, 512), (1, 4096, 16384), (128, 512, 1024), (512, 128, 8192), (1024, 1024, 4096),
           (4096, 16, 1024), (4096, 4096, 512)]


@needs_sm90
@pytest.mark.parametrize("out", ["bf16", "f16"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("m,n,k", SGL_MNK)
def test_sglang_fp8_scaled_mm(m, n, k, with_bias, out):
    # fp8_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias): b the [K, N] view, 1-D scales
    # randn * 1e-3 (signed), bias randn in the output dtype.
    torch.manual_seed(11)
    out_dtype = _dtype(out)
    a = _uniform_fp8(m, k)
    b = _uniform_fp8(n, k).t()
    scale_a = torch.randn(m, device=DEV) * 0.001
    scale_b = torch.randn(n, device=DEV) * 0.001
    bias = torch.randn(n, device=DEV, dtype=out_dtype) if with_bias else None
    y = fp8route.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)
    exact, mag = _dequant_mm(a, b, scale_a.view(m, 1), scale_b.view(1, n))
    torch.testing.assert_close(y, _peer_rounding(exact, out_dtype, bias), rtol=0.02, atol=1)
    _check_normwise(y, exact, bias)
    yp = fp8route.scaled_mm(a, b, scale_a, scale_b, out_dtype, bias, use_fast_accum=False)
    _check_precise(yp, exact, mag, k, bias)


@needs_sm90
@pytest.mark.parametrize("out", ["bf16", "f16"])
@pytest.mark.parametrize("m,n,k", [(1, 128, 512), (128, 4096, 16384), (512, 512, 1024), (1024, 128, 8192),
                                   (4096, 1024, 4096)])
def test_sglang_fp8_blockwise_scaled_mm(m, n, k, out):
    # fp8_blockwise_scaled_mm(a, b, scale_a, scale_b, out_dtype): SGLang's grid (M 1 .. 4096, N 128 ..
    # 4096, K 512 .. 16384; 5 shapes here); scale_a [M, K/128] M-major, scale_b [K/128, N/128] with
    # unit first stride, both randn * 1e-3.
    torch.manual_seed(12)
    out_dtype = _dtype(out)
    a = _uniform_fp8(m, k)
    b = _uniform_fp8(n, k).t()
    scale_a = _first_dim_contiguous(torch.randn(_grid_shape(a.shape, (1, BLOCK)), device=DEV) * 0.001)
    scale_b = _first_dim_contiguous(torch.randn(_grid_shape(b.shape, (BLOCK, BLOCK)), device=DEV) * 0.001)
    y = fp8route.scaled_mm(a, b, scale_a, scale_b, out_dtype)
    exact, mag = _dequant_mm(a, b, scale_a, scale_b)
    torch.testing.assert_close(y, _peer_rounding(exact, out_dtype, None), rtol=0.02, atol=1)
    _check_normwise(y, exact)
    _check_precise(y, exact, mag, k)


# ---- SGLang: quantization tests -------------------------------------------------------------------------

def _sglang_activations(tokens, hidden):
    """bf16 randn with some entries scaled by 10 (outliers), as SGLang's group-quant test data."""
    x = torch.randn(tokens, hidden, device=DEV, dtype=torch.bfloat16)
    x[torch.rand(tokens, hidden, device=DEV) < 0.01] *= 10
    return x


def _check_sglang_tiny_diff(q, r):
    """SGLang's code criterion: no sign flip, no code two or more steps away, under 0.5% of the codes
    one step away (4% for at most 4096 codes)."""
    steps = _code_steps(q, r)
    assert int(steps.max()) <= 1
    limit = 0.04 if steps.numel() <= 4096 else 0.005
    assert steps.float().mean().item() < limit


SGL_GROUP_FLAGS = {  # SGLang's flag sets -> fp8route's (layout, rounding, storage)
    "row": ("row_major", "none", "f32"),
    "col": ("col_major", "none", "f32"),
    "col_tma": ("col_major_tma", "none", "f32"),
    "col_tma_ue8m0": ("col_major_tma", "pow2", "ue8m0_packed"),
}


@needs_sm90
@pytest.mark.parametrize("flags", list(SGL_GROUP_FLAGS))
@pytest.mark.parametrize("code", ["e4m3", "i8"])
@pytest.mark.parametrize("tokens,hidden", [(1, 7168), (4, 512), (127, 1536), (512, 16384), (4096, 2048)])
def test_sglang_per_token_group_quant_8bit(tokens, hidden, code, flags):
    # SGLang's grid: tokens 1 .. 8192 x hidden 512 .. 16384 (5 pairs here), group 128, fp8 and int8
    # (int8 with row-major scales only, as there).
    if code == "i8" and flags != "row":
        pytest.skip("SGLang quantizes to int8 with row-major scales only")
    torch.manual_seed(13)
    layout, rounding, storage = SGL_GROUP_FLAGS[flags]
    x = _sglang_activations(tokens, hidden)
    q, s = fp8route.per_token_group_quant(x, 128, dtype=code, rounding=rounding, storage=storage, layout=layout)
    rq, rs, re = _ours_groups(x, 128, code, pow2=rounding == "pow2")
    assert _same_codes(q, rq)
    if storage == "ue8m0_packed":
        assert s.dtype == torch.int32 and torch.equal(s, _packed_ue8m0_tma(re, tokens))
    elif layout == "row_major":
        assert torch.equal(s, rs)
    else:
        assert torch.equal(s[:, :tokens].t(), rs)
    # SGLang's reference (its Triton kernel): s = amax / qmax (amax floored at 1e-10), rounded up to a
    # power of two with UE8M0 as exp2(ceil(log2(s))), codes clamp(x / s) cast to the code type.
    qmax = QMAX if code == "e4m3" else 127.0
    g = x.float().reshape(tokens, hidden // 128, 128)
    peer_s = g.abs().amax(-1).clamp(min=1e-10) / qmax
    if rounding == "pow2":
        peer_s = torch.exp2(torch.ceil(torch.log2(peer_s)))
        assert torch.equal(_pow2_from_exponent(re), peer_s)  # bf16 inputs keep amax / 448 off powers of two
    else:
        torch.testing.assert_close(rs, peer_s, rtol=1e-3, atol=1e-5)
    peer_v = (g / peer_s[..., None]).reshape(tokens, hidden).clamp(-qmax, qmax)
    if code == "e4m3":
        _check_sglang_tiny_diff(q, peer_v.to(_e4m3()))
    else:  # the Triton cast truncates toward zero, fp8route rounds to nearest even: one step at most
        assert int(_code_steps(q, peer_v.to(torch.int8)).max()) <= 1


def _masked_counts(mode, tokens, experts, gen):
    """SGLang's masked_m: the tokens split evenly, unevenly (random weights cubed) or all to one expert."""
    if mode == "balanced":
        return [tokens // experts + (1 if e < tokens % experts else 0) for e in range(experts)]
    if mode == "extreme":
        return [tokens] + [0] * (experts - 1)
    w = torch.rand(experts, generator=gen) ** 3
    counts = (w / w.sum() * tokens).floor().int().tolist()
    counts[int(torch.argmax(w))] += tokens - sum(counts)
    return counts


@needs_sm90
@pytest.mark.parametrize("mode", [None, "balanced", "imbalanced", "extreme"])
@pytest.mark.parametrize("tokens", [1, 32, 512])
def test_sglang_fused_silu_and_mul_group_quant(tokens, mode):
    # SGLang's fused flag set: silu_and_mul fused, column-major TMA-aligned packed UE8M0 scales, the
    # activations [T, 2H] (H = 2048) or, masked (DeepEP low-latency dispatch output), [E, T_pad, 2H]
    # with masked_m tokens per expert (6 local experts; T_pad 512 instead of 768 per rank).
    torch.manual_seed(14)
    hidden, spec = 2048, dict(rounding="pow2", storage="ue8m0_packed", layout="col_major_tma")
    if mode is None:
        x = torch.randn(tokens, 2 * hidden, device=DEV, dtype=torch.bfloat16)
        q, s = fp8route.silu_and_mul_per_token_group_quant(x, 128, **spec)
        rows = [(q, s, x, tokens)]
    else:
        experts, t_pad = 6, 512
        x = torch.randn(experts, t_pad, 2 * hidden, device=DEV, dtype=torch.bfloat16)
        counts = _masked_counts(mode, tokens, experts, torch.Generator().manual_seed(tokens))
        masked_m = torch.tensor(counts, dtype=torch.int32, device=DEV)
        q, s = fp8route.masked_silu_and_mul_per_token_group_quant(x, masked_m, group_size=128, **spec)
        assert q.shape == (experts, t_pad, hidden) and s.shape == (experts, hidden // 512, t_pad)
        rows = [(q[e, :c], s[e], x[e, :c], c) for e, c in enumerate(counts) if c > 0]
    for qe, se, xe, count in rows:
        act = torch.nn.functional.silu(xe[:, :hidden].float()) * xe[:, hidden:].float()
        rq, _, re = _ours_groups(act, 128, pow2=True)
        # docs/numerics.md, fused silu_and_mul: codes within one step, fewer than 1e-3 one step off;
        # the scales' exponents equal but for last-ulp differences of the activation on rare groups.
        _check_nearly_equal_codes(qe, rq)
        got = se[:, :count].contiguous().t().contiguous().view(torch.uint8).reshape(count, -1)[:, :hidden // 128]
        diff = (got.int() - re).abs()
        assert int(diff.max()) <= 1 and diff.float().mean().item() < 1e-3


@needs_sm90
@pytest.mark.parametrize("tokens,hidden", [(128, 512), (128, 1368), (256, 2048), (512, 4096)])
def test_sglang_per_token_quant_fp8(tokens, hidden):
    # SGLang's grid: tokens 128, 256, 512 x hidden 512, 1368, 2048, 4096 (4 pairs); f16 rand. sgl_per_token_quant_fp8(x, q, s) writes into
    # the caller's q and s [T]: fp8route's out=(q, s).
    torch.manual_seed(15)
    x = torch.rand(tokens, hidden, device=DEV, dtype=torch.float16)
    q = torch.empty(tokens, hidden, device=DEV, dtype=_e4m3())
    s = torch.zeros(tokens, device=DEV)
    q2, s2 = fp8route.per_token_quant(x, out=(q, s))
    assert q2 is q and s2 is s
    rq, rs, _ = _ours_groups(x, hidden)
    assert _same_codes(q, rq) and torch.equal(s, rs[:, 0])
    # SGLang's reference: x * reciprocal(the kernel's scale); its tolerance (1e-3) asks for equal codes,
    # which the two multipliers give but on rare ties.
    _check_nearly_equal_codes(q, _encode(x.float() * s.view(-1, 1).reciprocal(), QMAX, "e4m3"))


@needs_sm90
@pytest.mark.parametrize("tokens,hidden", [(128, 512), (256, 2048), (512, 4096)])
def test_sglang_per_tensor_quant_fp8(tokens, hidden):
    # SGLang's grid: tokens 128, 256, 512 x hidden 512, 2048, 4096 (3 pairs); dynamic, then static with
    # scale = rand(1). sgl_per_tensor_quant_fp8(x, q, scale, is_static): fp8route's out=q (and scale=
    # for the static form; the dynamic form returns its own scale).
    torch.manual_seed(16)
    x = torch.rand(tokens, hidden, device=DEV, dtype=torch.float16)
    q = torch.empty(tokens, hidden, device=DEV, dtype=_e4m3())
    q2, scale = fp8route.per_tensor_quant(x, out=q)
    rq, rscale = _ours_tensor_dynamic(x)
    assert q2 is q and torch.equal(scale, rscale) and _same_codes(q, rq)
    _check_nearly_equal_codes(q, _encode(x.float() * scale.reciprocal(), QMAX, "e4m3"))
    static = torch.rand(1, device=DEV)
    q, scale = fp8route.per_tensor_quant(x, static, out=q)
    assert scale is static and _same_codes(q, _ours_tensor_static(x, static))
    _check_nearly_equal_codes(q, _encode(x.float() * static.reciprocal(), QMAX, "e4m3"))


# ---- peer forms fp8route does not take ---------------------------------------------------------------

@needs_torch
def test_differs_group_size_512():
    # vLLM's group sizes include 512; fp8route's group kernels take 16, 32, 64, 128 and 256 (refused
    # before any device work, so this runs without a GPU).
    x = torch.zeros(7, 4096, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="group_size: 512 is not one of 16, 32, 64, 128, 256"):
        fp8route.per_token_group_quant(x, group_size=512)


@needs_sm90
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("hidden", [17, 1025, 1026, 1368, 5137, 8193])
def test_hidden_not_multiple_of_16(hidden, dtype):
    # vLLM's per-token and per-tensor hidden sizes 17, 1025, 1026, 5137, 8193 and SGLang's 1368
    # (docs/numerics.md: any H >= 1, any row stride >= H): per-token (E4M3 and INT8, both scale
    # roundings), dynamic and static per-tensor bit for bit against the transcription of fp8route's
    # rules; the fused silu_and_mul per-token form within its tolerance. Then the same ops on strided
    # views (rows padded by an odd number of elements, the view starting one element into the
    # buffer): the same bytes as on a contiguous copy.
    torch.manual_seed(18)
    tokens = 7
    x = torch.randn(tokens, hidden, device=DEV, dtype=_dtype(dtype)) * 3
    for code in ("e4m3", "i8"):
        for rounding in ("none", "pow2"):
            q, s = fp8route.per_token_quant(x, dtype=code, rounding=rounding)
            rq, rs, _ = _ours_groups(x, hidden, code=code, pow2=rounding == "pow2")
            assert _same_codes(q, rq) and torch.equal(s, rs[:, 0]), (code, rounding)
    q, scale = fp8route.per_tensor_quant(x)
    rq, rscale = _ours_tensor_dynamic(x)
    assert torch.equal(scale, rscale) and _same_codes(q, rq)
    static = torch.full((1,), 0.0123, device=DEV)
    q, _ = fp8route.per_tensor_quant(x, static)
    assert _same_codes(q, _ours_tensor_static(x, static))
    gu = torch.randn(tokens, 2 * hidden, device=DEV, dtype=_dtype(dtype))
    q, s = fp8route.silu_and_mul_per_token_quant(gu)
    act = torch.nn.functional.silu(gu[:, :hidden].float()) * gu[:, hidden:].float()
    rq, rs, _ = _ours_groups(act, hidden)
    torch.testing.assert_close(s, rs[:, 0], rtol=1e-6, atol=0)
    assert int(_code_steps(q, rq).max()) <= 1
    for pad in (1, 7):
        full = torch.randn(tokens, hidden + pad + 1, device=DEV, dtype=_dtype(dtype))
        xs = full[:, 1:hidden + 1]
        assert not xs.is_contiguous()
        for code in ("e4m3", "i8"):
            q1, s1 = fp8route.per_token_quant(xs, dtype=code)
            q2, s2 = fp8route.per_token_quant(xs.contiguous(), dtype=code)
            assert torch.equal(s1, s2) and _same_codes(q1, q2)
        q1, s1 = fp8route.per_tensor_quant(xs)
        q2, s2 = fp8route.per_tensor_quant(xs.contiguous())
        assert torch.equal(s1, s2) and _same_codes(q1, q2)
        q1, _ = fp8route.per_tensor_quant(xs, static)
        assert _same_codes(q1, _ours_tensor_static(xs, static))
        gus = torch.randn(tokens, 2 * hidden + pad + 1, device=DEV, dtype=_dtype(dtype))[:, 1:2 * hidden + 1]
        q1, s1 = fp8route.silu_and_mul_per_token_quant(gus)
        q2, s2 = fp8route.silu_and_mul_per_token_quant(gus.contiguous())
        assert torch.equal(s1, s2) and _same_codes(q1, q2)


@needs_sm90
def test_differs_col_major_scale_a_with_m_not_multiple_of_4():
    # fp8route's non-TMA column-major group scales are the physical [K/128, M] buffer; with M % 4 != 0
    # scaled_mm does not read that buffer as block scale_a (its physical form is [K/128, align(M, 4)]),
    # but takes the [M, K/128] view vLLM's per_token_group_quant_fp8 returns (gathered, the same bits).
    torch.manual_seed(17)
    m, n, k = 33, 256, 1024
    x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
    b = _uniform_fp8(n, k)
    Bs = torch.rand(n // BLOCK, k // BLOCK, device=DEV) * 1e-2
    q, s_cm = fp8route.per_token_group_quant(x, layout="col_major")
    _, s_rm = fp8route.per_token_group_quant(x)
    assert s_cm.shape == (k // BLOCK, m)
    with pytest.raises(ValueError, match="scale_a"):
        fp8route.scaled_mm(q, b, s_cm, Bs)
    want = fp8route.scaled_mm(q, b, s_rm, Bs)
    assert torch.equal(fp8route.scaled_mm(q, b, s_cm.t(), Bs), want)
