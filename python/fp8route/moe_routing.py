"""Mixture-of-experts routing, dispatch and the float reference layer, in plain torch with shapes fixed
by the token count (no host synchronization: capturable). fp8route.moe (the grouped GEMM, Fp8MoE)
re-exports every name; fp8route.models uses them without the native module."""
import torch


# ------------------------------------------------------------------------------------------------
# Routing: logits -> (weights, expert ids), pure torch with fixed shapes (capturable)
# ------------------------------------------------------------------------------------------------

def softmax_topk(logits, top_k, renormalize=True):
    """Qwen3-MoE / Mixtral routing: softmax over the experts in fp32, the top_k largest, renormalized
    to sum to 1 when renormalize (Qwen3-MoE's norm_topk_prob; Mixtral always). Returns (weights f32
    [T, top_k], ids int32 [T, top_k])."""
    p = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(p, top_k, dim=-1)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids.to(torch.int32)


def grouped_topk(logits, top_k, bias, n_group, topk_group, renormalize=True, scaling_factor=1.0):
    """DeepSeek-V3 routing: s = sigmoid(logits) in fp32; experts are chosen by s + bias (the
    load-balancing correction, which does not enter the weights): each of n_group groups is scored by
    the sum of its two best, only the topk_group best groups stay, and the top_k experts among them
    are taken. Weights are s of the chosen experts, renormalized to sum to 1 when renormalize, times
    scaling_factor (routed_scaling_factor). Returns (weights f32 [T, top_k], ids int32 [T, top_k])."""
    t, e = logits.shape
    s = torch.sigmoid(logits.float())
    choice = s + bias.float()
    groups = choice.view(t, n_group, e // n_group)
    group_score = groups.topk(2, dim=-1).values.sum(dim=-1)
    keep = torch.zeros_like(group_score).scatter_(1, group_score.topk(topk_group, dim=-1).indices, 1.0)
    mask = keep.unsqueeze(-1).expand(t, n_group, e // n_group).reshape(t, e)
    ids = choice.masked_fill(mask == 0, float("-inf")).topk(top_k, dim=-1).indices
    w = s.gather(1, ids)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w * scaling_factor, ids.to(torch.int32)


# ------------------------------------------------------------------------------------------------
# Dispatch: where each (token, choice) goes, pure torch with fixed shapes
# ------------------------------------------------------------------------------------------------

def contiguous_dispatch(ids, experts):
    """Rows of the contiguous form for ids [T, top_k]: returns (src2dst int32 [T, top_k], offsets int32
    [E + 1]), entries grouped by expert in token order (a stable sort). An id of -1 (an expert this GPU
    does not hold: expert_map) is dropped: src2dst -1, its row past offsets[E], in no group."""
    flat = ids.reshape(-1).long()
    flat = torch.where(flat >= 0, flat, torch.full_like(flat, experts))  # dropped: one virtual expert last
    order = torch.sort(flat, stable=True).indices
    dst = torch.empty_like(order)
    dst[order] = torch.arange(flat.numel(), device=ids.device)
    dst = torch.where(flat < experts, dst, torch.full_like(dst, -1))
    counts = torch.zeros(experts + 1, dtype=torch.int64, device=ids.device).scatter_add_(0, flat, torch.ones_like(flat))
    offsets = torch.cat([counts.new_zeros(1), counts[:experts].cumsum(0)])
    return dst.view(ids.shape).to(torch.int32), offsets.to(torch.int32)


def masked_dispatch(ids, experts, m_max):
    """Slots of the masked form for ids [T, top_k]: entry (t, j) goes to row pos of expert ids[t, j],
    pos = how many earlier entries chose that expert. Returns (src2dst int32 [T, top_k] = e * m_max +
    pos into the [E * m_max] rows, or -1 past m_max; masked_m int32 [E], clamped to m_max). With
    m_max >= T nothing is dropped: a token chooses an expert at most once. An id of -1 (an expert this
    GPU does not hold: expert_map) is dropped (src2dst -1)."""
    flat = ids.reshape(-1).long()
    held = flat >= 0
    flat = torch.where(held, flat, torch.full_like(flat, experts))  # dropped: a virtual expert, cut off
    onehot = torch.nn.functional.one_hot(flat, experts + 1)
    pos = (onehot.cumsum(0) - 1).gather(1, flat.unsqueeze(1)).squeeze(1)
    dst = torch.where(held & (pos < m_max), flat * m_max + pos, torch.full_like(pos, -1))
    masked_m = onehot[:, :experts].sum(0).clamp(max=m_max)
    return dst.view(ids.shape).to(torch.int32), masked_m.to(torch.int32)


def _combine(down_rows, src2dst, weights):
    """out[t] = sum_j weights[t, j] * down_rows[src2dst[t, j]] in fp32 (entries -1 contribute 0)."""
    idx = src2dst.long()
    rows = down_rows[idx.clamp(min=0)].float() * (weights * (idx >= 0)).unsqueeze(-1)
    return rows.sum(dim=1)


def dequantize_weight(w, w_scale, scale):
    """The float weight [E, N, K] an FP8 expert weight stands for: codes times their 128x128 block
    scales ("block") or per-channel scales ("row")."""
    wf = w.float()
    if scale == "row":
        return wf * w_scale.float().reshape(w.shape[0], w.shape[1], 1)
    e, n, k = w.shape
    sb = w_scale.float().repeat_interleave(128, dim=1)[:, :n].repeat_interleave(128, dim=2)[:, :, :k]
    return wf * sb


def reference_moe(x, weights, ids, w13, w2):
    """The layer in plain float torch, the oracle of Fp8MoE's tests: for each token, sum over its
    chosen experts of weight * down(silu(gate) * up), with float expert weights w13 [E, 2I, H] and
    w2 [E, H, I] (dequantize_weight gives them from FP8) and no activation quantization."""
    xf = x.float()
    out = torch.zeros(x.shape[0], w2.shape[1], dtype=torch.float32, device=x.device)
    i = w2.shape[2]
    for j in range(ids.shape[1]):
        for e in torch.unique(ids[:, j]).tolist():
            tok = (ids[:, j] == e).nonzero().squeeze(1)
            h = xf[tok] @ w13[e].float().t()
            act = torch.nn.functional.silu(h[:, :i]) * h[:, i:]
            out[tok] += weights[tok, j].unsqueeze(1) * (act @ w2[e].float().t())
    return out
