#!/usr/bin/env python3
"""MoE decode with the MoE FFNs on fp8route against torch at its best (fp8route.models, random weights),
at batch 1 and 32 by default; Qwen3-30B-A3B by default, --model picks Mixtral-8x7B or, in layer mode
only, one EP-8 rank of Qwen3-235B-A22B or DeepSeek-V3:

  fp8route        Fp8MoE: masked grouped GEMMs (the decode form), per-token scales (act row)
  fp8route:block  the same with 1x128 activation groups and 128x128 weight blocks
  torch_fp8       softmax top-k, per-token quant compiled (torch.compile), rows sorted by expert,
                  torch._scaled_grouped_mm (row-wise scales), silu_and_mul + quant compiled, the
                  weighted combine with index_add_
  bf16            the same permutation with torch._grouped_mm in bf16
Every variant's step is one CUDA graph (no host synchronization in any of them).

Two measurements (--mode):
  layer  the MoE block alone: --moe-layers distinct blocks (each its own router and 128 experts,
         so that a replay reads cold weights, as a decoder's next layer does) run back to back on
         the same [batch, 2048] hidden states in one graph; us per layer = replay / blocks.
         Floor: the bytes of the experts the routing actually chose (distinct experts per block,
         counted in an eager run) plus the router, over the device-to-device copy bandwidth
         measured in the same run; fraction = floor / time. Reading 8 experts (37.7 MB) is 8.9 us.
  model  the whole decoder (48 layers; --layers to cut), a decode step at KV length --kv-len in a
         CUDA graph (LlamaModel.capture_decode); us per layer = step / layers; the floor adds the
         attention weights, norms and lm_head (MoeModel.weight_bytes with the active experts).
Timing: the variants' graphs replayed interleaved, in a shuffled order each round, each replay
timed with its own CUDA events; the median (bench/e2e.py's method).

  python3 bench/moe_e2e.py                                  # layer and model, batch 1 and 32
  python3 bench/moe_e2e.py --mode layer --batches 1,8,32,64 --variants fp8route,fp8route:block,torch_fp8
  python3 bench/moe_e2e.py --mode model --layers 8 --json moe_e2e.json
  python3 bench/moe_e2e.py --mode layer --model deepseek-v3-ep8 --moe-layers 4 --variants fp8route,torch_fp8
  python3 bench/moe_e2e.py --mode layer --batches 1 --profile    # where a layer's time goes, kernel by kernel
  python3 bench/moe_e2e.py --mode layer --batches 1 --trace      # the same from the kernels' own clocks
                                                                 # (a -DFP8ROUTE_CHAIN_TRACE=ON build)

Memory (model mode, all 48 layers): about 30 GB of FP8 experts shared by fp8route and torch_fp8,
60 GB of bf16 experts, 30 GB more for fp8route:block (requantized in blocks): the default variants
fit an H200 (141 GB); add fp8route:block with --layers 24 or fewer. Mixtral-8x7B's 32 layers hold 45 GB
of FP8 and 90 GB of bf16 experts: --layers 8 for all three default variants on one GPU.
"""
import argparse
import gc
import json
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

# The published config.json of Qwen3-30B-A3B (tests/python/test_moe_models.py holds the same).
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "mlp_only_layers": [], "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
    "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "use_sliding_window": False, "vocab_size": 151936,
}
# The MoE fields of DeepSeek-V3's published config.json (its attention, MLA, is not in fp8route.models:
# layer mode only). One rank of expert parallelism over 8 GPUs holds 32 of the 256 routed experts.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "hidden_act": "silu", "hidden_size": 7168, "num_hidden_layers": 61,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
    "routed_scaling_factor": 2.5, "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
    "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1, "intermediate_size": 18432,
}
# Mixtral-8x7B's published config.json, and Qwen3-235B-A22B's (Qwen3-30B-A3B's with its sizes), as
# tests/python/test_moe_models.py holds them.
MIXTRAL_8X7B = {
    "model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000,
}
QWEN3_235B_A22B = dict(QWEN3_30B_A3B, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
                       num_attention_heads=64, num_hidden_layers=94, max_window_layers=94)
# name -> (title, config, expert-parallel ranks: this GPU holds the first rank's experts)
MODELS = {"qwen3-30b-a3b": ("Qwen3-30B-A3B", QWEN3_30B_A3B, 1),
          "mixtral-8x7b": ("Mixtral-8x7B", MIXTRAL_8X7B, 1),
          "qwen3-235b-a22b-ep8": ("Qwen3-235B-A22B, one EP-8 rank (16 of 128 experts)", QWEN3_235B_A22B, 8),
          "deepseek-v3-ep8": ("DeepSeek-V3, one EP-8 rank (32 of 256 experts, routed experts only)", DEEPSEEK_V3, 8)}
# The models whose whole decoder fp8route.models builds (the others: --mode layer).
DECODERS = ("qwen3-30b-a3b", "mixtral-8x7b")
VARIANTS = ("fp8route", "fp8route:block", "torch_fp8", "bf16")
DEFAULT_VARIANTS = ("fp8route", "torch_fp8", "bf16")


def split(v):
    backend, _, act = v.partition(":")
    return backend, act or "row"


def names(choices):
    def parse(text):
        out = [v.strip() for v in text.split(",") if v.strip()]
        if not out or any(v not in choices for v in out):
            raise argparse.ArgumentTypeError(f"one or more of {', '.join(choices)}, got {text!r}")
        return out
    return parse


def captured(fn, warmup=2):
    """fn run `warmup` times on a side stream (compilation, first calls), then captured."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def profile_kernels(graphs, per_replay, batch, replays=20):
    """Each variant's kernels in its graph's replays (torch.profiler, CUPTI): mean device time per
    layer of each kernel name, largest first, and their sum (CUPTI may stretch PDL overlap: the sum
    can exceed the timed replay)."""
    from torch.profiler import ProfilerActivity, profile
    for v, g in graphs.items():
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                g.replay()
            torch.cuda.synchronize()
        rows = []
        for ev in prof.key_averages():
            us = getattr(ev, "device_time_total", None)
            if us is None:
                us = getattr(ev, "cuda_time_total", 0)
            if us > 0 and ev.count > 0:
                rows.append((us / (replays * per_replay), ev.count / (replays * per_replay), ev.key))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        print(f"  profile batch {batch} {v}: {total:.1f} us of kernels per layer, "
              f"{sum(r[1] for r in rows):.1f} kernels per layer", flush=True)
        for us, n, name in rows[:14]:
            print(f"    {us:7.2f} us  x{n:4.1f}  {name[:110]}", flush=True)


def trace_kernels(fs, x, v, batch, blocks, reps, floor_us):
    """The chain trace of one variant's blocks (a build with FP8ROUTE_CHAIN_TRACE; bench/decode_chain.py
    and docs/benchmarks.md define the columns): each traced kernel of a block as the median over blocks
    1 .. L-1 and `reps` replays. The router's GEMM (torch) is not traced: the first kernel's boundary
    holds it. Returns the rows for --json."""
    import decode_chain as dc
    from fp8route import chain_trace as ct
    ct.arm(4096)  # after the timed graphs' first calls: only the capture takes slots
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for f in fs:
                f(x)
    finally:
        ct.disarm()
    kinds = [r["kernel"] for r in ct.read()]
    replays = dc.traced_replays(g.replay, reps)
    rows = dc.median_rows(replays)
    if not kinds or len(kinds) % blocks:
        print(f"  trace batch {batch} {v}: {len(kinds)} traced kernels for {blocks} blocks; skipped", flush=True)
        return []
    per = len(kinds) // blocks
    print(f"  trace batch {batch} {v}: {per} traced kernels a block (median of blocks 1..{blocks - 1}, {reps} replays)",
          flush=True)
    print(f"    {'kernel':34s} {'[grid]':>10} {'lead':>7} {'boundary':>9} {'post':>7} {'incr':>7}", flush=True)
    out, block_us = [], []
    for j in range(per):
        idx = [b * per + j for b in range(1, blocks)]
        pick = lambda key: dc.med(rows[i][key] for i in idx)  # noqa: E731
        r = dict(kernel=kinds[j] + (" (+router)" if j == 0 else ""), grid=replays[0][j]["grid"],
                 lead=pick("lead"), boundary=pick("boundary"), post=pick("post"), incr=pick("incr"))
        out.append(r)
        grid = "[" + ",".join(str(n) for n in r["grid"][:2]) + "]"
        print(f"    {r['kernel'][:34]:34s} {grid:>10} {dc.fmt(r['lead'])} {dc.fmt(r['boundary'], 9)} "
              f"{dc.fmt(r['post'])} {dc.fmt(r['incr'])}", flush=True)
    for b in range(1, blocks):
        incr = [rows[b * per + j]["incr"] for j in range(per)]
        if all(i is not None for i in incr):
            block_us.append(sum(incr))
    if block_us:
        print(f"    block (sum of incr, median): {dc.med(block_us):.2f} us against a read floor of {floor_us:.2f} us",
              flush=True)
    return out


def layer_mode(args, moe, bw, e2e, M):
    from fp8route.models.backends import _make_backend
    from fp8route.models.moe_ffn import moe_kind
    rows = []
    blocks = {}  # variant -> [MoeFfn]; one set of FP8 channel experts serves fp8route and torch_fp8
    t0 = time.time()
    title, _, world = MODELS[args.model]
    first = moe.sparse_layers[0]
    made = [M.random_moe_block(moe, first + i, "channel", "channel", seed=args.seed, world=world, device="cuda")
            for i in range(args.moe_layers)]
    emap = M.expert_map(moe.num_experts, 0, world, device="cuda") if world > 1 else None
    for v in args.variants:
        backend, act = split(v)
        kind, dtype = moe_kind(backend, act)
        be = _make_backend(backend, act, True)
        def ffn(b):
            return M.MoeFfn(moe, b["experts"].convert(kind, dtype or torch.float32), b["router"], be, backend, act,
                            bias=b["bias"], expert_map=emap)
        blocks[v] = [ffn(b) for b in made]
        if args.torch_glue and backend == "fp8route":
            # The same layer with Fp8MoE's decode glue (routing, dispatch, scatter, combine) in torch ops.
            blocks[v + "/torch-glue"] = [ffn(b) for b in made]
            for f in blocks[v + "/torch-glue"]:
                f.layer._fused_glue = False
    del made
    print(f"\n== layer: {args.moe_layers} {title} MoE blocks per replay (built in {time.time() - t0:.0f} s)",
          flush=True)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    for batch in args.batches:
        x = torch.randn(batch, moe.hidden_size, device="cuda", generator=gen).to(torch.bfloat16)
        graphs, floor = {}, {}
        for v, fs in blocks.items():
            for f in fs:  # the distinct experts each block's routing chose (eager, counted)
                f.record = True
                f(x)
                f.record = False
            active = [f.last_active for f in fs]
            floor[v] = sum(n * f.experts.expert_nbytes() + f.fixed_nbytes() for n, f in zip(active, fs))
            try:
                graphs[v] = captured(lambda fs=fs: [f(x) for f in fs])
            except Exception as e:  # e.g. a torch build without _scaled_grouped_mm: reported, not timed
                print(f"  batch {batch} {v}: not run: {str(e).splitlines()[0][:160]}", flush=True)
        times = e2e.interleaved_ms({v: g.replay for v, g in graphs.items()}, args.iters, warmup=3, seed=batch)
        for v, ms in times.items():
            us = ms * 1e3 / args.moe_layers
            floor_us = floor[v] / bw * 1e6 / args.moe_layers
            rows.append(dict(mode="layer", variant=v, batch=batch, us_per_layer=us, floor_us=floor_us,
                             fraction=floor_us / us, active_bytes_per_layer=floor[v] / args.moe_layers))
            print(f"  batch {batch:3d} {v:15s}: {us:8.1f} us/layer, floor {floor_us:6.1f} us "
                  f"({floor[v] / args.moe_layers / 1e6:6.1f} MB read), {100 * floor_us / us:5.1f}% of it", flush=True)
        if args.profile:
            profile_kernels(graphs, args.moe_layers, batch)
        if args.trace:
            from fp8route import chain_trace as ct
            if not ct.compiled_in():
                print("  trace: this build has no chain trace (configure with -DFP8ROUTE_CHAIN_TRACE=ON)", flush=True)
            else:
                for v in graphs:
                    if v.startswith("fp8route") and "torch-glue" not in v:
                        kernels = trace_kernels(blocks[v], x, v, batch, args.moe_layers, args.trace_reps,
                                                floor[v] / bw * 1e6 / args.moe_layers)
                        rows.append(dict(mode="trace", variant=v, batch=batch, kernels=kernels))
        del graphs
    del blocks
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def model_mode(args, moe, bw, e2e, M):
    rows = []
    t0 = time.time()
    weights = M.MoeRankWeights.random(moe, seed=args.seed, weight_format="channel", expert_kind="channel",
                                      device="cuda")
    models = {}
    for v in args.variants:
        backend, act = split(v)
        models[v] = M.MoeModel(moe, weights, backend=backend, act=act, device="cuda", max_batch=max(args.batches),
                               max_seq=args.kv_len + 1)
    layers = moe.num_hidden_layers
    print(f"\n== model: {MODELS[args.model][0]}, {layers} layers, KV length {args.kv_len} "
          f"(built in {time.time() - t0:.0f} s)",
          flush=True)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    for batch in args.batches:
        toks = torch.randint(0, moe.base.vocab_size, (batch,), device="cuda", generator=gen)
        pos = torch.full((batch,), args.kv_len, device="cuda")
        steps, floor = {}, {}
        for v, m in models.items():
            m.record_routing(True)
            m.decode_step(toks, pos)
            m.record_routing(False)
            active = [f.last_active for f in m.moe_layers()]
            floor[v] = m.weight_bytes(active) + m.kv_bytes(batch, args.kv_len + 1)
            try:
                steps[v] = m.capture_decode(batch)
                steps[v].tokens.copy_(toks)
                steps[v].positions.copy_(pos)
            except Exception as e:
                print(f"  batch {batch} {v}: not run: {str(e).splitlines()[0][:160]}", flush=True)
        times = e2e.interleaved_ms({v: s.replay for v, s in steps.items()}, args.iters, warmup=3, seed=batch)
        for v, ms in times.items():
            floor_ms = floor[v] / bw * 1e3
            rows.append(dict(mode="model", variant=v, batch=batch, kv_len=args.kv_len, ms=ms,
                             us_per_layer=ms * 1e3 / layers, tok_s=batch / ms * 1e3, floor_ms=floor_ms,
                             fraction=floor_ms / ms, bytes=floor[v]))
            print(f"  batch {batch:3d} {v:15s}: {ms * 1e3 / layers:8.1f} us/layer, {ms:7.3f} ms/step "
                  f"{batch / ms * 1e3:9.1f} tok/s, {100 * floor_ms / ms:5.1f}% of the read floor "
                  f"({floor[v] / 1e9:5.2f} GB with KV)", flush=True)
        del steps
    del models, weights
    gc.collect()
    torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("layer", "model", "both"), default="both")
    ap.add_argument("--model", choices=tuple(MODELS), default="qwen3-30b-a3b",
                    help="the MoE layer's model (the -ep8 ones: layer mode only)")
    ap.add_argument("--torch-glue", action="store_true",
                    help="layer mode: each fp8route variant also with Fp8MoE's decode glue in torch ops "
                    "(VARIANT/torch-glue), side by side with the fused glue kernels")
    ap.add_argument("--variants", type=names(VARIANTS), default=list(DEFAULT_VARIANTS),
                    help=f"comma-separated, of {', '.join(VARIANTS)} (default: {','.join(DEFAULT_VARIANTS)})")
    ap.add_argument("--batches", type=lambda t: [int(b) for b in t.split(",")], default=[1, 32])
    ap.add_argument("--moe-layers", type=int, default=8, help="layer mode: distinct MoE blocks per replay")
    ap.add_argument("--layers", type=int, default=0, help="model mode: decoder layers (default: the model's 48)")
    ap.add_argument("--kv-len", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true",
                    help="layer mode: also each variant's kernels per layer (torch.profiler) after its timing")
    ap.add_argument("--trace", action="store_true",
                    help="layer mode: also the chain trace of each fp8route variant's kernels (a build with "
                    "-DFP8ROUTE_CHAIN_TRACE=ON; docs/benchmarks.md)")
    ap.add_argument("--trace-reps", type=int, default=50, help="traced replays (each read back) with --trace")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/moe_e2e.py: needs a CUDA device")
    import e2e  # bench/e2e.py: copy_bandwidth, interleaved_ms
    from fp8route import models as M

    if args.model not in DECODERS and args.mode != "layer":
        sys.exit(f"bench/moe_e2e.py: --model {args.model} runs in --mode layer only (fp8route.models has no "
                 "decoder of it)")
    cfg = dict(MODELS[args.model][1])
    if args.layers:
        cfg["num_hidden_layers"] = args.layers
    moe = M.MoeConfig.from_hf(cfg)
    bw = e2e.copy_bandwidth()
    dev = torch.cuda.get_device_name()
    print(f"{dev}: device-to-device copy {bw / 1e9:.0f} GB/s (read + write), torch {torch.__version__}")
    rows = []
    if args.mode in ("layer", "both"):
        rows += layer_mode(args, moe, bw, e2e, M)
    if args.mode in ("model", "both"):
        rows += model_mode(args, moe, bw, e2e, M)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev, torch=torch.__version__, copy_bytes_per_s=bw, rows=rows), f, indent=1)
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
