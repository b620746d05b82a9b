"""The decode glue kernels one after another, a few calls each, for Nsight Compute (call2.sh):
decode attention (Llama-3.1-8B at batch 1, KV 1024), the fused SiLU-and-mul per-token quant at
T = 1 (the cluster split) and T = 17 (one block per row), the per-token quant of the o_proj input,
and the Qwen3-30B-A3B MoE glue at batch 1 (routing + masked dispatch, scatter quant, combine)."""
import torch

import fp8route

dev, bf16 = "cuda", torch.bfloat16
torch.manual_seed(0)


def rep(f, n=4):
    for _ in range(n):
        f()
    torch.cuda.synchronize()


hq, hk, d, s = 32, 8, 128, 1025
qkv = torch.randn(1, (hq + 2 * hk) * d, device=dev, dtype=bf16)
kc = torch.randn(1, hk, s, d, device=dev, dtype=bf16)
vc = torch.randn_like(kc)
cos, sin = torch.randn(s, d, device=dev, dtype=bf16), torch.randn(s, d, device=dev, dtype=bf16)
pos = torch.tensor([1024], dtype=torch.int32, device=dev)
rep(lambda: fp8route.decode_attention(qkv, kc, vc, cos, sin, pos, hq, hk))
x1 = torch.randn(1, 28672, device=dev, dtype=bf16)
rep(lambda: fp8route.silu_and_mul_per_token_quant(x1))
x17 = torch.randn(17, 28672, device=dev, dtype=bf16)
rep(lambda: fp8route.silu_and_mul_per_token_quant(x17))
xo = torch.randn(1, 4096, device=dev, dtype=bf16)
rep(lambda: fp8route.per_token_quant(xo))
e, k, m_max, h = 128, 8, 1, 2048
logits = torch.randn(1, e, device=dev, dtype=bf16)
w, ids, src2dst, masked_m = fp8route.moe_route_masked_dispatch(logits, k, e, m_max)
rep(lambda: fp8route.moe_route_masked_dispatch(logits, k, e, m_max))
xm = torch.randn(1, h, device=dev, dtype=bf16)
rep(lambda: fp8route.scatter_per_token_quant(xm, src2dst, e * m_max, unique_rows=True))
rows = torch.randn(e * m_max, h, device=dev, dtype=bf16)
rep(lambda: fp8route.moe_combine(rows, src2dst, w))
print("prof.py done")
