"""The routed experts of one MoE layer, stacked per expert as the grouped GEMMs take them: read from
an HF state dict (each expert's gate, up and down LinearWeight, in any format linear_from_state
reads) or made at random, for the experts one GPU holds."""
import torch

from .checkpoint import _gain, _random_linear, linear_from_state
from .moe_config import expert_range
from .weights import LinearWeight

# The kinds the stacked experts are held in: what the MoE backends run. "channel" takes per-tensor
# experts exactly (their scale repeated over the rows); Fp8MoE has no per-tensor form.
KINDS = ("block", "channel", "dense")


class ExpertWeights:
    """Experts [E_local] of one layer: w13 [E, 2I, H] (gate rows, then up: the fused gate_up of each
    expert) and w2 [E, H, I].

    kind "block": E4M3 codes, w13_scale [E, ceil(2I/128), ceil(H/128)], w2_scale [E, ceil(H/128),
    ceil(I/128)] (weight_scale_inv stacked); "channel": w13_scale [E, 2I], w2_scale [E, H]; "dense":
    float weights, no scales. global_ids: int64 [E] the global index of each expert held."""
    __slots__ = ("kind", "w13", "w13_scale", "w2", "w2_scale", "global_ids")

    def __init__(self, kind, w13, w13_scale, w2, w2_scale, global_ids):
        if kind not in KINDS:
            raise ValueError(f"kind: one of {KINDS}, got {kind!r}")
        self.kind, self.w13, self.w13_scale, self.w2, self.w2_scale = kind, w13, w13_scale, w2, w2_scale
        self.global_ids = torch.as_tensor(global_ids, dtype=torch.int64)

    @classmethod
    def stack(cls, gate_up, down, global_ids, kind, dtype=torch.float32):
        """From each expert's fused gate_up and down LinearWeights, converted to `kind` (dense: in
        dtype) with LinearWeight.convert: exact for the same kind, dense, or channel from per tensor;
        otherwise requantized from the dequantized weight (a second rounding)."""
        gu = [w.convert(kind, dtype) for w in gate_up]
        dn = [w.convert(kind, dtype) for w in down]
        sc = (lambda ws: None) if kind == "dense" else (lambda ws: torch.stack([w.scale for w in ws]))  # noqa: E731
        return cls(kind, torch.stack([w.w for w in gu]), sc(gu), torch.stack([w.w for w in dn]), sc(dn), global_ids)

    @property
    def experts(self):
        return self.w13.shape[0]

    @property
    def hidden(self):
        return self.w13.shape[2]

    @property
    def intermediate(self):
        return self.w2.shape[2]

    def expert(self, e):
        """(gate_up, down) LinearWeights of local expert e (views)."""
        sc = (lambda s: None) if self.kind == "dense" else (lambda s: s[e])  # noqa: E731
        return LinearWeight(self.kind, self.w13[e], sc(self.w13_scale)), LinearWeight(self.kind, self.w2[e],
                                                                                    sc(self.w2_scale))

    def convert(self, kind, dtype=torch.float32):
        if kind == self.kind and (kind != "dense" or self.w13.dtype == dtype):
            return self
        pairs = [self.expert(e) for e in range(self.experts)]
        return ExpertWeights.stack([p[0] for p in pairs], [p[1] for p in pairs], self.global_ids, kind, dtype)

    def dequant(self):
        """(w13, w2) float32 [E, 2I, H], [E, H, I]."""
        if self.kind == "dense":
            return self.w13.float(), self.w2.float()
        from ..moe_routing import dequantize_weight
        kind = "block" if self.kind == "block" else "row"
        return dequantize_weight(self.w13, self.w13_scale, kind), dequantize_weight(self.w2, self.w2_scale, kind)

    def to(self, device):
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return ExpertWeights(self.kind, mv(self.w13), mv(self.w13_scale), mv(self.w2), mv(self.w2_scale),
                             self.global_ids)

    def expert_nbytes(self):
        """Bytes of one expert (codes and scales of w13 and w2): what a step reads per active expert."""
        total = 0
        for t in (self.w13, self.w13_scale, self.w2, self.w2_scale):
            if t is not None:
                total += t.numel() * t.element_size()
        return total // self.experts


def experts_from_state(state, moe, layer, kind, dtype=torch.float32, rank=0, world=1, device="cpu"):
    """The experts of `layer` that rank `rank` of an expert-parallel group of `world` holds, from an HF
    state dict (moe: the MoeConfig naming them), each moved to `device` and converted to `kind`
    (KINDS) there. A static input_scale of a per-tensor checkpoint is not used: the MoE backends
    quantize the activations dynamically."""
    e0, e1 = expert_range(moe.num_experts, rank, world)
    gate_up, down = [], []
    for e in range(e0, e1):
        g, u, d = (linear_from_state(state, n).to(device) for n in moe.expert_names(layer, e))
        gate_up.append(LinearWeight.cat_rows([g, u]))
        down.append(d)
    return ExpertWeights.stack(gate_up, down, range(e0, e1), kind, dtype)


def random_expert_linears(moe, layer, e, weight_format, seed, device, num_layers=None):
    """(gate, up, down) LinearWeights of global expert e of `layer`, each from its own generator
    seeded by (seed, its HF name): the same values on every rank and in random_moe_state_dict. down
    is scaled by 1/sqrt(2 layers) as checkpoint._gain scales the dense down_proj."""
    h, i = moe.hidden_size, moe.moe_intermediate_size
    cfg = _Layers(num_layers or moe.num_hidden_layers)
    gate, up, down = moe.expert_names(layer, e)
    return (_random_linear(gate, i, h, h, False, weight_format, seed, device),
            _random_linear(up, i, h, h, False, weight_format, seed, device),
            _random_linear(down, h, i, i, False, weight_format, seed, device, _gain(cfg, "down_proj")))


def random_experts(moe, layer, kind, weight_format="channel", seed=0, rank=0, world=1, device="cpu",
                   dtype=torch.float32):
    """Random experts of `layer` for rank `rank` of `world`, made in `weight_format` (as a checkpoint
    would store them: "tensor", "channel", "block" or "dense") and converted to `kind`: exactly what
    experts_from_state reads from random_moe_state_dict with the same seed."""
    e0, e1 = expert_range(moe.num_experts, rank, world)
    gate_up, down = [], []
    for e in range(e0, e1):
        g, u, d = random_expert_linears(moe, layer, e, weight_format, seed, device)
        gate_up.append(LinearWeight.cat_rows([g, u]))
        down.append(d)
    return ExpertWeights.stack(gate_up, down, range(e0, e1), kind, dtype)


class _Layers:
    """The one field checkpoint._gain reads."""

    def __init__(self, n):
        self.num_hidden_layers = n
