#!/usr/bin/env python3
"""Which problems does the current shipped table (routes/h200.json) route to a config that lost more than 3%
to the best single backend on more than one H200, or is behind on average? recurring_misses.py (in this folder)
over every TP 1/8 bench of the shipped table kept in bench/results (`fp8route bench --configs all
--instances 4 --screen 25` at M = 1/2, 8, 16, 24, ..., 3072):

  B  ../2026-11-30-routed-v5-h200 bench_tp8/tp1a/tp1b (ninth session; M = 2, 8, 24, ..., 3072; no --recheck yet)
  E  ../2026-11-30-probe-h200/off (tenth session; TP 8; no --recheck yet)
  F  ../2026-11-30-probe-v2-h200 tp1a/tp1b/tp8 (eleventh session; no --recheck yet)
  G  ../2026-11-30-recheck-h200 call1/call2 (twelfth session; --recheck 16)
  K  this folder, calls 1-3 (--recheck 16; call 3's 405b TP 1 replaces call 2's cut one)
  L  this folder, call 5: the rebuilt table, three TP 1 models (--recheck 16)

Writes recurring.txt next to itself."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.dirname(HERE)
_spec = importlib.util.spec_from_file_location("recurring_misses",
                                              os.path.join(RESULTS, "..", "recurring_misses.py"))
recurring_misses = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recurring_misses)

RUNS = {
    "B": [f"2026-11-30-routed-v5-h200/bench_{d}.json.tar.gz" for d in ("tp8", "tp1a", "tp1b")],
    "E": ["2026-11-30-probe-h200/off/json.tar.gz"],
    "F": [f"2026-11-30-probe-v2-h200/{d}/json.tar.gz" for d in ("tp1a", "tp1b", "tp8")],
    "G": [f"2026-11-30-recheck-h200/{d}/json.tar.gz" for d in ("call1/tp8", "call1/tp1a", "call2/tp1b")],
    "K": [f"2026-11-30-tp18-v6-h200/{d}/json.tar.gz" for d in ("call1/tp8", "call1/tp1a", "call2/tp1b", "call3/tp1c")],
    "L": ["2026-11-30-tp18-v6-h200/call5/tp1/json.tar.gz"],
}


def main():
    runs = {label: [os.path.join(RESULTS, p) for p in paths] for label, paths in RUNS.items()}
    text = recurring_misses.report(runs, os.path.join(RESULTS, "..", "..", "routes", "h200.json"))
    open(os.path.join(HERE, "recurring.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
