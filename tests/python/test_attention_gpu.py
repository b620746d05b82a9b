"""fp8route.decode_attention from Python on the GPU: against a float64 torch transcription of
docs/numerics.md "Decode attention" (the appended cache rows bit-exact, the output within the
dtype's rounding), int64 positions, the torch.library op checked with opcheck and captured in a CUDA
graph, and the decoder's fused attention against its SDPA path for each model family. Skipped (with
the reason) without torch or a CUDA device."""
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU tests use it)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import fp8route  # noqa: E402

DEV = "cuda"


def rope_tables(seq, d, dtype):
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(DEV, dtype), ang.sin().to(DEV, dtype)


def ref_norm_rotate(x, w, eps, cos, sin):
    """x [..., D] (16-bit): per-head RMSNorm (sum of squares in float64), then the rotation with each
    product and the sum rounded to float32 (separate torch ops: no fused multiply-add), rounded to x's
    dtype."""
    dt = x.dtype
    if w is not None:
        ss = (x.double() ** 2).sum(-1, keepdim=True)
        inv = (1.0 / torch.sqrt(ss / x.shape[-1] + float(torch.tensor(eps, dtype=torch.float32)))).float()
        x = ((x.float() * inv).to(dt).float() * w.float()).to(dt)
    h = x.shape[-1] // 2
    xf = x.float()
    rot = torch.cat((-xf[..., h:], xf[..., :h]), dim=-1)
    return (xf * cos.float() + rot * sin.float()).to(dt)


def ref_decode_attention(qkv, kc, vc, cos, sin, pos, hq, hk, window=0, q_norm=None, k_norm=None, eps=1e-6):
    """Updates kc, vc (clones) and returns (out float64 [B, Hq * D], kc, vc)."""
    b, d = qkv.shape[0], kc.shape[-1]
    kc, vc = kc.clone(), vc.clone()
    out = torch.empty(b, hq, d, dtype=torch.float64, device=DEV)
    g = hq // hk
    for i in range(b):
        p = int(pos[i])
        c, s = cos[p], sin[p]
        q = ref_norm_rotate(qkv[i, :hq * d].view(hq, d), q_norm, eps, c, s)
        k = ref_norm_rotate(qkv[i, hq * d:(hq + hk) * d].view(hk, d), k_norm, eps, c, s)
        kc[i, :, p] = k
        vc[i, :, p] = qkv[i, (hq + hk) * d:].view(hk, d)
        lo = max(0, p - window + 1) if window else 0
        for h in range(hq):
            keys, vals = kc[i, h // g, lo:p + 1].double(), vc[i, h // g, lo:p + 1].double()
            w = torch.softmax(keys @ q[h].double() / d ** 0.5, dim=0)
            out[i, h] = w @ vals
    return out.view(b, hq * d), kc, vc


def problem(b, hq, hk, d, seq, dtype, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    qkv = torch.randn(b, (hq + 2 * hk) * d, device=DEV, generator=g).to(dtype)
    kc = torch.randn(b, hk, seq, d, device=DEV, generator=g).to(dtype)
    vc = torch.randn(b, hk, seq, d, device=DEV, generator=g).mul(2).to(dtype)
    pos = torch.randint(0, seq, (b,), device=DEV, generator=g)
    pos[0] = seq - 1
    cos, sin = rope_tables(seq, d, dtype)
    return qkv, kc, vc, cos, sin, pos


def assert_close(got, want, dtype, vmax):
    """Within the dtype's rounding of the reference, plus float32 accumulation slack of 1e-4 of the
    largest value."""
    rel = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    err = (got.double() - want).abs() - rel * want.abs()
    assert err.max().item() <= 1e-4 * vmax, f"max error beyond the rounding: {err.max().item()}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b,hq,hk,d,seq,window,norm", [
    (1, 32, 8, 128, 1025, 0, False), (3, 8, 1, 128, 300, 0, False), (2, 28, 4, 128, 130, 0, True),
    (4, 16, 16, 64, 77, 0, False), (2, 16, 2, 256, 50, 0, False), (5, 32, 8, 128, 400, 33, False),
    (1, 8, 1, 128, 1025, 0, False)])
def test_decode_attention_against_reference(dtype, b, hq, hk, d, seq, window, norm):
    qkv, kc, vc, cos, sin, pos = problem(b, hq, hk, d, seq, dtype, seed=b * seq + d)
    qn = kn = None
    if norm:
        qn = (torch.rand(d, device=DEV) + 0.5).to(dtype)
        kn = (torch.rand(d, device=DEV) + 0.5).to(dtype)
    want, kwant, vwant = ref_decode_attention(qkv, kc, vc, cos, sin, pos, hq, hk, window, qn, kn)
    kc2, vc2 = kc.clone(), vc.clone()
    out = fp8route.decode_attention(qkv, kc, vc, cos, sin, pos, hq, hk, window=window, q_norm=qn, k_norm=kn)
    ready = fp8route.decode_attention(qkv, kc2, vc2, cos, sin, pos, hq, hk, window=window, q_norm=qn, k_norm=kn,
                                      cache_ready=True)
    torch.cuda.synchronize()
    assert torch.equal(kc.view(torch.int16), kwant.view(torch.int16))
    assert torch.equal(vc.view(torch.int16), vwant.view(torch.int16))
    assert_close(out, want, dtype, vc.abs().max().item())
    assert torch.equal(ready.view(torch.int16), out.view(torch.int16))  # only when it reads: the same bits
    assert torch.equal(kc2, kc) and torch.equal(vc2, vc)


def test_torch_op_opcheck_and_graph_capture():
    hq, hk, d, seq = 16, 4, 128, 64
    qkv, kc, vc, cos, sin, pos = problem(2, hq, hk, d, seq, torch.bfloat16, seed=7)
    pos32 = pos.to(torch.int32)
    args = (qkv, kc, vc, cos, sin, pos32, hq, hk, 0.0, 0, None, None, 1e-6)
    torch.library.opcheck(torch.ops.fp8route.decode_attention.default, args)

    # One captured step serves every position: replay at new positions, compare with eager calls.
    static_pos = torch.zeros(2, dtype=torch.int32, device=DEV)
    kc2, vc2 = kc.clone(), vc.clone()
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.ops.fp8route.decode_attention(qkv, kc2, vc2, cos, sin, static_pos, hq, hk, 0.0, 0, None, None, 1e-6)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        out = torch.ops.fp8route.decode_attention(qkv, kc2, vc2, cos, sin, static_pos, hq, hk, 0.0, 0, None, None,
                                                  1e-6)
    kc3, vc3 = kc2.clone(), vc2.clone()
    for p in ([3, 40], [63, 0], [10, 11]):
        static_pos.copy_(torch.tensor(p, dtype=torch.int32))
        graph.replay()
        eager = fp8route.decode_attention(qkv, kc3, vc3, cos, sin, torch.tensor(p, device=DEV), hq, hk)
        torch.cuda.synchronize()
        assert torch.equal(out, eager)
        assert torch.equal(kc2, kc3) and torch.equal(vc2, vc3)


def test_bad_arguments_raise_value_error():
    qkv, kc, vc, cos, sin, pos = problem(2, 8, 2, 128, 32, torch.bfloat16, seed=1)
    with pytest.raises(ValueError, match="num_q_heads"):
        fp8route.decode_attention(qkv, kc, vc, cos, sin, pos, 6, 4)
    with pytest.raises(ValueError, match="cos"):
        fp8route.decode_attention(qkv, kc, vc, cos[:16], sin, pos, 8, 2)
    with pytest.raises(ValueError, match="q_norm"):
        fp8route.decode_attention(qkv, kc, vc, cos, sin, pos, 8, 2, q_norm=torch.ones(128, device=DEV))
    with pytest.raises(ValueError, match="k_cache"):
        fp8route.decode_attention(qkv, kc.transpose(2, 3), vc, cos, sin, pos, 8, 2)


# ---- the decoder: fused attention against its SDPA path ---------------------------------------------

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_models import FAMILIES, _tokens  # noqa: E402

from fp8route.models import llama as L  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "qwen3"])
def test_model_fused_attention_matches_sdpa(family):
    hf = dict(FAMILIES[family], head_dim=128) if family == "qwen3" else FAMILIES[family]
    cfg = L.LlamaConfig.from_hf(hf)
    weights = L.RankWeights.random(cfg, seed=3, device=DEV)
    kw = dict(backend="bf16", device=DEV, max_batch=3, max_seq=40)
    fused = L.LlamaModel(cfg, weights, attention="fused", **kw)
    sdpa = L.LlamaModel(cfg, weights, attention="sdpa", **kw)
    toks = _tokens(3, 12, cfg.vocab_size, 4).to(DEV)
    for m in (fused, sdpa):
        m.prefill(toks)
    nxt = _tokens(3, 4, cfg.vocab_size, 5).to(DEV)
    for step in range(4):
        pos = torch.tensor([12 + step, 12 + step, 5 + step], device=DEV)
        a, b = fused.decode_step(nxt[:, step], pos), sdpa.decode_step(nxt[:, step], pos)
        rel = ((a.double() - b.double()).norm() / b.double().norm()).item()
        assert rel < 2e-2, f"step {step}: relative difference {rel}"
    assert fused.attention == "fused" and sdpa.attention == "sdpa"
