"""The mixture-of-experts fields of an HF config.json: Qwen3-MoE, Mixtral and DeepSeek-V3 (its MoE
FFN blocks only: its attention, MLA, is not implemented here), the checkpoint names of their MoE
tensors, and which GPU holds which experts under expert parallelism."""
from dataclasses import dataclass
from typing import Optional

import torch

from .config import LlamaConfig, read_hf_config

MOE_FAMILIES = ("qwen3_moe", "mixtral", "deepseek_v3")
# The Llama-architecture family whose attention and config rules a MoE family shares.
_BASE_FAMILY = {"qwen3_moe": "qwen3", "mixtral": "mistral"}


@dataclass
class MoeConfig:
    """One model's MoE FFN blocks (MoeConfig.from_hf parses an HF config.json).

    num_experts routed experts of moe_intermediate_size each, top_k per token. routing "softmax"
    (Qwen3-MoE, Mixtral: softmax over the experts in fp32, top_k, renormalized when renormalize) or
    "sigmoid" (DeepSeek-V3: sigmoid scores, the top_k chosen by score + e_score_correction_bias within
    the topk_group best of n_group groups, the scores renormalized, times routed_scaling_factor).
    shared_intermediate_size: the shared expert (DeepSeek-V3: n_shared_experts x moe_intermediate_size),
    0 for none. sparse_layers: the decoder layers whose FFN is the MoE block; the others are dense MLPs
    of dense_intermediate_size. base: the LlamaConfig of the rest of the decoder (attention, norms,
    embedding, dense MLPs) for the families this package runs whole, None for deepseek_v3."""
    family: str
    hidden_size: int
    num_hidden_layers: int
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    routing: str = "softmax"
    renormalize: bool = True
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    shared_intermediate_size: int = 0
    dense_intermediate_size: int = 0
    sparse_layers: tuple = ()
    router_fp32: bool = False        # DeepSeek-V3 computes the router logits in fp32, the others in bf16
    base: Optional[LlamaConfig] = None

    def __post_init__(self):
        if self.family not in MOE_FAMILIES:
            raise ValueError(f"model_type: one of {MOE_FAMILIES}, got {self.family!r}")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"num_experts_per_tok: 1 .. {self.num_experts} (the experts), got {self.top_k}")
        if self.routing not in ("softmax", "sigmoid"):
            raise ValueError(f"routing: softmax or sigmoid, got {self.routing!r}")
        if self.num_experts % self.n_group or self.topk_group > self.n_group:
            raise ValueError(f"n_group: {self.n_group} must divide num_experts {self.num_experts} and be >= "
                             f"topk_group {self.topk_group}")
        if self.routing == "sigmoid" and self.top_k > self.topk_group * (self.num_experts // self.n_group):
            raise ValueError(f"num_experts_per_tok: {self.top_k} exceeds the experts of topk_group groups")
        self.sparse_layers = tuple(sorted(self.sparse_layers))

    # -- the HF config ---------------------------------------------------------------------------

    @classmethod
    def from_hf(cls, cfg):
        """cfg: a config.json dict, the path of one, or a checkpoint directory holding one. Refused
        with a ValueError naming the field: other model types, an activation other than silu, Qwen2-MoE's
        gated shared expert, DeepSeek routing other than noaux_tc (sigmoid, grouped top-k)."""
        cfg = read_hf_config(cfg)
        mt = cfg.get("model_type")
        if mt not in MOE_FAMILIES:
            raise ValueError(f"model_type: one of {MOE_FAMILIES}, got {mt!r}")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act: silu expected (experts are gate_up -> silu_and_mul -> down), got {act!r}")
        layers, hidden = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"])
        common = dict(family=mt, hidden_size=hidden, num_hidden_layers=layers,
                      top_k=int(cfg["num_experts_per_tok"]))
        if mt == "qwen3_moe":
            if cfg.get("shared_expert_intermediate_size"):
                raise ValueError("shared_expert_intermediate_size: Qwen2-MoE's gated shared expert is not supported")
            e = int(cfg["num_experts"])
            step = int(cfg.get("decoder_sparse_step", 1) or 1)
            dense = set(cfg.get("mlp_only_layers") or ())
            # HF Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers, every step-th layer.
            sparse = [i for i in range(layers) if i not in dense and e > 0 and (i + 1) % step == 0]
            return cls(num_experts=e, moe_intermediate_size=int(cfg["moe_intermediate_size"]),
                       renormalize=bool(cfg.get("norm_topk_prob", False)),
                       dense_intermediate_size=int(cfg.get("intermediate_size") or 0), sparse_layers=tuple(sparse),
                       base=LlamaConfig.from_hf(dict(cfg, model_type="qwen3")), **common)
        if mt == "mixtral":
            # Every layer sparse; softmax, top-k, always renormalized; intermediate_size is the expert's.
            return cls(num_experts=int(cfg["num_local_experts"]), moe_intermediate_size=int(cfg["intermediate_size"]),
                       renormalize=True, sparse_layers=tuple(range(layers)),
                       base=LlamaConfig.from_hf(dict(cfg, model_type="mistral")), **common)
        scoring, method = cfg.get("scoring_func", "sigmoid"), cfg.get("topk_method", "noaux_tc")
        if scoring != "sigmoid" or method != "noaux_tc":
            raise ValueError(f"topk_method: DeepSeek-V3's sigmoid noaux_tc routing only, got scoring_func "
                             f"{scoring!r}, topk_method {method!r}")
        first = int(cfg.get("first_k_dense_replace", 0))
        freq = int(cfg.get("moe_layer_freq", 1) or 1)
        moe_i = int(cfg["moe_intermediate_size"])
        return cls(num_experts=int(cfg["n_routed_experts"]), moe_intermediate_size=moe_i, routing="sigmoid",
                   renormalize=bool(cfg.get("norm_topk_prob", True)), n_group=int(cfg.get("n_group", 1)),
                   topk_group=int(cfg.get("topk_group", 1)),
                   routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
                   shared_intermediate_size=int(cfg.get("n_shared_experts") or 0) * moe_i,
                   dense_intermediate_size=int(cfg.get("intermediate_size") or 0),
                   sparse_layers=tuple(i for i in range(layers) if i >= first and i % freq == 0),
                   router_fp32=True, base=None, **common)

    # -- checkpoint names --------------------------------------------------------------------------

    def block_prefix(self, layer):
        """The MoE block's module name in HF checkpoints, with a trailing dot."""
        return f"model.layers.{layer}." + ("block_sparse_moe." if self.family == "mixtral" else "mlp.")

    def router_name(self, layer):
        return self.block_prefix(layer) + "gate.weight"

    def bias_name(self, layer):
        """DeepSeek-V3's e_score_correction_bias (the others have none)."""
        return self.block_prefix(layer) + "gate.e_score_correction_bias"

    def expert_names(self, layer, e):
        """(gate, up, down) base names of routed expert e (Mixtral's w1, w3, w2)."""
        p = f"{self.block_prefix(layer)}experts.{e}."
        if self.family == "mixtral":
            return p + "w1", p + "w3", p + "w2"
        return p + "gate_proj", p + "up_proj", p + "down_proj"

    def shared_names(self, layer):
        p = self.block_prefix(layer) + "shared_experts."
        return p + "gate_proj", p + "up_proj", p + "down_proj"

    def dense_names(self, layer):
        """A dense layer's MLP (Qwen3-MoE's mlp_only_layers, DeepSeek-V3's first layers)."""
        p = f"model.layers.{layer}.mlp."
        return p + "gate_proj", p + "up_proj", p + "down_proj"

    # -- shapes ------------------------------------------------------------------------------------

    def expert_shapes(self):
        """{"gate_up": (N, K), "down": (N, K)} of one routed expert."""
        i, h = self.moe_intermediate_size, self.hidden_size
        return {"gate_up": (2 * i, h), "down": (h, i)}


def expert_range(num_experts, rank, world):
    """The global experts [e0, e1) that rank `rank` of an expert-parallel group of `world` holds:
    contiguous equal blocks (ValueError when world does not divide the experts)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank: 0 <= rank < world ({world}), got {rank}")
    if num_experts % world:
        raise ValueError(f"num_experts: {num_experts} is not divisible by the expert-parallel size {world}")
    per = num_experts // world
    return rank * per, (rank + 1) * per


def expert_map(num_experts, rank, world, device="cpu"):
    """int32 [num_experts]: global expert g's index among rank's experts, or -1 where another rank holds
    it (Fp8MoE's expert_map)."""
    e0, e1 = expert_range(num_experts, rank, world)
    m = torch.full((num_experts,), -1, dtype=torch.int32, device=device)
    m[e0:e1] = torch.arange(e1 - e0, dtype=torch.int32, device=device)
    return m
