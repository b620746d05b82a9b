import os, sys, math, json, itertools, torch
sys.path.insert(0, "bench")
import attention_bench as AB
import fp8route
out = []
class A: iters = 20; l2_multiple = 4.0
for name in ["llama-3.1-8b", "llama-3.1-70b-tp8", "qwen2.5-72b-tp4"]:
    hq, hk, d, norm = AB.SHAPES[name]
    group = hq // hk
    gs = [g for g in (1, 2, 4) if g < 2 * group]
    for batch, kv_len in [(1, 1024), (1, 4096), (4, 1024), (16, 1024), (64, 1024)]:
        seq = kv_len + 1
        kv_bytes = 2 * batch * hk * seq * d * 2
        layers = max(4, min(64, math.ceil(4.0 * 50e6 / kv_bytes)))
        dt = torch.bfloat16
        caches = [torch.randn(2, batch, hk, seq, d, device="cuda").to(dt) for _ in range(layers)]
        qkv = torch.randn(batch, (hq + 2 * hk) * d, device="cuda").to(dt)
        ang = torch.randn(seq, d, device="cuda")
        cos, sin = ang.cos().to(dt), ang.sin().to(dt)
        pos32 = torch.full((batch,), kv_len, dtype=torch.int32, device="cuda")
        fn = lambda i: fp8route.decode_attention(qkv, caches[i][0], caches[i][1], cos, sin, pos32, hq, hk)
        row = {}
        for g, s in [(None, None)] + list(itertools.product(gs, (1, 2, 4, 8))):
            for k in ("FP8ROUTE_ATTN_G", "FP8ROUTE_ATTN_SPLITS"):
                os.environ.pop(k, None)
            if g is not None:
                os.environ["FP8ROUTE_ATTN_G"], os.environ["FP8ROUTE_ATTN_SPLITS"] = str(g), str(s)
            us = AB.graph_us(fn, layers, A.iters)
            row["default" if g is None else f"G{g}S{s}"] = round(us, 2)
        best = min((v, k) for k, v in row.items() if k != "default")
        print(f"{name} b{batch} kv{kv_len}: default {row['default']} best {best[1]} {best[0]} | " +
              " ".join(f"{k}={v}" for k, v in row.items() if k != "default"), flush=True)
        out.append(dict(model=name, batch=batch, kv=kv_len, times=row))
        del caches
json.dump(out, open(sys.argv[1], "w"), indent=1)
