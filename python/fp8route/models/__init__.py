"""Model definitions on fp8route (need torch): a Llama-architecture decoder (Llama 3.x, Qwen2.5,
Qwen3 dense, Mistral) whose linear layers run as Fp8Linear, with torch baselines beside it.
docs/models.md describes it."""
from .llama import (
    BACKENDS,
    DecodeGraph,
    LinearWeight,
    LlamaConfig,
    LlamaModel,
    RankWeights,
    SafetensorsState,
    linear_from_state,
    quantize,
    random_state_dict,
    rank_linear_shapes,
    rope_inv_freq,
    tp_shard,
)

__all__ = [
    "BACKENDS", "DecodeGraph", "LinearWeight", "LlamaConfig", "LlamaModel", "RankWeights", "SafetensorsState",
    "linear_from_state", "quantize", "random_state_dict", "rank_linear_shapes", "rope_inv_freq", "tp_shard",
]
