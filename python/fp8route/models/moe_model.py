"""Mixture-of-experts decoders on fp8route: Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B) and Mixtral.

    moe = MoeConfig.from_hf("Qwen3-30B-A3B-FP8")                  # the config.json's MoE and attention fields
    model = MoeModel.from_pretrained("Qwen3-30B-A3B-FP8", backend="fp8route", act="block", device="cuda")
    logits = model.prefill(tokens)                                 # as LlamaModel
    step = model.capture_decode(8)                                 # one decode step, one CUDA graph

The attention, norms, embedding, KV cache, prefill / decode / CUDA-graph code are LlamaModel's (the
Qwen3 and Mistral rules: q/k norms, sliding window); each sparse layer's FFN is a MoeFfn (moe_ffn.py:
Fp8MoE on "fp8route", torch's grouped GEMMs on "torch_fp8" and "bf16", a float32 loop over the
experts on "ref"). Dense layers (Qwen3-MoE's mlp_only_layers) are LlamaModel's MLP.

With world > 1 the experts are split across the ranks (expert parallelism over the tensor-parallel
group: rank r holds experts [r E / world, (r + 1) E / world), moe_config.expert_map), each rank's MoE
output is its experts' part of the sum, and LlamaModel's all-reduce after the FFN adds the parts up:
the same collective as the dense model's down_proj. Attention is tensor-parallel as in LlamaModel.
DeepSeek-V3 is not a model here (its attention is MLA); its MoE block is: MoeFfn with
moe_block_from_state / random_moe_block.
"""
import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from .checkpoint import (_gain, _generator, _need, _random_linear, _random_vector, SafetensorsState,
                         linear_from_state, random_state_dict)
from .backends import _weight_kind
from .experts import experts_from_state, random_expert_linears, random_experts
from .llama import LlamaModel
from .moe_config import MoeConfig, expert_map
from .moe_ffn import MoeFfn, moe_kind
from .sharding import _dist_rank_world, attention_half, dense_mlp, embed_head_norm, state_loaders, tp_shard
from .weights import LinearWeight


@dataclass
class MoeRankWeights:
    """What one rank holds (sharding.RankWeights, with MoE layers): each layer qkv, o, input_norm,
    post_norm (q_norm, k_norm) as RankWeights, and either a dense MLP (gate_up, down) or an MoE block
    (experts: ExpertWeights of this rank's experts; router [E, H]; bias: DeepSeek-V3's
    e_score_correction_bias or None; shared: (gate_up, down) LinearWeights or None)."""
    moe: MoeConfig
    rank: int
    world: int
    layers: list
    embed: torch.Tensor
    lm_head: torch.Tensor
    norm: torch.Tensor

    @property
    def config(self):
        return self.moe.base

    @classmethod
    def from_state(cls, moe, state, rank=None, world=None, kind=None, expert_kind="channel", device="cpu",
                   dtype=torch.bfloat16):
        """An HF state dict sharded for (rank, world): attention as RankWeights.from_state (each linear
        converted to `kind` first, None keeps the checkpoint's), this rank's experts converted to
        expert_kind (experts.KINDS; dense in dtype), routers and norms in dtype."""
        if rank is None or world is None:
            rank, world = _dist_rank_world()
        cfg = _base(moe)
        sh = tp_shard(cfg, rank, world)

        lin, vec = state_loaders(state, kind, device, dtype)

        layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            layer = attention_half(cfg, sh, rank, p, lin, vec)
            if i in moe.sparse_layers:
                layer.update(moe_block_from_state(moe, state, i, expert_kind, dtype, rank, world, device, kind))
            else:
                layer.update(dense_mlp(sh, rank, lin, *moe.dense_names(i)))
            layers.append(layer)
        return cls(moe, rank, world, layers, *embed_head_norm(cfg, sh, vec))

    @classmethod
    def random(cls, moe, rank=0, world=1, seed=0, weight_format="channel", expert_kind="channel", device="cpu",
               dtype=torch.bfloat16):
        """Random weights made at this rank's shapes directly (attention as RankWeights.random: its
        values depend on (seed, rank, world)); experts from random_experts, the same values for a
        global expert on any rank (expert-parallel ranks are slices of one model)."""
        cfg = _base(moe)
        d, h, sh = cfg.head_dim, cfg.hidden_size, tp_shard(cfg, rank, world)
        tag = f"#{rank}/{world}"
        layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            rl = lambda name, n, k, k_full, bias: _random_linear(  # noqa: E731
                p + name + tag, n, k, k_full, bias, weight_format, seed, device, _gain(cfg, name))
            layer = dict(qkv=rl("qkv", (sh.hq + 2 * sh.hk) * d, h, h, cfg.qkv_bias),
                         o=rl("o_proj", h, sh.hq * d, cfg.num_attention_heads * d, cfg.o_bias and rank == 0),
                         input_norm=_random_vector(p + "input_norm", h, seed, device).to(dtype),
                         post_norm=_random_vector(p + "post_norm", h, seed, device).to(dtype))
            if cfg.qk_norm:
                layer["q_norm"] = _random_vector(p + "q_norm", d, seed, device).to(dtype)
                layer["k_norm"] = _random_vector(p + "k_norm", d, seed, device).to(dtype)
            if i in moe.sparse_layers:
                layer.update(random_moe_block(moe, i, expert_kind, weight_format, seed, rank, world, device, dtype))
            else:
                layer["gate_up"] = rl("gate_up", 2 * sh.ni, h, h, False)
                layer["down"] = rl("down_proj", h, sh.ni, cfg.intermediate_size, False)
            layers.append(layer)
        g = _generator(seed, "embed", device)
        embed = torch.randn(cfg.vocab_size, h, generator=g, device=device).to(dtype)
        g = _generator(seed, "lm_head" + tag, device)
        lm = (torch.randn(sh.vr, h, generator=g, device=device) * h ** -0.5).to(dtype)
        lm[sh.nv:] = 0
        return cls(moe, rank, world, layers, embed, lm, _random_vector("norm", h, seed, device).to(dtype))


def _base(moe):
    if moe.base is None:
        raise ValueError(f"model_type: {moe.family}'s attention is not implemented (DeepSeek-V3's MLA); its MoE "
                         f"blocks run as MoeFfn (moe_block_from_state, random_moe_block)")
    return moe.base


def moe_block_from_state(moe, state, layer, expert_kind, dtype=torch.bfloat16, rank=0, world=1, device="cpu",
                         kind=None):
    """{experts, router, bias, shared} of MoE layer `layer` from an HF state dict: this rank's experts
    (expert_kind), the router and DeepSeek-V3's bias whole (every rank routes over all experts), the
    shared expert whole (converted to `kind`, None keeps the checkpoint's)."""
    router = _need(state, moe.router_name(layer)).to(device=device, dtype=dtype)
    bias = None
    if moe.routing == "sigmoid":
        bias = _need(state, moe.bias_name(layer)).to(device=device, dtype=torch.float32)
    shared = None
    if moe.shared_intermediate_size:
        g, u, dn = (linear_from_state(state, n).to(device) for n in moe.shared_names(layer))
        if kind is not None:
            g, u, dn = (w.convert(kind, dtype) for w in (g, u, dn))
        shared = (LinearWeight.cat_rows([g, u]), dn)
    experts = experts_from_state(state, moe, layer, expert_kind, dtype, rank, world, device)
    return dict(experts=experts, router=router, bias=bias, shared=shared)


def random_moe_block(moe, layer, expert_kind, weight_format="channel", seed=0, rank=0, world=1, device="cpu",
                     dtype=torch.bfloat16):
    """A random MoE block of `layer`: the values random_moe_state_dict holds for it."""
    h = moe.hidden_size
    router = _random_router(moe, layer, seed, device).to(dtype)
    bias = _random_bias(moe, layer, seed, device) if moe.routing == "sigmoid" else None
    shared = None
    if moe.shared_intermediate_size:
        i = moe.shared_intermediate_size
        g, u, dn = moe.shared_names(layer)
        shared = (LinearWeight.cat_rows([_random_linear(g, i, h, h, False, weight_format, seed, device),
                                         _random_linear(u, i, h, h, False, weight_format, seed, device)]),
                  _random_linear(dn, h, i, i, False, weight_format, seed, device,
                                 (2 * moe.num_hidden_layers) ** -0.5))
    experts = random_experts(moe, layer, expert_kind, weight_format, seed, rank, world, device, dtype)
    return dict(experts=experts, router=router, bias=bias, shared=shared)


def _random_router(moe, layer, seed, device):
    """N(0, 1/H): over unit-variance normed inputs the logits are about N(0, 1)."""
    g = _generator(seed, moe.router_name(layer), device)
    return torch.randn(moe.num_experts, moe.hidden_size, generator=g, device=device) * moe.hidden_size ** -0.5


def _random_bias(moe, layer, seed, device):
    g = _generator(seed, moe.bias_name(layer), device)
    return 0.1 * torch.randn(moe.num_experts, generator=g, device=device)


def random_moe_state_dict(moe, seed=0, weight_format="channel", dtype=torch.bfloat16, device="cpu"):
    """A random checkpoint of an MoE model in HF names (checkpoint.random_state_dict's formats): the
    dense model's tensors, with each sparse layer's MLP replaced by its router (dtype), DeepSeek's
    e_score_correction_bias (f32) and its experts (each gate, up and down from its own generator
    seeded by its name: random_experts makes the same values)."""
    cfg = _base(moe)
    state = random_state_dict(cfg, seed, weight_format, dtype, device)
    for layer in moe.sparse_layers:
        for name in moe.dense_names(layer):
            for key in [k for k in state if k.startswith(name + ".")]:
                del state[key]
        state[moe.router_name(layer)] = _random_router(moe, layer, seed, device).to(dtype)
        if moe.routing == "sigmoid":
            state[moe.bias_name(layer)] = _random_bias(moe, layer, seed, device)
        for e in range(moe.num_experts):
            for name, lw in zip(moe.expert_names(layer, e), random_expert_linears(moe, layer, e, weight_format,
                                                                                 seed, device)):
                _put(state, name, lw, dtype)
    return state


def _put(state, base, lw, dtype):
    """A LinearWeight into a state dict under HF names (random_state_dict's format conventions)."""
    state[base + ".weight"] = lw.w if lw.kind != "dense" else lw.w.to(dtype)
    if lw.kind == "tensor":
        state[base + ".weight_scale"] = lw.scale.reshape(())
        state[base + ".input_scale"] = lw.input_scale.reshape(())
    elif lw.kind == "channel":
        state[base + ".weight_scale"] = lw.scale.reshape(-1, 1)
    elif lw.kind == "block":
        state[base + ".weight_scale_inv"] = lw.scale


MOE_DONE = object()  # a sparse layer's `down`: its gate_up (the MoeFfn) already produced the FFN output


class _MoeBackend:
    """LlamaModel's backend with sparse layers: LlamaModel._forward calls
    norm_linear(..., layer.gate_up) then silu_linear(gu, layer.down); for a MoeFfn the first is the
    norm and the whole MoE block, the second passes its output through."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def norm_linear(self, x, residual, w, eps, lin):
        if isinstance(lin, MoeFfn):
            y, h = self.inner.norm(x, residual, w, eps)
            return lin(y), h
        return self.inner.norm_linear(x, residual, w, eps, lin)

    def silu_linear(self, gu, lin):
        return gu if lin is MOE_DONE else self.inner.silu_linear(gu, lin)


class MoeModel(LlamaModel):
    """An MoE decoder on one rank (module docstring): LlamaModel's constructor arguments, with config
    a MoeConfig (its base the LlamaConfig of the attention) and weights a MoeRankWeights. Build with
    MoeModel.from_state_dict / from_pretrained / random."""

    def __init__(self, config, weights, backend="fp8route", act="row", device=None, **kwargs):
        moe = config
        base = _base(moe)
        # LlamaModel builds the backend, attention choice, embedding, lm_head and KV cache; the
        # layers are built here.
        super().__init__(base, dataclasses.replace(weights, layers=[]), backend, act, device, **kwargs)
        self.moe = moe
        be, dev, dt = self.backend, self.device, self.dtype
        compile_ = kwargs.get("compile", True)
        emap = expert_map(moe.num_experts, self.rank, self.world, dev) if self.world > 1 else None
        vec = lambda t: t.to(device=dev, dtype=dt)  # noqa: E731
        for lw in weights.layers:
            layer = SimpleNamespace(
                qkv=be.linear(lw["qkv"].to(dev)), o=be.linear(lw["o"].to(dev)),
                input_norm=vec(lw["input_norm"]), post_norm=vec(lw["post_norm"]),
                q_norm=vec(lw["q_norm"]) if base.qk_norm else None, k_norm=vec(lw["k_norm"]) if base.qk_norm else None)
            if "experts" in lw:
                kind, ddt = moe_kind(backend, act)
                shared = None
                if lw["shared"] is not None:
                    shared = tuple(be.linear(w.to(dev)) for w in lw["shared"])
                layer.gate_up = MoeFfn(moe, lw["experts"].to(dev).convert(kind, ddt or torch.float32),
                                       lw["router"].to(dev), be, backend, act,
                                       bias=None if lw["bias"] is None else lw["bias"].to(dev), shared=shared,
                                       add_shared=self.rank == 0, expert_map=emap, compile_=compile_)
                layer.down = MOE_DONE
            else:
                layer.gate_up, layer.down = be.linear(lw["gate_up"].to(dev)), be.linear(lw["down"].to(dev))
            self.layers.append(layer)
        self.backend = _MoeBackend(be)

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_state_dict(cls, config, state, backend="fp8route", act="row", device="cpu", rank=None, world=None,
                        **kwargs):
        """From an HF-style state dict (a dict, or SafetensorsState); attention layers converted as
        LlamaModel.from_state_dict converts them, experts to what the backend's MoE block runs."""
        kind, dense_dtype = _weight_kind(backend, act)
        weights = MoeRankWeights.from_state(config, state, rank, world, kind, moe_kind(backend, act)[0], device,
                                            dense_dtype or torch.bfloat16)
        return cls(config, weights, backend, act, device, **kwargs)

    @classmethod
    def from_pretrained(cls, path, backend="fp8route", act="row", device="cuda", **kwargs):
        """From a checkpoint directory (config.json and *.safetensors)."""
        return cls.from_state_dict(MoeConfig.from_hf(path), SafetensorsState(path), backend, act, device, **kwargs)

    @classmethod
    def random(cls, config, backend="fp8route", act="row", device="cuda", rank=None, world=None, seed=0,
               weight_format=None, **kwargs):
        """Random weights at this rank's shapes (MoeRankWeights.random) on `device`; weight_format
        default: "block" for act="block", else "channel"."""
        if rank is None or world is None:
            rank, world = _dist_rank_world()
        fmt = weight_format or ("block" if act == "block" else "channel")
        dtype = torch.float32 if backend == "ref" else torch.bfloat16
        ekind, edtype = moe_kind(backend, act)
        weights = MoeRankWeights.random(config, rank, world, seed, fmt, ekind, device, edtype or dtype)
        return cls(config, weights, backend, act, device, **kwargs)

    # -- what it reads ------------------------------------------------------------------------

    def moe_layers(self):
        return [layer.gate_up for layer in self.layers if isinstance(layer.gate_up, MoeFfn)]

    def weight_bytes(self, experts_read=None):
        """Bytes of weights one decode step reads on this rank: the attention linears, dense MLPs,
        norms, lm_head, each MoE layer's router and shared expert, and experts_read experts per MoE
        layer (an int for every layer, or a list per MoE layer; None: all this rank holds)."""
        moes = self.moe_layers()
        if experts_read is None:
            experts_read = [f.experts.experts for f in moes]
        elif isinstance(experts_read, int):
            experts_read = [experts_read] * len(moes)
        total = sum(f.fixed_nbytes() + n * f.experts.expert_nbytes() for f, n in zip(moes, experts_read))
        for layer in self.layers:
            lins = [layer.qkv, layer.o] + ([] if isinstance(layer.gate_up, MoeFfn) else [layer.gate_up, layer.down])
            total += sum(lin.nbytes for lin in lins)
        vecs = [self.norm, self.lm_head] + [t for layer in self.layers
                                            for t in (layer.input_norm, layer.post_norm, layer.q_norm, layer.k_norm)
                                            if t is not None]
        return total + sum(t.numel() * t.element_size() for t in vecs)

    def routes(self, m):
        """fp8route: {layer name: backend/config} of layer 0's attention linears at m rows."""
        if self.backend_name != "fp8route" or not self.layers:
            return {}
        layer = self.layers[0]
        return {name: getattr(layer, name).mod.route(m) for name in ("qkv", "o")}

    def record_routing(self, on=True):
        """Eager steps keep each MoE layer's count of distinct experts run (MoeFfn.last_active)."""
        for f in self.moe_layers():
            f.record = on

