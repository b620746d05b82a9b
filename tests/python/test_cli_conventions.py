"""Conventions of the fp8route tool and the benchmark programs (docs/cli.md): exit codes, messages
naming the argument, usage examples in --help that run, tables within 120 columns, --csv records
equal to the --json ones, the warning for a routing table of another GPU model, and FP8ROUTE_LOG.

The binary: $FP8ROUTE_CLI, else build/release/fp8route or build/gpu/fp8route of the tree (as
test_cli.py); gemm_bench and quant_bench beside it. The CPU tests hide any GPU
(CUDA_VISIBLE_DEVICES=""), so they check the same thing on every machine; the GPU tests skip
without one."""
import csv
import json
import os
import re
import shlex
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTH = 120


def cli_path():
    for path in (os.environ.get("FP8ROUTE_CLI"), os.path.join(ROOT, "build", "release", "fp8route"),
                 os.path.join(ROOT, "build", "gpu", "fp8route")):
        if path and os.access(path, os.X_OK):
            return os.path.abspath(path)
    pytest.skip("no fp8route binary built (set FP8ROUTE_CLI)")


def bench_path(name):
    path = os.path.join(os.path.dirname(cli_path()), name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"no {name} beside {cli_path()}")
    return path


def run(binary, *args, cwd=None, gpu=False, env=None):
    """Runs binary with args; without gpu=True every GPU is hidden from it."""
    full = {**os.environ, "FP8ROUTE_SOURCE_DIR": ROOT, **(env or {})}
    if not gpu:
        full["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=600, cwd=cwd, env=full)


def has_gpu():
    info = run(cli_path(), "info", gpu=True)
    assert info.returncode == 0, info.stderr
    return "GPU: none" not in info.stdout


STAMP = {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.1.0",
         "date": "2026-11-30"}

# (arguments, what the message must name): each is an invalid argument of its command, exit 2,
# nothing written. Checked before any GPU is looked for, so the same on every machine.
BAD_ARGUMENTS = [
    (("info", "--bogus"), "--bogus"),
    (("nosuchcommand",), "nosuchcommand"),
    (("explain", "--m", "1", "--n", "4096", "--k", "4096", "--scale", "diag"), "--scale"),
    (("explain", "--m", "1", "--n", "4096", "--k", "4096", "--out", "f32"), "--out"),
    (("explain", "--m", "1"), "--n"),
    (("explain", "--model", "no-such-model", "--m", "1"), "--model"),
    (("explain", "--m", "1", "--n", "4096", "--k", "4096", "--table", "missing.json"), "missing.json"),
    (("explain", "--grouped", "ragged", "--experts", "8", "--m", "1", "--n", "64", "--k", "128"), "--grouped"),
    (("explain", "--grouped", "masked", "--m", "1", "--n", "64", "--k", "128"), "--experts"),
    (("explain", "--grouped", "masked", "--experts", "8", "--m", "1", "--n", "64", "--k", "128", "--table",
      "missing.json"), "missing.json"),
    (("explain", "--m", "1", "--n", "4096", "--k", "4096", "--experts", "8"), "--experts"),
    (("bench", "--configs", "some"), "--configs"),
    (("bench", "--backend", "cublaslt,nope"), "--backend"),
    (("bench", "--scale", "row,diag"), "--scale"),
    (("bench", "--out", "f32"), "--out"),
    (("bench", "--model", "no-such-model"), "--model"),
    (("bench", "--probe", "never"), "--probe"),
    (("bench", "--table", "missing.json"), "missing.json"),
    (("bench", "--shapes", "missing.txt"), "missing.txt"),
    (("tune", "--backend", "nope"), "--backend"),
    (("tune", "--final", "101"), "--final"),
    (("tune", "--build-only", "--raw", "missing.jsonl", "-o", "t.json"), "missing.jsonl"),
    (("probe", "--model", "llama-3.1-8b"), "--out-table"),
    (("probe", "--model", "llama-3.1-8b", "--top", "0", "-o", "t.json"), "--top"),
    (("check", "--slow"), "--slow"),
    (("table", "build", "-o", "t.json"), "manifest"),
]


@pytest.mark.parametrize("args,named", BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_invalid_arguments_exit_2_naming_the_argument(args, named, tmp_path):
    r = run(cli_path(), *args, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert named in r.stderr, r.stderr
    assert "unexpected error" not in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("command", ["bench", "tune", "probe", "check"])
def test_a_command_that_needs_a_gpu_exits_2_saying_so(command, tmp_path):
    args = {"probe": ("--model", "llama-3.1-8b", "-o", "t.json")}.get(command, ())
    r = run(cli_path(), command, *args, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert f"{command} needs a GPU" in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("program,args,named", [
    ("gemm_bench", ("--backend", "nope"), "--backend"),
    ("gemm_bench", ("--scale", "diag"), "--scale"),
    ("gemm_bench", ("--tp", "0"), "--tp"),
    ("gemm_bench", ("--shapes", "4096"), "--shapes"),
    ("gemm_bench", ("--json", "missing/g.json"), "missing/g.json"),
    ("gemm_bench", ("--csv", "missing/g.csv"), "missing/g.csv"),
    ("gemm_bench", (), "needs a GPU"),
    ("quant_bench", ("--ops", "group,nope"), "--ops"),
    ("quant_bench", ("--layouts", "diag"), "--layouts"),
    ("quant_bench", ("--T", "0"), "--T"),
    ("quant_bench", ("--csv", "missing/q.csv"), "missing/q.csv"),
    ("quant_bench", (), "needs a GPU"),
])
def test_bench_programs_exit_2_naming_the_argument(program, args, named, tmp_path):
    r = run(bench_path(program), *args, cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert named in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())


COMMANDS = [(), ("info",), ("explain",), ("bench",), ("tune",), ("probe",), ("check",), ("table",), ("table", "build"),
            ("cache",), ("cache", "show"), ("cache", "clear")]


def examples_of(help_text):
    """The command lines of --help's "Examples:" section (comments after '#' dropped)."""
    lines = help_text.splitlines()
    assert "Examples:" in lines, help_text
    out = []
    for line in lines[lines.index("Examples:") + 1:]:
        if not line.strip():
            break
        out.append(line.split("#")[0].strip())
    return out


PASSED_EXAMPLES = set()  # an example shown by two commands' help runs once


def run_example(example, tmp_path):
    """Runs one example without a GPU in tmp_path: NAME=VALUE words before the program go to its
    environment, a path of the source tree (routes/...) is read from there."""
    words = shlex.split(example)
    env = {}
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    program = words.pop(0)
    binary = cli_path() if program == "fp8route" else bench_path(program)
    args = [os.path.join(ROOT, w) if os.path.exists(os.path.join(ROOT, w)) and "/" in w else w for w in words]
    if "--build-only" in args:  # tune's raw file, as the tune example before it would leave it
        table = args[args.index("-o") + 1]
        raw = tmp_path / (table[:-len(".json")] + ".raw.jsonl")
        key = {"scale": "row", "out": "bf16", "n": 4096, "k": 4096, "m": 16}
        raw.write_text("".join(json.dumps(line) + "\n" for line in (
            {"stamp": STAMP}, {**key, "backend": "cublaslt", "config": "heuristic", "us": 10.0}, {"done": True, **key})))
    return run(binary, *args, cwd=tmp_path, env=env)


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) or "fp8route" for c in COMMANDS])
def test_help_shows_examples_that_run(command, tmp_path):
    h = run(cli_path(), *command, "--help")
    assert h.returncode == 0, h.stderr
    examples = examples_of(h.stdout)
    assert 1 <= len(examples) <= 3, examples
    for example in examples:
        assert re.match(r"^([A-Z0-9_]+=\S+ )*fp8route\b", example), example
        if command and example.split()[1:len(command) + 1] != list(command) and "=" not in example.split()[0]:
            pytest.fail(f"{example!r} in the help of {' '.join(command)} runs another command")
        if example in PASSED_EXAMPLES:
            continue
        r = run_example(example, tmp_path)
        # Without a GPU, an example that measures stops at that, exit 2; every other one runs.
        ok = r.returncode == 0 or (r.returncode == 2 and "needs a GPU" in r.stderr)
        assert ok, (example, r.returncode, r.stdout[-2000:], r.stderr)
        PASSED_EXAMPLES.add(example)


@pytest.mark.parametrize("program", ["gemm_bench", "quant_bench"])
def test_bench_program_help_shows_examples_that_parse(program, tmp_path):
    h = run(bench_path(program), "--help")
    assert h.returncode == 0, h.stderr
    examples = examples_of(h.stdout)
    assert 1 <= len(examples) <= 3, examples
    for example in examples:
        assert example.split()[0] == program, example
        r = run_example(example, tmp_path)
        assert r.returncode == 2 and "needs a GPU" in r.stderr, (example, r.returncode, r.stderr)


def test_the_routing_plan_fits_120_columns():
    # The main job without a GPU: the routing plan of the shipped table (the longest config names).
    r = run(cli_path())
    assert r.returncode == 0, r.stderr
    assert "the routing plan of the table" in r.stdout
    wide = [line for line in r.stdout.splitlines() if len(line) > WIDTH]
    assert not wide, wide


def test_info_json_reports_no_table_warning_without_a_gpu():
    r = run(cli_path(), "info", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["routing_table_warning"] == ""


def test_info_reports_the_grouped_table(tmp_path):
    # None in use, one named by FP8ROUTE_GROUPED_TABLE, one that does not load.
    good, bad = tmp_path / "g.json", tmp_path / "bad.json"
    good.write_text('{"format": "fp8route-grouped-table", "version": 1, "stamp": {"gpu": "NVIDIA H200", '
                    '"sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.3.0", "date": "2026-12-05"}, '
                    '"entries": [{"form": "masked", "scale": "row", "out": "bf16", "experts": 8, "n": 512, "k": 256, '
                    '"measured": [[4, "simt", 3.0]]}]}')
    bad.write_text("{")
    for env, path, line in [({"FP8ROUTE_GROUPED_TABLE": str(good)}, str(good), str(good) + ": 1 entries, measured on "
                             "NVIDIA H200 on 2026-12-05"),
                            ({"FP8ROUTE_GROUPED_TABLE": str(bad)}, "", "not loaded (")]:
        j = json.loads(run(cli_path(), "info", "--json", env=env).stdout)
        assert j["grouped_routing_table_path"] == path and j["grouped_routing_table"].startswith(line), j
        assert (j["grouped_routing_table_load_error"] == "") == (path != ""), j
        text = run(cli_path(), "info", env=env).stdout
        assert "grouped routing table: " + line in text, text


def other_gpu_table(tmp_path):
    """The shipped table stamped with a GPU model no machine has."""
    table = json.loads(open(os.path.join(ROOT, "routes", "h200.json")).read())
    table["stamp"]["gpu"] = "fp8route test GPU"
    path = tmp_path / "other.json"
    path.write_text(json.dumps(table))
    return path


def test_a_table_of_another_gpu_model_is_warned_about(tmp_path):
    if not has_gpu():
        pytest.skip("no CUDA device (the warning compares the table's GPU with this one)")
    env = {"FP8ROUTE_TABLE": str(other_gpu_table(tmp_path)), "FP8ROUTE_LOG": "0"}
    info = run(cli_path(), "info", gpu=True, env=env)
    assert info.returncode == 0, info.stderr
    assert "was measured on fp8route test GPU, this GPU is" in info.stdout, info.stdout
    j = json.loads(run(cli_path(), "info", "--json", gpu=True, env=env).stdout)
    assert "fp8route test GPU" in j["routing_table_warning"], j
    # The library warns once per process where it routes (scaled_mm and LinearPlan, many problems).
    check = run(cli_path(), "check", "--quick", gpu=True, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stderr.count("fp8route warning: the routing table in use was measured on fp8route test GPU") == 1
    assert "fp8route route: " not in check.stderr  # decisions are logged only with FP8ROUTE_LOG
    # The shipped table on its own GPU model: no warning.
    mine = json.loads(run(cli_path(), "info", "--json", gpu=True).stdout)
    if mine["devices"][0]["name"] == STAMP["gpu"]:
        assert mine["routing_table_warning"] == ""


def test_fp8route_log_prints_each_routing_decision_once():
    if not has_gpu():
        pytest.skip("no CUDA device (the routed scaled_mm and LinearPlan decide on a GPU)")
    r = run(cli_path(), "check", "--quick", gpu=True, env={"FP8ROUTE_LOG": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("fp8route route: ")]
    pattern = re.compile(r"^fp8route route: (scaled_mm|LinearPlan) m=\d+ n=\d+ k=\d+ scale=(tensor|row|block) "
                         r"out=(bf16|f16)( bias)?( align=\d+)? -> \w+/\w+ \((exact|nearest|heuristic)\)$")
    assert lines and all(pattern.match(line) for line in lines), lines
    assert {line.split()[2] for line in lines} == {"scaled_mm", "LinearPlan"}, lines
    assert len(lines) == len(set(lines)), lines  # once per distinct decision
    # check routes every problem it checks through scaled_mm once, each a distinct decision.
    problems = int(re.search(r"^(\d+) problems;", r.stdout, re.M).group(1))
    assert len([line for line in lines if " scaled_mm " in line]) == problems, lines


def same_value(text, value):
    if value is None:
        return text == ""
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if isinstance(value, (int, float)):
        return float(text) == pytest.approx(value, rel=1e-12)
    return text == value


def assert_csv_equals_json(csv_path, json_path):
    records = json.loads(open(json_path).read())
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert records and len(rows) == len(records)
    keys = set().union(*records)
    assert keys <= set(rows[0]), (keys, rows[0].keys())
    for row, record in zip(rows, records):
        for key in rows[0]:
            assert same_value(row[key], record.get(key)), (key, row[key], record.get(key))


def test_bench_fits_120_columns_and_its_csv_is_its_json(tmp_path):
    if not has_gpu():
        pytest.skip("no CUDA device (bench needs one)")
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("4096 4096 deepseek-v3/dense_gate_up_proj-like-label\n2112 7168\n")
    r = run(cli_path(), "bench", "--shapes", str(shapes), "--m", "1,4096", "--reps", "3", "--recheck", "2",
            "--json", str(tmp_path / "b.json"), "--csv", str(tmp_path / "b.csv"), gpu=True)
    assert r.returncode == 0, r.stdout + r.stderr
    wide = [line for line in r.stdout.splitlines() if len(line) > WIDTH and " failed on " not in line]
    assert not wide, wide
    assert_csv_equals_json(tmp_path / "b.csv", tmp_path / "b.json")


def test_gemm_bench_and_quant_bench_csv_is_their_json(tmp_path):
    if not has_gpu():
        pytest.skip("no CUDA device (the benchmarks need one)")
    g = run(bench_path("gemm_bench"), "--shapes", "4096:4096", "--m", "16", "--scale", "row",
            "--backend", "cublaslt,skinny,routed", "--reps", "3", "--json", "g.json", "--csv", "g.csv",
            cwd=tmp_path, gpu=True)
    assert g.returncode == 0, g.stdout + g.stderr
    assert not [line for line in g.stdout.splitlines() if len(line) > WIDTH and " failed on " not in line]
    assert_csv_equals_json(tmp_path / "g.csv", tmp_path / "g.json")
    q = run(bench_path("quant_bench"), "--ops", "group,token", "--layouts", "row_major", "--T", "1,64", "--H", "4096",
            "--json", "q.json", "--csv", "q.csv", cwd=tmp_path, gpu=True)
    assert q.returncode == 0, q.stdout + q.stderr
    assert not [line for line in q.stdout.splitlines() if len(line) > WIDTH]
    assert_csv_equals_json(tmp_path / "q.csv", tmp_path / "q.json")
