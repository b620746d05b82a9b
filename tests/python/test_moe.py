"""Mixture of experts from Python (docs/moe.md): routing and dispatch on CPU torch; the grouped GEMM
against a float torch reference, argument errors, and the Fp8MoE layer (contiguous and masked, one
CUDA graph for decode) against reference_moe on the GPU."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the MoE helpers and layer use it)")

from fp8route import moe  # noqa: E402  (after the skip: importing needs the native module too)

_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
gpu = pytest.mark.skipif(not _GPU, reason="needs an SM90 GPU (the grouped kernels are built for sm_90a)")


# ---- routing and dispatch (CPU) -----------------------------------------------------------------

def test_softmax_topk_renormalizes_and_picks_the_largest():
    logits = torch.randn(7, 16)
    w, ids = moe.softmax_topk(logits, 4)
    assert ids.dtype == torch.int32 and w.shape == (7, 4)
    torch.testing.assert_close(w.sum(-1), torch.ones(7))
    want = torch.softmax(logits, -1).topk(4, -1).indices
    assert torch.equal(ids.long(), want)
    w_raw, _ = moe.softmax_topk(logits, 4, renormalize=False)
    assert (w_raw.sum(-1) < 1).all()


def test_grouped_topk_stays_in_the_best_groups():
    torch.manual_seed(0)
    t, e, n_group, topk_group = 5, 64, 8, 4
    logits, bias = torch.randn(t, e), torch.randn(e) * 0.1
    w, ids = moe.grouped_topk(logits, 8, bias, n_group, topk_group, scaling_factor=2.5)
    choice = torch.sigmoid(logits) + bias
    group_score = choice.view(t, n_group, -1).topk(2, -1).values.sum(-1)
    best = group_score.topk(topk_group, -1).indices
    for i in range(t):
        assert set((ids[i].long() // (e // n_group)).tolist()) <= set(best[i].tolist())
        # The weights are the sigmoid scores (not the biased ones), renormalized, then scaled.
        s = torch.sigmoid(logits[i])[ids[i].long()]
        torch.testing.assert_close(w[i], s / s.sum() * 2.5)


def test_contiguous_dispatch_groups_rows_by_expert():
    ids = torch.tensor([[3, 0], [0, 2], [3, 1], [0, 3]], dtype=torch.int32)
    src2dst, offsets = moe.contiguous_dispatch(ids, 5)
    assert offsets.tolist() == [0, 3, 4, 5, 8, 8]  # expert 4 is empty
    flat = src2dst.reshape(-1).tolist()
    assert sorted(flat) == list(range(8))
    for (t, j), d in zip([(t, j) for t in range(4) for j in range(2)], flat):
        e = int(ids[t, j])
        assert offsets[e] <= d < offsets[e + 1]
    # Stable: within an expert, token order.
    assert src2dst[0, 1] < src2dst[1, 0] < src2dst[3, 0]


def test_masked_dispatch_slots_and_clamps():
    ids = torch.tensor([[1, 0], [1, 2], [1, 0]], dtype=torch.int32)
    src2dst, masked_m = moe.masked_dispatch(ids, 3, m_max=2)
    assert masked_m.tolist() == [2, 2, 1]  # expert 1 has 3 entries, clamped to M_max
    assert src2dst.tolist() == [[2, 0], [3, 4], [-1, 1]]  # the third choice of expert 1 is dropped
    src2dst, masked_m = moe.masked_dispatch(ids, 3, m_max=3)  # M_max >= T: nothing dropped
    assert (src2dst >= 0).all() and masked_m.tolist() == [2, 3, 1]


def test_dispatch_drops_experts_held_elsewhere():
    """ids of -1 (expert_map: an expert another GPU holds) get no row and count in no group."""
    ids = torch.tensor([[2, -1], [-1, 0], [2, 1]], dtype=torch.int32)
    src2dst, offsets = moe.contiguous_dispatch(ids, 3)
    assert offsets.tolist() == [0, 1, 2, 4]
    assert src2dst.tolist() == [[2, -1], [-1, 0], [3, 1]]
    src2dst, masked_m = moe.masked_dispatch(ids, 3, m_max=3)
    assert masked_m.tolist() == [1, 1, 2]
    assert src2dst.tolist() == [[6, -1], [-1, 0], [7, 3]]


def test_reference_moe_is_the_per_token_sum():
    torch.manual_seed(1)
    t, h, i, e = 4, 8, 6, 5
    x, w13, w2 = torch.randn(t, h), torch.randn(e, 2 * i, h), torch.randn(e, h, i)
    weights, ids = moe.softmax_topk(torch.randn(t, e), 2)
    got = moe.reference_moe(x, weights, ids, w13, w2)
    for tok in range(t):
        want = torch.zeros(h)
        for j in range(2):
            ex = int(ids[tok, j])
            g = w13[ex] @ x[tok]
            want += weights[tok, j] * (w2[ex] @ (torch.nn.functional.silu(g[:i]) * g[i:]))
        torch.testing.assert_close(got[tok], want, rtol=1e-5, atol=1e-5)


def test_dequantize_weight_block_covers_partial_blocks():
    w = torch.ones(2, 200, 256).to(torch.float8_e4m3fn)
    s = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    d = moe.dequantize_weight(w, s, "block")
    assert d[1, 150, 200] == 8.0 and d[0, 127, 127] == 1.0 and d[0, 128, 0] == 3.0


# ---- the grouped GEMM and the layer (GPU) -------------------------------------------------------

def _fp8(shape, device="cuda"):
    return (torch.randn(shape, device=device) * 4).clamp(-448, 448).to(torch.float8_e4m3fn)


def _abs(codes):
    """|codes| of an e4m3 tensor, exactly (e4m3 is symmetric)."""
    return codes.float().abs().to(torch.float8_e4m3fn)


def _grouped_ref(a, b, sa, sb, rows_of):
    """Float reference of the row-scaled grouped product over the rows rows_of(e) of each expert."""
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device=a.device)
    for e in range(b.shape[0]):
        r = rows_of(e)
        out[r] = (a[r].float() @ b[e].float().t()) * sa[r].unsqueeze(1) * sb[e].unsqueeze(0)
    return out


@gpu
def test_grouped_contiguous_row_against_torch():
    e, m, n, k = 6, 100, 256, 512
    a, b = _fp8((m, k)), _fp8((e, n, k))
    sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(e, n, device="cuda") + 0.5
    offsets = torch.tensor([0, 10, 10, 50, 51, 90, 95], dtype=torch.int32, device="cuda")  # rows 95.. of none
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    moe.grouped_scaled_mm(a, b, sa, sb, offsets=offsets, out=out)
    bounds = offsets.tolist()
    rows_of = lambda x: slice(bounds[x], bounds[x + 1])  # noqa: E731
    want = _grouped_ref(a, b, sa, sb, rows_of)
    # Hopper's FP8 MMAs sum a 128-deep K block in a narrower accumulator than fp32, so an output
    # that cancels can be off by a small part of the sum of the |products|, beyond bf16 rounding.
    mag = _grouped_ref(a.float().abs().to(a.dtype), b.float().abs().to(b.dtype), sa, sb, rows_of)
    err = (out[:95].float() - want[:95]).abs()
    bound = 2.0**-12 * mag[:95] + 2.0**-8 * want[:95].abs()
    assert (err <= bound).all(), f"{(err > bound).sum().item()} outputs off; worst err / bound {(err / bound).max():.3g}"
    assert out[95:].isnan().all()  # rows of no expert untouched


@gpu
def test_grouped_masked_block_matches_scaled_mm_per_expert():
    import fp8route
    e, m_max, n, k = 4, 16, 384, 1024
    x = torch.randn(e, m_max, k, dtype=torch.bfloat16, device="cuda")
    masked_m = torch.tensor([16, 0, 3, 40], dtype=torch.int32, device="cuda")  # 40 > M_max: clamped
    q, s = fp8route.masked_per_token_group_quant(x, masked_m, layout="col_major_tma")
    b = _fp8((e, n, k))
    sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
    out = moe.grouped_scaled_mm(q, b, s, sb, masked_m=masked_m)
    assert out.shape == (e, m_max, n)
    for ex, cnt in enumerate([16, 0, 3, 16]):
        if cnt == 0:
            continue
        sa = s[ex][:, :cnt].t()  # the expert's [M, K/128] view
        want = fp8route.scaled_mm(q[ex, :cnt], b[ex], sa, sb[ex], scale="block", accum="precise").float()
        # As in the contiguous test: outputs that cancel may be off by a small part of the sum of the
        # |products| (Hopper's narrower FP8 MMA accumulator, here over 8 K blocks, each rounded to
        # fp32 and scaled), beyond bf16 rounding.
        mag = fp8route.scaled_mm(_abs(q[ex, :cnt]), _abs(b[ex]), sa, sb[ex], scale="block", accum="precise")
        err = (out[ex, :cnt].float() - want).abs()
        bound = 2.0**-11 * mag.float() + 2.0**-8 * want.abs()
        assert (err <= bound).all(), \
            f"expert {ex}: {(err > bound).sum().item()} outputs off; worst err / bound {(err / bound).max():.3g}"


@gpu
@pytest.mark.parametrize("scale", ["row", "block"])
def test_grouped_decode_split_counts_agree(scale):
    # The decode backend's split knobs (bench/moe_bench.py --decode-splits): every split count computes
    # the same products, summed in another order (up to 64 experts x 4 row blocks: several items per
    # cluster).
    import fp8route
    from fp8route import chain_trace
    e, m_max, n, k = 64, 4, 512, 2048  # 4 row blocks of 128 per expert: more items than clusters
    x = torch.randn(e, m_max, k, dtype=torch.bfloat16, device="cuda")
    masked_m = torch.randint(0, m_max + 1, (e,), dtype=torch.int32, device="cuda")
    masked_m[:3] = torch.tensor([0, m_max, 1])
    b = _fp8((e, n, k))
    if scale == "block":
        q, s = fp8route.masked_per_token_group_quant(x, masked_m, layout="col_major_tma")
        sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
    else:
        q = x.clamp(-448, 448).to(torch.float8_e4m3fn)
        s = torch.rand(e, m_max, device="cuda") + 0.5
        sb = torch.rand(e, n, device="cuda") + 0.5
    outs = {}
    try:
        for splits in (0, 1, 2, 4, 8):
            chain_trace.set_grouped_decode_splits(splits)
            assert chain_trace.grouped_decode_splits() == splits
            outs[splits] = moe.grouped_scaled_mm(q, b, s, sb, masked_m=masked_m, scale=scale, backend="decode")
    finally:
        chain_trace.set_grouped_decode_splits(0)
    for ex, cnt in enumerate(masked_m.tolist()):
        if cnt == 0:
            continue
        want = outs[0][ex, :cnt].float()
        assert want.abs().max() > 0
        for splits, out in outs.items():
            torch.testing.assert_close(out[ex, :cnt].float(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item(),
                                       msg=lambda m: f"splits {splits}, expert {ex}: {m}")
    with pytest.raises(ValueError, match="splits: 0"):
        chain_trace.set_grouped_decode_splits(9)


@gpu
def test_grouped_errors_name_the_argument():
    a, b = _fp8((8, 256)), _fp8((2, 128, 256))
    sa, sb = torch.ones(8, device="cuda"), torch.ones(2, 128, device="cuda")
    offs = torch.tensor([0, 4, 8], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="offsets, masked_m"):
        moe.grouped_scaled_mm(a, b, sa, sb)
    with pytest.raises(ValueError, match="offsets"):
        moe.grouped_scaled_mm(a, b, sa, sb, offsets=offs.float())
    with pytest.raises(ValueError, match="scale_b"):
        moe.grouped_scaled_mm(a, b, sa, sb[:, :64], offsets=offs, scale="row")


def _layer(scale, masked_m_max=None, e=8, h=512, i=256, top_k=2, routing="softmax", expert_map=None):
    w13, w2 = _fp8((e, 2 * i, h)) , _fp8((e, h, i))
    if scale == "block":
        s13 = torch.rand(e, 2 * i // 128, h // 128, device="cuda") * 0.01 + 0.005
        s2 = torch.rand(e, h // 128, i // 128, device="cuda") * 0.01 + 0.005
    else:
        s13 = torch.rand(e, 2 * i, device="cuda") * 0.01 + 0.005
        s2 = torch.rand(e, h, device="cuda") * 0.01 + 0.005
    kw = {}
    if routing == "sigmoid":
        e_router = e if expert_map is None else expert_map.shape[0]  # the router scores every global expert
        kw = dict(e_score_correction_bias=torch.zeros(e_router, device="cuda"), n_group=4, topk_group=2,
                  routed_scaling_factor=2.5)
    return moe.Fp8MoE(w13, s13, w2, s2, top_k, scale=scale, routing=routing, masked_m_max=masked_m_max,
                      expert_map=expert_map, **kw)


@gpu
@pytest.mark.parametrize("scale", ["block", "row"])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("routing", ["softmax", "sigmoid"])
def test_fp8moe_against_the_float_reference(scale, masked, routing):
    t = 5
    layer = _layer(scale, masked_m_max=t if masked else None, routing=routing)
    x = torch.randn(t, layer.hidden, dtype=torch.bfloat16, device="cuda")
    logits = torch.randn(t, layer.experts, device="cuda")
    y = layer(x, logits)
    weights, ids = layer.route(logits)
    want = moe.reference_moe(x, weights, ids, moe.dequantize_weight(layer.w13, layer.w13_scale, scale),
                             moe.dequantize_weight(layer.w2, layer.w2_scale, scale))
    rel = (y.float() - want).norm() / want.norm()
    # The float reference skips the two activation quantizations (about 3% each, rms).
    assert y.shape == x.shape and rel < 1e-1, f"relative error {rel:.3g} against the float reference"
    # With both quantizations done as the layer does them, what remains is the tensor core's sum of
    # each 128-deep K block (docs/numerics.md, "Accumulation class": up to 2^-10 of the sum of
    # |products| per output, about 2^-10 * sqrt(K) * 2 / pi of an output's rms for random data: 2%
    # at gate_up's K = 512, 1.4% at down's 256), FP8 codes that round the other way and the
    # summation order. Fresh runs reach 2.8%; a wrong expert, weight or scale is far above 4%.
    want_q = _quantized_reference(x, weights, ids, layer, scale)
    rel_q = (y.float() - want_q).norm() / want_q.norm()
    assert rel_q < 4e-2, f"relative error {rel_q:.3g} against the reference with activation quantization"


def _quant_dequant(v, group):
    """v [T, D] fp32 -> the values its e4m3 codes stand for, one scale per `group` columns (docs/numerics.md:
    s = amax / 448, code = sat(v * (448 / amax)))."""
    g = v.view(v.shape[0], -1, group)
    amax = g.abs().amax(-1, keepdim=True).clamp_min(1e-10)
    q = (g * (448.0 / amax)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return (q.float() * (amax / 448.0)).view_as(v)


def _quantized_reference(x, weights, ids, layer, scale):
    """reference_moe with the layer's activation quantization: x per token (row) or per 128 (block),
    the gate_up product rounded to bf16, silu(gate) * up in fp32 quantized the same way."""
    group = lambda d: 128 if scale == "block" else d  # noqa: E731
    w13 = moe.dequantize_weight(layer.w13, layer.w13_scale, scale)
    w2 = moe.dequantize_weight(layer.w2, layer.w2_scale, scale)
    xq = _quant_dequant(x.float(), group(x.shape[1]))
    i = w2.shape[2]
    out = torch.zeros(x.shape[0], w2.shape[1], device=x.device)
    for j in range(ids.shape[1]):
        for e in torch.unique(ids[:, j]).tolist():
            tok = (ids[:, j] == e).nonzero().squeeze(1)
            h = (xq[tok] @ w13[e].float().t()).to(torch.bfloat16).float()
            act = _quant_dequant(torch.nn.functional.silu(h[:, :i]) * h[:, i:], group(i))
            out[tok] += weights[tok, j].unsqueeze(1) * (act @ w2[e].float().t())
    return out


@gpu
def test_fp8moe_decode_captures_in_one_graph():
    t = 4
    layer = _layer("block", masked_m_max=t)
    x = torch.randn(t, layer.hidden, dtype=torch.bfloat16, device="cuda")
    logits = torch.randn(t, layer.experts, device="cuda")
    layer(x, logits)  # warm-up outside the capture (workspaces, lazy init)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = layer(x, logits)
    for _ in range(3):  # new tokens and a new routing each replay
        x.copy_(torch.randn_like(x))
        logits.copy_(torch.randn_like(logits))
        graph.replay()
        torch.testing.assert_close(y, layer(x, logits), rtol=0, atol=0)
