"""Block-scaled GEMMs on one H200: fp8route.scaled_mm (routed), torch._scaled_mm blockwise, and
DeepGEMM's gemm_fp8_fp8_bf16_nt as an outside reference (its source at commit a5645d7 of
github.com/deepseek-ai/DeepGEMM, JIT-compiled on the GPU machine with the CUDA 13.0 nvcc and the
nvidia-cutlass headers; not part of fp8route), with fp8route and torch per-tensor alongside; the
method of bench/python_bench.py (CUDA graphs over rotated inputs >= 3x L2, interleaved replays, an
L2 flush before each, median of 20).

  PYTHONPATH=<DeepGEMM>:python python3 dg_compare.py [--precompile]

--precompile compiles DeepGEMM's kernels for every problem in parallel processes first (its JIT
cache, DG_CACHE_DIR)."""
import json
import math
import multiprocessing as mp
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import python_bench as pb  # noqa: E402
import fp8route  # noqa: E402

MODELS = ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v3")
MS = (4096, 8192)


def problems():
    for model in MODELS:
        for label, n, k in pb.layers(model, 1):
            for m in MS:
                yield label, m, n, k


def operands(m, n, k, sets):
    a = [(torch.randn(m, k, device="cuda") * 4).to(torch.float8_e4m3fn) for _ in range(sets)]
    b = [(torch.randn(n, k, device="cuda") * 4).to(torch.float8_e4m3fn) for _ in range(sets)]
    kb, nb = (k + 127) // 128, (n + 127) // 128
    sa = (torch.rand(kb, m, device="cuda") + 0.5).t()  # [M, K/128], the M index contiguous
    sb = torch.rand(nb, kb, device="cuda") + 0.5
    return a, b, sa, sb


def compile_one(args):
    import deep_gemm
    m, n, k = args
    a, b, sa, sb = operands(m, n, k, 1)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a[0], sa), (b[0], sb), out)
    torch.cuda.synchronize()
    return m, n, k


def main():
    import deep_gemm
    if "--precompile" in sys.argv:
        with mp.get_context("spawn").Pool(min(16, os.cpu_count() or 4)) as pool:
            for m, n, k in pool.imap_unordered(compile_one, [(m, n, k) for _, m, n, k in problems()]):
                print(f"compiled m={m} n={n} k={k}", flush=True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8route {fp8route.__version__}")
    print(f"{'layer':36} {'M':>5} {'fp8route':>9} {'DeepGEMM':>9} {'torch':>9} {'fp8r tensor':>11} "
          f"{'torch tensor':>12} {'TFLOP/s ours':>12} {'DeepGEMM':>9} {'DG/ours':>8} {'rel diff':>9}")
    records = []
    for label, m, n, k in problems():
        sets = pb.rotation_sets(m * k + n * k + 2 * m * n)
        a, b, sa, sb = operands(m, n, k, sets)
        one = torch.ones(1, device="cuda")
        outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        ops = {
            "fp8route": lambda i: fp8route.scaled_mm(a[i], b[i], sa, sb, scale="block"),
            "deepgemm": lambda i: deep_gemm.gemm_fp8_fp8_bf16_nt((a[i], sa), (b[i], sb), outs[i]),
            "fp8route tensor": lambda i: fp8route.scaled_mm(a[i], b[i], one, one, scale="tensor"),
            "torch tensor": lambda i: torch._scaled_mm(a[i], b[i].t(), scale_a=one, scale_b=one,
                                                       out_dtype=torch.bfloat16),
        }
        if n % 128 == 0:
            ops["torch"] = lambda i: torch._scaled_mm(a[i], b[i].t(), scale_a=sa, scale_b=sb.t(),
                                                      out_dtype=torch.bfloat16)
        ref = ops["fp8route"](0).float()
        ops["deepgemm"](0)
        diff = ((outs[0].float() - ref).norm() / ref.norm()).item()
        t = pb.time_interleaved(ops, sets)
        flop = 2.0 * m * n * k / 1e6
        tt = t.get("torch")
        print(f"{label:36} {m:5d} {t['fp8route']:9.1f} {t['deepgemm']:9.1f} "
              f"{(f'{tt:.1f}' if tt else '-'):>9} {t['fp8route tensor']:11.1f} {t['torch tensor']:12.1f} "
              f"{flop / t['fp8route']:12.0f} {flop / t['deepgemm']:9.0f} {t['fp8route'] / t['deepgemm']:7.3f}x "
              f"{diff:9.2e}", flush=True)
        records.append({"layer": label, "m": m, "n": n, "k": k, **{f"{name}_us": v for name, v in t.items()},
                        "rel_diff_deepgemm_vs_fp8route": diff})
        del a, b, outs
        torch.cuda.empty_cache()

    def gm(v):
        return math.exp(sum(map(math.log, v)) / len(v))
    r = [x["fp8route_us"] / x["deepgemm_us"] for x in records]
    bt = [x["deepgemm_us"] / x["fp8route tensor_us"] for x in records]
    print(f"\nDeepGEMM time / fp8route block time: geomean {1 / gm(r):.3f} ({1 / max(r):.3f}-{1 / min(r):.3f}); "
          f"DeepGEMM block / fp8route per-tensor time: geomean {gm(bt):.3f} ({min(bt):.3f}-{max(bt):.3f})")
    with open(os.environ.get("DG_JSON", "dg_compare.json"), "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
