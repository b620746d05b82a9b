"""The torch integration on the GPU: torch.library.opcheck of every fp8route op (schema, fake against
the real outputs, AOT dispatch with dynamic shapes), torch.compile(fullgraph=True, dynamic=True) of
Fp8Linear and of the public functions over varying M against their eager results, and the life of
Fp8Linear's plan. Skipped (with the reason) without torch or a CUDA device."""
import gc

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the torch integration tests use it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fp8route  # noqa: E402

DEV = "cuda"
MS = (1, 7, 33, 300)


def randn(*shape, dtype=torch.bfloat16, scale=1.0, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(*shape, device=DEV, generator=g) * scale).to(dtype)


def e4m3_bits(*shape, seed=0):
    """E4M3 codes as uint8 bits (what the ops take besides float8_e4m3fn): opcheck's schema test
    compares tensors with arithmetic torch lacks for float8."""
    return randn(*shape, dtype=torch.float32, scale=4, seed=seed).to(torch.float8_e4m3fn).view(torch.uint8)


def opcheck_cases():
    """(name, op, args) for every op; T = 8 rows (col_major_tma pads T to a multiple of 4, and the
    masked form writes only rows below masked_m: all rows are written, so outputs compare)."""
    t, h = 8, 512
    x, x2 = randn(t, h, seed=1), randn(t, 2 * h, seed=2)
    w = randn(h, seed=3) + 1
    scale = torch.tensor([0.05], device=DEV)
    e = 3
    xe = randn(e, t, h, seed=4)
    full = torch.full((e,), t, dtype=torch.int32, device=DEV)
    src2dst = torch.tensor([[2 * i, 2 * i + 1] for i in range(t)], dtype=torch.int32, device=DEV)
    src2dst[1, 1] = -1  # a skipped destination: its row stays zero
    a, b = e4m3_bits(t, h, seed=5), e4m3_bits(64, h, seed=6)
    sa, sb = torch.rand(t, device=DEV) + 0.5, torch.rand(64, device=DEV) + 0.5
    hq, hk, d, s = 4, 2, 128, 64
    qkv = randn(t, (hq + 2 * hk) * d, seed=7)
    k_cache, v_cache = randn(t, hk, s, d, seed=8), randn(t, hk, s, d, seed=9)
    angle = torch.arange(s, device=DEV)[:, None] * torch.rand(d, device=DEV)
    cos, sin = angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)  # qkv's dtype
    pos = torch.randint(0, s, (t,), dtype=torch.int32, device=DEV)
    ops = torch.ops.fp8route
    return [
        ("per_token_group_quant", ops.per_token_group_quant, (x, 128, "e4m3", "none", "f32", "col_major_tma", False)),
        ("per_token_group_quant fused", ops.per_token_group_quant, (x2, 128, "e4m3", "pow2", "ue8m0_packed",
                                                                     "row_major", True)),
        ("masked_per_token_group_quant", ops.masked_per_token_group_quant,
         (xe, full, 128, "e4m3", "none", "f32", "col_major_tma", False)),
        ("scatter_per_token_group_quant", ops.scatter_per_token_group_quant,
         (x, src2dst, 2 * t, 128, "e4m3", "none", "f32", "row_major")),
        ("per_token_quant", ops.per_token_quant, (x, "e4m3", "none", False)),
        ("per_token_quant fused", ops.per_token_quant, (x2, "e4m3", "none", True)),
        ("per_tensor_quant", ops.per_tensor_quant, (x, "e4m3")),
        ("per_tensor_quant_static", ops.per_tensor_quant_static, (x, scale, "e4m3")),
        ("rms_norm", ops.rms_norm, (x, w, 1e-6, x2[:, :h].contiguous())),
        ("rms_norm_per_token_group_quant", ops.rms_norm_per_token_group_quant,
         (x, w, 1e-6, None, 128, "e4m3", "none", "f32", "col_major_tma")),
        ("rms_norm_per_token_quant", ops.rms_norm_per_token_quant, (x, w, 1e-6, None, "e4m3", "none")),
        ("rms_norm_per_tensor_quant", ops.rms_norm_per_tensor_quant, (x, w, scale, 1e-6, None, "e4m3")),
        ("decode_attention", ops.decode_attention, (qkv, k_cache, v_cache, cos, sin, pos, hq, hk,
                                                    0.0, 0, None, None, 1e-6)),
        ("scaled_mm", ops.scaled_mm, (a, b, sa, sb, None, torch.bfloat16, "row")),
    ]


@pytest.mark.parametrize("case", opcheck_cases(), ids=lambda c: c[0])
def test_opcheck(case):
    _, op, args = case
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("act", ["row", "tensor", "block"])
def test_opcheck_linear_ops(act):
    layer = fp8route.Fp8Linear.from_float(randn(256, 512, scale=1 / 32, seed=10), act=act)
    x = randn(8, 512, seed=11)
    w = layer.weight.view(torch.uint8)  # the ops read only its shape and device (the plan holds it)
    torch.library.opcheck(torch.ops.fp8route.linear, (x, w, layer.plan_key, act, torch.bfloat16))
    if act == "row":
        q, s = fp8route.per_token_quant(x)
    elif act == "block":
        q, s = fp8route.per_token_group_quant(x, group_size=128, layout="col_major_tma")
    else:
        q, s = fp8route.per_tensor_quant(x)
    torch.library.opcheck(torch.ops.fp8route.linear_quantized,
                          (q.view(torch.uint8), s, w, layer.plan_key, torch.bfloat16))


@pytest.mark.parametrize("act", ["row", "tensor", "block"])
def test_fp8linear_compiles_dynamic_fullgraph(act):
    # One traced graph over every M (fullgraph: no graph break; dynamo specializes M = 1 apart), each
    # call equal to the eager forward bit for bit: the same quantization and routed GEMM run.
    torch._dynamo.reset()
    layer = fp8route.Fp8Linear.from_float(randn(384, 1024, scale=1 / 32, seed=12), act=act)
    compiled = torch.compile(layer, dynamic=True, fullgraph=True)
    for m in MS:
        x = randn(m, 1024, seed=m)
        assert torch.equal(compiled(x), layer(x)), m
    x3 = randn(2, 5, 1024, seed=13)  # leading dims are flattened into M
    assert torch.equal(compiled(x3), layer(x3))


def test_public_functions_compile_dynamic_fullgraph():
    # fp8route.per_token_quant + fp8route.scaled_mm as a user writes them, compiled once for all M.
    torch._dynamo.reset()
    w = randn(256, 1024, dtype=torch.float32, scale=4, seed=14).to(torch.float8_e4m3fn)
    ws = torch.rand(256, device=DEV) + 0.5

    def fn(x):
        q, s = fp8route.per_token_quant(x)
        return fp8route.scaled_mm(q, w, s, ws, out_dtype=torch.bfloat16)

    compiled = torch.compile(fn, dynamic=True, fullgraph=True)
    for m in MS:
        x = randn(m, 1024, seed=100 + m)
        assert torch.equal(compiled(x), fn(x)), m


def test_plan_outlives_its_module_and_keys_never_dangle():
    layer = fp8route.Fp8Linear.from_float(randn(256, 512, scale=1 / 32, seed=15), act="row")
    x = randn(16, 512, seed=16)
    want, weight, key, plan = layer(x), layer.weight, layer.plan_key, layer.plan
    assert (plan.n, plan.k, plan.act) == (256, 512, "row")
    del layer
    gc.collect()
    # The plan holds the weight it reads: still valid after its module is gone.
    q, s = fp8route.per_token_quant(x)
    y = torch.empty(16, 256, dtype=torch.bfloat16, device=DEV)
    plan.run(q.view(torch.uint8), s, y)
    assert torch.equal(y, want)
    assert torch.equal(torch.ops.fp8route.linear(x, weight, key, "row", torch.bfloat16), want)
    del plan
    gc.collect()
    with pytest.raises(ValueError, match=f"no live LinearPlan has key {key}"):
        torch.ops.fp8route.linear(x, weight, key, "row", torch.bfloat16)


def test_plan_is_freed_with_its_last_holder():
    # Plans made and dropped in a loop do not accumulate device memory (the plan's scale copies,
    # the weights it holds).
    torch.cuda.synchronize()
    w = randn(512, 1024, scale=1 / 32, seed=17)
    for _ in range(3):  # warm the caching allocator
        fp8route.Fp8Linear.from_float(w, act="block")(randn(4, 1024))
    gc.collect()
    before = torch.cuda.memory_allocated()
    for _ in range(20):
        fp8route.Fp8Linear.from_float(w, act="block")(randn(4, 1024))
    gc.collect()
    assert torch.cuda.memory_allocated() == before
