#!/usr/bin/env python3
"""Routed vs cuBLASLt alone per M band, and the problems where routed is > 3% slower than the best
single backend, for this folder's benches (4 graph instances, --configs all, --screen 25).
Run from the repository root: python3 bench/results/2026-11-30-routed-v3-h200/bands.py

1. "tune's table, same machine": calls 1-3, each TP degree benched right after its screened re-tune,
   on the same GPU, routed by that tune's own table (M >= 32).
2. "shipped table": calls 4-5 (another GPU), routes/h200.json of df3e427: every model at TP 8 and
   TP 1 for M = 1, 4, 16; every model at TP 8 for M >= 32; llama-3.1-8b, minimax-h3-like and
   deepseek-v3 at TP 1 for M >= 32. The other three TP 1 models at M >= 32 are taken from set 1
   (their choices in the tune's table and in the shipped table are the same), so every model is
   counted once at every M.
3. The same kernel timed twice in one run: where the routed config is also a backend's fastest, the
   routed call's time over that config's own time (run-to-run precision inside a bench).
4. Between the two GPUs (set 1 against calls 4-5, M >= 32, the problems both ran): the same routed
   config's time, and the cuBLASLt / CUTLASS ratio where each ran the same config in both.
5. The same problems: on the other GPU, how often the tune's table (set 1's routed config) and the
   fastest config of set 1's bench (4 graph instances, the top candidates only) are > 3% behind.
"""
import glob, json, os, sys, tarfile, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-11-30-routed-v2-h200"))
from bands import from_json, report  # noqa: E402  (the same totals as the previous session's)

HERE = "bench/results/2026-11-30-routed-v3-h200"


def misses(probs):
    for key, d in sorted(probs.items()):
        best = min(v for b, v in d.items() if b != "routed")
        if d["routed"] > 1.03 * best:
            print(f"    {'/'.join(map(str, key))}: {d['routed'] / best:.3f}x  " +
                  ", ".join(f"{b} {v:.2f}" for b, v in d.items()))


def same_kernel(paths):
    ratios = []
    for f in paths:
        by = {}
        for r in json.load(open(f)):
            by.setdefault((r["layer"], r["scale"], r["m"]), []).append(r)
        for rs in by.values():
            routed = next(r for r in rs if r["routed"])
            ratios += [routed["us"] / r["us"] for r in rs if not r["routed"] and
                       (r["backend"], r["config"]) == (routed["backend"], routed["config"])]
    ratios.sort()
    q = lambda p: ratios[round(p * (len(ratios) - 1))]
    print(f"3. same kernel, routed call / its own timing, {len(ratios)} problems: p1 {q(.01):.3f}, median {q(.5):.3f}, "
          f"p99 {q(.99):.3f}, max {ratios[-1]:.3f}; > 1.03: {sum(x > 1.03 for x in ratios)}")


def by_problem(paths):
    d = {}
    for f in paths:
        for r in json.load(open(f)):
            d.setdefault((r["model"], r["layer"], r["tp"], r["scale"], r["m"]), {})[
                "routed" if r["routed"] else r["backend"]] = (r["us"], r["backend"], r["config"])
    return d


def cross_gpu(paths_a, paths_b):
    a, b = by_problem(paths_a), by_problem(paths_b)
    same, rel = [], []
    for k in a.keys() & b.keys():
        x, y = a[k], b[k]
        if x["routed"][1:] == y["routed"][1:]:
            same.append(y["routed"][0] / x["routed"][0])
        if all(n in x and n in y and x[n][1:] == y[n][1:] for n in ("cublaslt", "cutlass_sm90")):
            rel.append(y["cublaslt"][0] / y["cutlass_sm90"][0] / (x["cublaslt"][0] / x["cutlass_sm90"][0]))
    q = lambda v, p: sorted(v)[round(p * (len(v) - 1))]
    print(f"4. other GPU / tune's GPU: same routed config, {len(same)} problems: p5 {q(same, .05):.3f}, "
          f"median {q(same, .5):.3f}, p95 {q(same, .95):.3f}; cuBLASLt/CUTLASS ratio, {len(rel)} problems: "
          f"p5 {q(rel, .05):.3f}, median {q(rel, .5):.3f}, p95 {q(rel, .95):.3f}, moved > 3%: "
          f"{sum(abs(r - 1) > 0.03 for r in rel)}")
    n = ev = miss_table = miss_bench = 0
    for k in a.keys() & b.keys():
        times_b = {}
        for v in b[k].values():  # the routed call is a timing of its config too
            times_b[v[1:]] = min(times_b.get(v[1:], v[0]), v[0])
        best_b = min(v[0] for name, v in b[k].items() if name != "routed")
        n += 1
        miss_table += times_b[b[k]["routed"][1:]] > 1.03 * best_b  # each config at its fastest timing, alike
        winner_a = min(a[k].values(), key=lambda v: v[0])[1:]
        if winner_a in times_b:
            ev += 1
            miss_bench += times_b[winner_a] > 1.03 * best_b
    print(f"5. on the other GPU, > 3% behind its best: the tune's table {miss_table} of {n}; set 1's bench winner "
          f"{miss_bench} of the {ev} it timed")


def shipped(tmp, tp):
    """Set 2 at one TP degree, from bench_shipped and bench_tp1_m32up extracted into tmp."""
    probs = {}
    from_json(f"{tmp}/bench_shipped/json/*_tp{tp}*.json", probs)
    if tp == 1:
        for model in ("llama-3.1-70b", "qwen2.5-72b", "llama-3.1-405b"):
            from_json(f"{tmp}/bench_tp1_m32up/json/{model}_tp1.json", probs)
    return probs


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("bench_tp8_m32up", "bench_tp1_m32up", "bench_shipped"):
            with tarfile.open(f"{HERE}/{name}.json.tar.gz") as t:
                t.extractall(os.path.join(tmp, name))
        for tp in (8, 1):
            probs = {}
            from_json(f"{tmp}/bench_tp{tp}_m32up/json/*_tp{tp}.json", probs)
            report(f"1. tune's table, same machine, TP {tp}", probs)
            misses(probs)
        for tp in (8, 1):
            probs = shipped(tmp, tp)
            report(f"2. shipped table, TP {tp}", probs)
            misses(probs)
        same_kernel(glob.glob(f"{tmp}/*/json/*.json"))
        cross_gpu(glob.glob(f"{tmp}/bench_tp*_m32up/json/*.json"),
                  [f for f in glob.glob(f"{tmp}/bench_shipped/json/*.json") if "decode" not in f])


if __name__ == "__main__":
    main()
