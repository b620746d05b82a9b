"""Tensor-parallel layout: what each rank holds of the model, and the fused weights of one rank."""
from dataclasses import dataclass

import torch

from ..weight_quant import _ceil
from .checkpoint import _gain, _generator, _need, _random_linear, _random_vector, linear_from_state
from .config import LlamaConfig
from .weights import LinearWeight


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


def state_loaders(state, kind, device, dtype):
    """from_state's readers of an HF state dict: lin(name) a LinearWeight on `device` (converted to
    `kind` first unless None), vec(name) a tensor on `device` in `dtype`."""
    def lin(base):
        lw = linear_from_state(state, base).to(device)
        return lw if kind is None else lw.convert(kind, dtype)

    def vec(name):
        return _need(state, name).to(device=device, dtype=dtype)

    return lin, vec


def embed_head_norm(cfg, sh, vec):
    """The embedding, this rank's rows of the lm_head (the embedding when tied) and the final norm."""
    embed = vec("model.embed_tokens.weight")
    lm = embed if cfg.tie_word_embeddings else vec("lm_head.weight")
    return embed, _vocab_rows(lm, sh), vec("model.norm.weight")


def dense_mlp(sh, rank, lin, gate, up, down):
    """A dense MLP's weights for rank `rank` of a TP shard `sh`, from the HF names gate, up, down:
    gate_up fused (this rank's intermediate rows of each), down (its columns; the bias on rank 0
    only, since a row-parallel layer's bias is added once after the sum over ranks)."""
    g = lin(gate).rows(sh.i0, sh.i0 + sh.ni)
    u = lin(up).rows(sh.i0, sh.i0 + sh.ni)
    d = lin(down).cols(sh.i0, sh.i0 + sh.ni)
    if rank:
        d.bias = None
    return {"gate_up": LinearWeight.cat_rows([g, u]), "down": d}


def attention_half(cfg, sh, rank, p, lin, vec):
    """One decoder layer's attention half for rank `rank` of a TP shard `sh`, from the HF names under
    prefix `p`: qkv fused (rows of this rank's heads), o (its columns; the bias on rank 0 only, since
    it is added once after the sum over ranks), the two norms and the q/k norms where the model has
    them. `lin(name)` gives a LinearWeight, `vec(name)` a tensor."""
    d = cfg.head_dim
    q = lin(p + "self_attn.q_proj").rows(sh.q0 * d, (sh.q0 + sh.hq) * d)
    k = lin(p + "self_attn.k_proj").rows(sh.k0 * d, (sh.k0 + sh.hk) * d)
    v = lin(p + "self_attn.v_proj").rows(sh.k0 * d, (sh.k0 + sh.hk) * d)
    o = lin(p + "self_attn.o_proj").cols(sh.q0 * d, (sh.q0 + sh.hq) * d)
    if rank:
        o.bias = None
    layer = dict(qkv=LinearWeight.cat_rows([q, k, v]), o=o, input_norm=vec(p + "input_layernorm.weight"),
                 post_norm=vec(p + "post_attention_layernorm.weight"))
    if cfg.qk_norm:
        layer["q_norm"] = vec(p + "self_attn.q_norm.weight")
        layer["k_norm"] = vec(p + "self_attn.k_norm.weight")
    return layer


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
        cfg = config
        sh = tp_shard(cfg, rank, world)

        lin, vec = state_loaders(state, kind, device, dtype)

        layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            layer = attention_half(cfg, sh, rank, p, lin, vec)
            layer.update(dense_mlp(sh, rank, lin, p + "mlp.gate_proj", p + "mlp.up_proj", p + "mlp.down_proj"))
            layers.append(layer)
        return cls(cfg, rank, world, layers, *embed_head_norm(cfg, sh, vec))

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
