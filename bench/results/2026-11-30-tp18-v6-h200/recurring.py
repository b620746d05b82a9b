#!/usr/bin/env python3
"""Which problems does the current shipped table (routes/h200.json) route to a config that lost more than 3%
to the best single backend on more than one H200? Reads every TP 1/8 bench of the shipped table kept in
bench/results (`fp8route bench --configs all --instances 4 --screen 25` at M = 1/2, 8, 16, 24, ... 3072):

  B  ../2026-11-30-routed-v5-h200 bench_tp8/tp1a/tp1b (ninth session; M = 2, 8, 24, ..., 3072; no --recheck yet)
  E  ../2026-11-30-probe-h200/off (tenth session; TP 8; no --recheck yet)
  F  ../2026-11-30-probe-v2-h200 tp1a/tp1b/tp8 (eleventh session; no --recheck yet)
  G  ../2026-11-30-recheck-h200 call1/call2 (twelfth session; --recheck 16)
  K  this folder, calls 1-3 (--recheck 16)
  L  this folder, call 5: the rebuilt table, three TP 1 models (--recheck 16)

A run counts for a problem only where its routed config is the current table's choice there (the table
changed between sessions). Second list: the problems whose current choice is behind on average, the
geometric mean of routed / best over at least 3 chips above 1.02 (a systematic loss, not one chip's
draw). Writes recurring.txt next to itself."""
import math
import collections
import io
import json
import os
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.dirname(HERE)
RUNS = {
    "B": [f"2026-11-30-routed-v5-h200/bench_{d}.json.tar.gz" for d in ("tp8", "tp1a", "tp1b")],
    "E": ["2026-11-30-probe-h200/off/json.tar.gz"],
    "F": [f"2026-11-30-probe-v2-h200/{d}/json.tar.gz" for d in ("tp1a", "tp1b", "tp8")],
    "G": [f"2026-11-30-recheck-h200/{d}/json.tar.gz" for d in ("call1/tp8", "call1/tp1a", "call2/tp1b")],
    "K": [f"2026-11-30-tp18-v6-h200/{d}/json.tar.gz" for d in ("call1/tp8", "call1/tp1a", "call2/tp1b", "call3/tp1c")],
    "L": ["2026-11-30-tp18-v6-h200/call5/tp1/json.tar.gz"],
}


def current_choices():
    table = json.load(open(os.path.join(RESULTS, "..", "..", "routes", "h200.json")))
    best = {}
    for e in table["entries"]:
        for m, backend, config, us in e["measured"]:
            key = (e["scale"], e["out"], e["n"], e["k"], m)
            if key not in best or us < best[key][1]:
                best[key] = (f"{backend}/{config}", us)
    return {key: choice for key, (choice, us) in best.items()}


def bench_problems():
    """{(model, tp, layer, scale, m, n, k, out): {chip: (routed config, routed / best, best config)}}"""
    problems = collections.defaultdict(dict)
    for chip, paths in RUNS.items():
        for path in paths:
            with tarfile.open(os.path.join(RESULTS, path)) as t:
                for member in t.getmembers():
                    if not member.name.endswith(".json") or "probe_always" in member.name:
                        continue
                    if path.endswith("call2/tp1b/json.tar.gz") and chip == "K" and "405b" in member.name:
                        continue  # cut by the deadline there; call 3 ran it whole
                    by_problem = collections.defaultdict(list)
                    for r in json.load(io.TextIOWrapper(t.extractfile(member))):
                        by_problem[tuple(r[k] for k in ("model", "tp", "layer", "scale", "m", "n", "k", "out"))].append(r)
                    for key, records in by_problem.items():
                        routed = next(r for r in records if r["routed"])
                        best = min((r for r in records if not r["routed"]), key=lambda r: r["us"])
                        problems[key][chip] = (f"{routed['backend']}/{routed['config']}", routed["us"] / best["us"],
                                               f"{best['backend']}/{best['config']}")
    return problems


def main():
    choice = current_choices()
    rows, counted, behind = [], collections.Counter(), []
    for key, by_chip in bench_problems().items():
        model, tp, layer, scale, m, n, k, out = key
        now = choice.get((scale, out, n, k, m))
        same = {chip: v for chip, v in by_chip.items() if v[0] == now}
        misses = {chip: v for chip, v in same.items() if v[1] > 1.03}
        counted[len(misses)] += 1
        if len(same) >= 3:
            mean = math.exp(sum(math.log(v[1]) for v in same.values()) / len(same))
            if mean > 1.02:
                behind.append((-mean, key, now, same))
        if misses:
            rows.append((-len(misses), key, now, same))
    lines = [f"{sum(counted.values())} problems benched; by the number of chips on which the current choice lost "
             f"more than 3%: " + ", ".join(f"{n}: {counted[n]}" for n in sorted(counted))]
    for minus, key, now, same in sorted(rows):
        model, tp, layer, scale, m = key[:5]
        chips = " ".join(f"{c}{'*' if v[1] > 1.03 else ''}={v[1]:.3f}" for c, v in sorted(same.items()))
        best = {v[2] for v in same.values() if v[1] > 1.03}
        lines.append(f"{-minus} of {len(same)}  {model} TP {tp} {layer} {scale} M = {m}: {now} ({chips}; "
                     f"best where it lost: {', '.join(sorted(best))})")
    lines.append("")
    lines.append(f"{len(behind)} problems whose current choice is behind by more than 2% on average over 3 or more chips:")
    for minus, key, now, same in sorted(behind):
        model, tp, layer, scale, m = key[:5]
        chips = " ".join(f"{c}={v[1]:.3f}" for c, v in sorted(same.items()))
        lines.append(f"{-minus:.3f}  {model} TP {tp} {layer} {scale} M = {m}: {now} ({chips}; best: "
                     f"{', '.join(sorted({v[2] for v in same.values()}))})")
    text = "\n".join(lines) + "\n"
    open(os.path.join(HERE, "recurring.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
