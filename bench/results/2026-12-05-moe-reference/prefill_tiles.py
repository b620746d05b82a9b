"""Prefill (contiguous, every expert) grouped GEMMs on DeepSeek-V3's EP-8 expert shapes with the
cutlass backend's wide kernel in three cluster shapes (1x1, as shipped; 2x1 and 1x2, an experiment
build's FP8ROUTE_EXP_GROUPED_CLUSTER, read at each call, so each variant is captured into its own
graph), beside the wgmma backend, DeepGEMM's contiguous kernel (block scales; dg_grouped.py) and
torch._scaled_grouped_mm (row scales). Timing: fp8route._timing (graphs, cold L2, interleaved).

  PYTHONPATH=<DeepGEMM>:python python3 prefill_tiles.py [--rows 256,1024,4096] [--json FILE]
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench", "results", "2026-12-05-moe-next"))
import moe_bench  # noqa: E402
import dg_grouped  # noqa: E402
from fp8route._timing import time_interleaved  # noqa: E402

E = 32
LAYERS = {"gate_up": (4096, 7168), "down": (7168, 2048)}
VARIANTS = {"cutlass 1x1": "", "cutlass 2x1": "21", "cutlass 1x2": "12"}


def main():
    rows = [int(x) for x in (sys.argv[sys.argv.index("--rows") + 1] if "--rows" in sys.argv else "256,1024,4096").split(",")]
    try:
        import deep_gemm  # noqa: F401
        have_dg = True
    except ImportError:
        have_dg = False
    print(f"{torch.cuda.get_device_name()}, DeepGEMM {'on' if have_dg else 'not importable'}", flush=True)
    if have_dg:  # DeepGEMM's JIT compiles each kernel once, in parallel here
        import multiprocessing as mp
        jobs = [(layer, "contiguous", m, m) for layer in LAYERS for m in rows]
        with mp.get_context("spawn").Pool(min(len(jobs), os.cpu_count() or 4)) as pool:
            for j in pool.imap_unordered(dg_grouped.compile_one, jobs):
                print(f"compiled {j}", flush=True)
    records = []
    for layer, (n, k) in LAYERS.items():
        for m in rows:
            counts = torch.full((E,), m, dtype=torch.int32)
            flop = 2.0 * E * m * n * k
            for scale in ("block", "row"):
                if scale == "block":
                    s = dg_grouped.operands("contiguous", m, n, k, counts, 3)
                    out = torch.empty(s["out_shape"], device="cuda", dtype=torch.bfloat16)

                    def ours(be, s=s, out=out):
                        return lambda: moe_bench.fp8route.grouped_scaled_mm(
                            s["a"], s["b"], s["sa"], s["sb"], offsets=s["groups"], scale="block", out=out, backend=be)
                else:
                    s = moe_bench.make_set("contiguous", "row", E, n, k, counts, None)

                    def ours(be, s=s):
                        return moe_bench.ours(s, "contiguous", "row", be)
                ops = {}
                for name, env in VARIANTS.items():
                    def op(i, f=ours("cutlass"), env=env):
                        os.environ["FP8ROUTE_EXP_GROUPED_CLUSTER"] = env
                        f()
                    ops[name] = op
                ops["wgmma"] = lambda i, f=ours("wgmma"): f()
                if scale == "block" and have_dg:
                    dg = dg_grouped.deepgemm(s, "contiguous", torch.empty_like(out), m)
                    ops["deepgemm"] = lambda i, f=dg: f()
                if scale == "row":
                    ops["torch._scaled_grouped_mm"] = lambda i, f=moe_bench.torch_grouped(s, "contiguous"): f()
                errors = {}
                times = time_interleaved(ops, 1, errors=errors)
                os.environ.pop("FP8ROUTE_EXP_GROUPED_CLUSTER", None)
                print(f"\n{layer} {scale} rows/expert={m}", flush=True)
                for name, us in sorted(times.items(), key=lambda kv: kv[1]):
                    print(f"  {name:26s} {us:10.2f} us {flop / (us * 1e-6) / 1e12:8.1f} TFLOP/s", flush=True)
                    records.append(dict(layer=layer, scale=scale, rows=m, op=name, us=us,
                                        tflops=flop / (us * 1e-6) / 1e12))
                for name, why in errors.items():
                    print(f"  {name:26s} not run: {why}", flush=True)
                del s, ops
                torch.cuda.empty_cache()
    with open(sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else "prefill_tiles.json", "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
