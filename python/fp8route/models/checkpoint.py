"""HF-style checkpoints: the linear layers' names and shapes, reading a layer's weight in any of
the supported formats from a state dict, safetensors files read lazily, and random checkpoints."""
import glob
import os
import zlib
from collections.abc import Mapping

import torch

from ..weight_quant import BLOCK, _ceil
from .weights import LinearWeight, quantize

# The static activation scale random per-tensor weights carry: |x| up to 28 without clipping, and
# E4M3's 17 binades keep small values at full relative precision.
_RANDOM_INPUT_SCALE = 1.0 / 16


def _linear_specs(cfg):
    """(HF base name, N, K, has bias) of every linear layer."""
    h, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    hq, hk = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    out = []
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        out += [(p + "self_attn.q_proj", hq, h, cfg.qkv_bias), (p + "self_attn.k_proj", hk, h, cfg.qkv_bias),
                (p + "self_attn.v_proj", hk, h, cfg.qkv_bias), (p + "self_attn.o_proj", h, hq, cfg.o_bias),
                (p + "mlp.gate_proj", i, h, cfg.mlp_bias), (p + "mlp.up_proj", i, h, cfg.mlp_bias),
                (p + "mlp.down_proj", h, i, cfg.mlp_bias)]
    return out


def _generator(seed, name, device):
    g = torch.Generator(device=device)
    g.manual_seed((int(seed) * 0x9E3779B1 + zlib.crc32(name.encode())) % (1 << 62))
    return g


def _random_linear(name, n, k, k_full, bias, weight_format, seed, device, gain=1.0):
    """A random linear weight, N(0, gain^2 / k_full): gain 1 keeps the variance of the inputs."""
    g = _generator(seed, name, device)
    w = torch.randn(n, k, generator=g, device=device) * (gain * k_full ** -0.5)
    b = torch.randn(n, generator=g, device=device) * 0.1 if bias else None
    ins = None
    if weight_format == "tensor":
        ins = _RANDOM_INPUT_SCALE * (1 + 0.25 * torch.rand(1, generator=g, device=device))
    return quantize(w, weight_format, b, ins)


def _gain(cfg, name):
    """o_proj and down_proj, whose outputs join the residual stream, scaled by 1/sqrt(2 * layers):
    the stream keeps about unit variance over any depth, each sublayer adding a small part of it."""
    return (2 * cfg.num_hidden_layers) ** -0.5 if name.endswith(("o_proj", "down_proj")) else 1.0


def _random_vector(name, n, seed, device, base=1.0, spread=0.1):
    g = _generator(seed, name, device)
    return base + spread * torch.randn(n, generator=g, device=device)


def random_state_dict(cfg, seed=0, weight_format="channel", dtype=torch.bfloat16, device="cpu"):
    """A random checkpoint in HF names and layout: FP8 linear weights in `weight_format` ("tensor":
    scalar weight_scale and a static input_scale; "channel": weight_scale [N, 1]; "block":
    weight_scale_inv [ceil(N/128), ceil(K/128)]; "dense": `dtype` weights), everything else in
    `dtype`. Each tensor comes from its own generator seeded by (seed, name): the same values for
    any layer count and order. Generated on `device` (values differ between CPU and CUDA)."""
    state = {}
    for base, n, k, bias in _linear_specs(cfg):
        lw = _random_linear(base, n, k, k, bias, weight_format, seed, device, _gain(cfg, base))
        state[base + ".weight"] = lw.w if lw.kind != "dense" else lw.w.to(dtype)
        if lw.kind == "tensor":
            state[base + ".weight_scale"] = lw.scale.reshape(())
            state[base + ".input_scale"] = lw.input_scale.reshape(())
        elif lw.kind == "channel":
            state[base + ".weight_scale"] = lw.scale.reshape(n, 1)
        elif lw.kind == "block":
            state[base + ".weight_scale_inv"] = lw.scale
        if lw.bias is not None:
            state[base + ".bias"] = lw.bias.to(dtype)
    h, v = cfg.hidden_size, cfg.vocab_size
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        for name in ("input_layernorm", "post_attention_layernorm"):
            state[p + name + ".weight"] = _random_vector(p + name, h, seed, device).to(dtype)
        if cfg.qk_norm:
            for name in ("self_attn.q_norm", "self_attn.k_norm"):
                state[p + name + ".weight"] = _random_vector(p + name, cfg.head_dim, seed, device).to(dtype)
    state["model.norm.weight"] = _random_vector("model.norm", h, seed, device).to(dtype)
    g = _generator(seed, "model.embed_tokens", device)
    state["model.embed_tokens.weight"] = torch.randn(v, h, generator=g, device=device).to(dtype)
    if not cfg.tie_word_embeddings:
        g = _generator(seed, "lm_head", device)
        state["lm_head.weight"] = (torch.randn(v, h, generator=g, device=device) * h ** -0.5).to(dtype)
    return state


class SafetensorsState(Mapping):
    """The tensors of a safetensors checkpoint (one file, or every *.safetensors of a directory),
    read one at a time when asked for, so a large checkpoint is never in memory whole."""

    def __init__(self, path):
        from safetensors import safe_open
        path = os.fspath(path)
        files = sorted(glob.glob(os.path.join(path, "*.safetensors"))) if os.path.isdir(path) else [path]
        if not files:
            raise ValueError(f"path: no *.safetensors in {path}")
        self._open = {f: safe_open(f, framework="pt") for f in files}
        self._where = {k: f for f, h in self._open.items() for k in h.keys()}

    def __getitem__(self, name):
        return self._open[self._where[name]].get_tensor(name)

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)

    def __contains__(self, name):
        return name in self._where


def _need(state, name):
    if name not in state:
        raise KeyError(f"{name}: not in the checkpoint")
    return state[name]


def linear_from_state(state, base):
    """The LinearWeight of HF layer `base` (e.g. "model.layers.0.self_attn.q_proj") in a state dict:
    an unquantized weight, or float8_e4m3fn with weight_scale (one element: per tensor; N elements:
    per channel) or weight_scale_inv ([ceil(N/128), ceil(K/128)] blocks), and the optional
    input_scale and bias."""
    w = _need(state, base + ".weight")
    bias = state[base + ".bias"] if base + ".bias" in state else None
    bias = None if bias is None else bias.float()
    if w.dtype != torch.float8_e4m3fn:
        if not w.is_floating_point() or w.element_size() == 1:
            raise ValueError(f"{base}.weight: float8_e4m3fn or a float dtype expected, got {w.dtype}")
        return LinearWeight("dense", w, None, bias)
    n, k = w.shape
    ins = state[base + ".input_scale"] if base + ".input_scale" in state else None
    if ins is not None:
        if ins.numel() != 1:
            raise ValueError(f"{base}.input_scale: one element (a static per-tensor scale), got {tuple(ins.shape)}")
        ins = ins.float().reshape(1)
    if base + ".weight_scale_inv" in state:
        s = state[base + ".weight_scale_inv"].float()
        if tuple(s.shape) != (_ceil(n, BLOCK), _ceil(k, BLOCK)):
            raise ValueError(f"{base}.weight_scale_inv: [{_ceil(n, BLOCK)}, {_ceil(k, BLOCK)}] (128x128 blocks of "
                             f"[{n}, {k}]) expected, got {tuple(s.shape)}")
        return LinearWeight("block", w, s.contiguous(), bias, ins)
    if base + ".weight_scale" in state:
        s = state[base + ".weight_scale"].float()
        if s.numel() == 1:
            return LinearWeight("tensor", w, s.reshape(1), bias, ins)
        if s.numel() == n and (s.dim() == 1 or (s.dim() == 2 and s.shape[1] == 1)):
            return LinearWeight("channel", w, s.reshape(n).contiguous(), bias, ins)
        raise ValueError(f"{base}.weight_scale: one element or [{n}, 1] expected, got {tuple(s.shape)}")
    raise ValueError(f"{base}.weight: float8_e4m3fn without weight_scale or weight_scale_inv")
