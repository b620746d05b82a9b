"""The Python package on the GPU: every op against a torch reference (docs/numerics.md in torch fp32:
amax floor 1e-10, s = amax / 448, codes = (x * (448 / amax)) clamped to +-448 then float8_e4m3fn;
both divisions tensor by tensor, because torch computes tensor / scalar and scalar / tensor as a
multiplication by a reciprocal, which is not the correctly rounded quotient docs/numerics.md asks for),
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
    with pytest.raises(ValueError, match="x: hidden = 100 must be a multiple of group_size 128"):
        fp8route.per_token_group_quant(torch.zeros(4, 100, device=DEV, dtype=torch.bfloat16), group_size=128)
    with pytest.raises(ValueError, match=r"x: hidden = 132 \(half the last dim 264: \[gate \| up\]\) must be a "
                                         r"multiple of group_size 128"):
        fp8route.silu_and_mul_per_token_group_quant(torch.zeros(4, 264, device=DEV, dtype=torch.bfloat16), 128)
    with pytest.raises(ValueError, match="x: the fused silu_and_mul form takes .* must be even, got 263"):
        fp8route.silu_and_mul_per_token_group_quant(torch.zeros(4, 263, device=DEV, dtype=torch.bfloat16), 128)


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


def test_empty_inputs_give_empty_outputs():
    # torch gives empty tensors a null data pointer; every op takes them and returns empty outputs
    # of the right shapes (the dynamic per-tensor scale is still written: amax floor / 448).
    bf16, i32 = torch.bfloat16, torch.int32
    x = torch.empty(0, 512, device=DEV, dtype=bf16)
    q, s = fp8route.per_token_group_quant(x)
    assert q.shape == (0, 512) and q.dtype == torch.float8_e4m3fn and s.shape == (0, 4)
    _, s = fp8route.per_token_group_quant(x, layout="col_major_tma")
    assert s.shape == (4, 0)
    q, s = fp8route.silu_and_mul_per_token_group_quant(torch.empty(0, 1024, device=DEV, dtype=bf16))
    assert q.shape == (0, 512) and s.shape == (0, 4)
    q, s = fp8route.masked_per_token_group_quant(torch.empty(3, 0, 512, device=DEV, dtype=bf16),
                                                 torch.zeros(3, device=DEV, dtype=i32))
    assert q.shape == (3, 0, 512) and s.shape == (3, 0, 4)
    q, s = fp8route.masked_per_token_group_quant(torch.empty(0, 4, 512, device=DEV, dtype=bf16),
                                                 torch.empty(0, device=DEV, dtype=i32))
    assert q.shape == (0, 4, 512) and s.shape == (0, 4, 4)
    q, s = fp8route.scatter_per_token_group_quant(x, torch.empty(0, 8, device=DEV, dtype=i32), rows=6,
                                                  layout="col_major_tma")
    assert q.shape == (6, 512) and s.shape == (4, 8)
    assert torch.all(q.view(torch.uint8) == 0) and torch.all(s == 0)
    q, s = fp8route.per_token_quant(x)
    assert q.shape == (0, 512) and s.shape == (0,)
    q, scale = fp8route.per_tensor_quant(x)
    floor = torch.tensor([1e-10], device=DEV)
    assert q.shape == (0, 512) and torch.equal(scale, floor / torch.full_like(floor, QMAX))
    q, _ = fp8route.per_tensor_quant(x, scale=scale)
    assert q.shape == (0, 512)
    b = torch.randn(256, 512, device=DEV).to(torch.float8_e4m3fn)
    a = torch.empty(0, 512, device=DEV, dtype=torch.float8_e4m3fn)
    one = torch.ones(1, device=DEV)
    assert fp8route.scaled_mm(a, b, one, one, scale="tensor").shape == (0, 256)
    assert fp8route.scaled_mm(a, b, torch.empty(0, device=DEV), torch.ones(256, device=DEV), scale="row").shape == (0, 256)
    a4 = torch.randn(4, 512, device=DEV).to(torch.float8_e4m3fn)
    assert fp8route.scaled_mm(a4, b[:0], one, one, scale="tensor").shape == (4, 0)
    w = torch.randn(256, 512, device=DEV, dtype=bf16) / 16
    for act in ("row", "tensor", "block"):
        layer = fp8route.Fp8Linear.from_float(w, act=act)
        assert layer(torch.empty(0, 512, device=DEV, dtype=bf16)).shape == (0, 256)
        assert layer(torch.empty(2, 0, 512, device=DEV, dtype=bf16)).shape == (2, 0, 256)


def test_overlapping_outputs_are_refused():
    x = torch.randn(4, 512, device=DEV, dtype=torch.bfloat16)
    buf = torch.zeros(4 * 512 + 64, device=DEV, dtype=torch.uint8)
    q = buf[:4 * 512].view(4, 512)
    s = buf[4 * 512 - 32:4 * 512 + 32].view(torch.float32).view(4, 4)  # its first 32 bytes are q's last
    with pytest.raises(ValueError, match="q and s overlap"):
        fp8route.per_token_group_quant(x, out=(q, s))
    assert torch.all(buf == 0)
    a = torch.randn(16, 256, device=DEV).to(torch.float8_e4m3fn)
    b = torch.randn(128, 256, device=DEV).to(torch.float8_e4m3fn)
    one = torch.ones(1, device=DEV)
    with pytest.raises(ValueError, match="out and a overlap"):
        fp8route.scaled_mm(a, b, one, one, scale="tensor", out=a.view(torch.bfloat16)[:, :128])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_ops_run_on_their_tensors_device():
    # The current device stays cuda:0; the calls run on cuda:1, where their tensors are, and tensors
    # of one call on two GPUs are a ValueError naming them.
    torch.cuda.set_device(0)
    dev = torch.device("cuda:1")
    x = torch.randn(8, 1024, device=dev, dtype=torch.bfloat16)
    q, s = fp8route.per_token_group_quant(x)
    rq, rs = ref_group_quant(x, 128)
    assert q.device == dev and torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)
    a = (torch.randn(16, 1024, device=dev) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(256, 1024, device=dev) * 4).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(16, device=dev) + 0.5, torch.rand(256, device=dev) + 0.5
    y = fp8route.scaled_mm(a, b, sa, sb, scale="row")
    want = dequant_mm(a, b, sa, sb, "row")
    assert y.device == dev and ((y.double() - want).norm() / want.norm()).item() < 1e-2
    w = torch.randn(256, 1024, device=dev, dtype=torch.bfloat16) / 32
    layer = fp8route.Fp8Linear.from_float(w, act="row")
    assert ((layer(x).double() - x.double() @ w.double().t()).norm() / (x.double() @ w.double().t()).norm()).item() < 5e-2
    assert torch.cuda.current_device() == 0
    with pytest.raises(ValueError, match="scale_a and a: must be on one device"):
        fp8route.scaled_mm(a, b, sa.to("cuda:0"), sb, scale="row")
    with pytest.raises(ValueError, match="and x: must be on one device"):
        fp8route.per_token_group_quant(x, out=(torch.empty(8, 1024, device="cuda:0", dtype=torch.uint8),
                                               torch.empty(8, 8, device="cuda:0")))
    with pytest.raises(ValueError, match="a and weight: must be on one device"):
        layer(x.to("cuda:0"))


def test_bad_inputs_raise_value_errors_naming_the_argument():
    # One rule broken per case; each is a ValueError naming the argument, and the given outputs keep
    # their poison: nothing was written.
    bf16 = torch.bfloat16
    x = torch.randn(4, 512, device=DEV, dtype=bf16)
    q = torch.full((4, 512), 0x55, device=DEV, dtype=torch.uint8)
    s = torch.full((4, 4), 7.0, device=DEV)
    unaligned = torch.empty(4 * 512 + 1, device=DEV, dtype=bf16)[1:].view(4, 512)
    a = torch.randn(16, 256, device=DEV).to(torch.float8_e4m3fn)
    b = torch.randn(128, 256, device=DEV).to(torch.float8_e4m3fn)
    one = torch.ones(1, device=DEV)
    y = torch.full((16, 128), 3.0, device=DEV, dtype=bf16)
    group = fp8route.per_token_group_quant
    cases = [
        (lambda: group(x.int(), out=(q, s)), "x: dtype"),
        (lambda: group(x[None], out=(q, s)), r"x: expected \[T, H\]"),
        (lambda: group(x[:, ::2], out=(q[:, :256], s[:, :2].contiguous())), "x: last dim must be contiguous"),
        (lambda: group(unaligned, out=(q, s)), "x: pointer"),
        (lambda: group(x, out=(q[:, :256], s)), "q: expected shape"),
        (lambda: group(x, out=(q, s.t())), "s: must be contiguous"),
        (lambda: group(x, out=(q, s.cpu())), "s: must be CUDA"),
        (lambda: group(x, out=(q, x.view(torch.float32).reshape(-1)[:16].view(4, 4))), "s and x overlap"),
        (lambda: group(x, group_size=2**32 + 128, out=(q, s)), "group_size"),
        (lambda: fp8route.masked_per_token_group_quant(x[None], torch.ones(1, device=DEV), out=(q[None], s[None])),
         "masked_m: dtype"),
        (lambda: fp8route.scatter_per_token_group_quant(x, torch.zeros(4, 2, device=DEV, dtype=torch.int64), rows=4,
                                                        out=(q, s)), "src2dst"),
        (lambda: fp8route.per_token_quant(x, out=(q, s[:, 0].contiguous()[:3])), "s: expected shape"),
        (lambda: fp8route.per_tensor_quant(x, scale=torch.ones(2, device=DEV), out=q), "scale: expected one f32 element"),
        (lambda: fp8route.scaled_mm(a.to(bf16), b, one, one, scale="tensor", out=y), "a: dtype"),
        (lambda: fp8route.scaled_mm(a, b[:, :128], one, one, scale="tensor", out=y), r"b: expected \[N, K\]"),
        (lambda: fp8route.scaled_mm(a, b, one.cpu(), one, scale="tensor", out=y), "scale_a: must be CUDA"),
        (lambda: fp8route.scaled_mm(a, b, one, one, scale="tensor", bias=torch.zeros(128, device=DEV), out=y),
         "bias: dtype"),
        (lambda: fp8route.scaled_mm(a, b, one, one, scale="tensor", out=y[:, :64]), "out: expected shape"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    torch.cuda.synchronize()
    assert torch.all(q == 0x55) and torch.all(s == 7.0) and torch.all(y == 3.0)
