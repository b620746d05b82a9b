#!/usr/bin/env python3
"""This folder's benches (fifteenth session). Chip M: call 1 re-tuned the problems recurring_misses.py
flagged, rebuilt the shipped table with them first in the chain and benched every model at TP 8 and three
at TP 1 with it; call 2 the other three at TP 1; call 3 (same chip, after pytest) every model at TP 8 and
four at TP 1 again. Chip N: call 4 benched llama-3.1-70b TP 1 at M <= 24 and llama-3.1-405b TP 8 at
M = 16 with the shipped table, and with the tables of a tune whose final round had 16 graph instances
(those tables hold only the scale kinds that tune measured: block and row for 70b, row for 405b, so
their other scale kinds are routed by the heuristic). Summarized as ../2026-11-30-tp18-v6-h200/summary.py
does. Writes summary.txt."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v6", os.path.join(HERE, "..", "2026-11-30-tp18-v6-h200", "summary.py"))
v6 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v6)
recheck, v2 = v6.recheck, v6.v2
for module in (v6, v2, recheck):
    module.HERE = HERE

TP1A = ["llama-3.1-8b", "minimax-h3-like", "deepseek-v3"]
RUN1 = [("call1/tp1a" if m in TP1A else "call2/tp1b", f"{m}_tp1.json", f"{m} TP 1, run 1") for m in v2.MODELS] + \
    [("call1/tp8", f"{m}_tp8.json", f"{m} TP 8, run 1") for m in v2.MODELS]
RUN2_TP1 = ["llama-3.1-8b", "minimax-h3-like", "llama-3.1-70b", "qwen2.5-72b"]
RUN2 = [("call3/tp1", f"{m}_tp1.json", f"{m} TP 1, run 2") for m in RUN2_TP1] + \
    [("call3/tp8", f"{m}_tp8.json", f"{m} TP 8, run 2") for m in v2.MODELS]
CHIP_N = [("call4/b1s", "llama-3.1-70b_tp1_shipped.json", "70b TP 1 M <= 24, shipped table (N)"),
          ("call4/b1", "llama-3.1-70b_tp1_f16.json", "70b TP 1 M <= 24, 16-instance tune's table (N)"),
          ("call4/b8s", "llama-3.1-405b_tp8_shipped.json", "405b TP 8 M = 16, shipped table (N)"),
          ("call4/b8", "llama-3.1-405b_tp8_f16.json", "405b TP 8 M = 16, 16-instance tune's table (N)")]


def main():
    runs = RUN1 + RUN2 + CHIP_N
    text = recheck.probe_summary.summarize(HERE, runs, band=v2.issue_band)
    together = [([(f, n) for f, n, w in RUN1 if w.endswith(what)], f"all six models{what}") for what in
                [" TP 1, run 1", " TP 8, run 1"]]
    together += [([(f, n) for f, n, w in RUN2 if w.endswith(" TP 1, run 2")], "four models TP 1, run 2"),
                 ([(f, n) for f, n, w in RUN2 if w.endswith(" TP 8, run 2")], "all six models TP 8, run 2"),
                 ([(f, n) for f, n, w in RUN1 if w.endswith(" TP 1, run 1") and n.split("_")[0] in RUN2_TP1],
                  "the same four TP 1, run 1")]
    text += "\n" + recheck.probe_summary.summarize(HERE, together, band=v2.issue_band)
    text += "\n" + v2.scale_bands(together[:2])
    text += "\n" + recheck.first_pass(runs)
    text += "\n" + v6.misses(runs)
    open(os.path.join(HERE, "summary.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
