"""Per-kernel time of fp8route kernels chained in one CUDA graph (programmatic dependent launch
between them), against the weight-read floor: what a kernel boundary costs at batch 1.

  python3 chain_latency.py [--n 64]

A: N per-token quants of one row (16 and 4096 elements): the cost of a minimal fp8route kernel.
B: N GEMMs of one layer shape at M = 1 (forward_quantized, codes and scales fixed), distinct
   weights (the chain reads more than L2 holds), and the same with one weight (read from L2).
C: B with a per-token quant before each GEMM (the decode layer's pattern).
Floor: the weight bytes over a device-to-device copy's bandwidth (read + write) in the same run."""
import argparse
import torch
import fp8route

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=64)
a = ap.parse_args()
dev = "cuda"
torch.manual_seed(0)


def timed(fn, reps=30):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            fn()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000)
    ts.sort()
    return ts[len(ts) // 2]


big = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
dst = torch.empty_like(big)
t_copy = timed(lambda: dst.copy_(big), 10)
bw = 2 * big.numel() / (t_copy * 1e-6)
print(f"device-to-device copy {bw / 1e9:.0f} GB/s (read + write)")
del big, dst

n = a.n
for h in (16, 4096):
    x = torch.randn(1, h, device=dev, dtype=torch.bfloat16)
    outs = [(torch.empty(1, h, dtype=torch.float8_e4m3fn, device=dev), torch.empty(1, device=dev)) for _ in range(n)]
    t = timed(lambda: [fp8route.per_token_quant(x, out=o) for o in outs])
    print(f"A per_token_quant [1, {h}] x {n}: {t / n:.2f} us per kernel")

shapes = {"8b o_proj": (4096, 4096), "8b qkv_proj": (6144, 4096), "70b-tp8 o_proj": (8192, 1024),
          "70b-tp8 qkv_proj": (1280, 8192), "70b-tp8 down_proj": (8192, 3584), "8b down_proj": (4096, 14336)}
for name, (nn, k) in shapes.items():
    layers = [fp8route.Fp8Linear.from_float(torch.randn(nn, k, device=dev, dtype=torch.bfloat16) / 32) for _ in range(min(n, max(4, (2 << 30) // (nn * k))))]
    x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
    q, s = fp8route.per_token_quant(x)
    L = len(layers)
    t_dist = timed(lambda: [l.forward_quantized(q, s) for l in layers])
    t_same = timed(lambda: [layers[0].forward_quantized(q, s) for _ in range(L)])
    t_pair = timed(lambda: [l.forward_quantized(*fp8route.per_token_quant(x)) for l in layers])
    floor = nn * k / bw * 1e6
    print(f"B {name} {nn}x{k} M=1 ({layers[0].route(1)}), {L} layers: distinct weights {t_dist / L:.2f} us, "
          f"one weight (L2) {t_same / L:.2f} us, floor {floor:.2f} us; C with a per-token quant before each: "
          f"{t_pair / L:.2f} us per pair")
