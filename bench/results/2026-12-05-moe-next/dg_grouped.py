"""Grouped block-scaled FP8 GEMMs on the GPU machine: fp8route.grouped_scaled_mm (the default and each
tensor-core backend), torch._scaled_grouped_mm where it takes the problem (row scales; timed on the
same codes with per-row scales, as a speed reference), and DeepGEMM's m_grouped_gemm_fp8_fp8_bf16_nt
masked and contiguous kernels as an outside reference (commit a5645d7 of
github.com/deepseek-ai/DeepGEMM, JIT-compiled on the GPU machine with its nvcc and the nvidia-cutlass
headers; not part of fp8route). The method of fp8route._timing (CUDA graphs over rotation sets,
interleaved replays, cold L2, median of 20). Both sides get the same codes and scales (our
col_major_tma activation scales are DeepGEMM's TMA-aligned transposed layout, viewed), and the
outputs are compared on the rows each expert holds.

  PYTHONPATH=<DeepGEMM>:python python3 dg_grouped.py [--precompile] [--json FILE]

Points, DeepSeek-V3 as one EP-8 rank holds it (32 experts; gate_up N=4096 K=7168, down N=7168
K=2048):
  masked   M_max = 8 (1-2 rows a held expert) and M_max = 128 (mean 4 and 32 rows), every expert;
  contiguous  256 and 1024 rows per expert, every expert (DeepGEMM needs groups of 128-row multiples).
GB/s of the held experts' weights against the copy bandwidth (decode), TFLOP/s (prefill)."""
import json
import math
import multiprocessing as mp
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import fp8route  # noqa: E402
from fp8route._timing import l2_bytes, time_interleaved  # noqa: E402
import e2e  # noqa: E402  (copy_bandwidth)

E = 32
LAYERS = {"gate_up": (4096, 7168), "down": (7168, 2048)}
# (form, M_max or rows per expert, mean rows a held expert gets)
POINTS = [("masked", 8, 2), ("masked", 128, 4), ("masked", 128, 32), ("contiguous", 256, 256),
          ("contiguous", 1024, 1024)]
E4M3 = torch.float8_e4m3fn


def counts_for(form, m, mean, gen):
    if form == "contiguous":
        return torch.full((E,), m, dtype=torch.int32)
    # Masked: each expert's rows drawn around the mean, within [1, M_max].
    c = torch.poisson(torch.full((E,), float(mean)), generator=gen).clamp(1, m)
    return c.to(torch.int32)


def operands(form, m, n, k, counts, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb, nb = k // 128, (n + 127) // 128
    b = torch.empty(E, n, k, dtype=E4M3, device="cuda")
    for e in range(E):
        b[e] = torch.randn(n, k, device="cuda", generator=g).clamp_(-4, 4)
    sb = torch.rand(E, nb, kb, device="cuda", generator=g) + 0.5
    rows = m if form == "masked" else int(counts.sum())
    lead = (E,) if form == "masked" else ()
    a = (torch.randn(*lead, rows, k, device="cuda", generator=g).clamp_(-4, 4)).to(E4M3)
    t4 = (rows + 3) // 4 * 4
    sa = torch.rand(*lead, kb, t4, device="cuda", generator=g) + 0.5  # col_major_tma
    if form == "masked":
        groups = counts.cuda()
        sa_dg = sa.transpose(1, 2)[:, :rows, :]  # [E, M_max, kb], strides (kb * t4, 1, t4)
        m_indices = None
    else:
        groups = torch.cat([torch.zeros(1, dtype=torch.int32), counts.cumsum(0).to(torch.int32)]).cuda()
        sa_dg = sa.t()[:rows]  # [M, kb], strides (1, t4)
        m_indices = torch.repeat_interleave(torch.arange(E, dtype=torch.int32), counts.long()).cuda()
    out_shape = (*lead, rows, n)
    return dict(a=a, b=b, sa=sa, sb=sb, groups=groups, sa_dg=sa_dg, m_indices=m_indices, out_shape=out_shape)


def ours(s, form, backend, out):
    kw = {"masked_m": s["groups"]} if form == "masked" else {"offsets": s["groups"]}
    return lambda: fp8route.grouped_scaled_mm(s["a"], s["b"], s["sa"], s["sb"], scale="block", out=out,
                                              backend=backend, **kw)


def deepgemm(s, form, out, mean):
    import deep_gemm
    if form == "masked":
        return lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((s["a"], s["sa_dg"]), (s["b"], s["sb"]), out,
                                                                      s["groups"], mean)
    return lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((s["a"], s["sa_dg"]), (s["b"], s["sb"]), out,
                                                                      s["m_indices"])


def compile_one(args):
    layer, form, m, mean = args
    n, k = LAYERS[layer]
    s = operands(form, m, n, k, counts_for(form, m, mean, torch.Generator().manual_seed(0)), 0)
    deepgemm(s, form, torch.empty(s["out_shape"], device="cuda", dtype=torch.bfloat16), mean)()
    torch.cuda.synchronize()
    return args


def held_rows(form, m, counts):
    if form == "masked":
        return (torch.arange(m)[None, :] < counts[:, None]).reshape(-1)
    return torch.ones(int(counts.sum()), dtype=torch.bool)


def main():
    import deep_gemm  # noqa: F401  (fail here when PYTHONPATH lacks it)
    jobs = [(layer, form, m, mean) for layer in LAYERS for form, m, mean in POINTS]
    if "--precompile" in sys.argv:
        with mp.get_context("spawn").Pool(min(len(jobs), os.cpu_count() or 4)) as pool:
            for j in pool.imap_unordered(compile_one, jobs):
                print(f"compiled {j}", flush=True)
    copy_gbs = e2e.copy_bandwidth(1 << 30, 10) / 1e9
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fp8route {fp8route.__version__}, "
          f"copy {copy_gbs:.0f} GB/s, L2 {l2_bytes() >> 20} MB", flush=True)
    records = []
    gen = torch.Generator().manual_seed(1)
    for layer, form, m, mean in jobs:
        n, k = LAYERS[layer]
        counts = counts_for(form, m, mean, gen)
        held = int((counts > 0).sum())
        sets = max(1, min(4, math.ceil(3 * l2_bytes() / (held * n * k))))
        data = [operands(form, m, n, k, counts, 10 + i) for i in range(sets)]
        outs = {}
        ops = {}
        backends = ["", "wgmma", "cutlass"] + (["decode"] if m <= 64 else [])
        for be in backends:
            name = "fp8route:" + (be or "default")
            outs[name] = [torch.empty(d["out_shape"], device="cuda", dtype=torch.bfloat16) for d in data]
            ops[name] = (lambda nm, be: lambda i: ours(data[i], form, be, outs[nm][i])())(name, be)
        outs["deepgemm"] = [torch.empty(d["out_shape"], device="cuda", dtype=torch.bfloat16) for d in data]
        ops["deepgemm"] = lambda i: deepgemm(data[i], form, outs["deepgemm"][i], mean)()
        errors = {}
        times = time_interleaved(ops, sets, errors=errors)
        rows = held_rows(form, m, counts).cuda()
        n_out = data[0]["out_shape"][-1]
        ref = outs["fp8route:default"][0].reshape(-1, n_out)[rows].float() if "fp8route:default" in times else None
        diff = None
        if ref is not None and "deepgemm" in times:
            dg = outs["deepgemm"][0].reshape(-1, n_out)[rows].float()
            diff = ((dg - ref).norm() / ref.norm()).item()
        weight_bytes = held * n * k
        flop = 2.0 * int(counts.sum()) * n * k
        print(f"\n{layer} {form} {'M_max' if form == 'masked' else 'rows/expert'}={m} mean={mean} "
              f"held={held}/{E}, DeepGEMM vs fp8route rel diff {diff if diff is None else f'{diff:.2e}'}", flush=True)
        for name, us in sorted(times.items(), key=lambda kv: kv[1]):
            gbs = weight_bytes / (us * 1e-6) / 1e9
            print(f"  {name:18s} {us:9.2f} us  {gbs:7.0f} GB/s of held weights ({gbs / copy_gbs:5.1%} of copy)  "
                  f"{flop / (us * 1e-6) / 1e12:7.1f} TFLOP/s", flush=True)
            records.append(dict(layer=layer, form=form, m=m, mean=mean, held=held, op=name, us=us, weight_gbs=gbs,
                                of_copy=gbs / copy_gbs, tflops=flop / (us * 1e-6) / 1e12, rel_diff_dg=diff))
        for name, why in errors.items():
            print(f"  {name:18s} not run: {why}", flush=True)
        del data, outs
        torch.cuda.empty_cache()
    with open(os.environ.get("DG_JSON", "dg_grouped.json"), "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
