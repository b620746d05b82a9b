"""Mixture of experts (docs/moe.md): the grouped scaled GEMM and the Fp8MoE layer.

grouped_scaled_mm works on any DLPack tensor given out=; the routing helpers, Fp8MoE and
reference_moe need torch. Everything the layer does after the router logits runs on the device with
shapes fixed by the number of tokens, so a decode step (the masked path) captures in one CUDA graph.
"""
from ._native import lib
from .ops import _bits, _is_torch, _out_name, _NOT_TORCH

try:
    import torch
except ImportError:  # grouped_scaled_mm still works on any DLPack tensor, given out=
    torch = None

if torch is not None:
    # Routing, dispatch and the float reference: pure torch, in moe_routing (importable without the
    # native module, for fp8route.models).
    from .moe_routing import (_combine, contiguous_dispatch, dequantize_weight, grouped_topk,  # noqa: F401
                              masked_dispatch, reference_moe, softmax_topk)

_LAYOUTS = ("row_major", "col_major", "col_major_tma")


def _infer_scale(b, scale_b):
    """The scale kind scale_b's shape implies: [E, N] or [E, N, 1] row; [E] or [E, 1] tensor; any
    other 3-D shape ([E, ceil(N/128), ceil(K/128)]) block."""
    e, n = b.shape[0], b.shape[1]
    shape = tuple(scale_b.shape)
    if shape in ((e, n), (e, n, 1)):
        return "row"
    if shape in ((e,), (e, 1)):
        return "tensor"
    return "block"


def grouped_scaled_mm(a, b, scale_a, scale_b, offsets=None, masked_m=None, out_dtype=None, scale=None,
                      scale_a_layout="col_major_tma", out=None, backend=""):
    """Grouped scaled FP8 GEMM, out[r] = (a[r] @ b[e]^T) * scale_a * scale_b[e] for each row r of expert e.

    Contiguous form (offsets given): a [M_total, K] with rows grouped by expert, offsets int32 [E + 1]
    (start of expert 0, then each expert's end) or [E] (the ends: torch._scaled_grouped_mm's offs),
    out [M_total, N]. Masked form (masked_m given): a [E, M_max, K], masked_m int32 [E], out
    [E, M_max, N]; rows past masked_m[e] are never written and reach no output. b e4m3 [E, N, K].
    scale: "tensor" (scale_a one element or [E], scale_b [E]), "row" (scale_a per token [M_total] or
    [E, M_max], scale_b [E, N]), "block" (scale_a the s of fp8route's group quant of a with group
    128, in scale_a_layout, f32 or int32 packed UE8M0; scale_b [E, ceil(N/128), ceil(K/128)]); None
    infers it from scale_b. The device counts are never read on the host: values out of range are
    clamped (docs/moe.md), and the call is CUDA-graph capturable."""
    if (offsets is None) == (masked_m is None):
        raise ValueError("offsets, masked_m: give exactly one (offsets: the contiguous form, masked_m: the masked form)")
    if scale_a_layout not in _LAYOUTS:
        raise ValueError(f"scale_a_layout: one of {', '.join(_LAYOUTS)}, got {scale_a_layout!r}")
    form = "contiguous" if offsets is not None else "masked"
    groups = offsets if offsets is not None else masked_m
    kind = scale if scale is not None else _infer_scale(b, scale_b)
    name = _out_name(out_dtype if out_dtype is not None else "bf16")
    if torch is not None and torch.compiler.is_compiling():
        r = torch.ops.fp8route.grouped_scaled_mm(a, b, scale_a, scale_b, groups, form, kind, scale_a_layout,
                                                 _TORCH_OUT[name], backend)
        return r if out is None else out.copy_(r)
    return _grouped(a, b, scale_a, scale_b, groups, form, kind, scale_a_layout, name, out, backend)


def _grouped(a, b, scale_a, scale_b, groups, form, kind, layout, name, out, backend):
    if out is None:
        if not _is_torch(a):
            raise ValueError(_NOT_TORCH)
        shape = tuple(a.shape[:-1]) + (b.shape[1],)
        out = torch.empty(size=shape, dtype=_TORCH_OUT[name], device=a.device)
    lib.grouped_scaled_mm(_bits(a), _bits(b), scale_a, scale_b, groups, out, form, kind, layout, backend)
    return out


if torch is not None:
    _TORCH_OUT = {"bf16": torch.bfloat16, "f16": torch.float16}
    _OUT_NAME = {torch.bfloat16: "bf16", torch.float16: "f16"}

    # torch.ops.fp8route.grouped_scaled_mm, for torch.compile (a fragment of its own: the other ops
    # are defined in torch_ops.py).
    _LIB = torch.library.Library("fp8route", "FRAGMENT")
    _LIB.define("grouped_scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor groups, str form, "
                "str scale, str scale_a_layout, ScalarType out_dtype, str backend) -> Tensor")

    def _grouped_op(a, b, scale_a, scale_b, groups, form, scale, scale_a_layout, out_dtype, backend):
        return _grouped(a, b, scale_a, scale_b, groups, form, scale, scale_a_layout, _OUT_NAME[out_dtype], None,
                        backend)

    def _grouped_fake(a, b, scale_a, scale_b, groups, form, scale, scale_a_layout, out_dtype, backend):
        return a.new_empty(tuple(a.shape[:-1]) + (b.shape[1],), dtype=out_dtype)

    _LIB.impl("grouped_scaled_mm", _grouped_op, "CompositeExplicitAutograd")
    torch.library.register_fake("fp8route::grouped_scaled_mm", _grouped_fake, lib=_LIB)
else:
    _TORCH_OUT = {}


# ------------------------------------------------------------------------------------------------
# The layer
# ------------------------------------------------------------------------------------------------

if torch is not None:

    class Fp8MoE(torch.nn.Module):
        """A mixture-of-experts FFN on FP8 expert weights: routing -> permute + quant -> grouped gate_up
        -> fused SiLU-and-mul + quant -> grouped down -> weighted combine (+ shared expert, a module).

        w13 e4m3 [E, 2I, H] (gate rows first, then up), w2 e4m3 [E, H, I]. scale "block": w13_scale
        [E, ceil(2I/128), H/128] and w2_scale [E, ceil(H/128), I/128] (weight_scale_inv of the FP8
        checkpoints), activations quantized per 1x128 group; "row": w13_scale [E, 2I], w2_scale [E, H],
        activations per token. routing "softmax" (Qwen3-MoE, Mixtral) or "sigmoid" (DeepSeek-V3:
        e_score_correction_bias, n_group, topk_group, routed_scaling_factor).

        forward(x [T, H] bf16, router_logits [T, E]) -> [T, H] bf16. masked_m_max=None runs the
        contiguous form (prefill); an int runs the masked form with that M_max (decode; pass T or more
        and nothing is dropped), whose shapes depend on T alone: it captures in a CUDA graph.

        expert_map (int32 [E_global], optional): this GPU holds E of an expert-parallel layer's E_global
        experts; router_logits are over E_global, expert_map[g] is global expert g's index in w13/w2 or
        -1. Entries on experts held elsewhere are dropped: the output is this GPU's part of the sum,
        which the caller adds up over the GPUs (an all-reduce, or its own combine)."""

        def __init__(self, w13, w13_scale, w2, w2_scale, top_k, scale="block", routing="softmax",
                     renormalize=True, e_score_correction_bias=None, n_group=1, topk_group=1,
                     routed_scaling_factor=1.0, shared_expert=None, masked_m_max=None, expert_map=None):
            super().__init__()
            if scale not in ("block", "row"):
                raise ValueError(f"scale: 'block' or 'row', got {scale!r}")
            if routing not in ("softmax", "sigmoid"):
                raise ValueError(f"routing: 'softmax' or 'sigmoid', got {routing!r}")
            e, two_i, h = w13.shape
            if w2.shape != (e, h, two_i // 2) or two_i % 2:
                raise ValueError(f"w2: expected [E, H, I] = [{e}, {h}, {two_i // 2}] for w13 {tuple(w13.shape)}, "
                                 f"got {tuple(w2.shape)}")
            if routing == "sigmoid" and e_score_correction_bias is None:
                raise ValueError("e_score_correction_bias: required by routing='sigmoid'")
            self.experts, self.hidden, self.intermediate = e, h, two_i // 2
            self.top_k, self.scale, self.routing, self.renormalize = top_k, scale, routing, renormalize
            self.n_group, self.topk_group, self.routed_scaling_factor = n_group, topk_group, routed_scaling_factor
            self.masked_m_max = masked_m_max
            self.shared_expert = shared_expert
            self.register_buffer("w13", w13)
            self.register_buffer("w13_scale", w13_scale)
            self.register_buffer("w2", w2)
            self.register_buffer("w2_scale", w2_scale)
            self.register_buffer("e_score_correction_bias", e_score_correction_bias)
            if expert_map is not None and (expert_map.dim() != 1 or int(expert_map.max()) >= e):
                raise ValueError(f"expert_map: int [E_global] of local indices < {e} or -1, got {tuple(expert_map.shape)}")
            self.register_buffer("expert_map", None if expert_map is None else expert_map.to(torch.int32))

        def route(self, router_logits):
            if self.routing == "softmax":
                return softmax_topk(router_logits, self.top_k, self.renormalize)
            return grouped_topk(router_logits, self.top_k, self.e_score_correction_bias, self.n_group,
                                self.topk_group, self.renormalize, self.routed_scaling_factor)

        def forward(self, x, router_logits):
            from . import ops
            weights, ids = self.route(router_logits)
            if self.expert_map is not None:
                ids = self.expert_map[ids.long()]
            t, h, e = x.shape[0], self.hidden, self.experts
            block = self.scale == "block"
            masked = self.masked_m_max is not None
            if masked:
                m_max = self.masked_m_max
                src2dst, counts = masked_dispatch(ids, e, m_max)
                rows, kw = e * m_max, {"masked_m": counts}
                # Row-major group scales of rows [E * M_max] are the masked layout [E, M_max, G].
                layout = "row_major"
            else:
                src2dst, counts = contiguous_dispatch(ids, e)
                rows, kw, layout = t * self.top_k, {"offsets": counts}, "col_major_tma"

            def shaped(q, s, width):  # the masked form's [E, M_max, ...] views of row buffers
                if not masked:
                    return q, s
                return q.view(e, m_max, width), (s.view(e, m_max, *s.shape[1:]) if s.dim() > 1 else s.view(e, m_max))

            if block:
                q, s = ops.scatter_per_token_group_quant(x, src2dst, rows, layout=layout)
            else:
                # Per-token quant once, then each entry's codes and scale copied to its row; dropped
                # entries (-1) go to one extra row that is cut off, so no row is written twice.
                qx, sx = ops.per_token_quant(x)
                idx = src2dst.reshape(-1).long()
                idx = torch.where(idx >= 0, idx, torch.full_like(idx, rows))
                token = torch.arange(t, device=x.device).repeat_interleave(self.top_k)
                q = qx.new_zeros((rows + 1, h))
                q.view(torch.uint8)[idx] = qx.view(torch.uint8)[token]
                s = sx.new_zeros((rows + 1,))
                s[idx] = sx.reshape(-1)[token]
                q, s = q[:rows], s[:rows]
            q, s = shaped(q, s, h)
            gate_up = grouped_scaled_mm(q, self.w13, s, self.w13_scale, scale=self.scale, scale_a_layout=layout, **kw)
            if block:
                if masked:
                    q2, s2 = ops.masked_silu_and_mul_per_token_group_quant(gate_up, counts, layout=layout)
                else:
                    q2, s2 = ops.silu_and_mul_per_token_group_quant(gate_up, layout=layout)
            else:
                flat = gate_up.view(-1, 2 * self.intermediate)
                q2, s2 = ops.silu_and_mul_per_token_quant(flat)
                q2, s2 = shaped(q2, s2.reshape(-1), self.intermediate)
            down = grouped_scaled_mm(q2, self.w2, s2, self.w2_scale, scale=self.scale, scale_a_layout=layout, **kw)
            y = _combine(down.reshape(-1, h), src2dst, weights)
            if self.shared_expert is not None:
                y = y + self.shared_expert(x).float()
            return y.to(x.dtype)

else:
    Fp8MoE = None
