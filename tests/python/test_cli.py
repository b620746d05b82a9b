"""The fp8route command-line tool: `tune --build-only` from a raw file and `table build` from a
manifest (no GPU needed), and `bench --json` (GPU). The binary: $FP8ROUTE_CLI (scripts/run_tests.sh
and run_tests_direct.sh set it), else build/release/fp8route or build/gpu/fp8route of the tree;
skipped, with the reason, when none is built."""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli_path():
    for path in (os.environ.get("FP8ROUTE_CLI"), os.path.join(ROOT, "build", "release", "fp8route"),
                 os.path.join(ROOT, "build", "gpu", "fp8route")):
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip("no fp8route binary built (set FP8ROUTE_CLI)")


def run(*args):
    return subprocess.run([cli_path(), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "FP8ROUTE_SOURCE_DIR": ROOT})


def has_gpu():
    info = run("info")
    assert info.returncode == 0, info.stderr
    return "GPU: none" not in info.stdout


STAMP = {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.1.0",
         "date": "2026-11-30"}


def test_build_only_keeps_screened_out_quick_times(tmp_path):
    # Two measured configs and one the screen dropped (its quick time in the "done" line), at two M;
    # then an unfinished problem (no "done" line), which must not reach the table.
    key = {"scale": "row", "out": "bf16", "n": 4096, "k": 4096}
    lines = [{"stamp": STAMP}]
    for m, fast, slow, dropped in ((16, 10.0, 11.0, 31.5), (64, 20.0, 18.0, 55.0)):
        lines += [{**key, "m": m, "backend": "cublaslt", "config": "heuristic", "us": fast},
                  {**key, "m": m, "backend": "cutlass_sm90", "config": "row_64x16x128_1x1x1_pingpong_swapab",
                   "us": slow},
                  {"done": True, **key, "m": m, "screen_pct": 25,
                   "screened_out": [["skinny", "m8_n32_k128x4_splitk", dropped]]}]
    lines.append({**key, "m": 128, "backend": "cublaslt", "config": "heuristic", "us": 1.0})
    raw = tmp_path / "t.raw.jsonl"
    raw.write_text("".join(json.dumps(line) + "\n" for line in lines))
    table = tmp_path / "t.json"
    r = run("tune", "--build-only", "--raw", str(raw), "-o", str(table))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "from 6 measurements of 2 finished problems" in r.stdout, r.stdout
    (entry,) = json.loads(table.read_text())["entries"]
    measured = {(m, b, c): us for m, b, c, us in entry["measured"]}
    assert measured[(16, "skinny", "m8_n32_k128x4_splitk")] == 31.5
    assert measured[(64, "skinny", "m8_n32_k128x4_splitk")] == 55.0
    assert not any(m == 128 for m, _, _ in measured)
    # The breakpoints are the fastest measured per M; a quick time far behind never is.
    assert entry["breakpoints"] == [[16, "cublaslt", "heuristic"],
                                    [64, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab"]]


def test_build_only_and_table_build_settle_the_final_round(tmp_path):
    # tune --final timed the near-ties cuBLASLt and CUTLASS "a" again; CUTLASS "b" has only its
    # full-round time, lower but from another mix: it ranks 5% behind the final round's fastest, in
    # tune's table and in table build's table and records alike.
    key = {"scale": "row", "out": "bf16", "n": 4096, "k": 4096, "m": 16}
    a, b = "row_64x16x128_1x1x1_pingpong_swapab", "row_128x16x128_1x1x1_coop_streamk_swapab"
    lines = [{"stamp": STAMP},
             {**key, "backend": "cublaslt", "config": "heuristic", "us": 12.0},
             {**key, "backend": "cutlass_sm90", "config": a, "us": 12.5},
             {**key, "backend": "cutlass_sm90", "config": b, "us": 11.0},
             {"done": True, **key, "screen_pct": 25, "screened_out": [], "final_pct": 5, "final_instances": 4,
              "final": [["cublaslt", "heuristic"], ["cutlass_sm90", a]]}]
    raw = tmp_path / "t.raw.jsonl"
    raw.write_text("".join(json.dumps(line) + "\n" for line in lines))
    table = tmp_path / "t.json"
    r = run("tune", "--build-only", "--raw", str(raw), "-o", str(table))
    assert r.returncode == 0, r.stdout + r.stderr
    (entry,) = json.loads(table.read_text())["entries"]
    assert entry["breakpoints"] == [[16, "cublaslt", "heuristic"]]
    measured = {(bk, c): us for _, bk, c, us in entry["measured"]}
    assert measured[("cutlass_sm90", b)] == pytest.approx(12.6, rel=1e-3)
    manifest = tmp_path / "sources.json"
    manifest.write_text(json.dumps({"format": "fp8route-table-sources", "version": 1, "stamp": STAMP,
                                    "groups": [{"files": [raw.name]}]}))
    built, records = tmp_path / "built.json", tmp_path / "records.json"
    b = run("table", "build", str(manifest), "-o", str(built), "--records", str(records))
    assert b.returncode == 0, b.stdout + b.stderr
    assert json.loads(built.read_text())["entries"] == json.loads(table.read_text())["entries"]
    assert {(bk, c): us for *_, bk, c, us in json.loads(records.read_text())} == pytest.approx(measured, rel=1e-3)


def test_bench_json_path_fails_before_the_run_and_the_file_is_valid(tmp_path):
    if not has_gpu():
        pytest.skip("no CUDA device (bench needs one)")
    bad = run("bench", "--model", "llama-3.1-8b", "--tp", "8", "--m", "1", "--scale", "tensor",
              "--json", str(tmp_path / "missing" / "b.json"))
    assert bad.returncode != 0
    assert "missing/b.json: cannot write (--json)" in bad.stdout + bad.stderr
    assert "problems" not in bad.stdout  # nothing was measured
    out = tmp_path / "b.json"
    ok = run("bench", "--model", "llama-3.1-8b", "--tp", "8", "--m", "1,4", "--scale", "tensor", "--reps", "3",
             "--json", str(out))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    records = json.loads(out.read_text())
    assert {r["layer"] for r in records} == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    assert sum(r["routed"] for r in records) == 4 * 2
    assert not os.path.exists(str(out) + ".partial")


def test_tune_writes_a_resumable_raw_file_and_a_table(tmp_path):
    if not has_gpu():
        pytest.skip("no CUDA device (tune needs one)")
    table, raw = tmp_path / "t.json", tmp_path / "t.raw.jsonl"
    args = ("tune", "--model", "llama-3.1-8b", "--tp", "8", "--m", "16", "--scale", "row", "--reps", "5", "-o", str(table))
    r = run(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [json.loads(line) for line in raw.read_text().splitlines()]
    done = [line for line in lines if line.get("done")]
    assert len(done) == 4  # qkv_proj, o_proj, gate_up_proj, down_proj
    for d in done:
        assert len(d.get("final_full_us", [])) == len(d.get("final", []))
    # The table is the raw file's, as tune --build-only reads it (settle_final_round included).
    rebuilt = tmp_path / "b.json"
    b = run("tune", "--build-only", "--raw", str(raw), "-o", str(rebuilt))
    assert b.returncode == 0, b.stdout + b.stderr
    assert json.loads(table.read_text())["entries"] == json.loads(rebuilt.read_text())["entries"]
    # Run again: every problem resumes, nothing is measured.
    again = run(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming: 4 problems already done" in again.stdout, again.stdout
    assert len(raw.read_text().splitlines()) == len(lines)


def test_probe_arguments_fail_before_any_work(tmp_path):
    r = run("probe", "-o", str(tmp_path / "t.json"))
    assert r.returncode == 2 and "--model" in r.stderr and "--shapes" in r.stderr, r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "fp8route-routing-table", "version": 1, "entries": [')
    r = run("probe", "--model", "llama-3.1-8b", "--table", str(bad), "-o", str(tmp_path / "t.json"))
    assert r.returncode == 2 and str(bad) in r.stderr, r.stderr  # no heuristic fallback: the table is the output's base
    assert not (tmp_path / "t.json").exists()
    if has_gpu():
        r = run("probe", "--model", "llama-3.1-8b", "-o", str(tmp_path / "missing" / "t.json"))
        assert r.returncode == 2 and "missing/t.json: cannot write (-o/--out-table)" in r.stderr, r.stderr
        assert "probing" not in r.stdout
    else:
        r = run("probe", "--model", "llama-3.1-8b", "-o", str(tmp_path / "t.json"))
        assert r.returncode == 2 and "probe needs a GPU" in r.stderr, r.stderr
    assert not (tmp_path / "t.json").exists()


def test_probe_writes_a_table_that_routes_by_its_timings(tmp_path):
    if not has_gpu():
        pytest.skip("no CUDA device (probe needs one)")
    shapes, out = tmp_path / "shapes.txt", tmp_path / "t.json"
    shapes.write_text("1536 5120 unseen\n")  # no tensor entry of this (N, K) in routes/h200.json
    shipped = json.loads(open(os.path.join(ROOT, "routes", "h200.json")).read())
    assert not [e for e in shipped["entries"] if (e["scale"], e["n"], e["k"]) == ("tensor", 1536, 5120)]
    args = ("probe", "--shapes", str(shapes), "--m", "1,64", "--scale", "tensor", "--reps", "5", "--instances", "1",
            "-o", str(out))
    r = run(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "of 2 probed problems route differently from the input table" in r.stdout, r.stdout
    table = json.loads(out.read_text())
    assert table["stamp"] == shipped["stamp"]
    new = [e for e in table["entries"] if (e["scale"], e["n"], e["k"]) == ("tensor", 1536, 5120)]
    assert len(new) == 1 and [e for e in table["entries"] if e is not new[0]] == shipped["entries"]
    measured = new[0]["measured"]
    assert {m for m, _, _, _ in measured} == {1, 64} and len(measured) >= 4
    for m in (1, 64):  # each M routes to its fastest timing
        best = min((rec for rec in measured if rec[0] == m), key=lambda rec: rec[3])
        bp = next(b for b in new[0]["breakpoints"] if b[0] >= m)
        assert bp[1:] == best[1:3], (m, bp, best)
        ex = run("explain", "--table", str(out), "--m", str(m), "--n", "1536", "--k", "5120", "--scale", "tensor")
        assert ex.returncode == 0 and "source: exact" in ex.stdout, ex.stdout
        assert f"choice: {best[1]}/{best[2]}\n" in ex.stdout, ex.stdout
    # Probed from the written table: every M now has an exact entry, so nothing is timed again.
    again = run(*args[:-1], str(tmp_path / "t2.json"), "--table", str(out))
    assert again.returncode == 0 and "probed: 0 timings" in again.stdout, again.stdout
    assert json.loads((tmp_path / "t2.json").read_text()) == table


def test_bench_recheck_times_a_miss_again_and_keeps_a_real_one(tmp_path):
    # A table that routes row 4096 x 4096 to a config ~2.8x slower than the best at M = 64 (the
    # shipped table's own measurements): bench flags it, re-checks it with more graph instances, and
    # the miss stands (a re-check measures again; it cannot hide a real loss).
    shipped = json.loads(open(os.path.join(ROOT, "routes", "h200.json")).read())
    slow = ["cutlass_sm90", "row_256x128x128_2x1x1_coop_fastacc"]
    entries = [e for e in shipped["entries"] if (e["scale"], e["n"], e["k"]) != ("row", 4096, 4096)]
    entries.append({"scale": "row", "out": "bf16", "n": 4096, "k": 4096, "breakpoints": [[16384, *slow]],
                    "measured": [[64, *slow, 25.98]]})
    table = tmp_path / "slow.json"
    table.write_text(json.dumps({**shipped, "entries": entries}))
    ex = run("explain", "--table", str(table), "--m", "64", "--n", "4096", "--k", "4096", "--scale", "row")
    if "no CUTLASS headers" in ex.stdout:
        pytest.skip("this build has no CUTLASS backend (the slow config under test is a CUTLASS one)")
    assert ex.returncode == 0 and f"choice: {slow[0]}/{slow[1]}\n" in ex.stdout, ex.stdout + ex.stderr
    if not has_gpu():
        pytest.skip("no CUDA device (bench needs one)")
    shapes, out = tmp_path / "shapes.txt", tmp_path / "b.json"
    shapes.write_text("4096 4096 square\n")
    r = run("bench", "--shapes", str(shapes), "--m", "64", "--scale", "row", "--configs", "all", "--reps", "5",
            "--recheck", "2", "--table", str(table), "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "re-checked with 2 graph instances" in r.stdout, r.stdout
    assert "1 of 1 problems were more than 3% slower than the best single backend in the first pass" in r.stdout
    assert "[re-checked]" in r.stdout and "1 of 1 problems: routed more than 3% slower" in r.stdout, r.stdout
    records = json.loads(out.read_text())
    routed = [x for x in records if x["routed"]]
    assert len(routed) == 1 and [routed[0]["backend"], routed[0]["config"]] == slow
    alone = [x for x in records if not x["routed"]]
    assert all("first_us" in x for x in records), records
    assert routed[0]["us"] > 1.5 * min(x["us"] for x in alone)
    assert routed[0]["first_us"] > 1.5 * min(x["first_us"] for x in alone)


def test_explain_grouped_names_the_table_entry(tmp_path):
    table = tmp_path / "g.json"
    table.write_text(json.dumps({"format": "fp8route-grouped-table", "version": 1, "stamp": STAMP, "entries": [
        {"form": "masked", "scale": "block", "out": "bf16", "experts": 32, "n": 4096, "k": 7168,
         "source": "deepseek-v3 ep8", "measured": [[8, "decode", 20.0], [8, "wgmma", 21.5], [64, "wgmma", 40.0]]}]}))
    r = run("explain", "--grouped", "masked", "--experts", "32", "--m", "5", "--n", "4096", "--k", "7168", "--scale",
            "block", "--table", str(table))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"grouped table {table}" in r.stdout and "deepseek-v3 ep8" in r.stdout, r.stdout
    assert "at measured rows 8:" in r.stdout and "decode 20 us" in r.stdout and "wgmma 21.5 us" in r.stdout, r.stdout
    r = run("explain", "--grouped", "contiguous", "--experts", "32", "--m", "5", "--n", "4096", "--k", "7168",
            "--table", str(table))  # row scales: no entry of that form and scale
    assert r.returncode == 0 and "no entry of form contiguous and scale row" in r.stdout, r.stdout


@pytest.mark.parametrize("args,flag", [
    (("explain", "--model", "llama-3.1-8b", "--m", "1", "--tp", "0"), "--tp"),
    (("explain", "--model", "llama-3.1-8b", "--m", "1", "--tp", str(2**32)), "--tp"),
    (("explain", "--m", "0", "--n", "4096", "--k", "4096"), "--m"),
    (("explain", "--m", "1", "--n", str(2**31), "--k", "4096"), "--n"),
    (("bench", "--model", "llama-3.1-8b", "--tp", "1," + str(2**32)), "--tp"),
    (("bench", "--model", "llama-3.1-8b", "--tp", "0"), "--tp"),
    (("bench", "--model", "llama-3.1-8b", "--m", "1,0"), "--m"),
    (("bench", "--model", "llama-3.1-8b", "--reps", "0"), "--reps"),
    (("tune", "--model", "llama-3.1-8b", "--tp", str(2**32 + 8)), "--tp"),
    (("probe", "--model", "llama-3.1-8b", "--reps", str(2**32), "-o", "never.json"), "--reps"),
    (("bench", "--instances", "0"), "--instances"),
])
def test_integer_options_out_of_range_exit_2_naming_the_flag(args, flag, tmp_path):
    # Checked at full width when parsed, before any work: a TP degree of 0 (or 2^32, narrowed to 0)
    # used to divide by zero.
    r = subprocess.run([os.path.abspath(cli_path()), *args], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env={**os.environ, "FP8ROUTE_SOURCE_DIR": ROOT})
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert flag in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())  # nothing written

