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

This module holds the model and its decode graph; the config, weights, checkpoint reading, sharding
and backends are modules beside it (models/__init__.py lists them), and their public names are
importable from here too.
"""
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ..weight_quant import BLOCK, FP8_MAX
from .backends import BACKENDS, _compiled, _make_backend, _rms_norm, _weight_kind
from .checkpoint import SafetensorsState, linear_from_state, random_state_dict
from .config import LlamaConfig, rope_inv_freq
from .sharding import RankWeights, _dist_rank_world, rank_linear_shapes, tp_shard
from .weights import LinearWeight, quantize

ATTENTIONS = ("fused", "sdpa")
FUSED_HEAD_DIMS = (64, 128, 256)  # the head dims fp8route.decode_attention is built for

__all__ = [
    "ATTENTIONS", "BACKENDS", "BLOCK", "DecodeGraph", "FP8_MAX", "FUSED_HEAD_DIMS", "LinearWeight", "LlamaConfig",
    "LlamaModel", "RankWeights", "SafetensorsState", "linear_from_state", "quantize", "random_state_dict",
    "rank_linear_shapes", "rope_inv_freq", "tp_shard",
]


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
