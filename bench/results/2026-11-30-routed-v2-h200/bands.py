#!/usr/bin/env python3
"""Routed vs cuBLASLt alone per M band, and problems where routed is > 3% slower than the best single
backend, over this session's benches plus the previous session's decode bench (4 graph instances).
Run from the repository root: python3 bench/results/2026-11-30-routed-v2-h200/bands.py

TP 8: decode from ../2026-11-30-routed-h200/decode_all_i4.json.tar.gz, M >= 32 from
bench_tp8_m32up_i4.json.tar.gz. TP 1: M >= 32 from bench_tp1_m32up_i4_screen25 (JSON, and the text
for llama-3.1-405b, whose run was cut before its JSON was written), decode from the previous
session's decode_all_i4.txt (its TP 1 run was cut before the JSON too) and qwen2.5-72b's decode JSON.
"""
import collections, glob, json, math, os, re, tarfile, tempfile

HERE = "bench/results/2026-11-30-routed-v2-h200"
PREV = "bench/results/2026-11-30-routed-h200"


def from_json(pattern, probs):
    for f in glob.glob(pattern):
        for r in json.load(open(f)):
            d = probs.setdefault((r["model"], r["layer"], r["tp"], r["scale"], r["m"]), {})
            if r["routed"]:
                d["routed"] = r["us"]
            else:
                d[r["backend"]] = min(d.get(r["backend"], 1e30), r["us"])


def from_text(path, probs, section):
    """Rows of `fp8route bench` text output inside the '== ...' section whose line contains `section`."""
    layer, on = None, False
    for line in open(path):
        if line.startswith("== "):
            on = section in line
        if not on:
            continue
        h = re.match(r"^(\S+)/(\S+) tp(\d+)\s", line)
        if h:
            layer = (h.group(1), h.group(2), int(h.group(3)))
            continue
        m = re.match(r"^\s+(tensor|row|block)\s+(\d+)\s+([\d.]+)\s+\S+\s+(.*)\[", line)
        if not m or layer is None:
            continue
        d = {"routed": float(m.group(3))}
        cells = re.findall(r"(?:([\d.]+) \(\s*[\d.]+x\))|(cannot run)", m.group(4))
        for backend, (us, _) in zip(("cublaslt", "cutlass_sm90", "skinny"), cells):
            if us:
                d[backend] = float(us)
        probs.setdefault((*layer, m.group(1), int(m.group(2))), d)


def band(m):
    return "decode" if m <= 16 else "middle" if m <= 512 else "prefill"


def report(name, probs, band=band, bands=("decode", "middle", "prefill")):
    ratios, n, over, worst = collections.defaultdict(list), collections.Counter(), collections.Counter(), {}
    for (model, layer, tp, scale, m), d in sorted(probs.items()):
        best = min(v for b, v in d.items() if b != "routed")
        b = band(m)
        n[b] += 1
        over[b] += d["routed"] > 1.03 * best
        worst[b] = max(worst.get(b, 0), d["routed"] / best)
        if "cublaslt" in d:
            ratios[(scale, b)].append(d["cublaslt"] / d["routed"])
    print(f"{name}: problems {dict(n)}; routed > 3% slower than the best single backend {dict(over)}; "
          f"worst {({k: round(v, 3) for k, v in worst.items()})}")
    for scale in ("row", "block", "tensor"):
        cells = []
        for b in bands:
            v = ratios[(scale, b)]
            if v:
                cells.append(f"{b} {math.exp(sum(map(math.log, v)) / len(v)):.3f}x ({len(v)})")
        print(f"  routed over cuBLASLt alone, {scale}: " + " | ".join(cells))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name, tar in [("prev", f"{PREV}/decode_all_i4.json.tar.gz"), ("tp8", f"{HERE}/bench_tp8_m32up_i4.json.tar.gz"),
                          ("tp1", f"{HERE}/bench_tp1_m32up_i4_screen25.json.tar.gz"),
                          ("tp1dec", f"{HERE}/bench_tp1_qwen_decode_i4_screen25.json.tar.gz")]:
            with tarfile.open(tar) as t:
                t.extractall(os.path.join(tmp, name))
        tp8 = {}
        from_json(f"{tmp}/prev/json/all_tp8_decode_i4.json", tp8)
        from_json(f"{tmp}/tp8/json/*.json", tp8)
        report("TP 8", tp8)
        tp1 = {}
        from_json(f"{tmp}/tp1/json/*.json", tp1)
        from_json(f"{tmp}/tp1dec/json/*.json", tp1)
        from_text(f"{HERE}/bench_tp1_m32up_i4_screen25.txt", tp1, "llama-3.1-405b")
        from_text(f"{PREV}/decode_all_i4.txt", tp1, "tp 1")
        report("TP 1", tp1)


if __name__ == "__main__":
    main()
