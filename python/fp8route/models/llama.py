"""A Llama-architecture decoder on fp8route: Llama 3.x, Qwen2.5, Qwen3 (dense) and Mistral.

    cfg = LlamaConfig.from_hf("Meta-Llama-3.1-8B-Instruct-FP8/config.json")
    model = LlamaModel.from_pretrained("Meta-Llama-3.1-8B-Instruct-FP8", backend="fp8route",
                                       device="cuda", max_batch=8, max_seq=4096)
    logits = model.prefill(tokens)                 # int64 [B, S] -> logits of the last position [B, V]
    logits = model.decode_step(tokens, positions)  # int64 [B] each, on the device -> [B, V]
    step = model.capture_decode(8)                 # the decode step of 8 sequences as a CUDA graph
    logits = step(tokens, positions)

Each layer: input_layernorm -> qkv_proj (q, k, v fused) -> [Qwen3: q_norm, k_norm] -> RoPE ->
attention (grouped-query) over a static KV cache -> o_proj -> residual add;
post_attention_layernorm -> gate_up_proj (fused) -> silu_and_mul -> down_proj -> residual add. Then
the final norm and lm_head (a bf16 F.linear: the vocabulary projection is kept out of FP8).

Backends (the linear layers, and the norms and quantizations that feed them):
  "fp8route"  Fp8Linear layers. The residual add, the RMSNorm and the activation quantization run as
              one fused op whose codes and scales feed Fp8Linear.forward_quantized. act="row"
              (per-token scales, default): silu_and_mul_per_token_quant feeds down_proj; act="block"
              (1x128 groups): silu_and_mul_per_token_group_quant feeds down_proj; act="tensor": a
              checkpoint's static input scales (rms_norm_per_tensor_quant fused; per_tensor_quant
              before o_proj/down_proj), else dynamic per-tensor scales (rms_norm, then forward).
  "torch_fp8" per-token quantization written in torch and compiled (torch.compile), with the norms
              and silu_and_mul it follows, then torch._scaled_mm with row-wise scales.
  "bf16"      F.linear on the dequantized weights in bf16, norms in plain torch.
  "ref"       float32 throughout on the dequantized weights (CPU or GPU): the tests' reference.

Attention (attention=, any backend): "fused" (the default on CUDA in bf16/f16 where the head dim is
64, 128 or 256) runs a decode step's q/k norms, RoPE, KV-cache append and attention as one fp8route
kernel (fp8route.decode_attention); prefill, and "sdpa", use torch: RoPE compiled, the cache written
with index_put_, SDPA.

Weights come from an HF-style state dict: safetensors checkpoints (FP8 per tensor with an optional
static input_scale, FP8 per channel, FP8 in 128x128 blocks with weight_scale_inv, or unquantized), or
random_state_dict(). Tensor parallelism follows torch.distributed when it is initialized. docs/models.md
has the details.
"""
import glob
import json
import math
import os
import zlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Mapping, Optional

import torch
import torch.nn.functional as F

BACKENDS = ("fp8route", "torch_fp8", "bf16", "ref")
ATTENTIONS = ("fused", "sdpa")
FUSED_HEAD_DIMS = (64, 128, 256)  # the head dims fp8route.decode_attention is built for
_ACTS = ("row", "block", "tensor")
_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
FP8_MAX = 448.0  # largest finite E4M3 value
BLOCK = 128      # the 128x128 weight blocks and 1x128 activation groups of block scaling
# The static activation scale random per-tensor weights carry: |x| up to 28 without clipping, and
# E4M3's 17 binades keep small values at full relative precision.
_RANDOM_INPUT_SCALE = 1.0 / 16


def _ceil(a, b):
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------

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
        if isinstance(cfg, (str, os.PathLike)):
            path = os.fspath(cfg)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            with open(path) as f:
                cfg = json.load(f)
        cfg = dict(cfg)
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


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------

def quantize(w, kind, bias=None, input_scale=None):
    """A float weight [N, K] as a LinearWeight of `kind`: "tensor", "channel", "block" (E4M3 codes,
    scale = amax / 448 per tensor, per row or per 128x128 block) or "dense" (w as float32)."""
    w = w.float()
    n, k = w.shape
    if kind == "dense":
        return LinearWeight("dense", w, None, bias, input_scale)
    if kind == "tensor":
        scale = (w.abs().amax() / FP8_MAX).clamp(min=1e-12).reshape(1)
        q = w / scale
    elif kind == "channel":
        scale = (w.abs().amax(dim=1) / FP8_MAX).clamp(min=1e-12)
        q = w / scale[:, None]
    elif kind == "block":
        nb, kb = _ceil(n, BLOCK), _ceil(k, BLOCK)
        padded = w.new_zeros(nb * BLOCK, kb * BLOCK)
        padded[:n, :k] = w
        blocks = padded.view(nb, BLOCK, kb, BLOCK)
        scale = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)
        q = (blocks / scale[:, None, :, None]).view(nb * BLOCK, kb * BLOCK)[:n, :k]
    else:
        raise ValueError(f"kind: tensor, channel, block or dense, got {kind!r}")
    # torch's float8 cast turns values past 464 into NaN: clamp first.
    q = q.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).contiguous()
    return LinearWeight(kind, q, scale.contiguous(), bias, input_scale)


class LinearWeight:
    """A linear layer's weight [N, K] as stored.

    kind "tensor": w E4M3, scale f32 [1]; "channel": scale f32 [N]; "block": scale f32
    [ceil(N/128), ceil(K/128)] (w = codes * scale of the block); "dense": w float, no scale.
    input_scale: a checkpoint's static activation scale (f32 [1]) or None. bias: [N] or None.
    """
    __slots__ = ("kind", "w", "scale", "bias", "input_scale")

    def __init__(self, kind, w, scale=None, bias=None, input_scale=None):
        self.kind, self.w, self.scale, self.bias, self.input_scale = kind, w, scale, bias, input_scale

    @property
    def shape(self):
        return tuple(self.w.shape)

    def dequant(self):
        """float32 [N, K]."""
        f = self.w.float()
        if self.kind == "dense":
            return f
        if self.kind == "tensor":
            return f * self.scale.reshape(())
        if self.kind == "channel":
            return f * self.scale[:, None]
        n, k = f.shape
        s = self.scale.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
        return f * s

    def to(self, device):
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return LinearWeight(self.kind, mv(self.w), mv(self.scale), mv(self.bias), mv(self.input_scale))

    def convert(self, kind, dtype=torch.float32):
        """This weight as `kind`. Exact when kind is this kind, "dense" (dequantized, in dtype), or
        "channel" from "tensor" (the scale repeated per row); otherwise requantized from the
        dequantized values (a second rounding). "rowwise": "tensor" or "channel" kept, others to
        "channel" (what a per-token-activation GEMM takes)."""
        if kind == "dense":
            w = self.w.to(dtype) if self.kind == "dense" else self.dequant().to(dtype)
            return LinearWeight("dense", w, None, self.bias, self.input_scale)
        if kind == "rowwise":
            kind = self.kind if self.kind in ("tensor", "channel") else "channel"
        if kind == self.kind:
            return self
        if kind == "channel" and self.kind == "tensor":
            return LinearWeight("channel", self.w, self.scale.reshape(1).expand(self.w.shape[0]).contiguous(),
                                self.bias, self.input_scale)
        return quantize(self.dequant(), kind, self.bias, self.input_scale)

    def rows(self, a, b):
        """Output rows [a, b). Exact except for a block weight cut inside a block (a % 128 != 0),
        which is requantized into the slice's own blocks."""
        if a == 0 and b == self.w.shape[0]:
            return self
        bias = None if self.bias is None else self.bias[a:b]
        w = self.w[a:b]
        if self.kind in ("dense", "tensor"):
            return LinearWeight(self.kind, w, self.scale, bias, self.input_scale)
        if self.kind == "channel":
            return LinearWeight("channel", w, self.scale[a:b], bias, self.input_scale)
        if a % BLOCK == 0:  # a block's scale stays right for any subset of its rows
            return LinearWeight("block", w, self.scale[a // BLOCK:_ceil(b, BLOCK)].contiguous(), bias,
                                self.input_scale)
        return quantize(self.dequant()[a:b], "block", bias, self.input_scale)

    def cols(self, a, b):
        """Input columns [a, b) (the bias is kept whole: the caller decides which rank adds it)."""
        if a == 0 and b == self.w.shape[1]:
            return self
        w = self.w[:, a:b].contiguous()
        if self.kind != "block":
            return LinearWeight(self.kind, w, self.scale, self.bias, self.input_scale)
        if a % BLOCK == 0:
            return LinearWeight("block", w, self.scale[:, a // BLOCK:_ceil(b, BLOCK)].contiguous(), self.bias,
                                self.input_scale)
        return quantize(self.dequant()[:, a:b], "block", self.bias, self.input_scale)

    @staticmethod
    def cat_rows(parts):
        """Fuses layers that read the same input (q, k, v; gate, up) by concatenating along N.
        Per-tensor parts with one scale stay per tensor; per-tensor parts with different scales
        become one per-channel weight (each part's scale repeated over its rows: exact, no
        requantization); block parts concatenate exactly when every part but the last fills
        whole blocks, else the concatenation is requantized into blocks. Static input scales: the
        largest (no part's activations clip)."""
        biases = [p.bias for p in parts]
        bias = None
        if any(b is not None for b in biases):
            ref = next(b for b in biases if b is not None)
            bias = torch.cat([b if b is not None else ref.new_zeros(p.w.shape[0]) for b, p in zip(biases, parts)])
        ins = [p.input_scale for p in parts]
        input_scale = None
        if all(s is not None for s in ins):
            input_scale = torch.stack([s.reshape(()) for s in ins]).amax().reshape(1)
        kinds = {p.kind for p in parts}
        cat_w = lambda: torch.cat([p.w for p in parts])  # noqa: E731
        if kinds == {"dense"}:
            return LinearWeight("dense", cat_w(), None, bias, input_scale)
        if "dense" in kinds:  # unquantized beside quantized parts: all dequantized
            return LinearWeight("dense", torch.cat([p.dequant() for p in parts]), None, bias, input_scale)
        if kinds == {"tensor"} and all(torch.equal(p.scale, parts[0].scale) for p in parts):
            return LinearWeight("tensor", cat_w(), parts[0].scale, bias, input_scale)
        if kinds <= {"tensor", "channel"}:
            scale = torch.cat([p.convert("channel").scale for p in parts])
            return LinearWeight("channel", cat_w(), scale, bias, input_scale)
        if kinds == {"block"} and all(p.w.shape[0] % BLOCK == 0 for p in parts[:-1]):
            return LinearWeight("block", cat_w(), torch.cat([p.scale for p in parts]), bias, input_scale)
        dense = torch.cat([p.dequant() for p in parts])
        return quantize(dense, "block" if "block" in kinds else "channel", bias, input_scale)

    def nbytes(self):
        total = self.w.numel() * self.w.element_size()
        for t in (self.scale, self.bias):
            if t is not None:
                total += t.numel() * t.element_size()
        return total


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


# ---------------------------------------------------------------------------------------------
# Tensor-parallel layout and the weights of one rank
# ---------------------------------------------------------------------------------------------

def _dist_rank_world():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass
class _Shard:
    """What rank `rank` of `world` holds: q heads [q0, q0 + hq), kv heads [k0, k0 + hk) (kv heads are
    replicated when world exceeds their count), intermediate [i0, i0 + ni), vocabulary rows
    [v0, v0 + nv) of a per-rank block of vr rows (the last block zero-padded)."""
    rank: int
    world: int
    hq: int
    q0: int
    hk: int
    k0: int
    ni: int
    i0: int
    vr: int
    v0: int
    nv: int


def tp_shard(cfg, rank, world):
    """The _Shard of rank `rank` of `world` (ValueError naming the config field that does not split)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank: 0 <= rank < world ({world}), got {rank}")
    nh, nk = cfg.num_attention_heads, cfg.num_key_value_heads
    if nh % world:
        raise ValueError(f"num_attention_heads: {nh} is not divisible by the tensor-parallel size {world}")
    if nk % world and world % nk:
        raise ValueError(f"num_key_value_heads: {nk} must divide or be divisible by the tensor-parallel size {world}")
    if cfg.intermediate_size % world:
        raise ValueError(f"intermediate_size: {cfg.intermediate_size} is not divisible by the tensor-parallel "
                         f"size {world}")
    hq = nh // world
    hk, k0 = (nk // world, rank * (nk // world)) if nk >= world else (1, rank * nk // world)
    ni = cfg.intermediate_size // world
    vr = _ceil(cfg.vocab_size, world)
    v0 = min(rank * vr, cfg.vocab_size)
    return _Shard(rank, world, hq, rank * hq, hk, k0, ni, rank * ni, vr, v0, min(cfg.vocab_size, v0 + vr) - v0)


def rank_linear_shapes(cfg, world=1, rank=0):
    """{"qkv_proj", "o_proj", "gate_up_proj", "down_proj": (N, K)} of one rank's fused linears."""
    sh, d, h = tp_shard(cfg, rank, world), cfg.head_dim, cfg.hidden_size
    return {"qkv_proj": ((sh.hq + 2 * sh.hk) * d, h), "o_proj": (h, sh.hq * d), "gate_up_proj": (2 * sh.ni, h),
            "down_proj": (h, sh.ni)}


@dataclass
class RankWeights:
    """The weights one tensor-parallel rank holds, with q/k/v and gate/up fused: per layer qkv
    [(hq + 2 hk) * head_dim, hidden] and gate_up [2 * ni, hidden] (column-parallel), o
    [hidden, hq * head_dim] and down [hidden, ni] (row-parallel; their bias on rank 0 only), the
    norms; embed [vocab, hidden] (replicated) and lm_head [vr, hidden] (this rank's vocabulary rows)."""
    config: LlamaConfig
    rank: int
    world: int
    layers: list
    embed: torch.Tensor
    lm_head: torch.Tensor
    norm: torch.Tensor

    @classmethod
    def from_state(cls, config, state, rank=None, world=None, kind=None, device="cpu", dtype=torch.bfloat16):
        """Shards and fuses an HF state dict for (rank, world) (default: torch.distributed's, or 0 of 1).
        kind: convert each layer to this LinearWeight kind before slicing ("dense" in `dtype`,
        "rowwise", "channel", "block"; None keeps the checkpoint's). Norms, embedding and lm_head
        in `dtype`. Tensors are moved to `device` one layer at a time, then cut there."""
        if rank is None or world is None:
            rank, world = _dist_rank_world()
        cfg, d = config, config.head_dim
        sh = tp_shard(cfg, rank, world)

        def lin(base):
            lw = linear_from_state(state, base).to(device)
            return lw if kind is None else lw.convert(kind, dtype)

        def vec(name):
            return _need(state, name).to(device=device, dtype=dtype)

        layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            q = lin(p + "self_attn.q_proj").rows(sh.q0 * d, (sh.q0 + sh.hq) * d)
            k = lin(p + "self_attn.k_proj").rows(sh.k0 * d, (sh.k0 + sh.hk) * d)
            v = lin(p + "self_attn.v_proj").rows(sh.k0 * d, (sh.k0 + sh.hk) * d)
            o = lin(p + "self_attn.o_proj").cols(sh.q0 * d, (sh.q0 + sh.hq) * d)
            gate = lin(p + "mlp.gate_proj").rows(sh.i0, sh.i0 + sh.ni)
            up = lin(p + "mlp.up_proj").rows(sh.i0, sh.i0 + sh.ni)
            down = lin(p + "mlp.down_proj").cols(sh.i0, sh.i0 + sh.ni)
            if rank:  # a row-parallel layer's bias is added once, after the sum over ranks
                o.bias = down.bias = None
            layer = dict(qkv=LinearWeight.cat_rows([q, k, v]), o=o, gate_up=LinearWeight.cat_rows([gate, up]),
                         down=down, input_norm=vec(p + "input_layernorm.weight"),
                         post_norm=vec(p + "post_attention_layernorm.weight"))
            if cfg.qk_norm:
                layer["q_norm"] = vec(p + "self_attn.q_norm.weight")
                layer["k_norm"] = vec(p + "self_attn.k_norm.weight")
            layers.append(layer)
        embed = vec("model.embed_tokens.weight")
        lm = embed if cfg.tie_word_embeddings else vec("lm_head.weight")
        return cls(cfg, rank, world, layers, embed, _vocab_rows(lm, sh), vec("model.norm.weight"))

    @classmethod
    def random(cls, config, rank=0, world=1, seed=0, weight_format="channel", device="cpu", dtype=torch.bfloat16):
        """Random weights generated at this rank's fused shapes directly (nothing of the other ranks
        is made: fast for a large model's one rank). The values depend on (seed, rank, world), so
        ranks of different world sizes are not slices of one model: tests of tensor parallelism
        shard random_state_dict() with from_state() instead."""
        cfg, d, h = config, config.head_dim, config.hidden_size
        sh = tp_shard(cfg, rank, world)
        tag = f"#{rank}/{world}"
        layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            rl = lambda name, n, k, k_full, bias: _random_linear(  # noqa: E731
                p + name + tag, n, k, k_full, bias, weight_format, seed, device, _gain(cfg, name))
            layer = dict(
                qkv=rl("qkv", (sh.hq + 2 * sh.hk) * d, h, h, cfg.qkv_bias),
                o=rl("o_proj", h, sh.hq * d, cfg.num_attention_heads * d, cfg.o_bias and rank == 0),
                gate_up=rl("gate_up", 2 * sh.ni, h, h, cfg.mlp_bias),
                down=rl("down_proj", h, sh.ni, cfg.intermediate_size, cfg.mlp_bias and rank == 0),
                input_norm=_random_vector(p + "input_norm", h, seed, device).to(dtype),
                post_norm=_random_vector(p + "post_norm", h, seed, device).to(dtype))
            if cfg.qk_norm:
                layer["q_norm"] = _random_vector(p + "q_norm", d, seed, device).to(dtype)
                layer["k_norm"] = _random_vector(p + "k_norm", d, seed, device).to(dtype)
            layers.append(layer)
        g = _generator(seed, "embed", device)
        embed = torch.randn(cfg.vocab_size, h, generator=g, device=device).to(dtype)
        g = _generator(seed, "lm_head" + tag, device)
        lm = (torch.randn(sh.vr, h, generator=g, device=device) * h ** -0.5).to(dtype)
        lm[sh.nv:] = 0
        return cls(cfg, rank, world, layers, embed, lm, _random_vector("norm", h, seed, device).to(dtype))


def _vocab_rows(lm, sh):
    part = lm[sh.v0:sh.v0 + sh.nv]
    if sh.nv == sh.vr:
        return part.contiguous()
    out = lm.new_zeros(sh.vr, lm.shape[1])
    out[:sh.nv] = part
    return out


# ---------------------------------------------------------------------------------------------
# Backends: the linear layers, and the norms / quantizations that feed them
# ---------------------------------------------------------------------------------------------

def _weight_kind(backend, act):
    """The LinearWeight kind (and dense dtype) a backend runs."""
    if backend == "ref":
        return "dense", torch.float32
    if backend == "bf16":
        return "dense", torch.bfloat16
    if backend == "torch_fp8":
        return "channel", None
    return ("block" if act == "block" else "rowwise"), None


def _rms_norm(h, w, eps):
    """RMSNorm as HF Llama computes it: in float32, rounded to h's dtype, then times the weight."""
    hf = h.float()
    y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(h.dtype)


def _silu_mul(gu):
    i = gu.shape[-1] // 2
    return F.silu(gu[..., :i]) * gu[..., i:]


class _DenseLinear:
    def __init__(self, lw, dtype):
        self.w = lw.w.to(dtype)
        self.bias = None if lw.bias is None else lw.bias.to(dtype)
        self.nbytes = LinearWeight("dense", self.w, None, self.bias).nbytes()

    def __call__(self, x):
        return F.linear(x, self.w, self.bias)


class _TorchBackend:
    """ref (float32) and bf16: plain torch."""

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype

    def linear(self, lw):
        return _DenseLinear(lw.convert("dense", self.dtype), self.dtype)

    def norm(self, x, residual, w, eps):
        h = x if residual is None else x + residual
        return _rms_norm(h, w, eps), h

    def norm_linear(self, x, residual, w, eps, lin):
        y, h = self.norm(x, residual, w, eps)
        return lin(y), h

    def silu_linear(self, gu, lin):
        return lin(_silu_mul(gu))

    def linear_call(self, x, lin):
        return lin(x)


def _tq_row(x):
    """Per-token E4M3 quantization in torch: s = amax / 448 per row ([M, 1] f32, what
    torch._scaled_mm's row-wise scale_a takes), codes = x * (448 / amax) clamped to +-448."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True).clamp(min=1e-10)
    q = (xf * (FP8_MAX / amax)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, amax / FP8_MAX


def _tq_norm_first(x, w, eps):
    return _tq_row(_rms_norm(x, w, eps))


def _tq_norm_add(x, residual, w, eps):
    h = x + residual
    q, s = _tq_row(_rms_norm(h, w, eps))
    return q, s, h


def _tq_silu(gu):
    return _tq_row(_silu_mul(gu))


def _t_norm_add(x, residual, w, eps):
    h = x + residual
    return _rms_norm(h, w, eps), h


_COMPILED = {}


def _compiled(fn, compile_):
    if not compile_:
        return fn
    if fn not in _COMPILED:
        # dynamic=True: one graph for every token count (batch sizes and prompt lengths) instead
        # of a recompilation per new M.
        _COMPILED[fn] = torch.compile(fn, dynamic=True)
    return _COMPILED[fn]


class _ScaledMmLinear:
    """torch._scaled_mm with row-wise scales: a [M, K] e4m3 with scale_a [M, 1] f32, b = W^T
    ([K, N] column-major, the transposed view of the row-major [N, K] weight) with scale_b [1, N]
    f32, out bf16."""

    def __init__(self, lw):
        lw = lw.convert("channel")
        self.w = lw.w
        self.wt = lw.w.t()
        self.scale_b = lw.scale.reshape(1, -1)
        self.bias = None if lw.bias is None else lw.bias.to(torch.bfloat16)
        self.nbytes = lw.nbytes()

    def quantized(self, q, s):
        y = torch._scaled_mm(q, self.wt, scale_a=s, scale_b=self.scale_b, out_dtype=torch.bfloat16)
        if isinstance(y, tuple):  # torch < 2.4 returned (out, amax)
            y = y[0]
        return y if self.bias is None else y + self.bias


class _TorchFp8Backend:
    name, dtype = "torch_fp8", torch.bfloat16

    def __init__(self, compile_=True):
        self.quant = _compiled(_tq_row, compile_)
        self.norm_first = _compiled(_tq_norm_first, compile_)
        self.norm_add = _compiled(_tq_norm_add, compile_)
        self.silu = _compiled(_tq_silu, compile_)
        self.final_norm = _compiled(_t_norm_add, compile_)

    def linear(self, lw):
        return _ScaledMmLinear(lw)

    def norm(self, x, residual, w, eps):
        if residual is None:
            return _rms_norm(x, w, eps), x
        return self.final_norm(x, residual, w, eps)

    def norm_linear(self, x, residual, w, eps, lin):
        if residual is None:
            q, s = self.norm_first(x, w, eps)
            return lin.quantized(q, s), x
        q, s, h = self.norm_add(x, residual, w, eps)
        return lin.quantized(q, s), h

    def silu_linear(self, gu, lin):
        q, s = self.silu(gu)
        return lin.quantized(q, s)

    def linear_call(self, x, lin):
        q, s = self.quant(x)
        return lin.quantized(q, s)


class _Fp8RouteLinear:
    def __init__(self, mod, input_scale, nbytes):
        self.mod, self.input_scale, self.nbytes = mod, input_scale, nbytes

    def __call__(self, x):
        return self.mod(x)


class _Fp8RouteBackend:
    """Fp8Linear layers fed by fp8route's fused norm + quant ops (torch.ops.fp8route, capturable)."""
    name, dtype = "fp8route", torch.bfloat16

    def __init__(self, act):
        import fp8route  # the native library: loaded only when this backend is used
        from fp8route.linear import Fp8Linear
        self.act, self.fp8route, self.Fp8Linear, self.ops = act, fp8route, Fp8Linear, torch.ops.fp8route

    def linear(self, lw):
        lw = lw.convert("block" if self.act == "block" else "rowwise")
        bias = None if lw.bias is None else lw.bias.to(torch.bfloat16)
        mod = self.Fp8Linear(lw.w, lw.scale, act=self.act, out_dtype=torch.bfloat16, bias=bias)
        return _Fp8RouteLinear(mod, lw.input_scale if self.act == "tensor" else None, lw.nbytes())

    def norm(self, x, residual, w, eps):
        y, h = self.ops.rms_norm(x, w, eps, residual)
        return y, (x if residual is None else h)

    def norm_linear(self, x, residual, w, eps, lin):
        if self.act == "row":
            q, s, h = self.ops.rms_norm_per_token_quant(x, w, eps, residual, "e4m3", "none")
        elif self.act == "block":
            q, s, h = self.ops.rms_norm_per_token_group_quant(x, w, eps, residual, BLOCK, "e4m3", "none", "f32",
                                                              "col_major_tma")
        elif lin.input_scale is not None:  # static per-tensor scale: fused
            s = lin.input_scale
            r = self.fp8route.rms_norm_per_tensor_quant(x, w, s, eps, residual=residual)
            q, h = r if residual is not None else (r, x)
        else:  # dynamic per-tensor: the amax needs the whole tensor first, so no fused form
            y, h = self.norm(x, residual, w, eps)
            return lin(y), h
        return lin.mod.forward_quantized(q, s), (x if residual is None else h)

    def silu_linear(self, gu, lin):
        if self.act == "block":
            q, s = self.ops.per_token_group_quant(gu, BLOCK, "e4m3", "none", "f32", "col_major_tma", True)
            return lin.mod.forward_quantized(q, s)
        if self.act == "row":
            q, s = self.ops.per_token_quant(gu, "e4m3", "none", True)
            return lin.mod.forward_quantized(q, s)
        # Per-tensor scales (a whole-tensor amax first, or a static scale) have no fused form:
        # torch's silu_and_mul, then the layer quantizes.
        return self.linear_call(_silu_mul(gu), lin)

    def linear_call(self, x, lin):
        if lin.input_scale is not None:
            q, _ = self.fp8route.per_tensor_quant(x, scale=lin.input_scale)
            return lin.mod.forward_quantized(q, lin.input_scale)
        return lin(x)


def _make_backend(name, act, compile_):
    if name not in BACKENDS:
        raise ValueError(f"backend: one of {BACKENDS}, got {name!r}")
    if act not in _ACTS:
        raise ValueError(f"act: one of {_ACTS}, got {act!r}")
    if name == "ref":
        return _TorchBackend("ref", torch.float32)
    if name == "bf16":
        return _TorchBackend("bf16", torch.bfloat16)
    if name == "torch_fp8":
        return _TorchFp8Backend(compile_)
    return _Fp8RouteBackend(act)


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------

def _rope(x, cos, sin):
    """x [B, S, H, D] rotated by its positions' angles (cos, sin [B, S, 1, D]); the halves
    convention of HF Llama (rotate_half)."""
    d = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., d:], x[..., :d]), dim=-1) * sin


def _rope_qk(q, k, cos_table, sin_table, pos):
    """q and k rotated by the angles of their positions (pos [B, S] into the [max_seq, D] tables):
    one function so that torch.compile fuses the gathers and both rotations into one kernel."""
    cos, sin = cos_table[pos].unsqueeze(2), sin_table[pos].unsqueeze(2)
    return _rope(q, cos, sin), _rope(k, cos, sin)


class LlamaModel:
    """The decoder on one tensor-parallel rank (see the module docstring).

    LlamaModel(config, weights, backend="fp8route", act="row", device=None, max_batch=1, max_seq=2048,
               skip_collectives=False, group=None, compile=True, attention=None)
      weights: a RankWeights (its rank and world are the model's). device: where the model runs
      (default: the weights'). max_batch, max_seq: the static KV cache
      [layers, 2, max_batch, kv_heads of the rank, max_seq, head_dim] in the backend's dtype
      (reset_cache reallocates it). With world > 1 the row-parallel outputs (o_proj, down_proj)
      are all-reduced and the vocabulary-parallel logits all-gathered over `group` (torch.distributed
      must be initialized); skip_collectives=True runs one rank alone without them (its partial
      sums: for timing one rank, not for results). compile: torch.compile on CUDA for torch_fp8's
      quant functions and, for every backend, the rotary embedding of q and k.
      attention: "fused" (decode steps through fp8route.decode_attention; the default on CUDA in
      bf16/f16 at head_dim 64, 128 or 256) or "sdpa" (torch ops; the choice everywhere else).
    Build with LlamaModel.from_state_dict / from_pretrained / random.
    """

    def __init__(self, config, weights, backend="fp8route", act="row", device=None, max_batch=1, max_seq=2048,
                 skip_collectives=False, group=None, compile=True, attention=None):
        self.config = cfg = config
        self.backend_name, self.act = backend, act
        self.device = torch.device(device) if device is not None else weights.embed.device
        if backend in ("fp8route", "torch_fp8") and self.device.type != "cuda":
            raise ValueError(f"device: backend {backend} runs on CUDA, got {self.device}")
        self.backend = be = _make_backend(backend, act, compile)
        self.dtype = be.dtype
        fusable = (self.device.type == "cuda" and self.dtype in (torch.bfloat16, torch.float16)
                   and cfg.head_dim in FUSED_HEAD_DIMS)
        self.attention = attention or ("fused" if fusable else "sdpa")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention: one of {ATTENTIONS}, got {attention!r}")
        if self.attention == "fused" and not fusable:
            raise ValueError(f"attention: 'fused' runs on CUDA in bf16/f16 at head_dim {FUSED_HEAD_DIMS}; this "
                             f"model is {self.dtype} on {self.device}, head_dim {cfg.head_dim}: use 'sdpa'")
        if self.attention == "fused":
            import fp8route  # noqa: F401  (registers torch.ops.fp8route)
        self.rank, self.world = weights.rank, weights.world
        self.group = group
        self.collectives = self.world > 1 and not skip_collectives
        if self.collectives:
            import torch.distributed as dist
            if not (dist.is_available() and dist.is_initialized()):
                raise ValueError(f"weights: rank {self.rank} of {self.world} needs torch.distributed initialized "
                                 f"(or skip_collectives=True to run one rank alone)")
        sh = tp_shard(cfg, self.rank, self.world)
        self.hq, self.hk, self.vr = sh.hq, sh.hk, sh.vr
        dev, dt = self.device, self.dtype
        vec = lambda t: t.to(device=dev, dtype=dt)  # noqa: E731
        self.layers = []
        for lw in weights.layers:
            layer = SimpleNamespace(
                qkv=be.linear(lw["qkv"].to(dev)), o=be.linear(lw["o"].to(dev)),
                gate_up=be.linear(lw["gate_up"].to(dev)), down=be.linear(lw["down"].to(dev)),
                input_norm=vec(lw["input_norm"]), post_norm=vec(lw["post_norm"]),
                q_norm=vec(lw["q_norm"]) if cfg.qk_norm else None, k_norm=vec(lw["k_norm"]) if cfg.qk_norm else None)
            self.layers.append(layer)
        self.embed = vec(weights.embed)
        self.lm_head = vec(weights.lm_head)
        self.norm = vec(weights.norm)
        self._inv_freq = rope_inv_freq(cfg)
        self._rope_qk = _compiled(_rope_qk, compile and self.device.type == "cuda")
        self._pool = None
        self.reset_cache(max_batch, max_seq)

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_state_dict(cls, config, state, backend="fp8route", act="row", device="cpu", rank=None, world=None,
                        **kwargs):
        """From an HF-style state dict (a dict, or SafetensorsState); layers are converted to what
        the backend runs before they are cut for the rank (so a dense reference is exact)."""
        kind, dense_dtype = _weight_kind(backend, act)
        weights = RankWeights.from_state(config, state, rank, world, kind, device,
                                         dense_dtype or torch.bfloat16)
        return cls(config, weights, backend, act, device, **kwargs)

    @classmethod
    def from_pretrained(cls, path, backend="fp8route", act="row", device="cuda", **kwargs):
        """From a checkpoint directory (config.json and *.safetensors)."""
        return cls.from_state_dict(LlamaConfig.from_hf(path), SafetensorsState(path), backend, act, device, **kwargs)

    @classmethod
    def random(cls, config, backend="fp8route", act="row", device="cuda", rank=None, world=None, seed=0,
               weight_format=None, **kwargs):
        """Random weights at this rank's shapes (RankWeights.random), generated on `device`;
        weight_format default: "block" for act="block", else "channel"."""
        if rank is None or world is None:
            rank, world = _dist_rank_world()
        fmt = weight_format or ("block" if act == "block" else "channel")
        dtype = torch.float32 if backend == "ref" else torch.bfloat16
        weights = RankWeights.random(config, rank, world, seed, fmt, device, dtype)
        return cls(config, weights, backend, act, device, **kwargs)

    def reset_cache(self, max_batch=None, max_seq=None):
        """(Re)allocates the zeroed KV cache and the RoPE tables; graphs captured before no longer run."""
        self.max_batch = int(max_batch or self.max_batch)
        self.max_seq = int(max_seq or self.max_seq)
        cfg, dev = self.config, self.device
        self.cache = torch.zeros((cfg.num_hidden_layers, 2, self.max_batch, self.hk, self.max_seq, cfg.head_dim),
                                 dtype=self.dtype, device=dev)
        angles = torch.outer(torch.arange(self.max_seq, dtype=torch.float64), self._inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.cos = angles.cos().to(device=dev, dtype=self.dtype)
        self.sin = angles.sin().to(device=dev, dtype=self.dtype)
        self._batch_index = torch.arange(self.max_batch, device=dev)
        self._seq_index = torch.arange(self.max_seq, device=dev)

    # -- what it reads ------------------------------------------------------------------------

    def weight_bytes(self):
        """Bytes of weights one decode step reads on this rank: every linear layer (codes, scales,
        bias), the norms and lm_head (the embedding lookup reads only the batch's rows: not counted)."""
        total = sum(lin.nbytes for layer in self.layers for lin in (layer.qkv, layer.o, layer.gate_up, layer.down))
        vecs = [self.norm, self.lm_head] + [t for layer in self.layers
                                            for t in (layer.input_norm, layer.post_norm, layer.q_norm, layer.k_norm)
                                            if t is not None]
        return total + sum(t.numel() * t.element_size() for t in vecs)

    def kv_bytes(self, batch, kv_len):
        """Bytes of K and V the attention of one decode step reads on this rank at kv_len positions."""
        cfg = self.config
        return 2 * cfg.num_hidden_layers * batch * self.hk * kv_len * cfg.head_dim * self.cache.element_size()

    def routes(self, m):
        """fp8route: {layer name: backend/config} of layer 0's linears at m rows; {} otherwise."""
        if self.backend_name != "fp8route" or not self.layers:
            return {}
        layer = self.layers[0]
        return {name: getattr(layer, name).mod.route(m) for name in ("qkv", "o", "gate_up", "down")}

    # -- running ------------------------------------------------------------------------------

    @torch.no_grad()
    def prefill(self, tokens, start=0, logits="last"):
        """tokens int64 [B, S] at positions start .. start + S - 1 of rows 0 .. B - 1 of the cache.
        logits: "last" ([B, V], the last position's) or "all" ([B, S, V]). start == 0 runs causal
        attention over the prompt alone; start > 0 (a later chunk) attends over the cache."""
        b, s = tokens.shape
        if b > self.max_batch or start < 0 or start + s > self.max_seq:
            raise ValueError(f"tokens: [{b}, {s}] at start {start} does not fit the cache (max_batch "
                             f"{self.max_batch}, max_seq {self.max_seq})")
        if logits not in ("last", "all"):
            raise ValueError(f"logits: 'last' or 'all', got {logits!r}")
        pos = (start + self._seq_index[:s]).expand(b, s)
        return self._forward(tokens.to(self.device), pos, start + s, start == 0, logits == "last")

    @torch.no_grad()
    def decode_step(self, tokens, positions):
        """tokens, positions int64 [B] on the device: one token per sequence, written to the cache at
        its position (each < max_seq; not checked, the values stay on the device), attending to
        positions 0 .. position. Returns logits [B, V]."""
        b = tokens.shape[0]
        if b > self.max_batch:
            raise ValueError(f"tokens: batch {b} exceeds max_batch {self.max_batch}")
        return self._forward(tokens.view(b, 1), positions.view(b, 1), self.max_seq, False, True)

    def capture_decode(self, batch):
        """A DecodeGraph: decode_step of `batch` sequences captured in a CUDA graph."""
        return DecodeGraph(self, batch)

    def _forward(self, tokens, pos, kv_len, fresh, last):
        b, s = tokens.shape
        cfg, be = self.config, self.backend
        x = F.embedding(tokens.reshape(-1), self.embed)
        fused = self.attention == "fused" and s == 1 and not fresh
        pos32 = pos.reshape(-1).to(torch.int32) if fused else None  # once per step, not per layer
        residual = None  # h, the residual stream; x is what the last sublayer adds to it
        for i, layer in enumerate(self.layers):
            qkv, residual = be.norm_linear(x, residual, layer.input_norm, cfg.rms_norm_eps, layer.qkv)
            if fused:
                attn = torch.ops.fp8route.decode_attention(
                    qkv, self.cache[i, 0, :b], self.cache[i, 1, :b], self.cos, self.sin, pos32, self.hq, self.hk,
                    0.0, cfg.sliding_window or 0, layer.q_norm, layer.k_norm, cfg.rms_norm_eps, True)
            else:
                attn = self._attention(i, layer, qkv, pos, b, s, kv_len, fresh)
            o = self._all_reduce(be.linear_call(attn, layer.o))
            gu, residual = be.norm_linear(o, residual, layer.post_norm, cfg.rms_norm_eps, layer.gate_up)
            x = self._all_reduce(be.silu_linear(gu, layer.down))
        y, _ = be.norm(x, residual, self.norm, cfg.rms_norm_eps)
        if last:
            y = y.view(b, s, -1)[:, -1]
        out = self._logits(y)
        return out if last else out.reshape(b, s, -1)

    def _attention(self, i, layer, qkv, pos, b, s, kv_len, fresh):
        cfg, d, hq, hk = self.config, self.config.head_dim, self.hq, self.hk
        q = qkv[:, :hq * d].view(b, s, hq, d)
        k = qkv[:, hq * d:(hq + hk) * d].view(b, s, hk, d)
        v = qkv[:, (hq + hk) * d:].view(b, s, hk, d)
        if cfg.qk_norm:
            q = _rms_norm(q, layer.q_norm, cfg.rms_norm_eps)
            k = _rms_norm(k, layer.k_norm, cfg.rms_norm_eps)
        q, k = self._rope_qk(q, k, self.cos, self.sin, pos)
        kc, vc = self.cache[i, 0, :b], self.cache[i, 1, :b]  # [b, hk, max_seq, d]
        rows = self._batch_index[:b, None]
        # In place at the positions' slots (index_put_ on views of the cache): no host sync, so
        # a decode step can be captured.
        kc[rows, :, pos] = k
        vc[rows, :, pos] = v
        g = hq // hk
        window = cfg.sliding_window
        if fresh:  # a prompt from position 0: causal attention over its own K and V
            qh = q.transpose(1, 2)
            kh = k.transpose(1, 2).repeat_interleave(g, dim=1)
            vh = v.transpose(1, 2).repeat_interleave(g, dim=1)
            if window and s > window:
                ii = self._seq_index[:s]
                mask = (ii[None, :] <= ii[:, None]) & (ii[None, :] > ii[:, None] - window)
                o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
            else:
                o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
            return o.transpose(1, 2).reshape(b * s, hq * d)
        # Over the cache: the g query heads of one kv head go in as g * s query rows of that head,
        # so grouped-query attention reads each cached K and V once and copies none.
        kh, vh = kc[:, :, :kv_len], vc[:, :, :kv_len]
        j = self._seq_index[:kv_len]
        allowed = j <= pos[:, :, None]  # [b, s, kv_len]
        if window:
            allowed = allowed & (j > pos[:, :, None] - window)
        if s == 1:
            qf, mask = q.reshape(b, hk, g, d), allowed[:, None]  # mask [b, 1, 1, kv_len]
        else:
            qf = q.reshape(b, s, hk, g, d).permute(0, 2, 3, 1, 4).reshape(b, hk, g * s, d)
            mask = allowed[:, None, None].expand(b, 1, g, s, kv_len).reshape(b, 1, g * s, kv_len)
        # [b, hk, g * s, d]; SDPA's fused kernels may return it in a transposed layout: reshape.
        o = F.scaled_dot_product_attention(qf, kh, vh, attn_mask=mask)
        return o.reshape(b, hk, g, s, d).permute(0, 3, 1, 2, 4).reshape(b * s, hq * d)

    def _all_reduce(self, t):
        if self.collectives:
            import torch.distributed as dist
            dist.all_reduce(t, group=self.group)
        return t

    def _logits(self, y):
        out = F.linear(y, self.lm_head)  # [T, vr]: this rank's vocabulary rows
        if not self.collectives:  # one rank (the whole vocabulary), or one rank alone (its rows)
            return out
        import torch.distributed as dist
        parts = [torch.empty_like(out) for _ in range(self.world)]
        dist.all_gather(parts, out.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)[:, :self.config.vocab_size]


class DecodeGraph:
    """LlamaModel.decode_step of `batch` sequences captured in a CUDA graph.

    step(tokens, positions) copies the int64 [batch] inputs into the graph's static buffers, replays
    it, and returns the graph's logits tensor [batch, V] (overwritten by the next replay: clone it to
    keep it). Capture runs the step twice first (on a side stream, as PyTorch asks; it also compiles
    torch_fp8's functions and makes fp8route's first calls) at position max_seq - 1 of rows
    0 .. batch - 1: a slot a sequence only reads as its last position, after writing it.
    """

    def __init__(self, model, batch):
        if model.device.type != "cuda":
            raise ValueError(f"model: CUDA graphs need a CUDA device, got {model.device}")
        if not 1 <= batch <= model.max_batch:
            raise ValueError(f"batch: 1 .. max_batch ({model.max_batch}), got {batch}")
        self.model, self.batch = model, batch
        dev = model.device
        self.tokens = torch.zeros(batch, dtype=torch.long, device=dev)
        self.positions = torch.full((batch,), model.max_seq - 1, dtype=torch.long, device=dev)
        self._cache = model.cache
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            for _ in range(2):
                model.decode_step(self.tokens, self.positions)
        torch.cuda.current_stream(dev).wait_stream(side)
        # A private memory pool per graph: a pool shared with graphs that were freed since trips the
        # caching allocator's accounting when the next capture starts.
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = model.decode_step(self.tokens, self.positions)

    def __call__(self, tokens, positions):
        if self.model.cache is not self._cache:
            raise RuntimeError("DecodeGraph: reset_cache() reallocated the KV cache after capture; capture again")
        self.tokens.copy_(tokens)
        self.positions.copy_(positions)
        self.graph.replay()
        return self.logits

    def replay(self):
        """Replays with the inputs already in self.tokens / self.positions (for timing)."""
        self.graph.replay()
