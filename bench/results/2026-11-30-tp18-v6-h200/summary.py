#!/usr/bin/env python3
"""This folder's benches (chip K, fourteenth session): every model at TP 1 and 8 routed by the shipped table
of de9497e, summarized as ../2026-11-30-recheck-h200/summary.py does (issue 6's M bands, the first pass
and after the re-check). llama-3.1-405b TP 1 was cut by call 2's deadline and re-run whole in call 3; its
JSON of call 2 is incomplete and not read. Then chip L: call 4 re-tuned the problems of three TP 1
models and 405b TP 8 at M = 16, 48, 96 and benched them by its tables; call 5 benched the three TP 1 models
by the shipped table rebuilt with that tune. Writes summary.txt."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("recheck", os.path.join(HERE, "..", "2026-11-30-recheck-h200", "summary.py"))
recheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recheck)
v2 = recheck.v2
v2.HERE = HERE
recheck.HERE = HERE

TP1 = {"llama-3.1-8b": "call1/tp1a", "minimax-h3-like": "call1/tp1a", "deepseek-v3": "call1/tp1a",
       "llama-3.1-70b": "call2/tp1b", "qwen2.5-72b": "call2/tp1b", "llama-3.1-405b": "call3/tp1c"}
RUNS = [(TP1[m], f"{m}_tp1.json", f"{m} TP 1, shipped table") for m in v2.MODELS] + \
    [("call1/tp8", f"{m}_tp8.json", f"{m} TP 8, shipped table") for m in v2.MODELS]
# Chip L: call 4's tune of these problems at M = 16, 48, 96 and the benches by its own tables (t1.json,
# t8.json); call 5: the shipped table rebuilt with call 4's tune first in the chain, the three TP 1 models.
TUNED = [("call4/b1", f"{m}_tp1_tuned.json", f"{m} TP 1 M 16-96, call 4's table") for m in
         ["llama-3.1-70b", "qwen2.5-72b", "llama-3.1-8b"]] + \
    [("call4/b8", "llama-3.1-405b_tp8_tuned.json", "llama-3.1-405b TP 8 M 16-96, call 4's table")]
REBUILT = [("call5/tp1", f"{m}_tp1.json", f"{m} TP 1, rebuilt table") for m in
           ["llama-3.1-70b", "qwen2.5-72b", "llama-3.1-8b"]]


def misses(runs):
    lines = ["problems more than 3% behind after the re-check (routed us / best single backend us)"]
    for folder, name, what in runs:
        by_key = {}
        for r in recheck.probe_summary.load(HERE, folder, name):
            by_key.setdefault((r["model"], r["tp"], r["layer"], r["scale"], r["m"]), []).append(r)
        for key, rs in sorted(by_key.items(), key=lambda kv: kv[0]):
            routed = next(r for r in rs if r["routed"])
            best = min((r for r in rs if not r["routed"]), key=lambda r: r["us"])
            if routed["us"] > 1.03 * best["us"]:
                lines.append(f"{' '.join(map(str, key))}: {routed['backend']}/{routed['config']} {routed['us']:.2f} vs "
                             f"{best['backend']}/{best['config']} {best['us']:.2f} = {routed['us'] / best['us']:.3f}"
                             + (f" (first pass {routed['first_us']:.2f})" if "first_us" in routed else ""))
    return "\n".join(lines) + "\n"


def main():
    text = recheck.probe_summary.summarize(HERE, RUNS + TUNED + REBUILT, band=v2.issue_band)
    together = [([(f, n) for f, n, w in RUNS if w.endswith(what)], f"all six models{what}") for what in
                [" TP 1, shipped table", " TP 8, shipped table"]]
    three = ["llama-3.1-70b", "qwen2.5-72b", "llama-3.1-8b"]
    together += [([(f, n) for f, n, w in RUNS if w.endswith(" TP 1, shipped table") and n.split("_")[0] in three],
                  "70b + qwen + 8b TP 1, shipped table (K)"),
                 ([(f, n) for f, n, w in REBUILT], "70b + qwen + 8b TP 1, rebuilt table (L)")]
    text += "\n" + recheck.probe_summary.summarize(HERE, together, band=v2.issue_band)
    text += "\n" + v2.scale_bands(together)
    text += "\n" + recheck.first_pass(RUNS + TUNED + REBUILT)
    text += "\n" + misses(RUNS + TUNED + REBUILT)
    open(os.path.join(HERE, "summary.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
