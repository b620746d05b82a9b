"""The Python package on the GPU: every op against a torch reference (NUMERICS.md in torch fp32:
amax floor 1e-10, s = amax / 448, codes = (x * (448 / amax)) clamped to +-448 then float8_e4m3fn;
both divisions tensor by tensor, because torch computes tensor / scalar and scalar / tensor as a
multiplication by a reciprocal, which is not the correctly rounded quotient NUMERICS.md asks for),
scaled_mm against an fp64 matmul of the dequantized operands, Fp8Linear eager, under torch.compile
and under CUDA-graph capture. Skipped (with the reason) without torch or a CUDA device."""
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tests use it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fp8route  # noqa: E402

DEV = "cuda"
ROOT = os.environ.get("FP8ROUTE_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
QMAX = 448.0


def ref_group_quant(x, group):
    t, h = x.shape
    g = x.float().view(t, h // group, group)
    finite = torch.where(torch.isfinite(g), g.abs(), torch.zeros_like(g))
    amax = finite.amax(-1).clamp(min=1e-10)
    qmax = torch.full_like(amax, QMAX)
    s = amax / qmax
    m = qmax / amax
    v = (g * m[..., None]).nan_to_num(nan=0.0).clamp(-QMAX, QMAX)
    return v.view(t, h).to(torch.float8_e4m3fn), s


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("t,h", [(1, 7168), (3, 4096), (127, 2048), (4097, 512)])
def test_per_token_group_quant_bit_exact(dtype, t, h):
    x = (torch.randn(t, h, device=DEV) * torch.rand(t, 1, device=DEV) * 10).to(dtype)
    q, s = fp8route.per_token_group_quant(x, group_size=128)
    rq, rs = ref_group_quant(x, 128)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (t, h // 128)
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))
    assert torch.equal(s, rs)


@pytest.mark.parametrize("layout", ["row_major", "col_major", "col_major_tma"])
def test_group_quant_layouts(layout):
    x = torch.randn(5, 1024, device=DEV, dtype=torch.bfloat16)
    q, s = fp8route.per_token_group_quant(x, layout=layout)
    _, rs = ref_group_quant(x, 128)
    if layout == "row_major":
        assert torch.equal(s, rs)
    else:
        assert torch.equal(s[:, :5], rs.t())
        if layout == "col_major_tma":
            assert s.shape == (8, 8) and torch.all(s[:, 5:] == 0)


def test_silu_and_mul_quant_close():
    x = torch.randn(64, 2 * 4096, device=DEV, dtype=torch.bfloat16)
    q, s = fp8route.silu_and_mul_per_token_group_quant(x)
    act = torch.nn.functional.silu(x[:, :4096].float()) * x[:, 4096:].float()
    rq, rs = ref_group_quant(act, 128)
    assert torch.allclose(s, rs, rtol=1e-6)
    off = (q.view(torch.uint8) != rq.view(torch.uint8)).float().mean().item()
    assert off < 1e-3


def test_masked_rows_untouched():
    e, t_pad, h = 3, 16, 512
    x = torch.randn(e, t_pad, h, device=DEV, dtype=torch.bfloat16)
    masked_m = torch.tensor([0, 5, 16], dtype=torch.int32, device=DEV)
    q = torch.full((e, t_pad, h), 0x55, dtype=torch.uint8, device=DEV).view(torch.float8_e4m3fn)
    lay = fp8route.quant_layout(t_pad, h, experts=e)
    s = torch.full(lay["s"], 7.0, device=DEV)
    fp8route.masked_per_token_group_quant(x, masked_m, out=(q, s))
    assert torch.all(q[0].view(torch.uint8) == 0x55) and torch.all(q[1, 5:].view(torch.uint8) == 0x55)
    rq, _ = ref_group_quant(x[1, :5], 128)
    assert torch.equal(q[1, :5].view(torch.uint8), rq.view(torch.uint8))


def test_scatter():
    x = torch.randn(4, 256, device=DEV, dtype=torch.bfloat16)
    src2dst = torch.tensor([[0, 5], [-1, 2], [7, -1], [1, 3]], dtype=torch.int32, device=DEV)
    q, s = fp8route.scatter_per_token_group_quant(x, src2dst, rows=8)
    rq, rs = ref_group_quant(x, 128)
    for tok, rows in enumerate(src2dst.tolist()):
        for r in rows:
            if r >= 0:
                assert torch.equal(q[r].view(torch.uint8), rq[tok].view(torch.uint8))
    assert torch.all(q[4].view(torch.uint8) == 0) and torch.all(q[6].view(torch.uint8) == 0)


def test_per_token_and_per_tensor():
    x = torch.randn(33, 4096, device=DEV, dtype=torch.bfloat16)
    q, s = fp8route.per_token_quant(x)
    rq, rs = ref_group_quant(x, 4096)
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs[:, 0])
    q, scale = fp8route.per_tensor_quant(x)
    amax = x.float().abs().max().clamp(min=1e-10)
    assert torch.equal(scale, (amax / torch.full_like(amax, QMAX)).view(1))
    q2, _ = fp8route.per_tensor_quant(x, scale=scale)
    assert (q2.view(torch.uint8) != q.view(torch.uint8)).float().mean().item() < 1e-3


def dequant_mm(a, b, sa, sb, kind, bias=None):
    af, bf = a.float().double(), b.float().double()
    if kind == "block":
        m, k = a.shape
        n = b.shape[0]
        sa_full = sa[:, :m].t().repeat_interleave(128, dim=1)[:, :k].double()
        sb_full = sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k].double()
        y = (af * sa_full) @ (bf * sb_full).t()
    else:
        y = (af @ bf.t()) * sa.double().view(-1, 1) * sb.double().view(1, -1)
    if bias is not None:
        y = y + bias.double()
    return y


@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (64, 2112, 7168), (1000, 1000, 1024), (4096, 6144, 4096)])
def test_scaled_mm_against_fp64(kind, m, n, k):
    a = (torch.randn(m, k, device=DEV) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device=DEV) * 4).to(torch.float8_e4m3fn)
    if kind == "tensor":
        sa, sb = torch.rand(1, device=DEV) + 0.5, torch.rand(1, device=DEV) + 0.5
    elif kind == "row":
        sa, sb = torch.rand(m, device=DEV) + 0.5, torch.rand(n, device=DEV) + 0.5
    else:
        sa = torch.rand((k + 127) // 128, (m + 3) // 4 * 4, device=DEV) + 0.5
        sb = torch.rand((n + 127) // 128, (k + 127) // 128, device=DEV) + 0.5
    bias = torch.randn(n, device=DEV, dtype=torch.bfloat16) if m == 64 else None
    y = fp8route.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, bias=bias, scale=kind)
    want = dequant_mm(a, b, sa, sb, kind, bias)
    err = ((y.double() - want).norm() / want.norm()).item()
    assert err < 1e-2, (kind, m, n, k, err, fp8route.explain(m, n, k, scale=kind))


def test_errors_are_value_errors_naming_the_argument():
    a = torch.zeros(4, 64, device=DEV, dtype=torch.float8_e4m3fn)
    b = torch.zeros(8, 32, device=DEV, dtype=torch.float8_e4m3fn)
    one = torch.ones(1, device=DEV)
    with pytest.raises(ValueError, match="b: expected"):
        fp8route.scaled_mm(a, b, one, one)
    with pytest.raises(ValueError, match="hidden: 100 is not divisible by group_size 128"):
        fp8route.per_token_group_quant(torch.zeros(4, 100, device=DEV, dtype=torch.bfloat16), group_size=128)


@pytest.mark.parametrize("act", ["row", "tensor", "block"])
def test_fp8linear_eager_compile_graph(act):
    torch.manual_seed(0)
    w = torch.randn(2048, 4096, device=DEV, dtype=torch.bfloat16) / 64
    layer = fp8route.Fp8Linear.from_float(w, act=act)
    x = torch.randn(16, 4096, device=DEV, dtype=torch.bfloat16)
    y = layer(x)
    want = x.double() @ w.double().t()
    assert ((y.double() - want).norm() / want.norm()).item() < 5e-2  # quantization of x and w
    compiled = torch.compile(layer, fullgraph=True)
    assert torch.equal(compiled(x), y)
    # Capture on torch.cuda.graph's own stream with an M this layer has not run yet: the first call
    # of that M (route lookup, workspaces) happens under capture.
    g = torch.cuda.CUDAGraph()
    static_x = torch.randn(8, 4096, device=DEV, dtype=torch.bfloat16)
    with torch.cuda.graph(g):
        static_y = layer(static_x)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, layer(static_x))
    static_x.copy_(static_x * 2)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, layer(static_x))
    assert "/" in layer.route(16)


def test_fp8linear_probe_unseen_shape():
    # N x K = 3328 x 2560 is in no table: probe times the table's best guesses here, then routes by them.
    torch.manual_seed(1)
    w = torch.randn(3328, 2560, device=DEV, dtype=torch.bfloat16) / 64
    layer = fp8route.Fp8Linear.from_float(w, act="row")
    timings = layer.probe(m_grid=[1, 24, 200])
    assert {t["m"] for t in timings} == {1, 24, 200}
    assert all(t["us"] > 0 and t["n"] == 3328 and t["k"] == 2560 for t in timings)
    for m in (1, 24, 200):
        fastest = min((t for t in timings if t["m"] == m), key=lambda t: t["us"])
        assert layer.route(m) == fastest["backend"] + "/" + fastest["config"]
    assert "probed on this GPU" in layer.explain(24)
    assert layer.probe(m_grid=[1, 24, 200]) == []  # nothing left to time
    x = torch.randn(24, 2560, device=DEV, dtype=torch.bfloat16)
    want = x.double() @ w.double().t()
    assert ((layer(x).double() - want).norm() / want.norm()).item() < 5e-2
    with pytest.raises(ValueError, match="m_grid"):
        layer.probe(m_grid=[0])


def test_torch_library_ops_registered():
    assert hasattr(torch.ops.fp8route, "scaled_mm") and hasattr(torch.ops.fp8route, "linear")
    a = torch.randn(8, 256, device=DEV).to(torch.float8_e4m3fn)
    b = torch.randn(16, 256, device=DEV).to(torch.float8_e4m3fn)
    one = torch.ones(1, device=DEV)
    y = torch.ops.fp8route.scaled_mm(a, b, one, one, None, torch.bfloat16, "tensor")
    assert y.shape == (8, 16) and y.dtype == torch.bfloat16


def test_probe_routes_scaled_mm_by_its_timings():
    # 1536 x 5120 has no tensor entry: fp8route.probe times it here and scaled_mm routes by the times.
    shipped = os.path.join(ROOT, "routes", "h200.json")
    fp8route.load_table(shipped)
    try:
        assert "source: nearest" in fp8route.explain(64, 1536, 5120, scale="tensor")
        timings = fp8route.probe([(1536, 5120)], scales="tensor", m_grid=[1, 64])
        assert {t["m"] for t in timings} == {1, 64}
        assert all((t["n"], t["k"], t["scale"]) == (1536, 5120, "tensor") and t["us"] > 0 for t in timings)
        for m in (1, 64):
            fastest = min((t for t in timings if t["m"] == m), key=lambda t: t["us"])
            text = fp8route.explain(m, 1536, 5120, scale="tensor")
            assert "source: exact" in text and f"choice: {fastest['backend']}/{fastest['config']}\n" in text, text
        assert fp8route.probe([(1536, 5120)], scales="tensor", m_grid=[1, 64]) == []  # nothing left to time
        a = (torch.randn(64, 5120, device=DEV) * 4).to(torch.float8_e4m3fn)
        b = (torch.randn(1536, 5120, device=DEV) * 4).to(torch.float8_e4m3fn)
        sa, sb = torch.rand(1, device=DEV) + 0.5, torch.rand(1, device=DEV) + 0.5
        y = fp8route.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, scale="tensor")
        want = dequant_mm(a, b, sa, sb, "tensor")
        assert ((y.double() - want).norm() / want.norm()).item() < 1e-2
    finally:
        fp8route.load_table(shipped)
