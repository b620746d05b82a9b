"""The Llama-architecture decoder (python/fp8route/models/).

CPU (needs torch; skipped without it): config parsing for Llama 3.1, Qwen2.5, Qwen3 and Mistral; the
"ref" model of each family against an independent float64 transcription of the architecture written
here (per-head loops over a whole sequence, no cache), for prefill, chunked prefill and decode steps
at different positions per row; checkpoints in the three FP8 formats written with safetensors, loaded
and compared with the same transcription of their dequantized weights; the fusion rules (exact where
they claim to be); tensor parallelism over gloo (two processes) against one process; the
per-rank shapes against the model catalog shapes/models.json.
GPU (skipped without CUDA): Fp8Linear.forward_quantized against forward; the fp8route and torch_fp8
backends against the float32 model; a captured decode step against the eager one; TP=2 over NCCL
(with two GPUs).
"""
import importlib.util
import json
import math
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the model tests use it)")

from models_import import import_models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
L = import_models().llama  # with or without the native module (only backend "fp8route" needs it)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# ------------------------------------------------------------------------------------------------
# Configs
# ------------------------------------------------------------------------------------------------

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256,
}
QWEN25_72B = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 29568,
    "max_position_embeddings": 32768, "max_window_layers": 80, "model_type": "qwen2", "num_attention_heads": 64,
    "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 152064,
}
QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 12288, "max_position_embeddings": 40960, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "tie_word_embeddings": False, "vocab_size": 151936,
}
MISTRAL_7B = {
    "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "vocab_size": 32000,
}


def test_config_llama31():
    c = L.LlamaConfig.from_hf(LLAMA_31_8B)
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers) == (4096, 14336, 32)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (32, 8, 128)
    assert c.rope_scaling["rope_type"] == "llama3" and c.rope_theta == 500000.0 and c.rms_norm_eps == 1e-5
    assert not (c.qkv_bias or c.o_bias or c.mlp_bias or c.qk_norm or c.tie_word_embeddings)
    assert c.sliding_window is None and c.max_position_embeddings == 131072 and c.vocab_size == 128256


def test_config_qwen25_has_qkv_bias_only():
    c = L.LlamaConfig.from_hf(QWEN25_72B)
    assert c.qkv_bias and not c.o_bias and not c.mlp_bias and not c.qk_norm
    assert c.sliding_window is None  # use_sliding_window is false
    assert (c.head_dim, c.rope_scaling, c.rms_norm_eps, c.vocab_size) == (128, None, 1e-6, 152064)


def test_config_qwen3_qk_norm_and_head_dim():
    small = dict(QWEN3_8B, hidden_size=1024, num_attention_heads=16, head_dim=128)  # Qwen3-0.6B's shape
    c = L.LlamaConfig.from_hf(small)
    assert c.qk_norm and not c.qkv_bias and c.head_dim == 128 != c.hidden_size // c.num_attention_heads
    assert L.LlamaConfig.from_hf(dict(QWEN3_8B, attention_bias=True)).o_bias


def test_config_mistral_sliding_window():
    c = L.LlamaConfig.from_hf(MISTRAL_7B)
    assert c.sliding_window == 4096 and c.head_dim == 128 and not c.qkv_bias
    assert L.LlamaConfig.from_hf(dict(MISTRAL_7B, sliding_window=None)).sliding_window is None


def test_config_from_file_and_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_31_8B))
    assert L.LlamaConfig.from_hf(tmp_path) == L.LlamaConfig.from_hf(str(tmp_path / "config.json"))


@pytest.mark.parametrize("change,match", [
    ({"model_type": "gpt2"}, "model_type"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling"),
    ({"num_key_value_heads": 5}, "num_key_value_heads"),
])
def test_config_refusals_name_the_field(change, match):
    with pytest.raises(ValueError, match=match):
        L.LlamaConfig.from_hf(dict(LLAMA_31_8B, **change))


def test_llama3_rope_scaling_against_formula():
    c = L.LlamaConfig.from_hf(LLAMA_31_8B)
    got = L.rope_inv_freq(c)
    want = torch.tensor(_inv_freqs(LLAMA_31_8B, 128), dtype=torch.float64)
    assert torch.allclose(got, want, rtol=1e-12, atol=0)
    assert not torch.allclose(got, L.rope_inv_freq(L.LlamaConfig.from_hf(dict(LLAMA_31_8B, rope_scaling=None))))


# ------------------------------------------------------------------------------------------------
# An independent float64 transcription of the architecture
# ------------------------------------------------------------------------------------------------

def _inv_freqs(cfg, d):
    theta = cfg.get("rope_theta", 10000.0)
    freqs = [1.0 / theta ** (2 * i / d) for i in range(d // 2)]
    rs = cfg.get("rope_scaling")
    if not rs:
        return freqs
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(f)
        elif wavelen > old / low:
            out.append(f / factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return out


def _dequant(state, base):
    w = state[base + ".weight"]
    if w.dtype != torch.float8_e4m3fn:
        return w.double()
    f = w.float().double()
    if base + ".weight_scale_inv" in state:
        s = state[base + ".weight_scale_inv"].double()
        out = torch.empty_like(f)
        for bi in range(s.shape[0]):
            for bj in range(s.shape[1]):
                out[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128] = \
                    f[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128] * s[bi, bj]
        return out
    s = state[base + ".weight_scale"].double()
    return f * (s.reshape(()) if s.numel() == 1 else s.reshape(-1, 1))


def _proj(state, base, x):
    y = x @ _dequant(state, base).t()
    if base + ".bias" in state:
        y = y + state[base + ".bias"].double()
    return y


def _rmsnorm(x, w, eps):
    ms = (x * x).sum(-1, keepdim=True) / x.shape[-1]
    return x / torch.sqrt(ms + eps) * w.double()


def reference_logits(cfg, state, tokens):
    """Logits [S, V] (float64) of one sequence, from the HF config dict and state dict."""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    d = cfg.get("head_dim") or hidden // heads
    eps = cfg["rms_norm_eps"]
    window = cfg.get("sliding_window") if cfg["model_type"] == "mistral" else None
    freqs = _inv_freqs(cfg, d)
    s = len(tokens)
    x = state["model.embed_tokens.weight"].double()[torch.tensor(tokens)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        hn = _rmsnorm(x, state[p + "input_layernorm.weight"], eps)
        q = _proj(state, p + "self_attn.q_proj", hn).view(s, heads, d)
        k = _proj(state, p + "self_attn.k_proj", hn).view(s, kv, d)
        v = _proj(state, p + "self_attn.v_proj", hn).view(s, kv, d)
        heads_out = []
        for h in range(heads):
            g = h // (heads // kv)
            qh, kh, vh = q[:, h], k[:, g], v[:, g]
            if cfg["model_type"] == "qwen3":
                qh = _rmsnorm(qh, state[p + "self_attn.q_norm.weight"], eps)
                kh = _rmsnorm(kh, state[p + "self_attn.k_norm.weight"], eps)
            # RoPE as a complex rotation of the pairs (x[j], x[j + d/2]) by pos * freq[j].
            angle = torch.tensor([[pos * f for f in freqs] for pos in range(s)], dtype=torch.float64)
            turn = torch.polar(torch.ones_like(angle), angle)
            qh, kh = [torch.cat([(torch.complex(t[:, :d // 2], t[:, d // 2:]) * turn).real,
                                 (torch.complex(t[:, :d // 2], t[:, d // 2:]) * turn).imag], dim=-1) for t in (qh, kh)]
            scores = qh @ kh.t() / math.sqrt(d)
            for qi in range(s):
                for kj in range(s):
                    if kj > qi or (window and kj <= qi - window):
                        scores[qi, kj] = -math.inf
            heads_out.append(torch.softmax(scores, dim=-1) @ vh)
        x = x + _proj(state, p + "self_attn.o_proj", torch.cat(heads_out, dim=-1))
        hn = _rmsnorm(x, state[p + "post_attention_layernorm.weight"], eps)
        gate, up = _proj(state, p + "mlp.gate_proj", hn), _proj(state, p + "mlp.up_proj", hn)
        x = x + _proj(state, p + "mlp.down_proj", gate * torch.sigmoid(gate) * up)
    xn = _rmsnorm(x, state["model.norm.weight"], eps)
    lm = state["model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"]
    return xn @ lm.double().t()


TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=384, rms_norm_eps=1e-5, max_position_embeddings=64, hidden_act="silu")
FAMILIES = {
    # Llama with every bias (attention_bias: q, k, v, o; mlp_bias) and llama3 RoPE scaling whose
    # three wavelength regimes all occur at head_dim 64.
    "llama": dict(TINY, model_type="llama", rope_theta=500000.0, attention_bias=True, mlp_bias=True,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 32}),
    "qwen2": dict(TINY, model_type="qwen2", rope_theta=1000000.0, use_sliding_window=False, sliding_window=64),
    "qwen3": dict(TINY, model_type="qwen3", rope_theta=1000000.0, head_dim=96, tie_word_embeddings=True),
    "mistral": dict(TINY, model_type="mistral", rope_theta=1000000.0, sliding_window=6),
}


def _tokens(b, s, vocab, seed):
    return torch.randint(0, vocab, (b, s), generator=torch.Generator().manual_seed(seed))


def _close(got, want, tol=1e-4):
    """Max abs difference within tol of the logits' scale (max |want|, at least 1)."""
    err = (got.double() - want).abs().max().item() / max(1.0, want.abs().max().item())
    assert err < tol, f"max |logits - reference| / scale = {err}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_ref_model_matches_independent_transcription(family):
    hf = FAMILIES[family]
    cfg = L.LlamaConfig.from_hf(hf)
    state = L.random_state_dict(cfg, seed=11)
    model = L.LlamaModel.from_state_dict(cfg, state, backend="ref", device="cpu", max_batch=2, max_seq=16)
    toks = _tokens(2, 10, cfg.vocab_size, 1)
    logits = model.prefill(toks, logits="all")
    for row in range(2):
        _close(logits[row], reference_logits(hf, state, toks[row].tolist()))
    # Decode with a different position per row: row 1 rewrites position 7 (its later slots masked).
    nxt = _tokens(2, 2, cfg.vocab_size, 2)
    seqs = [toks[0, :10].tolist(), toks[1, :7].tolist()]
    for step in range(2):
        pos = torch.tensor([10 + step, 7 + step])
        got = model.decode_step(nxt[:, step], pos)
        for row in range(2):
            seqs[row].append(int(nxt[row, step]))
            _close(got[row], reference_logits(hf, state, seqs[row])[-1])
    # Chunked prefill: a second chunk attends over the cache the first wrote.
    model.reset_cache()
    model.prefill(toks[:, :6])
    got = model.prefill(toks[:, 6:], start=6, logits="all")
    for row in range(2):
        _close(got[row], reference_logits(hf, state, toks[row].tolist())[6:])
    last = model.prefill(toks, logits="last")
    _close(last, logits[:, -1].double())


def test_prefill_and_decode_refuse_what_does_not_fit():
    cfg = L.LlamaConfig.from_hf(FAMILIES["qwen2"])
    model = L.LlamaModel.from_state_dict(cfg, L.random_state_dict(cfg), backend="ref", device="cpu", max_batch=2,
                                         max_seq=8)
    with pytest.raises(ValueError, match="does not fit the cache"):
        model.prefill(_tokens(1, 9, cfg.vocab_size, 0))
    with pytest.raises(ValueError, match="max_batch"):
        model.decode_step(torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="backend"):
        L.LlamaModel.from_state_dict(cfg, L.random_state_dict(cfg), backend="fp4", device="cpu")
    with pytest.raises(ValueError, match="runs on CUDA"):
        L.LlamaModel.from_state_dict(cfg, L.random_state_dict(cfg), backend="torch_fp8", device="cpu")


# ------------------------------------------------------------------------------------------------
# FP8 checkpoints (safetensors), quantized here
# ------------------------------------------------------------------------------------------------

def _e4m3(v):
    return v.clamp(-448, 448).to(torch.float8_e4m3fn)


def _quantize_checkpoint(fmt, w):
    """HF tensors (suffix -> tensor) of weight w [N, K] in a checkpoint format."""
    if fmt == "tensor":
        s = w.abs().max() / 448
        return {".weight": _e4m3(w / s), ".weight_scale": s.reshape(()), ".input_scale": torch.tensor(0.05)}
    if fmt == "channel":
        s = w.abs().amax(1, keepdim=True) / 448
        return {".weight": _e4m3(w / s), ".weight_scale": s}
    n, k = w.shape
    nb, kb = -(-n // 128), -(-k // 128)
    s = torch.empty(nb, kb)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    for bi in range(nb):
        for bj in range(kb):
            blk = w[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128]
            s[bi, bj] = blk.abs().max() / 448
            q[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128] = _e4m3(blk / s[bi, bj])
    return {".weight": q, ".weight_scale_inv": s}


def _write_checkpoint(path, hf, fmt, seed):
    """A random FP8 checkpoint of config hf in format fmt, split over two safetensors files."""
    safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors is not installed")
    g = torch.Generator().manual_seed(seed)
    h, inter, v = hf["hidden_size"], hf["intermediate_size"], hf["vocab_size"]
    d = hf["hidden_size"] // hf["num_attention_heads"]
    nq, nk = hf["num_attention_heads"] * d, hf["num_key_value_heads"] * d
    files = [{}, {}]
    for i in range(hf["num_hidden_layers"]):
        out = files[i % 2]
        p = f"model.layers.{i}."
        for name, n, k in (("self_attn.q_proj", nq, h), ("self_attn.k_proj", nk, h), ("self_attn.v_proj", nk, h),
                           ("self_attn.o_proj", h, nq), ("mlp.gate_proj", inter, h), ("mlp.up_proj", inter, h),
                           ("mlp.down_proj", h, inter)):
            w = torch.randn(n, k, generator=g) / math.sqrt(k)
            for suffix, t in _quantize_checkpoint(fmt, w).items():
                out[p + name + suffix] = t.contiguous()
            if hf["model_type"] == "qwen2" and name.split(".")[-1] in ("q_proj", "k_proj", "v_proj"):  # bf16 biases
                out[p + name + ".bias"] = (0.1 * torch.randn(n, generator=g)).to(torch.bfloat16)
        for name in ("input_layernorm", "post_attention_layernorm"):
            out[p + name + ".weight"] = (1 + 0.1 * torch.randn(h, generator=g)).to(torch.bfloat16)
    files[0]["model.embed_tokens.weight"] = torch.randn(v, h, generator=g).to(torch.bfloat16)
    files[1]["model.norm.weight"] = (1 + 0.1 * torch.randn(h, generator=g)).to(torch.bfloat16)
    files[1]["lm_head.weight"] = (torch.randn(v, h, generator=g) / math.sqrt(h)).to(torch.bfloat16)
    for j, f in enumerate(files):
        safetensors_torch.save_file(f, os.path.join(path, f"model-0000{j + 1}-of-00002.safetensors"))
    (path / "config.json").write_text(json.dumps(hf))
    return {k: t for f in files for k, t in f.items()}


# Block format with intermediate 320: partial 128-blocks along N (gate, up) and K (down).
CKPT = {"tensor": dict(FAMILIES["llama"], attention_bias=False, mlp_bias=False),
        "channel": FAMILIES["qwen2"],
        "block": dict(FAMILIES["llama"], attention_bias=False, mlp_bias=False, intermediate_size=320)}


@pytest.mark.parametrize("fmt", ["tensor", "channel", "block"])
def test_fp8_checkpoint_loads_and_matches_dequantized_reference(tmp_path, fmt):
    hf = CKPT[fmt]
    state = _write_checkpoint(tmp_path, hf, fmt, seed=21)
    model = L.LlamaModel.from_pretrained(tmp_path, backend="ref", device="cpu", max_batch=2, max_seq=16)
    toks = _tokens(2, 9, hf["vocab_size"], 3)
    logits = model.prefill(toks, logits="all")
    for row in range(2):
        _close(logits[row], reference_logits(hf, state, toks[row].tolist()))


@pytest.mark.parametrize("fmt", ["tensor", "channel", "block"])
def test_fusion_keeps_checkpoint_scales(tmp_path, fmt):
    hf = CKPT[fmt]
    state = _write_checkpoint(tmp_path, hf, fmt, seed=22)
    cfg = L.LlamaConfig.from_hf(hf)
    w = L.RankWeights.from_state(cfg, L.SafetensorsState(tmp_path), 0, 1)  # kind None: as stored
    p = "model.layers.1."
    qkv, gate_up = w.layers[1]["qkv"], w.layers[1]["gate_up"]
    want_qkv = torch.cat([_dequant(state, p + "self_attn." + n).float() for n in ("q_proj", "k_proj", "v_proj")])
    want_gu = torch.cat([_dequant(state, p + "mlp." + n).float() for n in ("gate_proj", "up_proj")])
    if fmt == "tensor":
        # Three different per-tensor scales: one per-channel weight, the codes untouched.
        assert qkv.kind == "channel" and torch.equal(qkv.dequant(), want_qkv)
        assert qkv.input_scale.item() == pytest.approx(0.05)
    elif fmt == "channel":
        assert qkv.kind == "channel" and torch.equal(qkv.dequant(), want_qkv)
        assert torch.equal(gate_up.dequant(), want_gu)
    else:
        # q (256 rows) and k (128) fill whole blocks: exact. gate (320 rows) does not: requantized.
        assert qkv.kind == "block" and torch.equal(qkv.dequant(), want_qkv)
        assert gate_up.kind == "block" and not torch.equal(gate_up.dequant(), want_gu)
        assert ((gate_up.dequant() - want_gu).norm() / want_gu.norm()).item() < 0.05
        # Per-token activations need a per-channel weight: requantized from the blocks.
        rowwise = qkv.convert("rowwise")
        assert rowwise.kind == "channel" and rowwise.scale.shape == (qkv.w.shape[0],)
    assert ((L.quantize(want_qkv, "channel").dequant() - want_qkv).norm() / want_qkv.norm()).item() < 0.05


def test_checkpoint_format_errors_name_the_tensor():
    w = torch.zeros(8, 16).to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="q_proj.weight: float8_e4m3fn without"):
        L.linear_from_state({"x.q_proj.weight": w}, "x.q_proj")
    with pytest.raises(ValueError, match="weight_scale_inv"):
        L.linear_from_state({"x.q_proj.weight": w, "x.q_proj.weight_scale_inv": torch.ones(2, 1)}, "x.q_proj")
    with pytest.raises(KeyError, match="not in the checkpoint"):
        L.linear_from_state({}, "x.q_proj")


# ------------------------------------------------------------------------------------------------
# Tensor parallelism
# ------------------------------------------------------------------------------------------------

# Two kv heads split over two ranks; one kv head replicated on both (Qwen2 biases, and a vocabulary
# that does not divide by 2: the last rank's block is padded).
TP_CONFIGS = [FAMILIES["llama"], dict(FAMILIES["qwen2"], num_key_value_heads=1, vocab_size=385)]


def _tp_run(model, vocab):
    toks = _tokens(2, 7, vocab, 5)
    out = [model.prefill(toks, logits="all")]
    nxt = _tokens(2, 2, vocab, 6)
    for step in range(2):
        out.append(model.decode_step(nxt[:, step], torch.tensor([7 + step, 4 + step])))
    return out


def _tp_worker(rank, world, init_file, out_file):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    try:
        results = []
        for hf in TP_CONFIGS:
            cfg = L.LlamaConfig.from_hf(hf)
            model = L.LlamaModel.from_state_dict(cfg, L.random_state_dict(cfg, seed=31), backend="ref", device="cpu",
                                                 max_batch=2, max_seq=16)
            assert (model.rank, model.world) == (rank, world)
            results.append(_tp_run(model, cfg.vocab_size))
        if rank == 0:
            torch.save(results, out_file)
    finally:
        dist.destroy_process_group()


def test_tensor_parallel_two_ranks_equal_one(tmp_path):
    import torch.multiprocessing as mp
    out_file = str(tmp_path / "tp2.pt")
    mp.spawn(_tp_worker, args=(2, str(tmp_path / "rendezvous"), out_file), nprocs=2, join=True)
    tp2 = torch.load(out_file)
    for hf, got in zip(TP_CONFIGS, tp2):
        cfg = L.LlamaConfig.from_hf(hf)
        model = L.LlamaModel.from_state_dict(cfg, L.random_state_dict(cfg, seed=31), backend="ref", device="cpu",
                                             max_batch=2, max_seq=16, rank=0, world=1)
        for a, b in zip(got, _tp_run(model, cfg.vocab_size)):
            assert a.shape == b.shape
            assert (a - b).abs().max().item() < 1e-5


def test_rank_weights_shapes():
    cfg = L.LlamaConfig.from_hf(dict(FAMILIES["llama"], num_key_value_heads=1, vocab_size=385))
    state = L.random_state_dict(cfg)
    for rank in range(2):
        sharded = L.RankWeights.from_state(cfg, state, rank, 2)
        rnd = L.RankWeights.random(cfg, rank, 2)
        shapes = L.rank_linear_shapes(cfg, 2, rank)
        for w in (sharded, rnd):
            got = {n: w.layers[0][k].shape for n, k in (("qkv_proj", "qkv"), ("o_proj", "o"),
                                                          ("gate_up_proj", "gate_up"), ("down_proj", "down"))}
            assert got == shapes
            assert w.lm_head.shape == (193, cfg.hidden_size)
        # Row-parallel biases are added once, by rank 0; column-parallel ones are cut.
        assert (sharded.layers[0]["o"].bias is None) == (rank == 1)
        assert (sharded.layers[0]["down"].bias is None) == (rank == 1)
        assert sharded.layers[0]["qkv"].bias.shape == (shapes["qkv_proj"][0],)
    with pytest.raises(ValueError, match="num_attention_heads"):
        L.tp_shard(cfg, 0, 3)


def test_rank_shapes_match_the_model_catalog():
    """The fused per-rank shapes of the configs bench/e2e.py embeds equal shapes/models.json's
    (TP=1 n and k, column layers split along n, row layers along k)."""
    spec = importlib.util.spec_from_file_location("e2e_bench", os.path.join(ROOT, "bench", "e2e.py"))
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)
    with open(os.path.join(ROOT, "shapes", "models.json")) as f:
        catalog = json.load(f)["models"]
    for name, entry in e2e.MODELS.items():
        cfg = L.LlamaConfig.from_hf(entry["config"])
        for tp in (1, 2, 4, 8):
            shapes = L.rank_linear_shapes(cfg, tp)
            for layer in catalog[entry["catalog"]]:
                n, k = layer["n"], layer["k"]
                want = (n // tp, k) if layer["parallel"] == "column" else (n, k // tp)
                assert shapes[layer["name"]] == want, (name, tp, layer["name"])


# ------------------------------------------------------------------------------------------------
# torch.library registration (no GPU: fake tensors)
# ------------------------------------------------------------------------------------------------

def test_linear_quantized_fake():
    fp8route = pytest.importorskip("fp8route", reason="the native module is not built")
    from torch._subclasses.fake_tensor import FakeTensorMode
    assert fp8route.__version__
    with FakeTensorMode():
        q = torch.empty(5, 1024, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(5, device="cuda")
        w = torch.empty(64, 1024, dtype=torch.float8_e4m3fn, device="cuda")
        y = torch.ops.fp8route.linear_quantized(q, s, w, 1, torch.bfloat16)
        assert y.shape == (5, 64) and y.dtype == torch.bfloat16


# ------------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------------

def _rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


@needs_cuda
@pytest.mark.parametrize("act", ["row", "block", "tensor"])
def test_gpu_forward_quantized_equals_forward(act):
    import fp8route
    g = torch.Generator(device="cuda").manual_seed(3)
    w = torch.randn(512, 1024, device="cuda", generator=g).to(torch.bfloat16) / 32
    layer = fp8route.Fp8Linear.from_float(w, act=act)
    x = torch.randn(24, 1024, device="cuda", generator=g).to(torch.bfloat16)
    if act == "row":
        q, s = fp8route.per_token_quant(x)
    elif act == "block":
        q, s = fp8route.per_token_group_quant(x, group_size=128, layout="col_major_tma")
    else:
        q, s = fp8route.per_tensor_quant(x)
    y = layer(x)
    assert torch.equal(layer.forward_quantized(q, s), y)
    assert torch.equal(torch.compile(layer.forward_quantized, fullgraph=True)(q, s), y)
    # test_schema compares inputs before and after with arithmetic torch lacks for float8 tensors.
    torch.library.opcheck(torch.ops.fp8route.linear_quantized, (q, s, layer.weight, layer.plan_key, torch.bfloat16),
                          test_utils=("test_faketensor", "test_autograd_registration"))
    with pytest.raises(ValueError, match="q: expected"):
        layer.forward_quantized(q[:, :512], s)
    if act == "row":
        with pytest.raises(ValueError, match="scale"):
            layer.forward_quantized(q, s[:5])


# Llama with every bias (the tiny config above) and Qwen3 (q/k norms, tied embedding; head_dim 128
# so that q, k and v each fill whole 128-row blocks).
GPU_FAMILIES = {"llama": FAMILIES["llama"], "qwen3": dict(FAMILIES["qwen3"], head_dim=128)}
GPU_CASES = [("fp8route", "row", "channel"), ("fp8route", "block", "block"), ("fp8route", "tensor", "tensor"),
             ("fp8route", "tensor", "channel"), ("torch_fp8", "row", "channel"), ("bf16", "row", "channel")]


@needs_cuda
@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("backend,act,fmt", GPU_CASES)
def test_gpu_backend_close_to_fp32(backend, act, fmt, family):
    cfg = L.LlamaConfig.from_hf(GPU_FAMILIES[family])
    state = L.random_state_dict(cfg, seed=41, weight_format=fmt)
    kw = dict(device="cuda", max_batch=4, max_seq=64)
    ref = L.LlamaModel.from_state_dict(cfg, state, backend="ref", **kw)
    model = L.LlamaModel.from_state_dict(cfg, state, backend=backend, act=act, **kw)
    toks = _tokens(4, 24, cfg.vocab_size, 7).cuda()
    bound = 2e-2 if backend == "bf16" else 5e-2  # bf16 rounding; activation quantization to E4M3
    assert _rel(model.prefill(toks, logits="all"), ref.prefill(toks, logits="all")) < bound
    nxt = _tokens(4, 3, cfg.vocab_size, 8).cuda()
    for step in range(3):
        pos = torch.tensor([24 + step, 24 + step, 10 + step, 20 + step], device="cuda")
        assert _rel(model.decode_step(nxt[:, step], pos), ref.decode_step(nxt[:, step], pos)) < bound


@needs_cuda
@pytest.mark.parametrize("backend,act", [("fp8route", "row"), ("fp8route", "block"), ("torch_fp8", "row"),
                                         ("bf16", "row")])
def test_gpu_decode_graph_replay_equals_eager(backend, act):
    cfg = L.LlamaConfig.from_hf(FAMILIES["llama"])
    model = L.LlamaModel.random(cfg, backend=backend, act=act, device="cuda", max_batch=4, max_seq=64, seed=5)
    model.prefill(_tokens(3, 20, cfg.vocab_size, 9).cuda())
    step = model.capture_decode(3)
    nxt = _tokens(3, 2, cfg.vocab_size, 10).cuda()
    for i in range(2):
        tok, pos = nxt[:, i], torch.tensor([20 + i, 12 + i, 20 + i], device="cuda")
        before = model.cache.clone()
        eager = model.decode_step(tok, pos).clone()
        after = model.cache.clone()
        model.cache.copy_(before)
        replayed = step(tok, pos)
        torch.cuda.synchronize()
        assert torch.equal(replayed, eager)
        assert torch.equal(model.cache, after)
    model.reset_cache()
    with pytest.raises(RuntimeError, match="capture again"):
        step(tok, pos)


def _tp_gpu_worker(rank, world, init_file, out_file):
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank, world_size=world)
    try:
        cfg = L.LlamaConfig.from_hf(FAMILIES["llama"])
        state = L.random_state_dict(cfg, seed=51)
        model = L.LlamaModel.from_state_dict(cfg, state, backend="fp8route", device="cuda", max_batch=2, max_seq=32)
        toks = _tokens(2, 12, cfg.vocab_size, 11).cuda()
        pre = model.prefill(toks, logits="all")
        step = model.capture_decode(2)
        nxt = _tokens(2, 1, cfg.vocab_size, 12).cuda()[:, 0]
        dec = step(nxt, torch.tensor([12, 12], device="cuda")).clone()
        if rank == 0:
            torch.save([pre.cpu(), dec.cpu()], out_file)
    finally:
        dist.destroy_process_group()


@needs_cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_gpu_tensor_parallel_nccl_close_to_fp32(tmp_path):
    import torch.multiprocessing as mp
    out_file = str(tmp_path / "tp2.pt")
    mp.spawn(_tp_gpu_worker, args=(2, str(tmp_path / "rendezvous"), out_file), nprocs=2, join=True)
    pre, dec = torch.load(out_file)
    cfg = L.LlamaConfig.from_hf(FAMILIES["llama"])
    ref = L.LlamaModel.from_state_dict(cfg, L.random_state_dict(cfg, seed=51), backend="ref", device="cpu",
                                       max_batch=2, max_seq=32, rank=0, world=1)
    toks = _tokens(2, 12, cfg.vocab_size, 11)
    assert _rel(pre, ref.prefill(toks, logits="all")) < 5e-2
    nxt = _tokens(2, 1, cfg.vocab_size, 12)[:, 0]
    assert _rel(dec, ref.decode_step(nxt, torch.tensor([12, 12]))) < 5e-2
