"""The fields of an HF config.json the decoder reads, and the RoPE frequencies they give."""
import json
import math
import os
from dataclasses import dataclass
from typing import Optional

import torch

_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def read_hf_config(cfg):
    """A config.json as a dict: given as a dict, the path of one, or a checkpoint directory holding one."""
    if isinstance(cfg, (str, os.PathLike)):
        path = os.fspath(cfg)
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        with open(path) as f:
            cfg = json.load(f)
    return dict(cfg)


@dataclass
class LlamaConfig:
    """The fields of an HF config.json the decoder reads (LlamaConfig.from_hf parses one)."""
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    head_dim: int = 0                      # 0: hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None    # None, or {"rope_type": "llama3" | "linear", ...}
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False                 # Qwen2.5; Llama with attention_bias
    o_bias: bool = False                   # Llama with attention_bias
    mlp_bias: bool = False                 # Llama with mlp_bias
    qk_norm: bool = False                  # Qwen3: RMSNorm over head_dim on q and k before RoPE
    sliding_window: Optional[int] = None   # Mistral: a query attends to the last `sliding_window` positions
    model_type: str = "llama"

    def __post_init__(self):
        if not self.head_dim:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_key_value_heads: {self.num_key_value_heads} does not divide "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim: must be even (RoPE rotates halves), got {self.head_dim}")
        self.rope_scaling = _rope_scaling(self.rope_scaling)

    @classmethod
    def from_hf(cls, cfg):
        """cfg: a config.json dict, the path of one, or a checkpoint directory holding one."""
        cfg = read_hf_config(cfg)
        mt = cfg.get("model_type", "llama")
        if mt not in _FAMILIES:
            raise ValueError(f"model_type: one of {_FAMILIES}, got {mt!r}")
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act: silu expected (gate_up -> silu_and_mul), got {act!r}")
        heads = int(cfg["num_attention_heads"])
        bias = bool(cfg.get("attention_bias", False))
        qkv_bias = {"qwen2": True, "mistral": False}.get(mt, bias)   # Qwen2 always has q/k/v bias
        o_bias = {"qwen2": False, "mistral": False}.get(mt, bias)
        window = None
        if mt == "mistral":
            window = cfg.get("sliding_window")
        elif cfg.get("use_sliding_window"):
            raise ValueError(f"use_sliding_window: {mt}'s per-layer sliding window is not supported")
        return cls(
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
            vocab_size=int(cfg["vocab_size"]),
            head_dim=int(cfg.get("head_dim") or 0),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            rope_scaling=cfg.get("rope_scaling"),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)) if mt == "llama" else False,
            qk_norm=mt == "qwen3",
            sliding_window=int(window) if window else None,
            model_type=mt,
        )


def _rope_scaling(rs):
    if rs is None:
        return None
    rs = dict(rs)
    kind = rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return None
    if kind not in ("llama3", "linear"):
        raise ValueError(f"rope_scaling: rope_type llama3, linear or default supported, got {kind!r}")
    rs["rope_type"] = kind
    return rs


def rope_inv_freq(cfg):
    """The RoPE inverse frequencies (float64 [head_dim / 2]), with llama3 or linear scaling applied."""
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    rs = cfg.rope_scaling
    if rs is None:
        return inv
    factor = float(rs["factor"])
    if rs["rope_type"] == "linear":
        return inv / factor
    low, high = float(rs.get("low_freq_factor", 1.0)), float(rs.get("high_freq_factor", 4.0))
    old = float(rs.get("original_max_position_embeddings", 8192))
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)  # long wavelengths: divided by factor
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, blended, scaled)
