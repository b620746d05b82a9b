"""scaled_mm with the conventions inference engines use (docs/engines.md): torch._scaled_mm's
argument order (the former order still read), out_dtype as a string or a torch dtype, b as the
[K, N] transpose view of the weight, 2-D row scales, block scales as engines pass them, the scale
kind inferred from the shapes. The CPU tests need neither torch nor a GPU (argument errors come
before any device work); the fake-tensor tests need torch; the GPU tests compare each form's output
with the canonical call's, bit for bit, on fresh random inputs. Each skips with its reason."""
import numpy as np
import pytest

import fp8route

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
needs_gpu = pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs torch and a CUDA device")


def test_former_positional_order_is_still_read():
    # Host arrays: every call stops at the C++ check of a, after the Python layer has read its
    # arguments. A dtype in bias's place is the former positional out_dtype.
    a = np.zeros((4, 32), np.uint8)
    b = np.zeros((8, 32), np.uint8)
    one = np.ones(1, np.float32)
    out = np.zeros((4, 8), np.float16)
    for args in [("f16",), ("f16", None), (None, "f16"), (None, None)]:
        with pytest.raises(ValueError, match="a: must be CUDA device memory"):
            fp8route.scaled_mm(a, b, one, one, *args, out=out)
    with pytest.raises(ValueError, match="out_dtype"):
        fp8route.scaled_mm(a, b, one, one, "f32", out=out)  # former order, checked as out_dtype
    with pytest.raises(ValueError, match="out_dtype"):
        fp8route.scaled_mm(a, b, one, one, None, "f32", out=out)
    with pytest.raises(ValueError, match="bias: a tensor or None"):
        fp8route.scaled_mm(a, b, one, one, "bf16", "f16", out=out)


@needs_torch
def test_torch_dtypes_for_out_dtype():
    a = np.zeros((4, 32), np.uint8)
    b = np.zeros((8, 32), np.uint8)
    one = np.ones(1, np.float32)
    out = np.zeros((4, 8), np.float16)
    for dtype in (torch.bfloat16, torch.float16):
        with pytest.raises(ValueError, match="a: must be CUDA device memory"):
            fp8route.scaled_mm(a, b, one, one, out_dtype=dtype, out=out)
        with pytest.raises(ValueError, match="a: must be CUDA device memory"):
            fp8route.scaled_mm(a, b, one, one, dtype, out=out)  # former positional place
    with pytest.raises(ValueError, match="out_dtype"):
        fp8route.scaled_mm(a, b, one, one, out_dtype=torch.float32, out=out)


@needs_torch
def test_torch_op_defaults_and_b_orientation_in_fakes():
    from torch._subclasses.fake_tensor import FakeTensorMode
    e4m3 = torch.float8_e4m3fn
    with FakeTensorMode():
        a = torch.empty(8, 256, dtype=e4m3, device="cuda")
        w = torch.empty(512, 256, dtype=e4m3, device="cuda")
        one = torch.empty(1, device="cuda")
        y = torch.ops.fp8route.scaled_mm(a, w.t(), one, one)  # b [K, N]: N is its second dim
        assert y.shape == (8, 512) and y.dtype == torch.bfloat16
        y = torch.ops.fp8route.scaled_mm(a, w, one, one, out_dtype=torch.float16)
        assert y.shape == (8, 512) and y.dtype == torch.float16
        y = torch.ops.fp8route.scaled_mm(a, w, one, one, None, torch.float16, "tensor")  # all positional
        assert y.shape == (8, 512) and y.dtype == torch.float16
        w1 = torch.empty(1, 256, dtype=e4m3, device="cuda")
        assert torch.ops.fp8route.scaled_mm(a, w1.t(), one, one).shape == (8, 1)
        square = torch.empty(256, 256, dtype=e4m3, device="cuda")
        assert torch.ops.fp8route.scaled_mm(a, square.t(), one, one).shape == (8, 256)


def _bits(y):
    return y.view(torch.int16)


@needs_gpu
@pytest.mark.parametrize("m,n,k", [(1, 512, 1024), (5, 384, 640), (64, 1024, 1536), (300, 768, 896)])
def test_engine_forms_give_the_canonical_bits(m, n, k):
    dev = "cuda"
    a = (torch.randn(m, k, device=dev) * 4).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device=dev) * 4).to(torch.float8_e4m3fn)
    bias = torch.randn(n, device=dev, dtype=torch.bfloat16)
    op = torch.ops.fp8route.scaled_mm

    sa, sb = torch.rand(1, device=dev) + 0.5, torch.rand(1, device=dev) + 0.5  # per tensor
    want = fp8route.scaled_mm(a, w, sa, sb, bias=bias, out_dtype="bf16", scale="tensor")
    for y in (fp8route.scaled_mm(a, w.t(), sa.view(1, 1), sb.view(1, 1), bias, torch.bfloat16),
              fp8route.scaled_mm(a, w, sa, sb, "bf16", bias),  # former positional order
              op(a, w.t(), sa, sb, bias, torch.bfloat16)):
        assert torch.equal(_bits(y), _bits(want))

    sa, sb = torch.rand(m, device=dev) + 0.5, torch.rand(n, device=dev) + 0.5  # per token, per channel
    want = fp8route.scaled_mm(a, w, sa, sb, bias=bias, scale="row")
    for y in (fp8route.scaled_mm(a, w.t(), sa.view(m, 1), sb.view(n, 1), bias, torch.bfloat16),
              fp8route.scaled_mm(a, w.t(), sa.view(m, 1), sb.view(1, n), bias=bias),
              op(a, w.t(), sa.view(m, 1), sb.view(n, 1), bias)):
        assert torch.equal(_bits(y), _bits(want))
    want16 = fp8route.scaled_mm(a, w, sa, sb, out_dtype="f16", scale="row")
    y16 = fp8route.scaled_mm(a, w.t(), sa, sb, out_dtype=torch.float16)
    assert y16.dtype == torch.float16 and torch.equal(_bits(y16), _bits(want16))

    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)  # 1x128 activation blocks, 128x128 weight blocks
    q, s_tma = fp8route.per_token_group_quant(x, layout="col_major_tma")  # [K/128, align(M, 4)]
    q2, s_kmajor = fp8route.per_token_group_quant(x, layout="row_major")  # [M, K/128]
    assert torch.equal(q.view(torch.uint8), q2.view(torch.uint8))
    ws = torch.rand((n + 127) // 128, (k + 127) // 128, device=dev) + 0.5
    want = fp8route.scaled_mm(q, w, s_tma, ws, scale="block")
    for y in (fp8route.scaled_mm(q, w.t(), s_tma[:, :m].t(), ws.t()),  # M-major view: read in place
              fp8route.scaled_mm(q, w.t(), s_kmajor, ws.t(), out_dtype=torch.bfloat16),  # K-major: gathered
              op(q, w, s_kmajor, ws)):
        assert torch.equal(_bits(y), _bits(want))


@needs_gpu
def test_unsupported_b_layout_names_b():
    a = (torch.randn(16, 256, device="cuda")).to(torch.float8_e4m3fn)
    w = (torch.randn(384, 256, device="cuda")).to(torch.float8_e4m3fn)
    one = torch.ones(1, device="cuda")
    with pytest.raises(ValueError, match=r"b: a \[K, N\] b must be the transpose view .* row-major \[K, N\] b is not "
                                         r"supported"):
        fp8route.scaled_mm(a, w.t().contiguous(), one, one)
    with pytest.raises(ValueError, match="scale_a, scale_b: their shapes fit no scale kind"):
        fp8route.scaled_mm(a, w, torch.ones(16, device="cuda"), torch.ones(3, 2, device="cuda"))
