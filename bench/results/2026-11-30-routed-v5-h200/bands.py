#!/usr/bin/env python3
"""Routed vs the best single backend and vs cuBLASLt alone, for this folder's benches (the ninth
session: the shipped table after the settle_final_round fix, on the GPU for the first time). Run
from the repository root:
    python3 bench/results/2026-11-30-routed-v5-h200/bands.py

1. The M the eighth session's tune added (2, 8, 24, 48, 96, 192, 384, 768, 1536, 2048, 3072),
   every model, TP 8 and TP 1 (llama-3.1-405b down_proj at TP 1 from its own --shapes run).
2. Every catalog M up to 4096: set 1 plus routed-v3's benches of the other M (1, 4, 16, 32, ...,
   1024, 4096). The table's choice at those M is unchanged since routed-v3 (no --final data there;
   checked: 0 of 1530 choices differ), but that bench ran on another H200.
3. The same kernel timed twice in one run (the routed call against that config's own timing).
4. The 20 problems of set 1 over 3% (the 405b gate_up TP 1 M = 3072 one left out: 9 ms a call),
   benched again: twice and then once more on the GPU of set 1 (chip B), and once on another H200
   (chip D) in a later call. Then, on chip B, each tuned alone with the fill-in tune's settings:
   does chip B's tune agree with chip B's bench?
5. Whether a cuBLASLt rank names the same algorithm on two chips (chip C's explain, chip D's records).
6. How close set 1's misses were in the table: the runner-up's measured time over the choice's at
   that problem (what `explain` flags as a near-tie when within 3%), against all measured points.
"""
import collections, glob, gzip, importlib.util, json, os, sys, tarfile, tempfile

HERE = "bench/results/2026-11-30-routed-v5-h200"
V3 = "bench/results/2026-11-30-routed-v3-h200"
V4 = "bench/results/2026-11-30-routed-v4-h200"
spec = importlib.util.spec_from_file_location("bands_v4", f"{V4}/bands.py")
v4 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v4)
v3 = v4.v3


def extract(tmp):
    for folder, name in ((HERE, "bench_tp8"), (HERE, "bench_tp1a"), (HERE, "bench_tp1b"),
                         (V3, "bench_shipped"), (V3, "bench_tp1_m32up")):
        with tarfile.open(f"{folder}/{name}.json.tar.gz") as t:
            t.extractall(os.path.join(tmp, name))
    # The --shapes run names its layer "llama-3.1-405b/down_proj" under model "shapes".
    records = json.load(gzip.open(f"{HERE}/bench_tp1_405b_down.json.gz", "rt"))
    for r in records:
        r["model"], r["layer"] = r["layer"].split("/")
    os.makedirs(f"{tmp}/bench_tp1b/json", exist_ok=True)
    json.dump(records, open(f"{tmp}/bench_tp1b/json/llama-3.1-405b_down_tp1.json", "w"))


def added(tmp, tp):
    probs = {}
    for part in (("bench_tp8",) if tp == 8 else ("bench_tp1a", "bench_tp1b")):
        v3.from_json(f"{tmp}/{part}/json/*.json", probs)
    return probs


def rebench(folder_tars):
    """(n, k, scale, m) -> {rep: (routed / best, best backend/config, routed config)}."""
    out = collections.defaultdict(dict)
    with tempfile.TemporaryDirectory() as tmp:
        for tar in folder_tars:
            with tarfile.open(tar) as t:
                t.extractall(tmp)
        for f in sorted(glob.glob(f"{tmp}/json/r*.json")):
            rs = json.load(open(f))
            key = (rs[0]["n"], rs[0]["k"], rs[0]["scale"], rs[0]["m"])
            routed = next(r for r in rs if r["routed"])
            best = min((r for r in rs if not r["routed"]), key=lambda r: r["us"])
            out[key][os.path.basename(f).split("_")[0]] = (
                routed["us"] / best["us"], f"{best['backend']}/{best['config']}", routed["config"])
    return out


def tuned_alone():
    """(n, k, scale, m) -> {mode: fastest config} from chip B's tunes of each problem alone."""
    out = collections.defaultdict(dict)
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(f"{HERE}/rebench/chipB_tune.tar.gz") as t:
            t.extractall(tmp)
        for f in glob.glob(f"{tmp}/tune/*.json"):
            if f.endswith(".raw.jsonl"):
                continue
            mode, n, k, s, m = os.path.basename(f)[:-5].split("_")
            e = json.load(open(f))["entries"][0]
            out[(int(n), int(k), s, int(m))][mode] = e["breakpoints"][0][2]
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        extract(tmp)
        fill = {}
        for tp in (8, 1):
            fill[tp] = added(tmp, tp)
            v4.report(f"1. added M, TP {tp} (settled table)", fill[tp])
            v3.misses(fill[tp])
        for tp in (8, 1):
            probs = v3.shipped(tmp, tp)
            probs.update(fill[tp])
            v4.report(f"2. every catalog M <= 4096, TP {tp}", probs)
        v3.same_kernel(glob.glob(f"{tmp}/bench_tp*/json/*.json"))

    b = rebench([f"{HERE}/rebench/chipB_r1r2.json.tar.gz", f"{HERE}/rebench/chipB_r3.json.tar.gz"])
    d = rebench([f"{HERE}/rebench/chipD_r4.json.tar.gz"])
    tune = tuned_alone()
    print("4. set 1's misses benched again (routed / best single backend); chip B = the GPU of set 1, "
          "chip D = another H200; chip B's tune of the problem alone (fill-in settings, then 4 instances)")
    over = collections.Counter()
    agree = 0
    for key in sorted(b):
        reps = {**b[key], **d.get(key, {})}
        for rep, (x, _, _) in reps.items():
            over[("chip D" if rep == "r4" else "chip B", x > 1.03)] += 1
        best_b = collections.Counter(v[1].split("/")[1] for v in b[key].values()).most_common(1)[0][0]
        agree += tune[key].get("fill") == best_b
        print(f"   {key}: table {b[key]['r1'][2]}; chip B "
              + " ".join(f"{b[key][r][0]:.3f}" for r in sorted(b[key]))
              + f" (best {best_b}); chip D {d[key]['r4'][0]:.3f} (best {d[key]['r4'][1].split('/')[1]})"
              + f"; chip B tune: {tune[key].get('fill')} / {tune[key].get('i4')}")
    for chip in ("chip B", "chip D"):
        print(f"   {chip}: {over[(chip, True)]} of {over[(chip, True)] + over[(chip, False)]} timings over 3%")
    print(f"   chip B's tune (fill-in settings) picks chip B's most frequent bench winner on {agree} of {len(b)}")

    ranks_across_chips()
    near_ties_in_table()


def ranks_across_chips():
    """5. Does a cuBLASLt rank name the same algorithm on chips C and D? Chip C's explain of the 20
    problems against the `algo` of chip D's bench records."""
    import re
    named, problem = {}, None
    for line in open(f"{HERE}/rebench/explain_chipC.txt"):
        if line.startswith("== "):
            n, k, s, m = line.split()[1:]
            problem = (int(n), int(k), s, int(m))
        hit = re.search(r"cublaslt/(heuristic\d?)\s+\[(.*)\]", line)
        if hit:
            named[(problem, hit.group(1))] = hit.group(2)
    count = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(f"{HERE}/rebench/chipD_r4.json.tar.gz") as t:
            t.extractall(tmp)
        for f in glob.glob(f"{tmp}/json/*.json"):
            for r in json.load(open(f)):
                key = ((r["n"], r["k"], r["scale"], r["m"]), r["config"])
                if r["backend"] == "cublaslt" and key in named:
                    count["same" if named[key] == r["algo"] else "different"] += 1
    print(f"5. cuBLASLt ranks, chip D's records against chip C's explain: {dict(count)}")



def near_ties_in_table():
    times = collections.defaultdict(list)
    for s, o, n, k, m, b, c, us in json.load(open("routes/h200-measurements.json")):
        times[(s, n, k, m)].append(us)
    gap = {key: sorted(v)[1] / sorted(v)[0] for key, v in times.items() if len(v) > 1}
    misses = [(s, int(n), int(k), int(m)) for tp, n, k, s, m in
              (line.split() for line in open(f"{HERE}/rebench/misses.txt"))] + [("tensor", 106496, 16384, 3072)]
    print(f"6. set 1's {len(misses)} misses: runner-up within 3% in the table for "
          f"{sum(gap[key] <= 1.03 for key in misses)} (gaps {', '.join(f'{gap[key]:.3f}' for key in sorted(misses, key=gap.get))}); "
          f"all measured points: {sum(g <= 1.03 for g in gap.values())} of {len(gap)}")


if __name__ == "__main__":
    main()
