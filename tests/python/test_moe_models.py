"""Mixture-of-experts models (python/fp8route/models/moe_*.py, experts.py).

CPU (needs torch; skipped without it): HF config parsing of Qwen3-30B-A3B, Mixtral-8x7B and
DeepSeek-V3 (sparse layers, shared expert, routing fields) and its refusals; the expert-parallel
expert map; the routing functions against a per-token transcription written here; the "ref" MoE
block of each family against a float64 per-token transcription; the "ref" MoeModel (Qwen3-MoE,
Mixtral) against an independent float64 transcription of the whole decoder, for prefill and decode;
FP8 checkpoints in the block, per-channel and per-tensor formats written with safetensors under the
HF names, loaded with MoeModel.from_pretrained; the experts' stacking rules (exact where they claim
to be); expert parallelism (the ranks' outputs sum to the whole block's); the catalog's MoE entries
against the configs.
GPU (skipped without an SM90 GPU; not yet run): fp8route (act row and block), torch_fp8 and bf16
MoE models against the float32 model; a replayed decode graph against the eager step; Fp8MoE with an
expert map; the DeepSeek-V3 block (sigmoid routing, shared expert).
"""
import importlib
import json
import math
import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the model tests use it)")

from models_import import import_models  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
M = import_models()
R = importlib.import_module(M.__name__.rsplit(".", 1)[0] + ".moe_routing")  # routing, pure torch

_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not _SM90, reason="needs an SM90 GPU (the grouped kernels are built for sm_90a)")

# ------------------------------------------------------------------------------------------------
# Configs: the published config.json values
# ------------------------------------------------------------------------------------------------

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False,
    "vocab_size": 151936,
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
    "vocab_size": 32000,
}
QWEN3_235B_A22B = dict(QWEN3_30B_A3B, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
                       num_attention_heads=64, num_hidden_layers=94, max_window_layers=94)
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
    "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_group": 4,
    "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280,
}

# Tiny configs of the same families (K multiples of 128, so every FP8 format loads exactly).
TINY = {
    "qwen3_moe": dict(QWEN3_30B_A3B, hidden_size=256, intermediate_size=384, moe_intermediate_size=128,
                      num_experts=8, num_experts_per_tok=3, num_hidden_layers=3, mlp_only_layers=[1],
                      num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=97),
    "mixtral": dict(MIXTRAL_8X7B, hidden_size=256, intermediate_size=256, num_local_experts=4, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, vocab_size=89),
    "deepseek_v3": dict(DEEPSEEK_V3, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                        n_routed_experts=16, n_group=4, topk_group=2, num_experts_per_tok=4, num_hidden_layers=2,
                        first_k_dense_replace=1),
}


def test_config_qwen3_30b_a3b():
    c = M.MoeConfig.from_hf(QWEN3_30B_A3B)
    assert (c.num_experts, c.top_k, c.moe_intermediate_size, c.routing, c.renormalize) == (128, 8, 768, "softmax",
                                                                                           True)
    assert c.sparse_layers == tuple(range(48)) and c.shared_intermediate_size == 0 and not c.router_fp32
    assert c.expert_shapes() == {"gate_up": (1536, 2048), "down": (2048, 768)}
    b = c.base
    assert b.qk_norm and (b.head_dim, b.num_attention_heads, b.num_key_value_heads) == (128, 32, 4)
    assert c.expert_names(5, 17) == tuple(f"model.layers.5.mlp.experts.17.{p}_proj" for p in ("gate", "up", "down"))
    assert c.router_name(5) == "model.layers.5.mlp.gate.weight"
    # HF's default norm_topk_prob is false (Qwen3-30B-A3B sets it).
    assert not M.MoeConfig.from_hf({k: v for k, v in QWEN3_30B_A3B.items() if k != "norm_topk_prob"}).renormalize


def test_config_qwen3_sparse_step_and_mlp_only_layers():
    c = M.MoeConfig.from_hf(dict(QWEN3_30B_A3B, num_hidden_layers=8, decoder_sparse_step=2, mlp_only_layers=[3, 5]))
    assert c.sparse_layers == (1, 7)  # (i + 1) % 2 == 0, less the listed dense layers
    assert c.dense_intermediate_size == 6144
    assert c.dense_names(3) == tuple(f"model.layers.3.mlp.{p}_proj" for p in ("gate", "up", "down"))


def test_config_mixtral():
    c = M.MoeConfig.from_hf(MIXTRAL_8X7B)
    assert (c.num_experts, c.top_k, c.moe_intermediate_size, c.renormalize) == (8, 2, 14336, True)
    assert c.sparse_layers == tuple(range(32)) and c.base.sliding_window is None and not c.base.qk_norm
    assert c.expert_names(0, 3) == tuple(f"model.layers.0.block_sparse_moe.experts.3.{w}" for w in ("w1", "w3", "w2"))
    assert c.router_name(2) == "model.layers.2.block_sparse_moe.gate.weight"
    assert c.expert_shapes() == {"gate_up": (28672, 4096), "down": (4096, 14336)}


def test_config_deepseek_v3_moe_block():
    c = M.MoeConfig.from_hf(DEEPSEEK_V3)
    assert (c.num_experts, c.top_k, c.n_group, c.topk_group, c.routed_scaling_factor) == (256, 8, 8, 4, 2.5)
    assert c.routing == "sigmoid" and c.renormalize and c.router_fp32 and c.base is None
    assert c.shared_intermediate_size == 2048 and c.dense_intermediate_size == 18432
    assert c.sparse_layers == tuple(range(3, 61))
    assert c.bias_name(3) == "model.layers.3.mlp.gate.e_score_correction_bias"
    assert c.shared_names(3)[0] == "model.layers.3.mlp.shared_experts.gate_proj"
    with pytest.raises(ValueError, match="MLA"):
        M.MoeModel.random(c, backend="ref", device="cpu")


@pytest.mark.parametrize("cfg,change,match", [
    (QWEN3_30B_A3B, {"model_type": "qwen2_moe"}, "model_type"),
    (QWEN3_30B_A3B, {"hidden_act": "gelu"}, "hidden_act"),
    (QWEN3_30B_A3B, {"shared_expert_intermediate_size": 5632}, "shared_expert"),
    (QWEN3_30B_A3B, {"num_experts_per_tok": 129}, "num_experts_per_tok"),
    (DEEPSEEK_V3, {"topk_method": "group_limited_greedy", "scoring_func": "softmax"}, "topk_method"),
    (DEEPSEEK_V3, {"n_group": 7}, "n_group"),
])
def test_config_refusals_name_the_field(cfg, change, match):
    with pytest.raises(ValueError, match=match):
        M.MoeConfig.from_hf(dict(cfg, **change))


def test_config_from_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL_8X7B))
    assert M.MoeConfig.from_hf(tmp_path) == M.MoeConfig.from_hf(MIXTRAL_8X7B)


def test_expert_map():
    assert M.expert_range(128, 3, 8) == (48, 64)
    m = M.expert_map(8, 1, 4)
    assert m.dtype == torch.int32 and m.tolist() == [-1, -1, 0, 1, -1, -1, -1, -1]
    every = torch.stack([M.expert_map(8, r, 4) for r in range(4)])
    assert ((every >= 0).sum(0) == 1).all()  # each expert on exactly one rank
    with pytest.raises(ValueError, match="num_experts"):
        M.expert_range(8, 0, 3)
    with pytest.raises(ValueError, match="rank"):
        M.expert_range(8, 4, 4)


# ------------------------------------------------------------------------------------------------
# Routing against a per-token transcription
# ------------------------------------------------------------------------------------------------

def _topk_direct(scores, k):
    """Indices of the k largest, by a full sort (ties: the lower index first, as an exact sort gives)."""
    return sorted(range(len(scores)), key=lambda e: (-scores[e], e))[:k]


def _softmax_route(logits, k, renormalize):
    out = []
    for row in logits.double().tolist():
        mx = max(row)
        p = [math.exp(v - mx) for v in row]
        p = [v / sum(p) for v in p]
        top = _topk_direct(p, k)
        w = [p[e] for e in top]
        if renormalize:
            w = [v / sum(w) for v in w]
        out.append(dict(zip(top, w)))
    return out


def _sigmoid_route(logits, k, bias, n_group, topk_group, renormalize, scale):
    out = []
    e = logits.shape[1]
    per = e // n_group
    for row in logits.double().tolist():
        s = [1 / (1 + math.exp(-v)) for v in row]
        c = [s[j] + float(bias[j]) for j in range(e)]
        gscore = [sum(sorted(c[g * per:(g + 1) * per], reverse=True)[:2]) for g in range(n_group)]
        groups = set(_topk_direct(gscore, topk_group))
        masked = [c[j] if j // per in groups else -math.inf for j in range(e)]
        top = _topk_direct(masked, k)
        w = [s[j] for j in top]
        if renormalize:
            w = [v / sum(w) for v in w]
        out.append({j: v * scale for j, v in zip(top, w)})
    return out


def _as_dicts(w, ids):
    return [dict(zip(i.tolist(), row.tolist())) for row, i in zip(w, ids)]


@pytest.mark.parametrize("renormalize", [True, False])
def test_softmax_topk_against_transcription(renormalize):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(9, 16, generator=g) * 2
    w, ids = R.softmax_topk(logits, 5, renormalize)
    for got, want in zip(_as_dicts(w, ids), _softmax_route(logits, 5, renormalize)):
        assert got.keys() == want.keys()
        for e in want:
            assert abs(got[e] - want[e]) < 1e-6


def test_grouped_topk_against_transcription():
    g = torch.Generator().manual_seed(6)
    logits, bias = torch.randn(11, 32, generator=g), torch.randn(32, generator=g) * 0.3
    w, ids = R.grouped_topk(logits, 6, bias, 8, 3, True, 2.5)
    for got, want in zip(_as_dicts(w, ids), _sigmoid_route(logits, 6, bias, 8, 3, True, 2.5)):
        assert got.keys() == want.keys()
        for e in want:
            assert abs(got[e] - want[e]) < 1e-5


# ------------------------------------------------------------------------------------------------
# The MoE block and the whole decoder against float64 transcriptions
# ------------------------------------------------------------------------------------------------

def _dequant(state, base):
    w = state[base + ".weight"]
    if w.dtype != torch.float8_e4m3fn:
        return w.double()
    f = w.float().double()
    if base + ".weight_scale_inv" in state:
        s = state[base + ".weight_scale_inv"].double()
        return f * s.repeat_interleave(128, 0)[:f.shape[0]].repeat_interleave(128, 1)[:, :f.shape[1]]
    s = state[base + ".weight_scale"].double()
    return f * (s.reshape(()) if s.numel() == 1 else s.reshape(-1, 1))


def _mlp(state, names, x):
    g, u, d = (_dequant(state, n) for n in names)
    a, b = x @ g.t(), x @ u.t()
    return (a / (1 + torch.exp(-a)) * b) @ d.t()


def moe_block_reference(moe, hf, state, layer, x):
    """float64 [S, H]: for each token, the sum over its chosen experts of weight x expert(x) (+ shared)."""
    logits = x @ state[moe.router_name(layer)].double().t()
    if hf["model_type"] == "deepseek_v3":
        bias = state[moe.bias_name(layer)].double()
        routes = _sigmoid_route(logits, hf["num_experts_per_tok"], bias, hf["n_group"], hf["topk_group"],
                                hf["norm_topk_prob"], hf["routed_scaling_factor"])
    else:
        routes = _softmax_route(logits, hf["num_experts_per_tok"], hf.get("norm_topk_prob", True))
    out = torch.zeros_like(x)
    for t, route in enumerate(routes):
        for e, w in route.items():
            out[t] += w * _mlp(state, moe.expert_names(layer, e), x[t:t + 1])[0]
    if moe.shared_intermediate_size:
        out += _mlp(state, moe.shared_names(layer), x)
    return out


def _rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w.double()


def _rotate(x, pos, theta):
    """RoPE on the halves (x[j], x[j + d/2]) at positions pos."""
    d = x.shape[-1]
    ang = pos.double()[:, None] * (1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))[None]
    c, s = ang.cos()[:, None], ang.sin()[:, None]
    a, b = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([a * c - b * s, a * s + b * c], -1)


def moe_model_reference(hf, state, tokens):
    """Logits [S, V] (float64) of one sequence."""
    moe = M.MoeConfig.from_hf(hf)
    h, nh, nk = hf["hidden_size"], hf["num_attention_heads"], hf["num_key_value_heads"]
    d, eps = hf.get("head_dim") or h // nh, hf["rms_norm_eps"]
    s = len(tokens)
    pos = torch.arange(s)
    x = state["model.embed_tokens.weight"].double()[torch.tensor(tokens)]
    for i in range(hf["num_hidden_layers"]):
        p = f"model.layers.{i}."
        hn = _rmsnorm(x, state[p + "input_layernorm.weight"], eps)
        q = (hn @ _dequant(state, p + "self_attn.q_proj").t()).view(s, nh, d)
        k = (hn @ _dequant(state, p + "self_attn.k_proj").t()).view(s, nk, d)
        v = (hn @ _dequant(state, p + "self_attn.v_proj").t()).view(s, nk, d)
        if hf["model_type"] == "qwen3_moe":
            q = _rmsnorm(q, state[p + "self_attn.q_norm.weight"], eps)
            k = _rmsnorm(k, state[p + "self_attn.k_norm.weight"], eps)
        q, k = _rotate(q, pos, hf["rope_theta"]), _rotate(k, pos, hf["rope_theta"])
        k, v = k.repeat_interleave(nh // nk, 1), v.repeat_interleave(nh // nk, 1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), -math.inf)
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(s, nh * d)
        x = x + attn @ _dequant(state, p + "self_attn.o_proj").t()
        hn = _rmsnorm(x, state[p + "post_attention_layernorm.weight"], eps)
        x = x + (moe_block_reference(moe, hf, state, i, hn) if i in moe.sparse_layers
                 else _mlp(state, moe.dense_names(i), hn))
    x = _rmsnorm(x, state["model.norm.weight"], eps)
    return x @ state["lm_head.weight"].double().t()


def _rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _tokens(b, s, vocab, seed):
    return torch.randint(0, vocab, (b, s), generator=torch.Generator().manual_seed(seed))


def _ref_block(family, fmt, seed=3, rank=0, world=1, expert_map=None):
    moe = M.MoeConfig.from_hf(TINY[family])
    layer = moe.sparse_layers[0]
    state = _state(family, fmt, seed)
    blk = M.moe_block_from_state(moe, state, layer, "dense", torch.float32, rank, world, kind="dense")
    be = importlib.import_module(M.__name__ + ".backends")._make_backend("ref", "row", False)
    shared = None if blk["shared"] is None else tuple(be.linear(w) for w in blk["shared"])
    ffn = M.MoeFfn(moe, blk["experts"], blk["router"], be, "ref", bias=blk["bias"], shared=shared,
                   add_shared=rank == 0, expert_map=expert_map)
    return moe, state, layer, ffn


def _state(family, fmt, seed):
    moe = M.MoeConfig.from_hf(TINY[family])
    if moe.base is not None:
        return M.random_moe_state_dict(moe, seed=seed, weight_format=fmt, dtype=torch.float32)
    # DeepSeek-V3: the MoE block's tensors only (no attention).
    state = {}
    layer = moe.sparse_layers[0]
    blk = M.random_moe_block(moe, layer, "dense", fmt, seed, dtype=torch.float32)
    state[moe.router_name(layer)] = blk["router"]
    state[moe.bias_name(layer)] = blk["bias"]
    mm = importlib.import_module(M.__name__ + ".moe_model")
    ex = importlib.import_module(M.__name__ + ".experts")
    ck = importlib.import_module(M.__name__ + ".checkpoint")
    for e in range(moe.num_experts):
        for name, lw in zip(moe.expert_names(layer, e), ex.random_expert_linears(moe, layer, e, fmt, seed, "cpu")):
            mm._put(state, name, lw, torch.float32)
    h, i = moe.hidden_size, moe.shared_intermediate_size
    for name, (n, k) in zip(moe.shared_names(layer), [(i, h), (i, h), (h, i)]):
        mm._put(state, name, ck._random_linear(name, n, k, k, False, fmt, seed, "cpu"), torch.float32)
    return state


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "deepseek_v3"])
@pytest.mark.parametrize("fmt", ["block", "channel"])
def test_ref_moe_block_matches_transcription(family, fmt):
    moe, state, layer, ffn = _ref_block(family, fmt)
    x = torch.randn(7, moe.hidden_size, generator=torch.Generator().manual_seed(9))
    got = ffn(x)
    want = moe_block_reference(moe, TINY[family], state, layer, x.double())
    assert got.dtype == torch.float32 and _rel(got, want) < 1e-5


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral", "deepseek_v3"])
def test_expert_parallel_ranks_sum_to_the_block(family):
    """Each rank holds E / world experts and routes over all of them; the ranks' outputs (the
    shared expert added by rank 0 only) sum to the one-GPU block."""
    world = 4
    moe, state, layer, whole = _ref_block(family, "channel")
    x = torch.randn(6, moe.hidden_size, generator=torch.Generator().manual_seed(4))
    parts = []
    for rank in range(world):
        emap = M.expert_map(moe.num_experts, rank, world)
        _, _, _, ffn = _ref_block(family, "channel", rank=rank, world=world, expert_map=emap)
        assert ffn.experts.experts == moe.num_experts // world
        assert ffn.experts.global_ids.tolist() == list(range(*M.expert_range(moe.num_experts, rank, world)))
        parts.append(ffn(x))
    assert _rel(sum(parts), whole(x)) < 1e-6


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_ref_model_matches_transcription(family):
    hf = TINY[family]
    moe = M.MoeConfig.from_hf(hf)
    state = M.random_moe_state_dict(moe, seed=11, weight_format="channel", dtype=torch.float32)
    model = M.MoeModel.from_state_dict(moe, state, backend="ref", max_batch=2, max_seq=16)
    toks = _tokens(2, 6, hf["vocab_size"], 1)
    got = model.prefill(toks, logits="all")
    for b in range(2):
        assert _rel(got[b], moe_model_reference(hf, state, toks[b].tolist())) < 1e-4
    # Decode steps continue both rows; each equals the transcription of the longer sequence.
    nxt = _tokens(2, 2, hf["vocab_size"], 2)
    for step in range(2):
        out = model.decode_step(nxt[:, step], torch.tensor([6 + step, 6 + step]))
        for b in range(2):
            seq = toks[b].tolist() + nxt[b, :step + 1].tolist()
            assert _rel(out[b], moe_model_reference(hf, state, seq)[-1]) < 1e-4


def _write(path, hf, state):
    from safetensors.torch import save_file
    path.mkdir()
    (path / "config.json").write_text(json.dumps(hf))
    items = sorted(state.items())
    half = len(items) // 2  # two shards, as large checkpoints are
    save_file({k: v.contiguous() for k, v in items[:half]}, str(path / "model-00001-of-00002.safetensors"))
    save_file({k: v.contiguous() for k, v in items[half:]}, str(path / "model-00002-of-00002.safetensors"))


@pytest.mark.parametrize("family,fmt", [("qwen3_moe", "block"), ("qwen3_moe", "tensor"), ("mixtral", "channel"),
                                        ("mixtral", "tensor")])
def test_fp8_checkpoint_loads_under_hf_names(tmp_path, family, fmt):
    pytest.importorskip("safetensors", reason="safetensors is not installed")
    hf = TINY[family]
    moe = M.MoeConfig.from_hf(hf)
    state = M.random_moe_state_dict(moe, seed=21, weight_format=fmt)
    experts = [k for k in state if ".experts." in k]
    assert experts and all(state[k].dtype == torch.float8_e4m3fn for k in experts if k.endswith(".weight"))
    if fmt == "block":
        key = moe.expert_names(0, 1)[0] + ".weight_scale_inv"
        assert state[key].shape == (1, 2)  # [ceil(128/128), ceil(256/128)]
    _write(tmp_path / "ckpt", hf, state)
    model = M.MoeModel.from_pretrained(tmp_path / "ckpt", backend="ref", device="cpu", max_batch=1, max_seq=8)
    toks = _tokens(1, 5, hf["vocab_size"], 3)
    want = moe_model_reference(hf, {k: v.float() if v.dtype == torch.bfloat16 else v for k, v in state.items()},
                               toks[0].tolist())
    assert _rel(model.prefill(toks, logits="all")[0], want) < 1e-2  # bf16 norms and embedding in the checkpoint


def test_checkpoint_missing_expert_names_the_tensor():
    moe = M.MoeConfig.from_hf(TINY["mixtral"])
    state = M.random_moe_state_dict(moe, seed=1, weight_format="channel")
    del state["model.layers.1.block_sparse_moe.experts.2.w3.weight"]
    with pytest.raises(KeyError, match="experts.2.w3.weight"):
        M.MoeModel.from_state_dict(moe, state, backend="ref")


def test_expert_stacking_keeps_checkpoint_scales():
    moe = M.MoeConfig.from_hf(TINY["qwen3_moe"])
    state = M.random_moe_state_dict(moe, seed=2, weight_format="block")
    blk = M.moe_block_from_state(moe, state, 0, "block")
    ex = blk["experts"]
    g, u, d = moe.expert_names(0, 3)
    # Block experts stack exactly: gate then up rows (I % 128 == 0), the checkpoint's scales.
    assert torch.equal(ex.w13[3, :128].view(torch.uint8), state[g + ".weight"].view(torch.uint8))
    assert torch.equal(ex.w13_scale[3], torch.cat([state[g + ".weight_scale_inv"], state[u + ".weight_scale_inv"]]))
    assert torch.equal(ex.w2_scale[3], state[d + ".weight_scale_inv"])
    assert ex.w13.shape == (8, 256, 256) and ex.w2.shape == (8, 256, 128) and ex.w13_scale.shape == (8, 2, 2)
    assert ex.expert_nbytes() == 256 * 256 + 256 * 128 + 4 * (4 + 2)
    # Per-tensor experts become per-channel exactly: each part's scale repeated over its rows.
    state = M.random_moe_state_dict(moe, seed=2, weight_format="tensor")
    ex = M.moe_block_from_state(moe, state, 0, "channel")["experts"]
    assert ex.kind == "channel" and ex.w13_scale.shape == (8, 256)
    assert torch.equal(ex.w13_scale[3, 128:], state[u + ".weight_scale"].float().expand(128))
    w13, w2 = ex.dequant()
    assert torch.equal(w2[3], state[d + ".weight"].float() * state[d + ".weight_scale"].float())
    # Random experts are what the random checkpoint holds (the same per-name generators).
    direct = M.random_moe_block(moe, 0, "block", "block", seed=2, dtype=torch.float32)["experts"]
    loaded = M.moe_block_from_state(moe, M.random_moe_state_dict(moe, seed=2, weight_format="block"), 0,
                                    "block")["experts"]
    assert torch.equal(direct.w13.view(torch.uint8), loaded.w13.view(torch.uint8))
    assert torch.equal(direct.w2_scale, loaded.w2_scale)


def test_weight_bytes_counts_the_experts_read():
    moe = M.MoeConfig.from_hf(TINY["qwen3_moe"])
    model = M.MoeModel.random(moe, backend="ref", device="cpu", max_batch=1, max_seq=8)
    per = model.moe_layers()[0].experts.expert_nbytes()
    assert len(model.moe_layers()) == 2  # layer 1 is dense (mlp_only_layers)
    assert model.weight_bytes() - model.weight_bytes(3) == 2 * (8 - 3) * per
    assert model.weight_bytes([3, 5]) - model.weight_bytes(3) == 2 * per


# ------------------------------------------------------------------------------------------------
# The catalog
# ------------------------------------------------------------------------------------------------

def test_catalog_moe_entries_match_the_configs():
    """shapes/models.json's "moe" section: each model's expert shapes and counts are its config's."""
    with open(os.path.join(ROOT, "shapes", "models.json")) as f:
        catalog = json.load(f)
    entries = catalog["moe"]["models"]
    models = (("qwen3-30b-a3b", QWEN3_30B_A3B), ("qwen3-235b-a22b", QWEN3_235B_A22B), ("mixtral-8x7b", MIXTRAL_8X7B),
              ("deepseek-v3", DEEPSEEK_V3))
    assert set(entries) == {name for name, _ in models}
    for name, hf in models:
        c = M.MoeConfig.from_hf(hf)
        e = entries[name]
        assert (e["experts"], e["top_k"], e["shared_experts"]) == (c.num_experts, c.top_k,
                                                                   c.shared_intermediate_size // c.moe_intermediate_size)
        got = {layer["name"]: (layer["n"], layer["k"]) for layer in e["layers"]}
        shapes = c.expert_shapes()
        assert got == {"experts.gate_up_proj": shapes["gate_up"], "experts.down_proj": shapes["down"]}
        assert all(c.num_experts % ep == 0 for ep in e["ep"])
    # The dense section, which the C++ tools tune and test, holds no expert layer.
    assert not [layer for layers in catalog["models"].values() for layer in layers if "expert" in layer["name"]]


# ------------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------------

def _per_token_rel(a, b):
    a, b = a.double().reshape(-1, a.shape[-1]), b.double().reshape(-1, b.shape[-1])
    return (a - b).norm(dim=-1) / b.norm(dim=-1)


def _close_but_for_flips(got, want, bound):
    """Most tokens within bound of the float32 model; a few may differ more: quantization noise moves a
    router score across a near tie and the token takes another expert (a different model output, not
    an error of the kernels). At most 10% of tokens past the bound, the median well within it."""
    rel = _per_token_rel(got, want)
    assert rel.median() < bound / 2, f"median per-token relative error {rel.median():.3g}"
    assert (rel > bound).float().mean() <= 0.1, f"{(rel > bound).float().mean():.0%} of tokens past {bound}"


GPU_CASES = [("fp8route", "row", "channel"), ("fp8route", "block", "block"), ("torch_fp8", "row", "channel"),
             ("bf16", "row", "channel")]


@needs_sm90
@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
@pytest.mark.parametrize("backend,act,fmt", GPU_CASES)
def test_gpu_moe_model_close_to_fp32(backend, act, fmt, family):
    hf = dict(TINY[family], head_dim=128) if family == "qwen3_moe" else TINY[family]
    moe = M.MoeConfig.from_hf(hf)
    state = M.random_moe_state_dict(moe, seed=41, weight_format=fmt)
    kw = dict(device="cuda", max_batch=4, max_seq=64)
    ref = M.MoeModel.from_state_dict(moe, state, backend="ref", **kw)
    model = M.MoeModel.from_state_dict(moe, state, backend=backend, act=act, **kw)
    toks = _tokens(4, 24, hf["vocab_size"], 7).cuda()  # 96 tokens: the contiguous form
    bound = 2e-2 if backend == "bf16" else 5e-2
    _close_but_for_flips(model.prefill(toks, logits="all"), ref.prefill(toks, logits="all"), bound)
    nxt = _tokens(4, 3, hf["vocab_size"], 8).cuda()
    for step in range(3):  # 4 tokens: the masked form
        pos = torch.tensor([24 + step, 24 + step, 10 + step, 20 + step], device="cuda")
        _close_but_for_flips(model.decode_step(nxt[:, step], pos), ref.decode_step(nxt[:, step], pos), bound)


@needs_sm90
@pytest.mark.parametrize("backend,act", [("fp8route", "row"), ("fp8route", "block"), ("torch_fp8", "row"),
                                         ("bf16", "row")])
def test_gpu_moe_decode_graph_replay_equals_eager(backend, act):
    moe = M.MoeConfig.from_hf(dict(TINY["qwen3_moe"], head_dim=128))
    model = M.MoeModel.random(moe, backend=backend, act=act, device="cuda", max_batch=4, max_seq=32)
    step = model.capture_decode(4)
    g = torch.Generator(device="cuda").manual_seed(1)
    for pos in (3, 9):
        toks = torch.randint(0, moe.base.vocab_size, (4,), device="cuda", generator=g)
        positions = torch.full((4,), pos, device="cuda")
        replayed = step(toks, positions).clone()
        eager = model.decode_step(toks, positions)  # rewrites the same cache slots with the same values
        assert torch.equal(replayed, eager), (backend, act, pos)


@needs_sm90
@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3"])
@pytest.mark.parametrize("act", ["row", "block"])
def test_gpu_fp8route_block_expert_parallel(family, act):
    """Fp8MoE with an expert map on each of 2 ranks (and DeepSeek-V3's sigmoid routing and shared
    expert): the ranks' outputs sum to the same layer on one GPU (each rank's output rounded to bf16
    once), and to the float32 block up to FP8 activation quantization, which at these tiny widths
    (H = 256, experts of 128) puts the block's output 3-6% from float32 per token; the whole model's
    test sees less, its residual stream carrying most of each token's value."""
    moe = M.MoeConfig.from_hf(TINY[family])
    layer = moe.sparse_layers[0]
    state = {k: v.cuda() for k, v in _state(family, "block" if act == "block" else "channel", 5).items()}
    backends = importlib.import_module(M.__name__ + ".backends")
    x = torch.randn(5, moe.hidden_size, device="cuda", generator=torch.Generator(device="cuda").manual_seed(2))
    _, _, _, ref = _ref_block(family, "block" if act == "block" else "channel", seed=5)
    want = ref.__class__(ref.moe, ref.experts.to("cuda"), ref.router.cuda(), ref.be, "ref",
                         bias=None if ref.bias is None else ref.bias.cuda(),
                         shared=None if ref.shared is None else tuple(_to_cuda(s) for s in ref.shared))(x.float())
    be = backends._make_backend("fp8route", act, False)
    kind = "block" if act == "block" else "channel"

    def rank_out(rank, world):
        blk = M.moe_block_from_state(moe, state, layer, kind, rank=rank, world=world, device="cuda",
                                     kind="block" if act == "block" else "rowwise")
        shared = None if blk["shared"] is None else tuple(be.linear(w) for w in blk["shared"])
        emap = M.expert_map(moe.num_experts, rank, world, "cuda") if world > 1 else None
        ffn = M.MoeFfn(moe, blk["experts"], blk["router"], be, "fp8route", act, bias=blk["bias"], shared=shared,
                       add_shared=rank == 0, expert_map=emap)
        return ffn(x.to(torch.bfloat16)).float()

    total = rank_out(0, 2) + rank_out(1, 2)
    one = rank_out(0, 1)
    # The same routing and codes on both sides: the sum differs by the ranks' bf16 roundings only.
    assert (_per_token_rel(total, one) < 2e-2).all(), _per_token_rel(total, one)
    _close_but_for_flips(total, want, 0.12)


def _to_cuda(lin):
    lin.w = lin.w.cuda()
    lin.bias = None if lin.bias is None else lin.bias.cuda()
    return lin
