"""Where the grouped decode backend's time goes at one token: masked form, block scales, 8 experts of
8 each holding one row, the weight of every expert [N, K] swept over N (work items = 8 N / 128) and K
(K blocks per item), timed as fp8route._timing times (CUDA graphs, cold L2, interleaved, median).
A fit t = a + b * (bytes of the busiest block) per N says what a block costs before it streams.

  python3 decode_cost.py [--json FILE]       the sweep
  python3 decode_cost.py --one N K [reps]    one problem, eager, for a profiler (ncu -k regex:grouped_decode)
"""
import json
import math
import os
import sys

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import fp8route  # noqa: E402
from fp8route._timing import l2_bytes, time_interleaved  # noqa: E402
import e2e  # noqa: E402  (copy_bandwidth)

E = 8
E4M3 = torch.float8_e4m3fn


def operands(n, k, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb, nb = k // 128, (n + 127) // 128
    b = (torch.randn(E, n, k, device="cuda", generator=g).clamp_(-4, 4)).to(E4M3)
    sb = torch.rand(E, nb, kb, device="cuda", generator=g) + 0.5
    a = (torch.randn(E, 1, k, device="cuda", generator=g).clamp_(-4, 4)).to(E4M3)
    sa = torch.rand(E, kb, 4, device="cuda", generator=g) + 0.5  # col_major_tma, rows rounded to 4
    m = torch.ones(E, dtype=torch.int32, device="cuda")
    out = torch.empty(E, 1, n, device="cuda", dtype=torch.bfloat16)
    return (a, b, sa, sb, m, out)


def call(s, backend="decode"):
    a, b, sa, sb, m, out = s
    return lambda: fp8route.grouped_scaled_mm(a, b, sa, sb, masked_m=m, scale="block", out=out, backend=backend)


def main():
    if "--one" in sys.argv:
        i = sys.argv.index("--one")
        n, k = int(sys.argv[i + 1]), int(sys.argv[i + 2])
        reps = int(sys.argv[i + 3]) if len(sys.argv) > i + 3 else 3
        f = call(operands(n, k, 0))
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copy_gbs = e2e.copy_bandwidth(1 << 30, 10) / 1e9
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, copy {copy_gbs:.0f} GB/s, L2 {l2_bytes() >> 20} MB", flush=True)
    ns = [256, 512, 1024, 1536, 2048, 4096]
    ks = [256, 512, 1024, 2048, 4096, 7168]
    records = []
    for n in ns:
        ops, meta = {}, {}
        for k in ks:
            sets = max(1, min(4, math.ceil(3 * l2_bytes() / (E * n * k))))
            data = [operands(n, k, 10 + i) for i in range(sets)]
            for be in ("decode", "wgmma"):
                name = f"{be} K={k}"
                ops[name] = (lambda d, be: lambda i: call(d[i], be)())(data, be)
                meta[name] = (be, k, sets)
        # time_interleaved takes one set count: time each K on its own.
        for k in ks:
            sub = {nm: f for nm, f in ops.items() if meta[nm][1] == k}
            times = time_interleaved(sub, meta[f"decode K={k}"][2])
            items = E * n // 128
            waves = math.ceil(items / sms)
            busiest = waves * 128 * k
            for nm, us in times.items():
                floor = E * n * k / (copy_gbs * 1e3)
                print(f"N={n:5d} K={k:5d} items={items:4d} {meta[nm][0]:7s} {us:8.2f} us  floor {floor:7.2f} us "
                      f"({floor / us:6.1%})  busiest block {busiest >> 10:5d} KB", flush=True)
                records.append(dict(n=n, k=k, items=items, backend=meta[nm][0], us=us, floor_us=floor,
                                    busiest_bytes=busiest))
        del ops
        torch.cuda.empty_cache()
    # t = a + b * busiest bytes per N (the decode backend)
    for n in ns:
        pts = [(r["busiest_bytes"], r["us"]) for r in records if r["n"] == n and r["backend"] == "decode"]
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        a = my - b * mx
        print(f"fit N={n}: {a:.2f} us + busiest bytes at {1e-3 / b:.1f} GB/s per block", flush=True)
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else "decode_cost.json"
    with open(out, "w") as f:
        json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
