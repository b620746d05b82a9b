#!/usr/bin/env python3
"""End-to-end decode and prefill throughput of a Llama-architecture decoder (fp8route.models) on one
GPU, its linear layers as bf16, torch_fp8 and fp8route side by side in one run:

  bf16       F.linear on bf16 weights, norms in plain torch
  torch_fp8  per-token quant in torch (torch.compile, with the norm or silu_and_mul before it) +
             torch._scaled_mm row-wise
  fp8route   Fp8Linear (routed GEMM) fed by fp8route's fused residual-add + RMSNorm + quant ops
             (act="row" by default, --act block for 1x128 groups)

and the attention of a decode step either way (a variant is BACKEND or BACKEND:ATTENTION):
  :sdpa      torch ops: RoPE (compiled), the KV-cache write (index_put_), SDPA over the cache
  :fused     fp8route.decode_attention: norms, RoPE, cache append and attention in one kernel
             (no suffix: the model's default, fused on the GPU)
The default variants are bf16:sdpa and torch_fp8:sdpa (what a torch user writes), torch_fp8 with
the fused attention (so that fp8route's own linear-layer gain reads against the same attention) and
fp8route.

  python3 bench/e2e.py                              # the default run: about 5 minutes on an H200
  python3 bench/e2e.py --models llama-3.1-8b --batches 1,32 --prefill 2048 --json e2e.json --plot e2e.png
  python3 bench/e2e.py --layers 4                   # a quick check: 4 layers of each model

Models (the published HF config values, embedded below): llama-3.1-8b (TP1); llama-3.1-70b-tp8 and
qwen2.5-72b-tp4: ONE rank of tensor parallelism at its shard shapes (q/kv heads, intermediate and
vocabulary cut as LlamaModel cuts them), run in one process. That rank's all-reduces (after o_proj
and down_proj) and its logits all-gather are skipped (skip_collectives): the times are one rank's
compute, without the communication a real TP-8 / TP-4 step adds.

Weights are random (RankWeights.random: FP8 E4M3 with per-channel scales, the same tensors for
torch_fp8 and fp8route; the bf16 variant dequantizes them). Nothing here depends on the values.

The variants of a model are built together and timed side by side: in each of --iters rounds every
variant runs once, in a shuffled order, each run timed with its own CUDA events; the median per
variant (a clock drift during the run shifts every variant alike). Peak memory: about 90 GB for
qwen2.5-72b-tp4 (FP8 and bf16 weights, three KV caches at batch 128).
Decode: `batch` sequences each at KV length --kv-len (1024: each step writes position 1024 and
attends over 1025 positions; the cache holds exactly that, so attention reads no unused slots). One
step is captured in a CUDA graph (LlamaModel.capture_decode); a run is one replay.
tokens/s = batch / step time.
Prefill: one sequence of S tokens from position 0 (causal SDPA over the prompt, logits of the last
position), eager, --prefill-iters rounds after one warm-up. tokens/s = S / time.
Roofline: the device-to-device copy bandwidth measured in the same run (a 2 GiB copy timed with CUDA
events; bytes read + bytes written per second), and for each decode row
  roofline_ms = bytes of weights one step reads / copy bandwidth      (every linear's codes, scales,
                 bias; lm_head; norms: LlamaModel.weight_bytes)
  fraction    = roofline_ms / measured step time
and the same with the K/V bytes the step's attention reads added (roofline_kv_ms, fraction_kv):
at batch 128 the KV cache read outweighs the FP8 weights.

--json FILE writes every row (with the fp8route routes of layer 0 at each decode batch); --plot
FILE.png draws decode and prefill tokens/s per model (needs matplotlib; skipped without it).
"""
import argparse
import gc
import json
import os
import random
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

_LLAMA31_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}

# name: tensor-parallel size of the rank measured, the shapes/models.json entry it matches
# (tests/python/test_models.py checks the shard shapes against it), the HF config.json values.
MODELS = {
    "llama-3.1-8b": {"tp": 1, "catalog": "llama-3.1-8b", "config": {
        "model_type": "llama", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE, "max_position_embeddings": 131072,
        "vocab_size": 128256, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}},
    "llama-3.1-70b-tp8": {"tp": 8, "catalog": "llama-3.1-70b", "config": {
        "model_type": "llama", "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 28672,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0, "rope_scaling": _LLAMA31_ROPE, "max_position_embeddings": 131072,
        "vocab_size": 128256, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}},
    "qwen2.5-72b-tp4": {"tp": 4, "catalog": "qwen2.5-72b", "config": {  # Qwen2.5-72B-Instruct
        "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 8192, "intermediate_size": 29568,
        "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "max_position_embeddings": 32768, "sliding_window": 131072,
        "use_sliding_window": False, "max_window_layers": 70, "vocab_size": 152064, "tie_word_embeddings": False}},
}
BACKENDS = ("bf16", "torch_fp8", "fp8route")
ATTENTIONS = ("sdpa", "fused")
DEFAULT_VARIANTS = ["bf16:sdpa", "torch_fp8:sdpa", "torch_fp8:fused", "fp8route"]


def split_variant(v):
    """'fp8route' -> ('fp8route', None); 'torch_fp8:sdpa' -> ('torch_fp8', 'sdpa')."""
    backend, _, attention = v.partition(":")
    return backend, attention or None


def variant_list(text):
    names = [v.strip() for v in text.split(",") if v.strip()]
    bad = [n for n in names if split_variant(n)[0] not in BACKENDS or split_variant(n)[1] not in (None,) + ATTENTIONS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"BACKEND or BACKEND:ATTENTION with BACKEND of {', '.join(BACKENDS)} and "
                                         f"ATTENTION of {', '.join(ATTENTIONS)}, got {text!r}")
    return names


def int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers expected, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"integers >= 1 expected, got {text!r}")
    return values


def name_list(choices):
    def parse(text):
        names = [v.strip() for v in text.split(",") if v.strip()]
        bad = [n for n in names if n not in choices]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"one or more of {', '.join(choices)}, got {text!r}")
        return names
    return parse


def copy_bandwidth(nbytes=2 << 30, iters=20):
    """Bytes moved per second (read + written) by a device-to-device copy of nbytes."""
    src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dst.copy_(src)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / iters
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / seconds


def interleaved_ms(fns, reps, warmup, seed=0):
    """{name: median ms of one call}: `warmup` rounds, then `reps` rounds in which every fn runs once,
    each timed with its own CUDA events, in a shuffled order, before any runs again (a clock drift
    during the run then shifts every variant alike)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    rng = random.Random(seed)
    names = list(fns)
    events = {n: [] for n in names}
    for _ in range(reps):
        rng.shuffle(names)
        for n in names:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[n]()
            end.record()
            events[n].append((start, end))
    torch.cuda.synchronize()
    return {n: statistics.median(s.elapsed_time(e) for s, e in pairs) for n, pairs in events.items()}


def run_model(name, entry, args, bw, L):
    cfg_dict = dict(entry["config"])
    if args.layers:
        cfg_dict["num_hidden_layers"] = args.layers
    cfg = L.LlamaConfig.from_hf(cfg_dict)
    tp = entry["tp"]
    t0 = time.time()
    weights = L.RankWeights.random(cfg, rank=0, world=tp, seed=args.seed, weight_format="channel", device="cuda")
    note = "" if tp == 1 else f"one rank of TP-{tp}; all-reduce and logits all-gather skipped (not timed)"
    # All variants live at once (torch_fp8 and fp8route share the FP8 tensors; bf16 holds its
    # dequantized copy), so each batch and prompt length is timed side by side.
    models, skipped = {}, {}
    for v in args.variants:
        try:
            backend, attention = split_variant(v)
            models[v] = L.LlamaModel(cfg, weights, backend=backend, act=args.act, device="cuda",
                                     max_batch=max(args.batches), max_seq=args.kv_len + 1, skip_collectives=tp > 1,
                                     attention=attention)
        except ValueError as e:  # e.g. act="block" where a rank's K is not a multiple of 128
            skipped[v] = str(e)
            print(f"  {v}: skipped: {e}", flush=True)
    torch.cuda.synchronize()
    print(f"\n== {name}: {cfg.num_hidden_layers} layers, rank shapes {L.rank_linear_shapes(cfg, tp)}"
          f"{'; ' + note if note else ''} (built in {time.time() - t0:.1f} s)", flush=True)
    act = lambda v: args.act if split_variant(v)[0] == "fp8route" else None  # noqa: E731
    decode, prefill = [], []
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    for batch in args.batches:
        t0 = time.time()
        steps = {v: m.capture_decode(batch) for v, m in models.items()}
        toks = torch.randint(0, cfg.vocab_size, (batch,), device="cuda", generator=gen)
        for step in steps.values():
            step.tokens.copy_(toks)
            step.positions.fill_(args.kv_len)
        times = interleaved_ms({v: step.replay for v, step in steps.items()}, args.iters, warmup=3, seed=batch)
        for v, ms in times.items():
            m = models[v]
            wbytes, kvb = m.weight_bytes(), m.kv_bytes(batch, args.kv_len + 1)
            row = dict(model=name, tp=tp, variant=v, attention=m.attention, act=act(v), batch=batch, kv_len=args.kv_len, ms=ms,
                       tok_s=batch / ms * 1e3, weight_bytes=wbytes, roofline_ms=wbytes / bw * 1e3, kv_bytes=kvb,
                       roofline_kv_ms=(wbytes + kvb) / bw * 1e3, routes=m.routes(batch))
            row["fraction"] = row["roofline_ms"] / ms
            row["fraction_kv"] = row["roofline_kv_ms"] / ms
            decode.append(row)
            print(f"  decode batch {batch:4d} {v:15s}: {ms:8.3f} ms/step {row['tok_s']:10.1f} tok/s  "
                  f"{100 * row['fraction']:5.1f}% of weight roofline, {100 * row['fraction_kv']:5.1f}% with KV",
                  flush=True)
        del steps
        print(f"  (batch {batch}: {time.time() - t0:.1f} s)", flush=True)
    if args.prefill:
        for m in models.values():  # the decode caches go; one sequence of the longest prompt
            m.reset_cache(1, max(args.prefill))
        gc.collect()
        torch.cuda.empty_cache()
        for s in args.prefill:
            t0 = time.time()
            toks = torch.randint(0, cfg.vocab_size, (1, s), device="cuda", generator=gen)
            fns = {v: (lambda m=m, t=toks: m.prefill(t)) for v, m in models.items()}
            for v, ms in interleaved_ms(fns, args.prefill_iters, warmup=1, seed=s).items():
                prefill.append(dict(model=name, tp=tp, variant=v, act=act(v), tokens=s, ms=ms, tok_s=s / ms * 1e3))
                print(f"  prefill {s:5d} tokens {v:15s}: {ms:9.2f} ms {s / ms * 1e3:10.0f} tok/s", flush=True)
            print(f"  (prefill {s}: {time.time() - t0:.1f} s)", flush=True)
    del models, weights
    gc.collect()
    torch.cuda.empty_cache()
    return dict(name=name, tp=tp, note=note, layers=cfg.num_hidden_layers, config=cfg_dict, skipped=skipped,
                decode=decode, prefill=prefill)


def print_summary(results, variants):
    for res in results:
        print(f"\n{res['name']} (TP {res['tp']}{'; ' + res['note'] if res['note'] else ''})")
        head = "".join(f"{v:>22s}" for v in variants)
        print(f"  decode batch{head}   (tok/s, % of weight roofline)")
        for batch in sorted({r["batch"] for r in res["decode"]}):
            cells = []
            for v in variants:
                r = next((r for r in res["decode"] if r["batch"] == batch and r["variant"] == v), None)
                cells.append(f"{r['tok_s']:>13.1f} ({100 * r['fraction']:4.1f}%)" if r else f"{'-':>22s}")
            print(f"  {batch:12d}" + "".join(f"{c:>22s}" for c in cells))
        if res["prefill"]:
            print(f"  prefill toks{head}   (tok/s)")
            for s in sorted({r["tokens"] for r in res["prefill"]}):
                cells = [next((f"{r['tok_s']:.0f}" for r in res["prefill"] if r["tokens"] == s and r["variant"] == v),
                              "-") for v in variants]
                print(f"  {s:12d}" + "".join(f"{c:>22s}" for c in cells))


def plot(results, variants, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"--plot {path}: matplotlib is not installed; no plot written")
        return
    fig, axes = plt.subplots(2, len(results), figsize=(5 * len(results), 8), squeeze=False)
    width = 0.8 / len(variants)
    for col, res in enumerate(results):
        for row, (key, rows, label) in enumerate((("batch", res["decode"], "decode batch"),
                                                   ("tokens", res["prefill"], "prefill tokens"))):
            ax = axes[row][col]
            xs = sorted({r[key] for r in rows})
            for i, v in enumerate(variants):
                ys = [next((r["tok_s"] for r in rows if r[key] == x and r["variant"] == v), 0) for x in xs]
                bars = ax.bar([j + i * width for j in range(len(xs))], ys, width, label=v)
                if key == "batch":
                    for bar, x in zip(bars, xs):
                        r = next((r for r in rows if r[key] == x and r["variant"] == v), None)
                        if r:
                            ax.annotate(f"{100 * r['fraction']:.0f}%", (bar.get_x() + bar.get_width() / 2,
                                                                        bar.get_height()),
                                        ha="center", va="bottom", fontsize=6)
            ax.set_xticks([j + width * (len(variants) - 1) / 2 for j in range(len(xs))])
            ax.set_xticklabels([str(x) for x in xs])
            ax.set_xlabel(label)
            ax.set_ylabel("tokens/s")
            ax.set_title(f"{res['name']} (TP {res['tp']}" + (", one rank" if res["tp"] > 1 else "") + ")", fontsize=9)
            ax.legend(fontsize=7)
    fig.suptitle("decode (CUDA graph; % = weight-roofline fraction) and prefill", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=name_list(tuple(MODELS)), default=list(MODELS),
                    help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    ap.add_argument("--variants", type=variant_list, default=list(DEFAULT_VARIANTS),
                    help=f"comma-separated BACKEND[:ATTENTION] (default: {','.join(DEFAULT_VARIANTS)})")
    ap.add_argument("--batches", type=int_list, default=[1, 8, 32, 128], help="decode batch sizes")
    ap.add_argument("--prefill", type=lambda t: [] if t in ("", "0", "none") else int_list(t),
                    default=[512, 2048, 8192], help="prefill lengths ('none': no prefill)")
    ap.add_argument("--kv-len", type=int, default=1024, help="KV length of every sequence at decode")
    ap.add_argument("--iters", type=int, default=50, help="timed replays per decode batch")
    ap.add_argument("--prefill-iters", type=int, default=3, help="timed runs per prefill length")
    ap.add_argument("--act", choices=("row", "block"), default="row", help="fp8route's activation scaling")
    ap.add_argument("--layers", type=int, default=0, help="override each model's layer count (quick checks)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--plot", help="write a PNG of tokens/s (needs matplotlib)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/e2e.py: needs a CUDA device")
    from fp8route.models import llama as L

    t_start = time.time()
    bw = copy_bandwidth()
    dev = torch.cuda.get_device_name()
    print(f"{dev}: device-to-device copy {bw / 1e9:.0f} GB/s (read + write), torch {torch.__version__}")
    results = [run_model(name, MODELS[name], args, bw, L) for name in args.models]
    print_summary(results, args.variants)
    print(f"\ntotal {time.time() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev, torch=torch.__version__, copy_bytes_per_s=bw, kv_len=args.kv_len,
                           act=args.act, models=results), f, indent=1)
        print(f"json: {args.json}")
    if args.plot:
        plot(results, args.variants, args.plot)


if __name__ == "__main__":
    main()
