#!/usr/bin/env python3
"""Compact benchmark results into the records a routing table is built from.

  python3 bench/routing_records.py -o routes/h200-measurements.json \
      bench/results/2026-11-30-tune-h200/tune_tp8_flush.raw.jsonl.gz \
      --older bench/results/2026-11-30-tune-h200/tune_tp1_tp8.raw.jsonl.gz \
      --older bench/results/2026-11-30-decode-h200/decode_*.json

Inputs: `fp8route tune` raw files (JSON lines, .raw.jsonl[.gz]) or gemm_bench JSON arrays (.json[.gz]).
Each --older group fills in only problems (scale, out, n, k, m) that neither the inputs nor an earlier
--older group measured: a problem's candidates must all come from one run, since timings of separate
runs differ by a few percent.

Output: [[scale, out, n, k, m, backend, config, us], ...], sorted. "floor" (a roofline, not a kernel)
and "reference" (never a routing choice) are dropped; a point measured in several files (tp1 and
tp8 share shapes, decode repeats small M) keeps its minimum, the same rule as min over repeats.
Bias and model are not kept: the routing key is (scale, out, N, K) and then M.
"""
import argparse, gzip, json


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        if ".jsonl" not in path:
            return json.load(f)
        # tune raw file, as fp8route's read_tune_raw reads it: skip the stamp line; a problem's
        # records count once its "done" line is there, which adds the configs the quick round dropped
        # (--screen), with their quick times, and names the configs timed again (--final): the others
        # rank at least final_pct% behind the fastest of those (settle_final_round, route.h).
        out, pending = [], {}
        for r in map(json.loads, filter(str.strip, f)):
            if "stamp" in r:
                continue
            key = tuple(r[k] for k in ("scale", "out", "n", "k", "m"))
            problem = pending.setdefault(key, [])
            if not r.get("done"):
                problem.append(r)
                continue
            del pending[key]
            problem += [{**{k: r[k] for k in ("scale", "out", "n", "k", "m")}, "backend": backend,
                         "config": config, "us": us} for backend, config, us in r.get("screened_out", [])]
            again = {tuple(c) for c in r.get("final", [])}
            fastest = min((p["us"] for p in problem if (p["backend"], p["config"]) in again), default=None)
            if fastest is not None:
                floor = fastest * (1 + r["final_pct"] / 100)
                problem = [p if (p["backend"], p["config"]) in again else {**p, "us": max(p["us"], floor)}
                           for p in problem]
            out += problem
        return out


def records(paths):
    best = {}
    for path in paths:
        for r in load(path):
            if r["backend"] in ("floor", "reference") or r.get("bias"):
                continue
            key = (r["scale"], r["out"], r["n"], r["k"], r["m"], r["backend"], r["config"])
            best[key] = min(best.get(key, float("inf")), r["us"])
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--older", nargs="+", action="append", default=[],
                    help="a group of files filling in problems nothing before it measured (repeatable)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    best = records(args.inputs)
    older = {}
    for group in args.older:
        problems = {key[:5] for key in best}
        fill = {key: us for key, us in records(group).items() if key[:5] not in problems}
        older.update(fill)
        best.update(fill)
    rows = [[*key, round(us, 4)] for key, us in sorted(best.items())]
    with open(args.output, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    print(f"{args.output}: {len(rows)} records ({len(older)} from --older, "
          f"{len({k[:5] for k in older})} problems) from {len(args.inputs) + sum(map(len, args.older))} files")


if __name__ == "__main__":
    main()
