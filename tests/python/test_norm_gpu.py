"""The fused RMSNorm ops from Python on the GPU: the normalized values and residual sums bit-exact
against a torch transcription of docs/numerics.md "RMSNorm" (sum of squares in float64), the fused
quantized forms equal to rms_norm followed by the standalone quant op, the torch.library ops checked
with opcheck and traced by torch.compile. Skipped (with the reason) without torch or a CUDA device."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tests use it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fp8route  # noqa: E402

DEV = "cuda"


def ref_rms_norm(x, w, eps, residual=None):
    h = x if residual is None else (x.float() + residual.float()).to(x.dtype)
    ss = (h.double() ** 2).sum(-1, keepdim=True)
    inv = (1.0 / torch.sqrt(ss / h.shape[-1] + float(torch.tensor(eps, dtype=torch.float32)))).float()
    y = ((h.float() * inv) * w.float()).to(x.dtype)
    return y, h


def inputs(t, h, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(t, h, device=DEV, generator=g).mul(3).to(dtype)
    r = torch.randn(t, h, device=DEV, generator=g).to(dtype)
    w = (torch.rand(h, device=DEV, generator=g) * 1.75 + 0.25).to(dtype)
    return x, r, w


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("t,h", [(1, 4096), (7, 8192), (130, 5120), (3, 16384)])
def test_rms_norm_bit_exact(dtype, t, h):
    x, r, w = inputs(t, h, dtype, t * h)
    y = fp8route.rms_norm(x, w, 1e-5)
    want, _ = ref_rms_norm(x, w, 1e-5)
    assert torch.equal(y.view(torch.int16), want.view(torch.int16))
    y, hsum = fp8route.rms_norm(x, w, 1e-5, residual=r)
    want, want_h = ref_rms_norm(x, w, 1e-5, r)
    assert torch.equal(hsum.view(torch.int16), want_h.view(torch.int16))
    assert torch.equal(y.view(torch.int16), want.view(torch.int16))


def test_in_place_residual_like_fused_add_rms_norm():
    x, r, w = inputs(5, 4096, torch.bfloat16, 1)
    want, want_h = ref_rms_norm(x, w, 1e-6, r)
    fp8route.rms_norm(x, w, 1e-6, residual=r, out=x, residual_out=r)
    assert torch.equal(x, want) and torch.equal(r, want_h)


@pytest.mark.parametrize("layout", ["row_major", "col_major_tma"])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_quant_equals_unfused(layout, residual):
    x, r, w = inputs(33, 7168, torch.bfloat16, 7)
    res = r if residual else None
    y, _ = ref_rms_norm(x, w, 1e-6, res)
    out = fp8route.rms_norm_per_token_group_quant(x, w, 1e-6, residual=res, layout=layout)
    q, s = fp8route.per_token_group_quant(y, layout=layout)
    assert torch.equal(out[0].view(torch.uint8), q.view(torch.uint8)) and torch.equal(out[1], s)
    out = fp8route.rms_norm_per_token_quant(x, w, 1e-6, residual=res)
    q, s = fp8route.per_token_quant(y)
    assert torch.equal(out[0].view(torch.uint8), q.view(torch.uint8)) and torch.equal(out[1], s)
    scale = torch.tensor([0.02], device=DEV)
    out = fp8route.rms_norm_per_tensor_quant(x, w, scale, 1e-6, residual=res)
    q, _ = fp8route.per_tensor_quant(y, scale=scale)
    assert torch.equal((out[0] if residual else out).view(torch.uint8), q.view(torch.uint8))


def test_errors_name_the_argument():
    x, r, w = inputs(4, 4096, torch.bfloat16, 3)
    with pytest.raises(ValueError, match="weight"):
        fp8route.rms_norm(x, w[:2048].contiguous(), 1e-6)
    with pytest.raises(ValueError, match="eps"):
        fp8route.rms_norm(x, w, float("nan"))
    with pytest.raises(ValueError, match="residual"):
        fp8route.rms_norm(x, w, 1e-6, residual=r[:2])
    with pytest.raises(ValueError, match="x: dtype"):
        fp8route.rms_norm(x.float(), w.float(), 1e-6)


def test_empty_batch():
    x = torch.empty(0, 4096, device=DEV, dtype=torch.bfloat16)
    w = torch.ones(4096, device=DEV, dtype=torch.bfloat16)
    q, s = fp8route.rms_norm_per_token_group_quant(x, w)
    assert q.shape == (0, 4096) and s.shape == (0, 32)
    assert fp8route.rms_norm(x, w).shape == (0, 4096)


def test_torch_ops_opcheck_and_compile():
    x, r, w = inputs(16, 4096, torch.bfloat16, 11)
    torch.library.opcheck(torch.ops.fp8route.rms_norm, (x, w, 1e-6, r))
    torch.library.opcheck(torch.ops.fp8route.rms_norm_per_token_group_quant,
                          (x, w, 1e-6, None, 128, "e4m3", "none", "f32", "col_major_tma"))
    torch.library.opcheck(torch.ops.fp8route.rms_norm_per_token_quant, (x, w, 1e-6, r, "e4m3", "none"))

    def step(x, r):
        q, s, h = torch.ops.fp8route.rms_norm_per_token_quant(x, w, 1e-6, r, "e4m3", "none")
        return q.view(torch.uint8).sum(dtype=torch.int64) + s.sum(), h

    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    for t in (16, 3, 40):
        x, r, _ = inputs(t, 4096, torch.bfloat16, t)
        got, h = compiled(x, r)
        want, want_h = step(x, r)
        assert torch.equal(got, want) and torch.equal(h, want_h)


def _bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16) if t.element_size() == 2 else \
        t.view(torch.int32)


@pytest.mark.parametrize("t,h", [(1, 4096), (3, 8192), (2, 28672)])
def test_static_weight_changes_no_bit(t, h):
    """static_weight=True (the norm weight loaded before the kernel's programmatic-launch wait) gives
    every output of every form bit for bit, eager and as a torch op, in a chain where the previous
    kernel writes x."""
    x0, r, w = inputs(t, h, torch.bfloat16, t + h)
    scale = torch.tensor([0.05], device=DEV)
    forms = [
        lambda x, sw: fp8route.rms_norm(x, w, 1e-6, residual=r, static_weight=sw),
        lambda x, sw: fp8route.rms_norm_per_token_quant(x, w, 1e-6, residual=r, static_weight=sw),
        lambda x, sw: fp8route.rms_norm_per_token_group_quant(x, w, 1e-6, residual=r, layout="col_major_tma",
                                                              static_weight=sw),
        lambda x, sw: fp8route.rms_norm_per_tensor_quant(x, w, scale, 1e-6, residual=r, static_weight=sw),
        lambda x, sw: torch.ops.fp8route.rms_norm_per_token_quant(x, w, 1e-6, r, "e4m3", "none", sw),
    ]
    for form in forms:
        want = [_bits(v).clone() for v in form(fp8route.rms_norm(x0, w, 1e-6), False)]
        for _ in range(3):
            x = fp8route.rms_norm(x0, w, 1e-6)  # a PDL kernel that writes x just before
            got = form(x, True)
            assert all(torch.equal(_bits(g), v) for g, v in zip(got, want))
    torch.library.opcheck(torch.ops.fp8route.rms_norm_per_token_quant, (x0, w, 1e-6, r, "e4m3", "none", True))
