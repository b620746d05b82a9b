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


# Each public tensor function of fp8route, with meta-tensor arguments for a given M, and the torch op
# that stands for it in a traced graph.
def _calls(m):
    meta = dict(device="meta")
    x = torch.empty(m, 256, dtype=torch.bfloat16, **meta)
    x2 = torch.empty(m, 512, dtype=torch.bfloat16, **meta)
    w = torch.empty(256, dtype=torch.bfloat16, **meta)
    scale = torch.empty(1, **meta)
    masked_m = torch.empty(2, dtype=torch.int32, **meta)
    a = torch.empty(m, 256, dtype=torch.float8_e4m3fn, **meta)
    b = torch.empty(64, 256, dtype=torch.float8_e4m3fn, **meta)
    hq, hk, d, s = 4, 2, 64, 32
    qkv = torch.empty(m, (hq + 2 * hk) * d, dtype=torch.bfloat16, **meta)
    cache = torch.empty(m, hk, s, d, dtype=torch.bfloat16, **meta)
    table = torch.empty(s, d, **meta)
    pos = torch.empty(m, dtype=torch.int32, **meta)
    return {
        "per_token_group_quant": ("per_token_group_quant",
                                  lambda: fp8route.per_token_group_quant(x, layout="col_major_tma")),
        "silu_and_mul_per_token_group_quant": ("per_token_group_quant",
                                               lambda: fp8route.silu_and_mul_per_token_group_quant(x2)),
        "silu_and_mul_per_token_quant": ("per_token_quant", lambda: fp8route.silu_and_mul_per_token_quant(x2)),
        "masked_per_token_group_quant": ("masked_per_token_group_quant", lambda: fp8route.masked_per_token_group_quant(
            torch.empty(2, m, 256, dtype=torch.bfloat16, **meta), masked_m)),
        "masked_silu_and_mul_per_token_group_quant": (
            "masked_per_token_group_quant",
            lambda: fp8route.masked_silu_and_mul_per_token_group_quant(torch.empty(2, m, 512, dtype=torch.bfloat16,
                                                                                   **meta), masked_m)),
        "masked_silu_and_mul_per_token_quant": (
            "masked_silu_and_mul_per_token_quant",
            lambda: fp8route.masked_silu_and_mul_per_token_quant(torch.empty(2, m, 512, dtype=torch.bfloat16, **meta),
                                                                 masked_m)),
        "scatter_per_token_group_quant": (
            "scatter_per_token_group_quant",
            lambda: fp8route.scatter_per_token_group_quant(x, torch.empty(m, 2, dtype=torch.int32, **meta), 2 * m)),
        "scatter_per_token_quant": (
            "scatter_per_token_quant",
            lambda: fp8route.scatter_per_token_quant(x, torch.empty(m, 2, dtype=torch.int32, **meta), 2 * m)),
        "moe_softmax_topk": ("moe_softmax_topk",
                             lambda: fp8route.moe_softmax_topk(torch.empty(m, 64, dtype=torch.bfloat16, **meta), 8)),
        "moe_grouped_topk": ("moe_grouped_topk", lambda: fp8route.moe_grouped_topk(
            torch.empty(m, 256, dtype=torch.bfloat16, **meta), 8, torch.empty(256, **meta), 8, 4)),
        "moe_masked_dispatch": ("moe_masked_dispatch", lambda: fp8route.moe_masked_dispatch(
            torch.empty(m, 8, dtype=torch.int32, **meta), 64, 4)),
        "moe_route_masked_dispatch": ("moe_route_masked_dispatch", lambda: fp8route.moe_route_masked_dispatch(
            torch.empty(m, 128, dtype=torch.bfloat16, **meta), 8, 128, 4)),
        "moe_contiguous_dispatch": ("moe_contiguous_dispatch", lambda: fp8route.moe_contiguous_dispatch(
            torch.empty(m, 8, dtype=torch.int32, **meta), 64)),
        "moe_combine": ("moe_combine", lambda: fp8route.moe_combine(
            torch.empty(4 * m, 256, dtype=torch.bfloat16, **meta), torch.empty(m, 8, dtype=torch.int32, **meta),
            torch.empty(m, 8, **meta))),
        "per_token_quant": ("per_token_quant", lambda: fp8route.per_token_quant(x)),
        "per_tensor_quant": ("per_tensor_quant", lambda: fp8route.per_tensor_quant(x)),
        "per_tensor_quant(scale)": ("per_tensor_quant_static", lambda: fp8route.per_tensor_quant(x, scale)[0]),
        "rms_norm": ("rms_norm", lambda: fp8route.rms_norm(x, w, residual=x)),
        "rms_norm_per_token_group_quant": ("rms_norm_per_token_group_quant",
                                           lambda: fp8route.rms_norm_per_token_group_quant(x, w)),
        "rms_norm_per_token_quant": ("rms_norm_per_token_quant",
                                     lambda: fp8route.rms_norm_per_token_quant(x, w, residual=x)),
        "rms_norm_per_tensor_quant": ("rms_norm_per_tensor_quant", lambda: fp8route.rms_norm_per_tensor_quant(x, w,
                                                                                                              scale)),
        "decode_attention": ("decode_attention", lambda: fp8route.decode_attention(qkv, cache, cache.clone(), table,
                                                                                   table, pos, hq, hk)),
        "scaled_mm": ("scaled_mm", lambda: fp8route.scaled_mm(a, b, torch.empty(m, **meta),
                                                              torch.empty(64, **meta))),
        "grouped_scaled_mm": ("grouped_scaled_mm", lambda: fp8route.grouped_scaled_mm(
            torch.empty(2, m, 256, dtype=torch.float8_e4m3fn, **meta),
            torch.empty(2, 64, 256, dtype=torch.float8_e4m3fn, **meta), torch.empty(2, m, **meta),
            torch.empty(2, 64, **meta), masked_m=masked_m, out_dtype=torch.bfloat16, scale="row")),
    }


def test_every_tensor_function_is_an_op():
    names = set(_calls(1))
    public = {n for n in fp8route.__all__ if n not in ("explain", "load_table", "save_table", "probe", "table_info",
                                                       "set_autoprobe", "autoprobe_info", "warmup", "quant_layout",
                                                       "__version__", "Fp8Linear", "LinearPlan", "Fp8MoE",
                                                       "explain_grouped", "load_grouped_table", "grouped_table_info")}
    assert public <= {n.split("(")[0] for n in names}, public - names
    ops = {op for op, _ in _calls(1).values()} | {"linear", "linear_quantized"}  # + Fp8Linear's two
    missing = [op for op in sorted(ops) if not hasattr(torch.ops.fp8route, op)]
    assert not missing, missing


def _shapes(result):
    result = result if isinstance(result, tuple) else (result,)
    return [(tuple(t.shape), t.dtype) for t in result]


@pytest.mark.parametrize("name", sorted(_calls(1)))
def test_public_function_traces_to_its_op(name):
    # torch.compile(fullgraph=True, dynamic=True) of each public function: one graph holding its op
    # (no graph break), whose fake outputs at each M are what the function returns for that M.
    op, _ = _calls(1)[name]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda m: _calls(m)[name][1](), backend=backend, fullgraph=True, dynamic=True)
    for m in (1, 7, 33, 300):
        want = _calls(m)[name][1]
        # At static shapes, what the same call gives (the symbolic shapes of the dynamic graph must agree).
        expected = _shapes(torch.compile(want, backend="eager", fullgraph=True, dynamic=False)())
        assert _shapes(compiled(m)) == expected, (name, m)
    assert graphs and all(f"torch.ops.fp8route.{op}" in g.code for g in graphs), graphs[0].code


@pytest.mark.parametrize("layout", ["row_major", "col_major_tma"])
@pytest.mark.parametrize("t", [1, 6])
def test_masked_and_scatter_fakes_match_layout(layout, t):
    with FakeTensorMode():
        x = torch.empty(3, t, 512, dtype=torch.bfloat16, device="cuda")
        masked_m = torch.empty(3, dtype=torch.int32, device="cuda")
        q, s = torch.ops.fp8route.masked_per_token_group_quant(x, masked_m, 128, "e4m3", "none", "f32", layout, False)
        q2, s2 = torch.ops.fp8route.scatter_per_token_group_quant(x[0], torch.empty(t, 2, dtype=torch.int32,
                                                                                    device="cuda"),
                                                                  2 * t, 128, "e4m3", "none", "f32", layout)
    lay = fp8route.quant_layout(t, 512, 128, layout=layout, experts=3)
    assert list(q.shape) == lay["q"] and list(s.shape) == lay["s"]
    lay = fp8route.quant_layout(2 * t, 512, 128, layout=layout)
    assert list(q2.shape) == lay["q"] and list(s2.shape) == lay["s"]


def test_plan_keys_name_live_plans_only():
    # The linear ops find the plan by its key through a weak table: a key names its plan while
    # something holds it, a dropped plan's key is an error (never another plan), keys are not reused.
    import gc

    from fp8route import torch_ops
    from fp8route._native import LinearPlan
    plan = LinearPlan.__new__(LinearPlan)  # a handle without a C++ plan: lookups only
    key = torch_ops.plan_key(plan)
    assert torch_ops._plan(key) is plan
    del plan
    gc.collect()
    with pytest.raises(ValueError, match=f"no live LinearPlan has key {key}"):
        torch_ops._plan(key)
    other = LinearPlan.__new__(LinearPlan)
    assert torch_ops.plan_key(other) > key
