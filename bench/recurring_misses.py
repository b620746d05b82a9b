#!/usr/bin/env python3
"""Which problems does a routing table send to a config that loses to the best single backend on more
than one GPU, or on average over several? Reads `fp8route bench --json` files (or tarballs of them) from
runs on several GPUs of one model and compares each problem's routed config with the table's current
choice:

  bench/recurring_misses.py [--table routes/h200.json] [--over 1.03] [--behind 1.02] [--min-runs 3] \\
      chipF=run_f/json.tar.gz chipG=run_g/tp1.json,run_g/tp8.json ...

LABEL=PATH[,PATH...]: one GPU's runs. A PATH is a bench JSON or a .tar.gz of them. A problem measured
twice under one label keeps the last. A run counts for a problem only where it routed the problem to
the table's current choice there (runs made with an older table are compared where it agreed).

It prints two lists. The first has the problems that lost more than --over on some GPU, most GPUs
first: a loss on one GPU is a near-tie's draw, a loss on several is a choice to question. The second
has the problems whose routed / best, as a geometric mean over at least --min-runs GPUs, is above
--behind: a systematic loss that no single run shows as a miss. Then comes the `fp8route tune` command,
per (model, TP degree), that would measure both lists again. The exact-entry choice at a measured M is
the fastest measured config there; problems at an M the table did not measure are left out.
"""
import argparse
import collections
import io
import json
import math
import os
import tarfile

KEY = ("model", "tp", "layer", "scale", "m", "n", "k", "out")


def table_choices(path):
    """{(scale, out, n, k, m): "backend/config"}: the fastest measured config at each measured M."""
    best = {}
    for e in json.load(open(path))["entries"]:
        for m, backend, config, us in e["measured"]:
            key = (e["scale"], e["out"], e["n"], e["k"], m)
            if key not in best or us < best[key][1]:
                best[key] = (f"{backend}/{config}", us)
    return {key: choice for key, (choice, us) in best.items()}


def bench_records(path):
    """The records of a bench JSON, or of every .json in a tarball."""
    if not path.endswith((".tar.gz", ".tgz")):
        return json.load(open(path))
    out = []
    with tarfile.open(path) as t:
        for member in t.getmembers():
            if member.isfile() and member.name.endswith(".json"):
                out += json.load(io.TextIOWrapper(t.extractfile(member)))
    return out


def bench_problems(runs):
    """runs: {label: [path, ...]} -> {KEY tuple: {label: (routed config, routed / best, best config)}}."""
    problems = collections.defaultdict(dict)
    for label, paths in runs.items():
        for path in paths:
            by_problem = collections.defaultdict(list)
            for r in bench_records(path):
                by_problem[tuple(r[k] for k in KEY)].append(r)
            for key, records in by_problem.items():
                routed = next((r for r in records if r["routed"]), None)
                alone = [r for r in records if not r["routed"]]
                if routed is None or not alone:
                    continue
                best = min(alone, key=lambda r: r["us"])
                problems[key][label] = (f"{routed['backend']}/{routed['config']}", routed["us"] / best["us"],
                                        f"{best['backend']}/{best['config']}")
    return problems


def report(runs, table, over=1.03, behind=1.02, min_runs=3):
    """The report as text (see the module's docstring)."""
    choice = table_choices(table)
    lost, systematic, counted = [], [], collections.Counter()
    for key, by_run in bench_problems(runs).items():
        model, tp, layer, scale, m, n, k, out = key
        now = choice.get((scale, out, n, k, m))
        if now is None:
            continue
        same = {label: v for label, v in by_run.items() if v[0] == now}
        misses = {label: v for label, v in same.items() if v[1] > over}
        counted[len(misses)] += 1
        if misses:
            lost.append((-len(misses), key, now, same))
        if len(same) >= min_runs:
            mean = math.exp(sum(math.log(v[1]) for v in same.values()) / len(same))
            if mean > behind:
                systematic.append((-mean, key, now, same))

    def name(key):
        model, tp, layer, scale, m = key[:5]
        return f"{model} TP {tp} {layer} {scale} M = {m}"

    lines = [f"{sum(counted.values())} problems benched at a measured M; by the number of GPUs on which the table's "
             f"choice lost more than {over:g}x: " + ", ".join(f"{n}: {counted[n]}" for n in sorted(counted))]
    for minus, key, now, same in sorted(lost):
        ratios = " ".join(f"{label}{'*' if v[1] > over else ''}={v[1]:.3f}" for label, v in sorted(same.items()))
        best = sorted({v[2] for v in same.values() if v[1] > over})
        lines.append(f"{-minus} of {len(same)}  {name(key)}: {now} ({ratios}; best where it lost: {', '.join(best)})")
    lines += ["", f"{len(systematic)} problems whose choice is more than {behind:g}x behind on average over "
                  f"{min_runs} or more GPUs:"]
    for minus, key, now, same in sorted(systematic):
        ratios = " ".join(f"{label}={v[1]:.3f}" for label, v in sorted(same.items()))
        best = sorted({v[2] for v in same.values()})
        lines.append(f"{-minus:.3f}  {name(key)}: {now} ({ratios}; best: {', '.join(best)})")
    # A loss on one GPU alone is a draw, not worth a re-tune by itself.
    keys = {key for minus, key, now, same in lost if -minus >= 2} | {key for mean, key, now, same in systematic}
    again = collections.defaultdict(lambda: (set(), set()))
    for key in keys:
        ms, scales = again[(key[0], key[1])]
        ms.add(key[4]), scales.add(key[3])
    lines += ["", "to measure the problems lost on 2 or more GPUs and the systematic ones again:"]
    for (model, tp), (ms, scales) in sorted(again.items()):
        lines.append(f"  fp8route tune --model {model} --tp {tp} --m {','.join(map(str, sorted(ms)))} "
                     f"--scale {','.join(sorted(scales))}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="LABEL=PATH[,PATH...]")
    ap.add_argument("--table", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                    "routes", "h200.json"))
    ap.add_argument("--over", type=float, default=1.03, help="a loss: routed / best above this (default 1.03)")
    ap.add_argument("--behind", type=float, default=1.02, help="systematic: geometric mean above this (default 1.02)")
    ap.add_argument("--min-runs", type=int, default=3, help="GPUs a systematic loss needs (default 3)")
    args = ap.parse_args()
    runs = {}
    for spec in args.runs:
        label, sep, paths = spec.partition("=")
        if not sep or not label or not paths:
            ap.error(f"run '{spec}': expected LABEL=PATH[,PATH...]")
        runs.setdefault(label, []).extend(paths.split(","))
    for paths in runs.values():
        for path in paths:
            if not os.path.exists(path):
                ap.error(f"run file '{path}' does not exist")
    print(report(runs, args.table, args.over, args.behind, args.min_runs), end="")


if __name__ == "__main__":
    main()
