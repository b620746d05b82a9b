#!/usr/bin/env python3
"""This folder's runs (chip F) summarized as ../2026-11-30-probe-h200/summary.py does, with the M bands
of issue 6's acceptance: decode M <= 16, middle 32-512, prefill >= 1024 (M = 24 and 768 in none).
Writes summary.txt next to itself."""
import collections
import importlib.util
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("probe_summary", os.path.join(HERE, "..", "2026-11-30-probe-h200",
                                                                            "summary.py"))
probe_summary = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe_summary)

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-72b", "deepseek-v3", "minimax-h3-like"]
TP1A = ["llama-3.1-8b", "minimax-h3-like", "deepseek-v3"]
RUNS = [("tp1a" if m in TP1A else "tp1b", f"{m}_tp1.json", f"{m} TP 1, shipped table") for m in MODELS] + \
    [("tp8", f"{m}_tp8.json", f"{m} TP 8, shipped table") for m in MODELS] + \
    [("p/b1", f"{m}_tp1_probed.json", f"{m} TP 1, probed table") for m in
     ["llama-3.1-70b", "qwen2.5-72b"]] + \
    [("p/b8", "llama-3.1-405b_tp8_probed.json", "llama-3.1-405b TP 8, probed table")]


def issue_band(m):
    return "decode" if m <= 16 else "middle" if 32 <= m <= 512 else "prefill" if m >= 1024 else None


def scale_bands(runs):
    """Routed over cuBLASLt alone, geometric mean per scale kind and issue band, all models of a run."""
    lines = ["routed / cuBLASLt alone (geomean; decode / middle / prefill)"]
    for sources, what in runs:
        logs = collections.defaultdict(list)
        for (model, tp, layer, scale, m), us in probe_summary.problems_of(HERE, sources).items():
            if "cublaslt" in us and issue_band(m):
                logs[(scale, issue_band(m))].append(math.log(us["cublaslt"] / us["routed"]))
        for scale in ("row", "block", "tensor"):
            g = [math.exp(sum(v) / len(v)) for v in (logs[(scale, b)] for b in ("decode", "middle", "prefill"))]
            lines.append(f"{what:<40} {scale:<7} " + " / ".join(f"{x:.3f}x" for x in g))
    return "\n".join(lines) + "\n"


def main():
    text = probe_summary.summarize(HERE, RUNS, band=issue_band)
    together = [([(f, n) for f, n, w in RUNS if w.endswith(what)], f"all six models{what}") for what in
                [" TP 1, shipped table", " TP 8, shipped table"]]
    text += "\n" + probe_summary.summarize(HERE, together, band=issue_band)
    text += "\n" + scale_bands(together)
    open(os.path.join(HERE, "summary.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
