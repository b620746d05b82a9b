#!/usr/bin/env python3
"""../2026-11-30-tp18-v6-h200/recurring.py's runs (chips B, E, F, G, K, L) and this folder's, through
../2026-11-30-tp18-v6-h200/recurring_misses.py against the current shipped table (routes/h200.json):

  M   this folder, calls 1-2 (run 1: every model at TP 1 and 8, --recheck 16)
  M'  this folder, call 3 (run 2 on the same chip: every model at TP 8, four at TP 1). A second label
      for the same GPU, so a problem counted on M and M' lost twice on one chip, not on two chips.
  N   this folder, call 4 (llama-3.1-70b TP 1 at M <= 24, llama-3.1-405b TP 8 at M = 16; shipped table)

Writes recurring.txt next to itself."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v6", os.path.join(HERE, "..", "2026-11-30-tp18-v6-h200", "recurring.py"))
v6 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v6)

FOLDER = os.path.basename(HERE)
RUNS = dict(v6.RUNS)
RUNS["M"] = [f"{FOLDER}/{d}/json.tar.gz" for d in ("call1/tp8", "call1/tp1a", "call2/tp1b")]
RUNS["M'"] = [f"{FOLDER}/{d}/json.tar.gz" for d in ("call3/tp8", "call3/tp1")]
RUNS["N"] = [f"{FOLDER}/{d}/json.tar.gz" for d in ("call4/b1s", "call4/b8s")]


def main():
    runs = {label: [os.path.join(v6.RESULTS, p) for p in paths] for label, paths in RUNS.items()}
    text = v6.recurring_misses.report(runs, os.path.join(v6.RESULTS, "..", "..", "routes", "h200.json"))
    open(os.path.join(HERE, "recurring.txt"), "w").write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
