#!/usr/bin/env python3
"""Per run (a bench JSON of this folder's tarballs): problems, routed more than 3% / 20% slower than the
best single backend, the worst ratio, the geometric mean of routed / best, and routed over cuBLASLt
alone (geomean, > 1: routed faster) per M band. Writes summary.txt next to itself."""
import collections
import io
import json
import math
import os
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = [  # (folder, json name, what)
    ("heldout-deepseek", "deepseek-v3_tp8_heldout_off.json", "deepseek-v3 held out, table alone"),
    ("heldout-deepseek", "deepseek-v3_tp8_heldout_unseen.json", "deepseek-v3 held out, --probe unseen"),
    ("heldout-405b-8b", "llama-3.1-405b_tp8_heldout_off.json", "llama-3.1-405b held out, table alone"),
    ("heldout-405b-8b", "llama-3.1-405b_tp8_heldout_unseen.json", "llama-3.1-405b held out, --probe unseen"),
    ("heldout-405b-8b", "llama-3.1-8b_tp8_heldout_off.json", "llama-3.1-8b held out, table alone"),
    ("heldout-8b-rerun", "llama-3.1-8b_tp8_heldout_unseen.json", "llama-3.1-8b held out, --probe unseen"),
] + [("off", f"{m}_tp8_probe_off.json", f"{m}, shipped table") for m in
     ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-72b", "deepseek-v3", "minimax-h3-like"]] + \
    [("always", f"{m}_tp8_probe_always.json", f"{m}, --probe always") for m in
     ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-72b", "deepseek-v3", "minimax-h3-like"]]


def load(here, folder, name):
    with tarfile.open(os.path.join(here, folder, "json.tar.gz")) as t:
        return json.load(io.TextIOWrapper(t.extractfile("json/" + name)))


def problems_of(here, sources):
    """{(model, tp, layer, scale, m): {"routed" or backend: us}} of the bench JSONs [(folder, name)]."""
    problems = collections.defaultdict(dict)
    for folder, name in sources:
        for r in load(here, folder, name):
            key = (r["model"], r["tp"], r["layer"], r["scale"], r["m"])
            problems[key]["routed" if r["routed"] else r["backend"]] = r["us"]
    return problems


def band(m):
    return "decode" if m <= 16 else "middle" if m < 1024 else "prefill"


def summarize(here, runs, band=band):
    """The summary lines of runs, as text: each run (folder under here, json name, what), or ([(folder,
    json name), ...], what) for the problems of several JSONs together. band(m) names the M band of
    routed/cuBLASLt ("decode", "middle", "prefill", or None: in no band)."""
    lines = ["run                                         problems  >3%  >20%  worst  geomean(routed/best)  "
             "routed/cuBLASLt decode middle prefill"]
    for run in runs:
        sources, what = (run[0], run[1]) if len(run) == 2 else ([run[:2]], run[2])
        problems = problems_of(here, sources)
        over3 = over20 = 0
        worst, logs = 1.0, []
        vs_lt = collections.defaultdict(list)
        for key, t in problems.items():
            best = min(us for b, us in t.items() if b != "routed")
            ratio = t["routed"] / best
            over3 += ratio > 1.03
            over20 += ratio > 1.20
            worst = max(worst, ratio)
            logs.append(math.log(ratio))
            if "cublaslt" in t and band(key[-1]):
                vs_lt[band(key[-1])].append(math.log(t["cublaslt"] / t["routed"]))
        g = {b: (f"{math.exp(sum(v) / len(v)):.3f}" if v else "-") for b, v in vs_lt.items()}
        lines.append(f"{what:<44}{len(problems):>8} {over3:>4} {over20:>5} {worst:>6.3f} "
                     f"{math.exp(sum(logs) / len(logs)):>12.4f}          "
                     f"{g.get('decode', '-'):>14} {g.get('middle', '-'):>6} {g.get('prefill', '-'):>7}")
    return "\n".join(lines) + "\n"


def main():
    text = summarize(HERE, RUNS)
    open(os.path.join(HERE, "summary.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
