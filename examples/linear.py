"""One FP8 linear layer with the installed fp8route package: a bf16 weight made an Fp8Linear (E4M3
codes, per-channel scales, the plan decided once), called on bf16 activations (per-token quant + the
routed FP8 GEMM), and the same GEMM through scaled_mm; checked against torch on the same codes.

  python3 examples/linear.py        exit 0: results match; 1: they do not; 2: no CUDA GPU here
"""
import sys

import torch

import fp8route

if not torch.cuda.is_available():
    print("linear.py: needs a CUDA GPU (SM90)")
    sys.exit(2)

torch.manual_seed(0)
w = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
layer = fp8route.Fp8Linear.from_float(w, act="row")     # E4M3 weight, per-channel scales; plan made once
x = torch.randn(16, 14336, device="cuda", dtype=torch.bfloat16)
y = layer(x)                                            # per-token quant + routed FP8 GEMM -> bf16 [16, 4096]
print(layer.route(16))                                  # the backend/config a 16-row call runs

q, s = fp8route.per_token_quant(x)                      # e4m3 [16, 14336], f32 [16]
y2 = fp8route.scaled_mm(q, layer.weight, s, layer.weight_scale, out_dtype=torch.bfloat16)

# torch on the same codes and scales, in fp32.
want = (q.float() @ layer.weight.float().t()) * s.view(-1, 1) * layer.weight_scale.view(1, -1)
err = max((y.float() - want).abs().max().item(), (y2.float() - want).abs().max().item())
print(f"y {tuple(y.shape)} {y.dtype}: max |y - torch| = {err:.3g} of max |torch| {want.abs().max().item():.3g}")
ok = err <= 1e-2 * want.abs().max().item()  # fast accumulation and bf16 rounding: well within 1%
print("ok" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
