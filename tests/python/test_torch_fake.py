"""The torch.library registration without a GPU: every fake (meta) implementation gives the shapes
and dtypes the C++ layout function gives, so torch.compile traces what the kernels write. Needs torch
(skipped without it), not a GPU: fake tensors only."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch.library tests use it)")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import fp8route  # noqa: E402


@pytest.mark.parametrize("layout", ["row_major", "col_major", "col_major_tma"])
@pytest.mark.parametrize("storage,rounding", [("f32", "none"), ("f32", "pow2"), ("ue8m0_packed", "pow2")])
@pytest.mark.parametrize("t", [1, 5, 128])
@pytest.mark.parametrize("fused", [False, True])
def test_group_quant_fake_matches_layout(layout, storage, rounding, t, fused):
    h = 1024
    with FakeTensorMode():
        x = torch.empty(t, 2 * h if fused else h, dtype=torch.bfloat16, device="cuda")
        q, s = torch.ops.fp8route.per_token_group_quant(x, 128, "e4m3", rounding, storage, layout, fused)
    lay = fp8route.quant_layout(t, h, 128, "e4m3", rounding, storage, layout)
    assert list(q.shape) == lay["q"] and q.dtype == torch.float8_e4m3fn
    assert list(s.shape) == lay["s"]
    assert s.dtype == (torch.int32 if lay["s_dtype"] == "i32" else torch.float32)


def test_gemm_and_linear_fakes():
    with FakeTensorMode():
        a = torch.empty(8, 256, dtype=torch.float8_e4m3fn, device="cuda")
        b = torch.empty(16, 256, dtype=torch.float8_e4m3fn, device="cuda")
        one = torch.empty(1, device="cuda")
        y = torch.ops.fp8route.scaled_mm(a, b, one, one, None, torch.float16, "tensor")
        assert y.shape == (8, 16) and y.dtype == torch.float16
        q, s = torch.ops.fp8route.per_token_quant(torch.empty(5, 64, device="cuda"), "i8", "none")
        assert q.dtype == torch.int8 and s.shape == (5,)
        w = torch.empty(64, 1024, dtype=torch.float8_e4m3fn, device="cuda")
        x = torch.empty(2, 3, 1024, dtype=torch.bfloat16, device="cuda")
        assert torch.ops.fp8route.linear(x, w, 1, "row", torch.bfloat16).shape == (2, 3, 64)
