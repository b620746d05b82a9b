"""The accumulation class in Python: accum="fast"|"precise", torch._scaled_mm's use_fast_accum mapped
to it (both given must agree), errors naming the argument, explain() of each class, the torch op's
fake; on a GPU, precise results against fp64 at large K and use_fast_accum=False running the same
config as accum="precise"."""
import numpy as np
import pytest

import fp8route
from fp8route import ops
from fp8route._native import lib

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
needs_gpu = pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs torch and a CUDA device")


@pytest.mark.parametrize("accum,use_fast_accum,want", [
    (None, None, "fast"), ("fast", None, "fast"), ("precise", None, "precise"),
    (None, True, "fast"), (None, False, "precise"), ("fast", True, "fast"), ("precise", False, "precise"),
])
def test_use_fast_accum_maps_to_accum(accum, use_fast_accum, want):
    assert ops._accum(accum, use_fast_accum) == want


@pytest.mark.parametrize("accum,use_fast_accum", [("fast", False), ("precise", True)])
def test_conflicting_spellings_raise(accum, use_fast_accum):
    with pytest.raises(ValueError, match="accum, use_fast_accum: .* disagree"):
        ops._accum(accum, use_fast_accum)
    # The public functions check before anything else (no tensor is looked at).
    a = np.zeros((4, 32), np.uint8)
    with pytest.raises(ValueError, match="disagree"):
        fp8route.scaled_mm(a, a, np.ones(1, np.float32), np.ones(1, np.float32), accum=accum,
                           use_fast_accum=use_fast_accum)
    with pytest.raises(ValueError, match="disagree"):
        fp8route.explain(1, 4096, 4096, accum=accum, use_fast_accum=use_fast_accum)


@pytest.mark.parametrize("bad", ["Fast", "fp32", "", "fastacc", 1, True])
def test_bad_accum_names_accum(bad):
    with pytest.raises(ValueError, match="^accum: "):
        ops._accum(bad, None)
    with pytest.raises(ValueError, match="^accum: "):
        fp8route.explain(1, 4096, 4096, accum=bad)


@pytest.mark.parametrize("bad", [1, 0, "True", "yes"])
def test_bad_use_fast_accum_names_it(bad):
    with pytest.raises(ValueError, match="^use_fast_accum: "):
        ops._accum(None, bad)


def test_native_module_checks_accum():
    # The C++ parse names the argument too (what a direct caller of the native module meets).
    with pytest.raises(ValueError, match="accum"):
        lib.explain(1, 4096, 4096, "row", "bf16", "medium")


def test_explain_says_the_class():
    fast = fp8route.explain(64, 4096, 4096, scale="row")
    assert "\naccum: fast" in fast, fast
    precise = fp8route.explain(64, 4096, 4096, scale="row", accum="precise")
    assert "accum=precise" in precise and "\naccum: precise (precise-class configs only); the choice accumulates precise\n" \
        in precise, precise
    assert fp8route.explain(64, 4096, 4096, scale="row", use_fast_accum=False) == precise
    choice = next(line for line in precise.splitlines() if line.startswith("choice: "))
    assert "_fastacc" not in choice, precise


@needs_torch
def test_fp8linear_checks_accum_first():
    w = torch.zeros(64, 128, dtype=torch.float8_e4m3fn)
    s = torch.ones(64)
    with pytest.raises(ValueError, match="disagree"):
        fp8route.Fp8Linear(w, s, accum="precise", use_fast_accum=True)
    with pytest.raises(ValueError, match="^accum: "):
        fp8route.Fp8Linear(w, s, accum="medium")


@needs_torch
def test_scaled_mm_op_fake_takes_accum():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(8, 256, dtype=torch.float8_e4m3fn, device="cuda")
        b = torch.empty(16, 256, dtype=torch.float8_e4m3fn, device="cuda")
        one = torch.empty(1, device="cuda")
        y = torch.ops.fp8route.scaled_mm(a, b, one, one, None, torch.bfloat16, "tensor", "precise")
        assert y.shape == (8, 16) and y.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="^accum: "):
            torch.ops.fp8route.scaled_mm(a, b, one, one, None, torch.bfloat16, "tensor", "medium")


def _operands(m, n, k, positive, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mag = torch.exp2(torch.rand(m + n, k, device="cuda", generator=g) * 4 - 2)
    sign = 1 if positive else torch.where(torch.rand(m + n, k, device="cuda", generator=g) < 0.5, -1.0, 1.0)
    q = (mag * sign).to(torch.float8_e4m3fn)
    sa = (torch.rand(m, device="cuda", generator=g) * 0.5 + 0.5) / 64
    sb = (torch.rand(n, device="cuda", generator=g) * 0.5 + 0.5) / 64
    return q[:m].contiguous(), q[m:].contiguous(), sa, sb


@needs_gpu
@pytest.mark.parametrize("k", [16384, 18432])
@pytest.mark.parametrize("positive", [True, False])
def test_precise_within_bound_of_fp64(k, positive):
    # The precise-class bound of docs/numerics.md: (2^-10 + K 2^-24) sa sb sum|a b| + 2^-8 |y|.
    m, n = 64, 512
    a, b, sa, sb = _operands(m, n, k, positive, seed=k + positive)
    da, db = a.double(), b.double()
    ref = (da @ db.t()) * sa.double()[:, None] * sb.double()[None, :]
    mag = (da.abs() @ db.abs().t()) * sa.double()[:, None] * sb.double()[None, :]
    bound = (2.0 ** -10 + k * 2.0 ** -24) * mag + 2.0 ** -8 * ref.abs()
    y = fp8route.scaled_mm(a, b, sa, sb, accum="precise")
    worst = ((y.double() - ref).abs() / bound).max().item()
    assert worst <= 1.0, f"error up to {worst:.3f}x the bound; route: {fp8route.explain(m, n, k, accum='precise')}"
    # torch._scaled_mm's spelling runs the same config: the same bits.
    assert torch.equal(fp8route.scaled_mm(a, b, sa, sb, use_fast_accum=False), y)


@needs_gpu
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (4, 2112, 7168), (64, 4096, 14336), (512, 6144, 4096)])
def test_cublaslt_precise_runs_torchs_algorithm(tmp_path, m, n, k):
    # cublaslt/precise asks cuBLASLt as torch._scaled_mm asks by default (precise accumulation, 1 MiB of
    # workspace, the operands' own alignment): the same algorithm, hence the same bits as torch's call.
    # A one-entry table routes the shape there.
    import os
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "routes", "h200.json")
    timings = [{"m": m, "n": n, "k": k, "scale": "tensor", "out": "bf16", "backend": "cublaslt", "config": "precise",
                "us": 1.0}]
    fp8route.save_table(tmp_path / "precise.json", timings)
    g = torch.Generator(device="cuda").manual_seed(m * 131 + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa = torch.rand(1, device="cuda", generator=g) + 0.5
    sb = torch.rand(1, device="cuda", generator=g) * 0.01 + 0.01
    want = torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
    try:
        fp8route.load_table(tmp_path / "precise.json")
        route = fp8route.explain(m, n, k, scale="tensor")
        assert "choice: cublaslt/precise" in route, route
        y = fp8route.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        assert torch.equal(y, want), f"{(y.float() - want.float()).abs().max().item()} max difference"
    finally:
        fp8route.load_table(shipped)
