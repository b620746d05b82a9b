"""Fp8Linear.forward_quantized (LinearPlan::run through the native module) with block activation
scales in every form scaled_mm takes: the col_major_tma buffer, its transpose view, and the
row_major [M, K/128] tensor (gathered), each giving the col_major_tma output bit for bit, eagerly and
replayed from a CUDA graph. Skipped (with the reason) without torch or a CUDA device."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Fp8Linear needs it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fp8route  # noqa: E402

DEV = "cuda"


def randn(*shape, seed=0, scale=1.0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(*shape, device=DEV, generator=g) * scale).to(torch.bfloat16)


@pytest.mark.parametrize("m", [1, 7, 33, 300])
def test_forward_quantized_takes_every_block_scale_form(m):
    layer = fp8route.Fp8Linear.from_float(randn(384, 640, seed=1, scale=1 / 32), act="block")
    x = randn(m, 640, seed=2 + m)
    q, s = fp8route.per_token_group_quant(x, group_size=128, layout="col_major_tma")  # [5, align(m, 4)]
    q2, s_rows = fp8route.per_token_group_quant(x, group_size=128, layout="row_major")  # [m, 5]
    assert torch.equal(q.view(torch.uint8), q2.view(torch.uint8))
    want = layer.forward_quantized(q, s)
    assert torch.isfinite(want.float()).all()
    forms = {"transpose view": s.t()[:m], "row_major": s_rows,
             "M-major, row stride m": s.t()[:m].contiguous().t().contiguous().t()}
    for name, view in forms.items():
        assert torch.equal(layer.forward_quantized(q, view), want), name
        assert torch.equal(torch.ops.fp8route.linear_quantized(q.view(torch.uint8), view, layer.weight.view(torch.uint8),
                                                                layer.plan_key, torch.bfloat16), want), name


def test_gathered_scales_replay_from_a_cuda_graph():
    layer = fp8route.Fp8Linear.from_float(randn(512, 1024, seed=3, scale=1 / 32), act="block")
    m = 37
    q, s = fp8route.per_token_group_quant(randn(m, 1024, seed=4), group_size=128, layout="col_major_tma")
    rows = s.t()[:m].contiguous()  # K-major [m, 8]: gathered on every call
    layer.forward_quantized(q, rows)  # the route of this M is decided outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = layer.forward_quantized(q, rows)
    for seed in (5, 6):
        q_new, s_new = fp8route.per_token_group_quant(randn(m, 1024, seed=seed), group_size=128,
                                                      layout="col_major_tma")
        q.copy_(q_new)
        rows.copy_(s_new.t()[:m])
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, layer.forward_quantized(q_new, s_new)), seed
