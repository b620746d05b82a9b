#!/usr/bin/env python3
"""This folder's runs (chip G, bench --recheck 16) summarized as ../2026-11-30-probe-v2-h200/summary.py does
(issue 6's M bands), plus the first pass: how many problems were over 3% before the re-check (the records
of a re-checked problem keep the first pass's time as first_us). Writes summary.txt next to itself."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v2", os.path.join(HERE, "..", "2026-11-30-probe-v2-h200", "summary.py"))
v2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v2)
v2.HERE = HERE  # v2.scale_bands reads the runs under v2.HERE
probe_summary = v2.probe_summary

TP1A = ["llama-3.1-8b", "minimax-h3-like", "deepseek-v3"]
RUNS = [("call1/tp1a" if m in TP1A else "call2/tp1b", f"{m}_tp1.json", f"{m} TP 1, shipped table") for m in v2.MODELS] + \
    [("call1/tp8", f"{m}_tp8.json", f"{m} TP 8, shipped table") for m in v2.MODELS] + \
    [("call3/b1", f"{m}_tp1_probed.json", f"{m} TP 1, probed table") for m in
     ["llama-3.1-70b", "qwen2.5-72b", "llama-3.1-8b"]] + \
    [("call3/b8", "llama-3.1-405b_tp8_probed.json", "llama-3.1-405b TP 8, probed table")]


def first_pass(runs):
    """Per run: the problems over 3% in the first pass (each was re-checked: its routed record has first_us;
    the first pass's best single backend is not kept when the re-check crowned another config) and after."""
    lines = ["run                                         >3% in the first pass (re-checked)  >3% after the re-check"]
    for folder, name, what in runs:
        records = probe_summary.load(HERE, folder, name)
        rechecked = sum(1 for r in records if r["routed"] and "first_us" in r)
        final = probe_summary.problems_of(HERE, [(folder, name)])
        over = sum(t["routed"] > 1.03 * min(us for b, us in t.items() if b != "routed") for t in final.values())
        lines.append(f"{what:<43} {rechecked:>34}  {over:>22}")
    return "\n".join(lines) + "\n"


def main():
    text = probe_summary.summarize(HERE, RUNS, band=v2.issue_band)
    together = [([(f, n) for f, n, w in RUNS if w.endswith(what)], f"all six models{what}") for what in
                [" TP 1, shipped table", " TP 8, shipped table"]]
    text += "\n" + probe_summary.summarize(HERE, together, band=v2.issue_band)
    text += "\n" + v2.scale_bands(together)
    text += "\n" + first_pass(RUNS)
    open(os.path.join(HERE, "summary.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
