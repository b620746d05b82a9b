"""What an installed fp8route relies on (CPU): FP8ROUTE_DATA_DIR, looked in before every other place
for the shipped data, and the wheel's `fp8route` console script (python/fp8route/_cli.py), which runs
the tool inside the package (fp8route/bin/fp8route) with the arguments given, passes its exit status
through, points FP8ROUTE_DATA_DIR at the package unless it is set, and says so when the tool is
missing. The tool: $FP8ROUTE_CLI, else build/release/fp8route; skipped when none is built."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from cli_helpers import bare_env, cli_path, small_table, staged_copy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def info_json(cmd, env):
    r = subprocess.run(cmd + ["info", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_data_dir_comes_first(tmp_path):
    binary = staged_copy(str(tmp_path / "prefix" / "bin"))
    small_table(str(tmp_path / "prefix" / "share" / "fp8route" / "routes" / "h200.json"), "installed table")
    data = small_table(str(tmp_path / "data" / "routes" / "h200.json"), "data dir table")
    # Before the install prefix beside the binary and before a source tree.
    info = info_json([binary], {**bare_env(), "FP8ROUTE_SOURCE_DIR": ROOT, "FP8ROUTE_DATA_DIR": str(tmp_path / "data")})
    assert info["routing_table_path"] == data, info
    assert "data dir table" in info["routing_table"], info
    # A data folder without the file: the next place that has it.
    info = info_json([binary], {**bare_env(), "FP8ROUTE_DATA_DIR": str(tmp_path / "empty")})
    assert "installed table" in info["routing_table"], info


def wheel_layout(pkg, with_tool=True):
    """A package laid out as the wheel's: fp8route/_cli.py (with _cuda_libs.py), bin/fp8route, routes/h200.json."""
    os.makedirs(pkg, exist_ok=True)
    for name in ("_cli.py", "_cuda_libs.py"):
        shutil.copy2(os.path.join(ROOT, "python", "fp8route", name), os.path.join(pkg, name))
    if with_tool:
        staged_copy(os.path.join(pkg, "bin"))
    small_table(os.path.join(pkg, "routes", "h200.json"), "packaged table")
    return [sys.executable, os.path.join(pkg, "_cli.py")]


def test_console_script_runs_the_packaged_tool_with_the_packaged_table(tmp_path):
    pkg = str(tmp_path / "site" / "fp8route")
    script = wheel_layout(pkg)
    info = info_json(script, bare_env())
    assert info["routing_table_path"] == os.path.join(pkg, "routes", "h200.json"), info
    assert "packaged table" in info["routing_table"], info
    # A data folder already named is kept.
    other = small_table(str(tmp_path / "other" / "routes" / "h200.json"), "other table")
    info = info_json(script, {**bare_env(), "FP8ROUTE_DATA_DIR": str(tmp_path / "other")})
    assert info["routing_table_path"] == other, info


@pytest.mark.parametrize("args", [["--version"], ["--no-such-flag"], ["explain", "--m", "0"]])
def test_console_script_passes_arguments_and_exit_status_through(tmp_path, args):
    script = wheel_layout(str(tmp_path / "fp8route"))
    direct = subprocess.run([cli_path()] + args, capture_output=True, text=True, timeout=300, env=bare_env())
    wrapped = subprocess.run(script + args, capture_output=True, text=True, timeout=300, env=bare_env())
    assert wrapped.returncode == direct.returncode, (direct.stderr, wrapped.stderr)
    assert wrapped.stdout == direct.stdout


def test_console_script_without_the_tool_says_so(tmp_path):
    pkg = str(tmp_path / "fp8route")
    script = wheel_layout(pkg, with_tool=False)
    r = subprocess.run(script + ["info"], capture_output=True, text=True, timeout=60, env=bare_env())
    assert r.returncode == 127
    assert os.path.join(pkg, "bin", "fp8route") in r.stderr and "not in this installation" in r.stderr
