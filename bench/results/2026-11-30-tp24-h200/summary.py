#!/usr/bin/env python3
"""This folder's benches (chip J, thirteenth session) summarized as ../2026-11-30-recheck-h200/summary.py does:
TP 4 and TP 2, every model, routed by the tables tuned in calls 1-2 (build/gpu/retune24/h200_tp{4,2}.json,
rebuilt from tune_tp{4,2}.raw.jsonl.gz by `fp8route tune --build-only`), and TP 4 of five models routed by the
shipped table of 5429201 (TP 2/4 measured only for row scales at M <= 64 there). Writes summary.txt."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("recheck", os.path.join(HERE, "..", "2026-11-30-recheck-h200", "summary.py"))
recheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recheck)
v2 = recheck.v2
v2.HERE = HERE
recheck.HERE = HERE

SHIPPED = ["llama-3.1-70b", "llama-3.1-8b", "deepseek-v3", "minimax-h3-like", "qwen2.5-72b"]  # 405b: no time left
RUNS = [("call2/tp4_tuned", f"{m}_tp4.json", f"{m} TP 4, tuned table") for m in v2.MODELS] + \
    [("call3/tp2_tuned", f"{m}_tp2.json", f"{m} TP 2, tuned table") for m in v2.MODELS] + \
    [("call4/tp4_shipped", f"{m}_tp4_shipped.json", f"{m} TP 4, old shipped table") for m in SHIPPED]


def main():
    text = recheck.probe_summary.summarize(HERE, RUNS, band=v2.issue_band)
    def group(what, models):
        return [(f, n) for f, n, w in RUNS if w.endswith(what) and n.split("_")[0] in models]
    together = [(group(" TP 4, tuned table", SHIPPED), "the five models TP 4, tuned table"),
                (group(" TP 4, old shipped table", SHIPPED), "the five models TP 4, old shipped table"),
                (group(" TP 4, tuned table", v2.MODELS), "all six models TP 4, tuned table"),
                (group(" TP 2, tuned table", v2.MODELS), "all six models TP 2, tuned table")]
    text += "\n" + recheck.probe_summary.summarize(HERE, together, band=v2.issue_band)
    text += "\n" + v2.scale_bands(together)
    text += "\n" + recheck.first_pass(RUNS)
    open(os.path.join(HERE, "summary.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
