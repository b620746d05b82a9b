"""Model definitions on fp8route (need torch): a Llama-architecture decoder (Llama 3.x, Qwen2.5,
Qwen3 dense, Mistral) whose linear layers run as Fp8Linear, with torch baselines beside it.
docs/models.md describes it.

One concern a module, each importing only those above it:
  config.py      LlamaConfig (an HF config.json), rope_inv_freq
  weights.py     LinearWeight (a layer's weight as stored: FP8 per tensor / channel / block, or
                 dense) and quantize (fp8route.weight_quant.quantize_weight)
  checkpoint.py  HF state dicts: linear_from_state, SafetensorsState, random_state_dict
  sharding.py    tensor parallelism: tp_shard, rank_linear_shapes, RankWeights
  backends.py    BACKENDS: the linear layers, norms and quantizations of each execution backend
  llama.py       LlamaModel and DecodeGraph (and every name above, as before the split)
Mixture of experts (Qwen3-MoE, Mixtral; DeepSeek-V3's MoE blocks), docs/models.md:
  moe_config.py  MoeConfig (the MoE fields of an HF config.json, checkpoint names), expert_map
  experts.py     ExpertWeights (a layer's experts stacked [E, N, K]), from a state dict or random
  moe_ffn.py     MoeFfn: the MoE block on each backend (Fp8MoE, torch grouped GEMMs, float reference)
  moe_model.py   MoeModel (LlamaModel's attention, MoE FFNs), MoeRankWeights, random_moe_state_dict
"""
from .backends import BACKENDS
from .checkpoint import SafetensorsState, linear_from_state, random_state_dict
from .config import LlamaConfig, rope_inv_freq
from .llama import DecodeGraph, LlamaModel
from .sharding import RankWeights, rank_linear_shapes, tp_shard
from .weights import LinearWeight, quantize
from .moe_config import MoeConfig, expert_map, expert_range
from .experts import ExpertWeights
from .moe_ffn import MoeFfn
from .moe_model import MoeModel, MoeRankWeights, moe_block_from_state, random_moe_block, random_moe_state_dict

__all__ = [
    "BACKENDS", "DecodeGraph", "LinearWeight", "LlamaConfig", "LlamaModel", "RankWeights", "SafetensorsState",
    "linear_from_state", "quantize", "random_state_dict", "rank_linear_shapes", "rope_inv_freq", "tp_shard",
    "ExpertWeights", "MoeConfig", "MoeFfn", "MoeModel", "MoeRankWeights", "expert_map", "expert_range",
    "moe_block_from_state", "random_moe_block", "random_moe_state_dict",
]
