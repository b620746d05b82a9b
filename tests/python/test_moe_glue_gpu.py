"""The MoE decode glue kernels (docs/moe.md, "The glue kernels") against their torch references
in fp8route.moe_routing and fp8route.ops, on fresh random inputs (FP8ROUTE_TEST_SEED=N repeats a
run): moe_softmax_topk, moe_masked_dispatch, moe_route_masked_dispatch, moe_contiguous_dispatch, moe_combine,
scatter_per_token_quant, masked_silu_and_mul_per_token_quant, and Fp8MoE (masked and contiguous) with the fused glue against the same
layer on the torch glue. Exact where the numerics
say so (dispatch, combine in the same order, quant codes and scales). The argument errors that need
no GPU are at the end (host tensors refused, Python-side checks)."""
import os
import random

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the MoE glue functions use it)")

import fp8route  # noqa: E402  (after the skip: importing needs the native module too)
from fp8route import ops  # noqa: E402
from fp8route.moe_routing import _combine, contiguous_dispatch, grouped_topk, masked_dispatch, softmax_topk  # noqa: E402
from test_moe import _layer  # noqa: E402  (the Fp8MoE of test_moe's layer tests, random FP8 experts)

_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
gpu = pytest.mark.skipif(not _GPU, reason="needs an SM90 GPU (the MoE glue kernels are built for sm_90a)")

_SEED = int(os.environ.get("FP8ROUTE_TEST_SEED", random.randrange(2**31)))


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(_SEED)
    yield


def _msg(what):
    return f"{what} (FP8ROUTE_TEST_SEED={_SEED})"


# ---- moe_softmax_topk ----------------------------------------------------------------------------

def _topk_by_rule(p, k):
    """The documented order: decreasing p, equal p by the lower expert index (a stable sort)."""
    order = torch.sort(p, dim=-1, descending=True, stable=True).indices[:, :k]
    return order.to(torch.int32)


@gpu
@pytest.mark.parametrize("t,e,k", [(1, 128, 8), (5, 8, 2), (33, 256, 8), (1, 1024, 16), (70, 60, 4), (3, 16, 16)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_topk_matches_the_reference(t, e, k, dtype, renormalize):
    logits = (torch.randn(t, e, device="cuda") * 3).to(dtype)
    w, ids = fp8route.moe_softmax_topk(logits, k, renormalize)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32 and w.shape == ids.shape == (t, k)
    p = torch.softmax(logits.float(), dim=-1)
    want_ids = _topk_by_rule(p, k)
    assert torch.equal(ids, want_ids), _msg(f"ids differ at {(ids != want_ids).nonzero()[:4].tolist()}")
    ref_w, ref_ids = softmax_topk(logits, k, renormalize)
    if dtype == torch.float32:  # random fp32 logits have no ties: torch.topk's ids are the same
        assert torch.equal(ids, ref_ids), _msg("ids differ from softmax_topk")
    want_w = p.gather(1, ids.long())
    if renormalize:
        want_w = want_w / want_w.sum(-1, keepdim=True)
    torch.testing.assert_close(w, want_w, rtol=1e-6, atol=1e-9, msg=lambda m: _msg(m))
    assert (w > 0).all() and (w[:, :-1] >= w[:, 1:]).all(), _msg("weights not positive and decreasing")


@gpu
def test_softmax_topk_ties_take_the_lower_index():
    # Equal logits give bit-equal probabilities: the lower expert index comes first.
    t, e, k = 4, 128, 8
    logits = torch.zeros(t, e, device="cuda", dtype=torch.bfloat16)
    w, ids = fp8route.moe_softmax_topk(logits, k)
    assert ids.tolist() == [list(range(k))] * t
    torch.testing.assert_close(w, torch.full((t, k), 1.0 / k, device="cuda"), rtol=1e-6, atol=0)
    # Ties among the chosen, and at the cut: experts 100, 7, 50 share the largest logit, 3 and 90 the next.
    logits = torch.randn(t, e, device="cuda").clamp(-1, 1)
    for ex in (100, 7, 50):
        logits[:, ex] = 5.0
    for ex in (90, 3):
        logits[:, ex] = 4.0
    _, ids = fp8route.moe_softmax_topk(logits, 4)
    assert ids.tolist() == [[7, 50, 100, 3]] * t
    # Random bf16 logits from few values: many ties, ordered by the rule.
    logits = torch.randint(-3, 3, (64, 256), device="cuda").to(torch.bfloat16)
    _, ids = fp8route.moe_softmax_topk(logits, 8)
    assert torch.equal(ids, _topk_by_rule(torch.softmax(logits.float(), -1), 8)), _msg("tie order")


@gpu
def test_softmax_topk_empty():
    w, ids = fp8route.moe_softmax_topk(torch.empty(0, 128, device="cuda", dtype=torch.bfloat16), 8)
    assert w.shape == ids.shape == (0, 8)


@gpu
def test_softmax_topk_errors_name_the_argument():
    logits = torch.randn(2, 8, device="cuda")
    with pytest.raises(ValueError, match="top_k: 9"):
        fp8route.moe_softmax_topk(logits, 9)
    with pytest.raises(ValueError, match="top_k"):
        fp8route.moe_softmax_topk(torch.randn(2, 64, device="cuda"), 17)
    with pytest.raises(ValueError, match="logits: E = 1025"):
        fp8route.moe_softmax_topk(torch.randn(2, 1025, device="cuda"), 8)
    with pytest.raises(ValueError, match="logits: dtype"):
        fp8route.moe_softmax_topk(torch.zeros(2, 64, device="cuda", dtype=torch.int32), 8)


# ---- moe_grouped_topk ----------------------------------------------------------------------------

def _grouped_by_rule(logits, bias, k, n_group, topk_group):
    """The documented order, by stable sorts: groups by the sum of their two best choice scores (equal:
    the lower group), then experts of the kept groups by choice score (equal: the lower index)."""
    s = torch.sigmoid(logits.float())
    c = s + bias.float()
    t, e = c.shape
    g = e // n_group
    top2 = torch.sort(c.view(t, n_group, g), dim=-1, descending=True, stable=True).values[..., :2].sum(-1)
    keep = torch.sort(top2, dim=-1, descending=True, stable=True).indices[:, :topk_group]
    kept = torch.zeros(t, n_group, dtype=torch.bool, device=c.device).scatter_(1, keep, True)
    c = c.masked_fill(~kept.repeat_interleave(g, dim=1), float("-inf"))
    return torch.sort(c, dim=-1, descending=True, stable=True).indices[:, :k].to(torch.int32), s


@gpu
@pytest.mark.parametrize("t,e,k,n_group,topk_group",
                         [(1, 256, 8, 8, 4), (5, 64, 6, 8, 3), (33, 256, 8, 8, 4), (2, 1024, 16, 32, 4),
                          (7, 16, 4, 4, 2), (3, 32, 16, 16, 16), (4, 8, 2, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("renormalize", [True, False])
def test_grouped_topk_matches_the_reference(t, e, k, n_group, topk_group, dtype, renormalize):
    logits = (torch.randn(t, e, device="cuda") * 2).to(dtype)
    bias = torch.randn(e, device="cuda") * 0.1
    w, ids = fp8route.moe_grouped_topk(logits, k, bias, n_group, topk_group, renormalize, 2.5)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32 and w.shape == ids.shape == (t, k)
    want_ids, s = _grouped_by_rule(logits, bias, k, n_group, topk_group)
    assert torch.equal(ids, want_ids), _msg(f"ids differ at {(ids != want_ids).nonzero()[:4].tolist()}")
    if dtype == torch.float32:  # random fp32 scores have no ties: torch.topk's choice is the same
        _, ref_ids = grouped_topk(logits, k, bias, n_group, topk_group, renormalize, 2.5)
        assert torch.equal(ids, ref_ids), _msg("ids differ from grouped_topk")
    want_w = s.gather(1, ids.long())
    if renormalize:
        want_w = want_w / want_w.sum(-1, keepdim=True)
    torch.testing.assert_close(w, want_w * 2.5, rtol=1e-6, atol=1e-9, msg=lambda m: _msg(m))


@gpu
def test_grouped_topk_nan_and_infinite_scores_keep_ids_in_range():
    logits = torch.randn(4, 64, device="cuda")
    logits[0, :] = float("nan")
    logits[1, ::3] = float("-inf")
    bias = torch.zeros(64, device="cuda")
    bias[5] = float("-inf")
    w, ids = fp8route.moe_grouped_topk(logits, 8, bias, 8, 2)
    assert ((ids >= 0) & (ids < 64)).all(), _msg(f"ids out of range: {ids.tolist()}")
    assert all(len(set(r)) == 8 for r in ids.tolist()), _msg("an expert chosen twice")


@gpu
def test_grouped_topk_empty_and_errors():
    w, ids = fp8route.moe_grouped_topk(torch.empty(0, 256, device="cuda"), 8, torch.zeros(256, device="cuda"), 8, 4)
    assert w.shape == ids.shape == (0, 8)
    with pytest.raises(ValueError, match="n_group: 3"):
        fp8route.moe_grouped_topk(torch.randn(2, 256, device="cuda"), 8, torch.zeros(256, device="cuda"), 3, 1)
    with pytest.raises(ValueError, match="top_k: 9"):
        fp8route.moe_grouped_topk(torch.randn(2, 64, device="cuda"), 9, torch.zeros(64, device="cuda"), 8, 1)
    with pytest.raises(ValueError, match="bias: expected shape"):
        fp8route.moe_grouped_topk(torch.randn(2, 64, device="cuda"), 4, torch.zeros(32, device="cuda"), 8, 2)


# ---- moe_masked_dispatch -------------------------------------------------------------------------

def _router_ids(t, e, k, device="cuda"):
    """ids as a router gives them: k distinct experts per token."""
    return torch.rand(t, e, device=device).argsort(dim=-1)[:, :k].to(torch.int32)


@gpu
@pytest.mark.parametrize("t,e,k,m_max", [(1, 128, 8, 1), (1, 8, 2, 4), (16, 8, 2, 3), (64, 256, 8, 2), (7, 128, 8, 7),
                                         (512, 16, 8, 512), (512, 128, 8, 20)])
def test_masked_dispatch_matches_the_reference(t, e, k, m_max):
    ids = _router_ids(t, e, k)
    ids[torch.rand(t, k, device="cuda") < 0.1] = -1  # some entries dropped before dispatch
    src2dst, masked_m = fp8route.moe_masked_dispatch(ids, e, m_max)
    want_dst, want_m = masked_dispatch(ids, e, m_max)
    assert torch.equal(src2dst, want_dst), _msg("src2dst")
    assert torch.equal(masked_m, want_m), _msg("masked_m")
    again = fp8route.moe_masked_dispatch(ids, e, m_max)
    assert torch.equal(again[0], src2dst) and torch.equal(again[1], masked_m), _msg("not deterministic")


@gpu
def test_masked_dispatch_drops_past_m_max():
    # Every token on expert 3: the busiest expert is cut at m_max.
    t, e, m_max = 10, 8, 4
    ids = torch.stack([torch.full((t,), 3), torch.arange(t) % e], dim=1).to(torch.int32).cuda()
    ids[ids[:, 1] == 3, 1] = 0
    src2dst, masked_m = fp8route.moe_masked_dispatch(ids, e, m_max)
    want_dst, want_m = masked_dispatch(ids, e, m_max)
    assert torch.equal(src2dst, want_dst) and torch.equal(masked_m, want_m)
    assert masked_m[3].item() == m_max and (src2dst[:, 0] == -1).sum().item() == t - m_max


@gpu
@pytest.mark.parametrize("t,e_global,e_local,k,m_max", [(1, 256, 32, 8, 1), (9, 128, 64, 8, 4), (33, 8, 4, 2, 33)])
def test_masked_dispatch_with_expert_map(t, e_global, e_local, k, m_max):
    held = torch.randperm(e_global, device="cuda")[:e_local]
    expert_map = torch.full((e_global,), -1, dtype=torch.int32, device="cuda")
    expert_map[held] = torch.arange(e_local, dtype=torch.int32, device="cuda")
    assert (expert_map == -1).any()
    ids = _router_ids(t, e_global, k)
    src2dst, masked_m = fp8route.moe_masked_dispatch(ids, e_local, m_max, expert_map=expert_map)
    want_dst, want_m = masked_dispatch(expert_map[ids.long()], e_local, m_max)
    assert torch.equal(src2dst, want_dst), _msg("src2dst")
    assert torch.equal(masked_m, want_m), _msg("masked_m")


@gpu
def test_masked_dispatch_out_of_range_ids_are_dropped_and_empty_is_zeros():
    ids = torch.tensor([[5, 0], [-7, 9], [1, 0]], dtype=torch.int32, device="cuda")
    src2dst, masked_m = fp8route.moe_masked_dispatch(ids, 4, 2)
    assert src2dst.tolist() == [[-1, 0], [-1, -1], [2, 1]] and masked_m.tolist() == [2, 1, 0, 0]
    src2dst, masked_m = fp8route.moe_masked_dispatch(torch.empty(0, 8, dtype=torch.int32, device="cuda"), 16, 4)
    assert src2dst.shape == (0, 8) and masked_m.tolist() == [0] * 16


@gpu
def test_masked_dispatch_errors_name_the_argument():
    ids = torch.zeros(4, 8, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="m_max: must be >= 1"):
        fp8route.moe_masked_dispatch(ids, 16, 0)
    with pytest.raises(ValueError, match="ids: T \\* top_k = 4104 entries, at most 4096"):
        fp8route.moe_masked_dispatch(torch.zeros(513, 8, dtype=torch.int32, device="cuda"), 16, 4)
    with pytest.raises(ValueError, match="ids: dtype"):
        fp8route.moe_masked_dispatch(ids.long(), 16, 4)
    with pytest.raises(ValueError, match="expert_map: dtype"):
        fp8route.moe_masked_dispatch(ids, 16, 4, expert_map=torch.zeros(32, device="cuda"))


# ---- moe_route_masked_dispatch -------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("routing", ["softmax", "sigmoid"])
@pytest.mark.parametrize("t,e,k,m_max", [(1, 128, 8, 1), (7, 256, 8, 7), (32, 128, 8, 32), (33, 64, 4, 8),
                                         (200, 32, 8, 16)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_route_masked_dispatch_is_the_two_calls(routing, t, e, k, m_max, dtype):
    # Up to 32 tokens one warp each; 33 and 200: warps take turns.
    logits = torch.randn(t, e, device="cuda").to(dtype)
    if routing == "softmax":
        got = fp8route.moe_route_masked_dispatch(logits, k, e, m_max)
        w, ids = fp8route.moe_softmax_topk(logits, k)
    else:
        bias = torch.randn(e, device="cuda") * 0.1
        got = fp8route.moe_route_masked_dispatch(logits, k, e, m_max, bias=bias, n_group=8, topk_group=4,
                                                 scaling_factor=2.5)
        w, ids = fp8route.moe_grouped_topk(logits, k, bias, 8, 4, scaling_factor=2.5)
    src2dst, masked_m = fp8route.moe_masked_dispatch(ids, e, m_max)
    for name, a, b in zip(("weights", "ids", "src2dst", "masked_m"), got, (w, ids, src2dst, masked_m)):
        assert torch.equal(a, b), _msg(name)


@gpu
def test_route_masked_dispatch_with_expert_map_and_empty():
    e_global, e_local, t, k = 256, 32, 5, 8
    held = torch.randperm(e_global, device="cuda")[:e_local]
    expert_map = torch.full((e_global,), -1, dtype=torch.int32, device="cuda")
    expert_map[held] = torch.arange(e_local, dtype=torch.int32, device="cuda")
    logits = torch.randn(t, e_global, device="cuda")
    w, ids, src2dst, masked_m = fp8route.moe_route_masked_dispatch(logits, k, e_local, t, expert_map=expert_map)
    want_w, want_ids = fp8route.moe_softmax_topk(logits, k)
    want = fp8route.moe_masked_dispatch(want_ids, e_local, t, expert_map=expert_map)
    assert torch.equal(w, want_w) and torch.equal(ids, want_ids), _msg("routing")
    assert torch.equal(src2dst, want[0]) and torch.equal(masked_m, want[1]), _msg("dispatch")
    out = fp8route.moe_route_masked_dispatch(torch.empty(0, 64, device="cuda"), 4, 16, 2)
    assert [tuple(o.shape) for o in out] == [(0, 4), (0, 4), (0, 4), (16,)] and out[3].tolist() == [0] * 16


@gpu
def test_route_masked_dispatch_errors_name_the_argument():
    logits = torch.randn(4, 64, device="cuda")
    with pytest.raises(ValueError, match="n_group, topk_group, scaling_factor: softmax routing"):
        fp8route.moe_route_masked_dispatch(logits, 4, 64, 4, n_group=8)
    with pytest.raises(ValueError, match="m_max: must be >= 1"):
        fp8route.moe_route_masked_dispatch(logits, 4, 64, 0)
    with pytest.raises(ValueError, match="n_group"):
        fp8route.moe_route_masked_dispatch(logits, 4, 64, 4, bias=torch.zeros(64, device="cuda"), n_group=5)


# ---- moe_contiguous_dispatch ---------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("t,e,k", [(1, 128, 8), (1, 8, 2), (16, 8, 2), (127, 256, 8), (128, 256, 8), (129, 64, 8),
                                   (1000, 1024, 8), (4096, 128, 8), (20000, 256, 8), (3000, 8, 1)])
def test_contiguous_dispatch_matches_the_reference(t, e, k):
    # 1024 entries a chunk, 128 a warp: sizes below, at and past both, many chunks.
    ids = _router_ids(t, e, k)
    ids[torch.rand(t, k, device="cuda") < 0.1] = -1  # some entries dropped before dispatch
    src2dst, offsets = fp8route.moe_contiguous_dispatch(ids, e)
    want_dst, want_off = contiguous_dispatch(ids, e)
    assert torch.equal(offsets, want_off), _msg("offsets")
    assert torch.equal(src2dst, want_dst), _msg("src2dst")
    again = fp8route.moe_contiguous_dispatch(ids, e)
    assert torch.equal(again[0], src2dst) and torch.equal(again[1], offsets), _msg("not deterministic")


@gpu
def test_contiguous_dispatch_every_entry_on_one_expert():
    t, e = 3000, 16
    ids = torch.full((t, 1), 5, dtype=torch.int32, device="cuda")
    src2dst, offsets = fp8route.moe_contiguous_dispatch(ids, e)
    assert src2dst[:, 0].tolist() == list(range(t))
    assert offsets.tolist() == [0] * 6 + [t] * 11


@gpu
@pytest.mark.parametrize("t,e_global,e_local,k", [(1, 256, 32, 8), (900, 128, 64, 8), (33, 8, 1, 2)])
def test_contiguous_dispatch_with_expert_map(t, e_global, e_local, k):
    held = torch.randperm(e_global, device="cuda")[:e_local]
    expert_map = torch.full((e_global,), -1, dtype=torch.int32, device="cuda")
    expert_map[held] = torch.arange(e_local, dtype=torch.int32, device="cuda")
    ids = _router_ids(t, e_global, k)
    src2dst, offsets = fp8route.moe_contiguous_dispatch(ids, e_local, expert_map=expert_map)
    want_dst, want_off = contiguous_dispatch(expert_map[ids.long()], e_local)
    assert torch.equal(src2dst, want_dst), _msg("src2dst")
    assert torch.equal(offsets, want_off), _msg("offsets")


@gpu
def test_contiguous_dispatch_out_of_range_ids_and_empty():
    ids = torch.tensor([[5, 0], [-7, 3], [1, 0]], dtype=torch.int32, device="cuda")
    src2dst, offsets = fp8route.moe_contiguous_dispatch(ids, 4)
    assert src2dst.tolist() == [[-1, 0], [-1, 3], [2, 1]] and offsets.tolist() == [0, 2, 3, 3, 4]
    src2dst, offsets = fp8route.moe_contiguous_dispatch(torch.empty(0, 8, dtype=torch.int32, device="cuda"), 16)
    assert src2dst.shape == (0, 8) and offsets.tolist() == [0] * 17


@gpu
def test_an_empty_expert_map_drops_every_entry():
    # Given but empty: no global expert is held here (its data pointer may be null).
    ids = torch.randint(0, 8, (3, 2), dtype=torch.int32, device="cuda")
    empty = torch.empty(0, dtype=torch.int32, device="cuda")
    src2dst, masked_m = fp8route.moe_masked_dispatch(ids, 4, 2, expert_map=empty)
    assert src2dst.tolist() == [[-1, -1]] * 3 and masked_m.tolist() == [0] * 4
    src2dst, offsets = fp8route.moe_contiguous_dispatch(ids, 4, expert_map=empty)
    assert src2dst.tolist() == [[-1, -1]] * 3 and offsets.tolist() == [0] * 5
    _, _, src2dst, masked_m = fp8route.moe_route_masked_dispatch(torch.randn(3, 8, device="cuda"), 2, 4, 2,
                                                                 expert_map=empty)
    assert src2dst.tolist() == [[-1, -1]] * 3 and masked_m.tolist() == [0] * 4


@gpu
def test_contiguous_dispatch_captures_in_a_graph():
    ids = _router_ids(300, 64, 8)
    src2dst, offsets = fp8route.moe_contiguous_dispatch(ids, 64)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        src2dst, offsets = fp8route.moe_contiguous_dispatch(ids, 64)
    ids.copy_(_router_ids(300, 64, 8))
    graph.replay()
    want_dst, want_off = contiguous_dispatch(ids, 64)
    assert torch.equal(src2dst, want_dst) and torch.equal(offsets, want_off), _msg("replay")


@gpu
def test_contiguous_dispatch_errors_name_the_argument():
    ids = torch.zeros(4, 8, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="experts: must be in \\[1, 1024\\]"):
        fp8route.moe_contiguous_dispatch(ids, 1025)
    with pytest.raises(ValueError, match="ids: dtype"):
        fp8route.moe_contiguous_dispatch(ids.long(), 16)
    with pytest.raises(ValueError, match="expert_map: dtype"):
        fp8route.moe_contiguous_dispatch(ids, 16, expert_map=torch.zeros(32, device="cuda"))


# ---- moe_combine ---------------------------------------------------------------------------------

def _combine_in_order(down_rows, src2dst, weights):
    """The combine summed in j order from +0, each product and sum rounded once; dropped entries
    skipped (their rows never enter)."""
    t, k = src2dst.shape
    acc = torch.zeros(t, down_rows.shape[1], dtype=torch.float32, device=down_rows.device)
    for j in range(k):
        idx = src2dst[:, j].long()
        term = down_rows[idx.clamp(min=0)].float() * weights[:, j:j + 1]
        acc = torch.where((idx >= 0).unsqueeze(1), acc + term, acc)
    return acc


@gpu
@pytest.mark.parametrize("t,e,k,m_max,h", [(1, 128, 8, 1, 2048), (5, 8, 2, 5, 4096), (64, 256, 8, 2, 7168),
                                           (3, 16, 4, 3, 8), (40, 128, 8, 4, 1000 * 8)])
@pytest.mark.parametrize("rows_dtype", [torch.bfloat16, torch.float16])
def test_combine_is_the_reference_bit_for_bit(t, e, k, m_max, h, rows_dtype):
    ids = _router_ids(t, e, k)
    src2dst, masked_m = masked_dispatch(ids, e, m_max)
    w, _ = softmax_topk(torch.randn(t, e, device="cuda"), k)
    down = torch.randn(e * m_max, h, device="cuda").to(rows_dtype)
    # Rows past masked_m are never read: NaN there must not reach the output.
    valid = torch.arange(m_max, device="cuda").unsqueeze(0) < masked_m.unsqueeze(1)
    down.view(e, m_max, h)[~valid] = float("nan")
    want = _combine_in_order(down, src2dst, w)
    assert torch.isfinite(want).all()
    out = fp8route.moe_combine(down, src2dst, w)
    assert out.dtype == rows_dtype and out.shape == (t, h)
    assert torch.equal(out, want.to(rows_dtype)), _msg(f"{(out != want.to(rows_dtype)).sum().item()} elements differ")
    out32 = fp8route.moe_combine(down, src2dst, w, out_dtype=torch.float32)
    assert torch.equal(out32, want), _msg("f32 output differs")
    # Against moe_routing._combine (summation order its own): equal up to that order.
    finite = torch.nan_to_num(down, nan=0.0)
    torch.testing.assert_close(out32, _combine(finite, src2dst, w), rtol=1e-5, atol=1e-5)


@gpu
def test_combine_empty_and_errors():
    down = torch.randn(16, 128, device="cuda", dtype=torch.bfloat16)
    out = fp8route.moe_combine(down, torch.empty(0, 8, dtype=torch.int32, device="cuda"),
                               torch.empty(0, 8, device="cuda"))
    assert out.shape == (0, 128)
    src2dst, w = torch.zeros(2, 8, dtype=torch.int32, device="cuda"), torch.ones(2, 8, device="cuda")
    with pytest.raises(ValueError, match="down_rows: H = 100"):
        fp8route.moe_combine(torch.randn(16, 100, device="cuda", dtype=torch.bfloat16), src2dst, w)
    with pytest.raises(ValueError, match="weights: dtype"):
        fp8route.moe_combine(down, src2dst, w.half())
    with pytest.raises(ValueError, match="out_dtype"):
        fp8route.moe_combine(down, src2dst, w, out_dtype=torch.int8)
    with pytest.raises(ValueError, match="out: dtype f16"):
        fp8route.moe_combine(down, src2dst, w, out_dtype=torch.float16)


# ---- scatter_per_token_quant ---------------------------------------------------------------------

def _check_scatter(x, src2dst, rows, q, s, q0, s0, dtype):
    qx, sx = ops.per_token_quant(x, dtype=dtype)
    flat = src2dst.reshape(-1).long()
    entry = torch.arange(flat.numel(), device=x.device)
    k = src2dst.shape[1]
    inside = (flat >= 0) & (flat < rows)
    # The owner of each named row: the last entry naming it.
    owner = torch.full((rows,), -1, dtype=torch.long, device=x.device)
    owner.scatter_reduce_(0, flat[inside], entry[inside], reduce="amax")
    named = owner >= 0
    tok = owner[named] // k
    assert named.any(), _msg("no row is written: the test would pass vacuously")
    assert torch.equal(q.view(torch.uint8)[named], qx.view(torch.uint8)[tok]), _msg("codes differ from per_token_quant")
    assert torch.equal(s[named], sx[tok]), _msg("scales differ from per_token_quant")
    assert torch.equal(q.view(torch.uint8)[~named], q0.view(torch.uint8)[~named]), _msg("an unnamed row was written")
    assert torch.equal(s[~named], s0[~named]), _msg("an unnamed scale was written")


@gpu
@pytest.mark.parametrize("t,e,k,m_max,h", [(1, 128, 8, 1, 2048), (5, 8, 2, 3, 4096), (64, 256, 8, 2, 7168),
                                           (3, 16, 4, 3, 100), (2, 8, 2, 2, 20000), (700, 64, 8, 100, 256)])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
def test_scatter_per_token_quant_is_per_token_quant_scattered(t, e, k, m_max, h, x_dtype):
    # (700, 64, 8): 5600 entries, past the in-kernel scan: the owner table path. h = 100: rows of any
    # width; h = 20000: rows read twice.
    ids = _router_ids(t, e, k)
    src2dst, _ = masked_dispatch(ids, e, m_max)
    rows = e * m_max
    x = torch.randn(t, h, device="cuda").to(x_dtype) * 3
    x[0, : min(h, 4)] = 300.0  # one larger row scale
    q0 = torch.randint(0, 255, (rows, h), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    s0 = torch.full((rows,), -1.0, device="cuda")
    q, s = q0.clone(), s0.clone()
    fp8route.scatter_per_token_quant(x, src2dst, rows, out=(q, s))
    _check_scatter(x, src2dst, rows, q, s, q0, s0, "e4m3")


@gpu
@pytest.mark.parametrize("t,k", [(6, 3), (5, 11), (1024, 8)])
def test_scatter_per_token_quant_duplicate_rows_get_the_last_entry(t, k):
    # Destinations named several times (and out of range ones, skipped): the last entry writes the row.
    # k = 11: more destinations per token than any catalog model's top-k (8), an odd count.
    rows = 16
    src2dst = torch.randint(-2, rows + 3, (t, k), dtype=torch.int32, device="cuda")
    x = torch.randn(t, 512, device="cuda", dtype=torch.bfloat16)
    q0 = torch.zeros(rows, 512, dtype=torch.float8_e4m3fn, device="cuda")
    s0 = torch.full((rows,), -1.0, device="cuda")
    q, s = q0.clone(), s0.clone()
    fp8route.scatter_per_token_quant(x, src2dst, rows, out=(q, s))
    _check_scatter(x, src2dst, rows, q, s, q0, s0, "e4m3")
    q8 = torch.zeros(rows, 512, dtype=torch.int8, device="cuda")
    q, s = q8.clone(), s0.clone()
    fp8route.scatter_per_token_quant(x, src2dst, rows, dtype="i8", out=(q, s))
    _check_scatter(x, src2dst, rows, q, s, q8, s0, "i8")


@gpu
@pytest.mark.parametrize("form", ["masked", "contiguous"])
@pytest.mark.parametrize("t", [3, 700])
def test_scatter_unique_rows_is_the_default_on_a_dispatch(form, t):
    # A dispatch names each row at most once: unique_rows=True (no search for a row's writer) writes
    # what the default writes. 700 x 8 entries: past the per-token scan (its owner table skipped too).
    e, k, h = 64, 8, 512
    ids = _router_ids(t, e, k)
    ids[torch.rand(t, k, device="cuda") < 0.1] = -1
    if form == "masked":
        src2dst, _ = masked_dispatch(ids, e, t)
        rows = e * t
    else:
        src2dst, _ = contiguous_dispatch(ids, e)
        rows = t * k
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    for scatter, kw in [(fp8route.scatter_per_token_quant, {}),
                        (fp8route.scatter_per_token_group_quant, {"layout": "col_major_tma"})]:
        q0, s0 = scatter(x, src2dst, rows, **kw)
        q1, s1 = (o.clone() for o in (q0, s0))
        scatter(x, src2dst, rows, out=(q1, s1), unique_rows=True, **kw)
        # Bit for bit over the whole buffers: rows no entry maps stay as they were (uninitialized,
        # possibly NaN, in both).
        assert torch.equal(q1.view(torch.uint8), q0.view(torch.uint8)), _msg(f"{scatter.__name__} codes")
        assert torch.equal(s1.view(torch.int32), s0.view(torch.int32)), _msg(f"{scatter.__name__} scales")
        q2, s2 = scatter(x, src2dst, rows, unique_rows=True, **kw)
        held = src2dst[src2dst >= 0].long()
        assert torch.equal(q2.view(torch.uint8)[held], q0.view(torch.uint8)[held]), _msg("allocated, unique_rows")


# ---- masked_silu_and_mul_per_token_quant ---------------------------------------------------------

@gpu
@pytest.mark.parametrize("e,m_max,h", [(128, 1, 768), (16, 8, 100), (8, 64, 2048), (4, 3, 20000)])
@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float32])
def test_masked_silu_per_token_quant_is_the_unmasked_one_on_held_rows(e, m_max, h, x_dtype):
    # h = 100: rows of any width; h = 20000: rows read twice. Counts past M_max and below 0 clamp.
    x = (torch.randn(e, m_max, 2 * h, device="cuda") * 3).to(x_dtype)
    masked_m = torch.randint(-1, m_max + 2, (e,), dtype=torch.int32, device="cuda")
    masked_m[0] = m_max + 5
    q0 = torch.randint(0, 255, (e, m_max, h), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    s0 = torch.full((e, m_max), -1.0, device="cuda")
    q, s = q0.clone(), s0.clone()
    fp8route.masked_silu_and_mul_per_token_quant(x, masked_m, out=(q, s))
    want_q, want_s = fp8route.silu_and_mul_per_token_quant(x.reshape(e * m_max, 2 * h))
    held = (torch.arange(m_max, device="cuda")[None, :] < masked_m.clamp(0, m_max)[:, None]).reshape(-1)
    qb, sb = q.view(torch.uint8).reshape(e * m_max, h), s.reshape(-1)
    assert torch.equal(qb[held], want_q.view(torch.uint8)[held]), _msg("codes of held rows")
    assert torch.equal(sb[held], want_s[held]), _msg("scales of held rows")
    assert torch.equal(qb[~held], q0.view(torch.uint8).reshape(e * m_max, h)[~held]), _msg("rows past masked_m written")
    assert torch.equal(sb[~held], s0.reshape(-1)[~held]), _msg("scales past masked_m written")


@gpu
def test_masked_silu_per_token_quant_int8_and_graph_replay():
    e, m_max, h = 8, 4, 512
    x = torch.randn(e, m_max, 2 * h, device="cuda", dtype=torch.bfloat16)
    masked_m = torch.tensor([1, 0, 4, 2, 3, 0, 1, 4], dtype=torch.int32, device="cuda")
    q, s = fp8route.masked_silu_and_mul_per_token_quant(x, masked_m, dtype="i8")
    assert q.dtype == torch.int8 and q.shape == (e, m_max, h) and s.shape == (e, m_max)
    want_q, want_s = fp8route.silu_and_mul_per_token_quant(x.reshape(-1, 2 * h), dtype="i8")
    held = (torch.arange(m_max, device="cuda")[None, :] < masked_m[:, None]).reshape(-1)
    assert torch.equal(q.reshape(-1, h)[held], want_q[held]) and torch.equal(s.reshape(-1)[held], want_s[held])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q, s = fp8route.masked_silu_and_mul_per_token_quant(x, masked_m)
    masked_m.copy_(torch.tensor([4, 4, 0, 1, 2, 3, 4, 0], dtype=torch.int32))
    graph.replay()
    want_q, want_s = fp8route.silu_and_mul_per_token_quant(x.reshape(-1, 2 * h))
    held = (torch.arange(m_max, device="cuda")[None, :] < masked_m[:, None]).reshape(-1)
    assert torch.equal(q.view(torch.uint8).reshape(-1, h)[held], want_q.view(torch.uint8)[held]), _msg("replay")
    assert torch.equal(s.reshape(-1)[held], want_s[held]), _msg("replay scales")


@gpu
def test_scatter_per_token_quant_empty():
    q, s = fp8route.scatter_per_token_quant(torch.empty(0, 256, device="cuda", dtype=torch.bfloat16),
                                            torch.empty(0, 8, dtype=torch.int32, device="cuda"), 32)
    assert q.shape == (32, 256) and s.shape == (32,)


# ---- Fp8MoE: the fused glue against the torch glue -----------------------------------------------

@gpu
@pytest.mark.parametrize("scale", ["block", "row"])
@pytest.mark.parametrize("routing", ["softmax", "sigmoid"])
@pytest.mark.parametrize("t,m_max", [(1, 1), (5, 5), (12, 3), (40, 40), (1, None), (37, None), (300, None)])
def test_fp8moe_output_unchanged_by_the_fused_glue(scale, routing, t, m_max):  # m_max None: contiguous
    e, h, i, top_k = 16, 512, 256, 4
    layer = _layer(scale, m_max, e=e, h=h, i=i, top_k=top_k, routing=routing)
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    # fp32 logits: no tied scores, so torch.topk (which orders ties as it likes) and the kernels choose
    # the same experts; the kernels' tie rule has its own tests above.
    logits = torch.randn(t, e, device="cuda", dtype=torch.float32)
    assert layer._fused_glue
    got = layer(x, logits)
    layer._fused_glue = False
    want = layer(x, logits)
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape == (t, h)
    assert torch.isfinite(want).all() and want.abs().max() > 0, _msg("the reference output is empty")
    # The fused routing kernels' weights are within 1e-6 relative of torch's, and the combine sums in
    # another order: the bf16 outputs agree within a rounding.
    torch.testing.assert_close(got, want, rtol=2**-7, atol=1e-2 * want.abs().max().item(), msg=lambda m: _msg(m))
    close = (got.float() - want.float()).abs() <= 2**-8 * want.float().abs() + 1e-6
    assert close.float().mean() > 0.95, _msg("most outputs should be equal up to one bf16 rounding")


@gpu
@pytest.mark.parametrize("scale", ["block", "row"])
@pytest.mark.parametrize("masked", [True, False])
def test_fp8moe_with_expert_map_unchanged(scale, masked):
    e_global, e, h, i, top_k, t = 64, 16, 512, 256, 8, 6
    held = torch.randperm(e_global, device="cuda")[:e]
    expert_map = torch.full((e_global,), -1, dtype=torch.int32, device="cuda")
    expert_map[held] = torch.arange(e, dtype=torch.int32, device="cuda")
    layer = _layer(scale, t if masked else None, e=e, h=h, i=i, top_k=top_k, expert_map=expert_map)
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(t, e_global, device="cuda", dtype=torch.bfloat16)
    logits[:, held] += 2.0  # most choices on held experts, some elsewhere
    got = layer(x, logits)
    layer._fused_glue = False
    want = layer(x, logits)
    assert want.abs().max() > 0, _msg("the reference output is empty")
    torch.testing.assert_close(got, want, rtol=2**-7, atol=1e-2 * want.abs().max().item(), msg=lambda m: _msg(m))


@gpu
@pytest.mark.parametrize("m_max", [2, None])
def test_fp8moe_softmax_top_k_past_the_kernels_runs_the_torch_glue(m_max):
    # top_k = 20 is past the routing kernels' 16: the layer routes with moe_routing's torch code.
    layer = _layer("row", m_max, e=32, h=256, i=128, top_k=20)
    x = torch.randn(2, 256, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(2, 32, device="cuda", dtype=torch.float32)
    assert not layer._glue_fits(2, logits, m_max is not None)
    got = layer(x, logits)
    assert got.shape == (2, 256) and torch.isfinite(got).all() and got.abs().max() > 0


@gpu
def test_fp8moe_masked_fused_glue_captures_in_a_graph():
    layer = _layer("block", 4, e=16, h=512, i=256, top_k=4)
    x = torch.randn(4, 512, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(4, 16, device="cuda", dtype=torch.bfloat16)
    eager = layer(x, logits)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer(x, logits)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = layer(x, logits)
    logits.copy_(torch.randn_like(logits))  # another routing, replayed by the same graph
    graph.replay()
    torch.testing.assert_close(out, layer(x, logits), rtol=0, atol=0)
    assert eager.abs().max() > 0, _msg("the eager output is empty")


# ---- without a GPU: the errors named before any kernel ---------------------------------------------

def test_host_tensors_are_refused_with_the_argument_named():
    if not hasattr(fp8route, "moe_softmax_topk"):
        pytest.fail("fp8route.moe_softmax_topk is missing")
    with pytest.raises(ValueError, match="logits: "):
        fp8route.moe_softmax_topk(torch.randn(2, 8), 2)
    with pytest.raises(ValueError, match="logits: "):
        fp8route.moe_grouped_topk(torch.randn(2, 8), 2, torch.zeros(8), 4, 2)
    with pytest.raises(ValueError, match="ids: "):
        fp8route.moe_masked_dispatch(torch.zeros(2, 2, dtype=torch.int32), 8, 2)
    with pytest.raises(ValueError, match="down_rows: "):
        fp8route.moe_combine(torch.randn(4, 8, dtype=torch.bfloat16), torch.zeros(2, 2, dtype=torch.int32),
                             torch.ones(2, 2))
    with pytest.raises(ValueError, match="x: "):
        fp8route.scatter_per_token_quant(torch.randn(2, 8), torch.zeros(2, 2, dtype=torch.int32), 8)


def test_python_side_checks_name_the_argument():
    with pytest.raises(ValueError, match="top_k: must be in"):
        fp8route.moe_softmax_topk(torch.randn(2, 64), 17)
    with pytest.raises(ValueError, match="top_k: must be in"):
        fp8route.moe_softmax_topk(torch.randn(2, 64), 0)
    with pytest.raises(ValueError, match="logits: expected 2 dims"):
        fp8route.moe_softmax_topk(torch.randn(64), 2)
    with pytest.raises(ValueError, match="top_k: must be in"):
        fp8route.moe_grouped_topk(torch.randn(2, 64), 17, torch.zeros(64), 8, 4)
    with pytest.raises(ValueError, match="logits: expected 2 dims"):
        fp8route.moe_grouped_topk(torch.randn(64), 2, torch.zeros(64), 8, 4)
    with pytest.raises(ValueError, match="ids: expected 2 dims"):
        fp8route.moe_masked_dispatch(torch.zeros(8, dtype=torch.int32), 8, 2)
    with pytest.raises(ValueError, match="experts: must be >= 0"):
        fp8route.moe_masked_dispatch(torch.zeros(2, 2, dtype=torch.int32), -1, 2)
    with pytest.raises(ValueError, match="out_dtype"):
        fp8route.moe_combine(torch.randn(4, 8, dtype=torch.bfloat16), torch.zeros(2, 2, dtype=torch.int32),
                             torch.ones(2, 2), out_dtype="i8")
