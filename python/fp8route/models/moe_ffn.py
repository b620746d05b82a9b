"""The MoE FFN block on each execution backend: router logits -> top-k -> the experts this GPU holds
-> weighted sum (+ the shared expert). One class, MoeFfn, whose forward depends on the backend:

  "fp8route"  fp8route.Fp8MoE: the masked form (one CUDA graph per batch size) up to MASKED_MAX_TOKENS
              tokens, the contiguous form above; act "block" (1x128 activation groups, 128x128
              weight blocks) or "row" (per token, per expert channel).
  "torch_fp8" torch at its best: per-token quant compiled (torch.compile), rows sorted by expert,
              torch._scaled_grouped_mm with row-wise scales, silu_and_mul + quant compiled, the
              weighted combine with index_add_. No host synchronization (capturable).
  "bf16"      the same permutation with torch._grouped_mm in bf16 (on CUDA; elsewhere as "ref").
  "ref"       float32, every local expert run over every token and weighted by its combine weight
              (0 where the token did not choose it): simple, exact, E times the work; the tests' oracle.
"""
import torch
import torch.nn.functional as F

from ..moe_routing import grouped_topk, softmax_topk
from .backends import _compiled, _silu_mul, _tq_row, _tq_silu

MASKED_MAX_TOKENS = 64  # the grouped decode backend's rows per expert; the masked buffer is E x T rows


def moe_kind(backend, act):
    """(ExpertWeights kind, dense dtype) the MoE block of a backend runs."""
    if backend == "ref":
        return "dense", torch.float32
    if backend == "bf16":
        return "dense", torch.bfloat16
    if backend == "fp8route" and act == "block":
        return "block", None
    return "channel", None  # torch_fp8, fp8route row (and tensor: Fp8MoE has no per-tensor form)


class MoeFfn:
    """One MoE FFN block on one GPU (module docstring). y [T, H] -> [T, H] in the backend's dtype.

    moe: MoeConfig; experts: ExpertWeights in moe_kind(backend, act), on the device; router [E_global,
    H] (kept unquantized, as checkpoints store it); bias: DeepSeek-V3's e_score_correction_bias;
    shared: (gate_up, down) linears of the model backend `be` (be.linear), or None; add_shared: this
    GPU adds the shared expert (one rank of a group that sums its outputs). expert_map: int32
    [E_global] (moe_config.expert_map) when the GPU holds part of the experts; its output is then
    its part of the sum. record: eager calls keep the number of distinct local experts they ran in
    last_active (a host synchronization: for benchmarks, never inside a capture)."""

    def __init__(self, moe, experts, router, be, backend, act="row", bias=None, shared=None, add_shared=True,
                 expert_map=None, compile_=True):
        self.moe, self.experts, self.backend_name, self.act = moe, experts, backend, act
        self.be, self.shared, self.add_shared = be, shared, add_shared and shared is not None
        self.dtype = torch.float32 if backend == "ref" else torch.bfloat16
        self.router_dtype = torch.float32 if (backend == "ref" or moe.router_fp32) else self.dtype
        self.router = router.to(self.router_dtype)
        self.bias = None if bias is None else bias.float()
        self.expert_map = None if expert_map is None else expert_map.to(device=router.device, dtype=torch.int32)
        self.record, self.last_active = False, None
        kind, _ = moe_kind(backend, act)
        if experts.kind != kind:
            raise ValueError(f"experts: backend {backend} (act {act}) runs {kind} experts, got {experts.kind}")
        self.grouped = backend in ("torch_fp8", "fp8route") or (backend == "bf16" and router.is_cuda)
        if backend == "fp8route":
            from ..moe import Fp8MoE
            self.layer = Fp8MoE(experts.w13, experts.w13_scale, experts.w2, experts.w2_scale, moe.top_k,
                                scale="block" if kind == "block" else "row", routing=moe.routing,
                                renormalize=moe.renormalize, e_score_correction_bias=self.bias, n_group=moe.n_group,
                                topk_group=moe.topk_group, routed_scaling_factor=moe.routed_scaling_factor,
                                expert_map=self.expert_map)
        elif self.grouped:
            # torch's grouped GEMMs take b as [E, K, N]: the column-major view of [E, N, K].
            self.w13t, self.w2t = experts.w13.transpose(1, 2), experts.w2.transpose(1, 2)
        if backend == "torch_fp8":
            self.quant = _compiled(_tq_row, compile_)
            self.silu_quant = _compiled(_tq_silu, compile_)

    # -- what it reads ----------------------------------------------------------------------------

    def fixed_nbytes(self):
        """Bytes every step reads whatever the routing: the router and the shared expert."""
        total = self.router.numel() * self.router.element_size()
        if self.add_shared:
            total += sum(lin.nbytes for lin in self.shared)
        return total

    # -- running ----------------------------------------------------------------------------------

    def route(self, y):
        """(weights f32 [T, top_k], local ids int32 [T, top_k], -1 for experts held elsewhere)."""
        logits = F.linear(y.to(self.router_dtype), self.router)
        m = self.moe
        if m.routing == "softmax":
            w, ids = softmax_topk(logits, m.top_k, m.renormalize)
        else:
            w, ids = grouped_topk(logits, m.top_k, self.bias, m.n_group, m.topk_group, m.renormalize,
                                  m.routed_scaling_factor)
        if self.expert_map is not None:
            ids = self.expert_map[ids.long()]
        return w, ids

    def __call__(self, y):
        if self.backend_name == "fp8route":
            logits = F.linear(y.to(self.router_dtype), self.router)
            t = y.shape[0]
            # Decode: the masked form, whose shapes depend on T only (one graph per batch size).
            self.layer.masked_m_max = t if t <= MASKED_MAX_TOKENS else None
            out = self.layer(y.to(self.dtype), logits)
            if self.record:
                self._count(self.route(y)[1])
            if not self.add_shared:
                return out  # in self.dtype already: no float round trip (two kernels of a decode step)
            out = out.float()
        else:
            weights, ids = self.route(y)
            if self.record:
                self._count(ids)
            out = self._grouped(y, weights, ids) if self.grouped else self._dense(y, weights, ids)
        if self.add_shared:
            gu_lin, down_lin = self.shared
            out = out + self.be.silu_linear(self.be.linear_call(y, gu_lin), down_lin).float()
        return out.to(self.dtype)

    def _count(self, ids):
        self.last_active = int(torch.unique(ids[ids >= 0]).numel())

    def _dense(self, y, weights, ids):
        """Every local expert over every token, times the token's combine weight for it."""
        t, e, i = y.shape[0], self.experts.experts, self.experts.intermediate
        idx = torch.where(ids >= 0, ids, torch.full_like(ids, e)).long()
        cw = torch.zeros(t, e + 1, dtype=torch.float32, device=y.device).scatter_add_(1, idx, weights.float())
        w13, w2 = self.experts.w13, self.experts.w2
        x = y.to(w13.dtype)
        out = torch.zeros(t, w2.shape[1], dtype=torch.float32, device=y.device)
        for j in range(e):
            h = F.linear(x, w13[j])
            out += cw[:, j:j + 1] * F.linear(_silu_mul(h), w2[j]).float()
        return out

    def _permute(self, ids):
        """Rows grouped by expert (a stable sort of the T * top_k choices): (order: the choice of each
        row, token: its token, ends int32 [E]: torch's offs, valid: rows of a held expert)."""
        e = self.experts.experts
        flat = ids.reshape(-1).long()
        flat = torch.where(flat >= 0, flat, torch.full_like(flat, e))  # held elsewhere: after every group
        order = torch.sort(flat, stable=True).indices
        counts = torch.zeros(e + 1, dtype=torch.int64, device=ids.device).scatter_add_(0, flat, torch.ones_like(flat))
        ends = counts[:e].cumsum(0).to(torch.int32)
        return order, order // self.moe.top_k, ends, flat[order] < e

    def _grouped(self, y, weights, ids):
        order, token, ends, valid = self._permute(ids)
        if self.backend_name == "torch_fp8":
            q, s = self.quant(y)
            a = q.view(torch.uint8)[token].view(torch.float8_e4m3fn)  # row gather on the bytes
            gu = torch._scaled_grouped_mm(a, self.w13t, s.reshape(-1)[token], self.experts.w13_scale, offs=ends,
                                          out_dtype=torch.bfloat16)
            q2, s2 = self.silu_quant(gu)
            down = torch._scaled_grouped_mm(q2, self.w2t, s2.reshape(-1), self.experts.w2_scale, offs=ends,
                                            out_dtype=torch.bfloat16)
        else:
            gu = torch._grouped_mm(y.to(torch.bfloat16)[token], self.w13t, offs=ends, out_dtype=torch.bfloat16)
            down = torch._grouped_mm(_silu_mul(gu), self.w2t, offs=ends, out_dtype=torch.bfloat16)
        # Rows past the last group are not written by the grouped GEMMs: where, not a product with 0.
        contrib = torch.where(valid[:, None], down.float() * weights.reshape(-1)[order].float()[:, None], 0.0)
        out = torch.zeros(y.shape[0], down.shape[1], dtype=torch.float32, device=y.device)
        return out.index_add_(0, token, contrib)
