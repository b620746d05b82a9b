"""Which routing table a binary uses when none is named, and what it says when the table does not
load (CPU): a copy of the fp8route binary with routes/h200.json beside it (scripts/stage_gpu.sh's
layout) or in <prefix>/share/fp8route (cmake --install's), run without FP8ROUTE_SOURCE_DIR, finds
that table and names it in `info --json`, and so does a copy of the Python module with the table
beside it (a wheel's layout); a table that does not load leaves the tool and the Python package
routing by the heuristic rules, with the file named in the load error. The binary: $FP8ROUTE_CLI,
else build/release/fp8route; the module: $FP8ROUTE_FFI_LIB, else build/release's; skipped when
none is built."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from cli_helpers import bare_env, cli_path, small_table, staged_copy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "routes", "h200.json")


def info_json(binary, env):
    r = subprocess.run([binary, "info", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_staged_binary_finds_the_table_beside_it(tmp_path):
    binary = staged_copy(str(tmp_path / "gpu"))
    table = str(tmp_path / "gpu" / "routes" / "h200.json")
    small_table(table)
    info = info_json(binary, bare_env())
    assert info["routing_table_path"] == table, info
    assert info["routing_table_load_error"] == ""
    assert "staged table" in info["routing_table"]


def test_installed_binary_finds_the_table_in_share(tmp_path):
    binary = staged_copy(str(tmp_path / "prefix" / "bin"))
    table = str(tmp_path / "prefix" / "share" / "fp8route" / "routes" / "h200.json")
    small_table(table, gpu="installed table")
    info = info_json(binary, bare_env())
    assert info["routing_table_path"] == table, info
    assert "installed table" in info["routing_table"]


def test_env_overrides_win(tmp_path):
    binary = staged_copy(str(tmp_path / "gpu"))
    small_table(str(tmp_path / "gpu" / "routes" / "h200.json"))
    # FP8ROUTE_SOURCE_DIR (a source tree copied elsewhere) comes before the table beside the binary.
    info = info_json(binary, {**bare_env(), "FP8ROUTE_SOURCE_DIR": ROOT})
    assert info["routing_table_path"] == TABLE, info
    # FP8ROUTE_TABLE before both; one that does not exist is an error that names it.
    missing = str(tmp_path / "missing.json")
    info = info_json(binary, {**bare_env(), "FP8ROUTE_SOURCE_DIR": ROOT, "FP8ROUTE_TABLE": missing})
    assert missing in info["routing_table_load_error"], info


# Test ids are the names: pytest puts the id in the child's environment (PYTEST_CURRENT_TEST), and one
# holding the 200 kB text fails the child's exec with E2BIG.
@pytest.mark.parametrize("name,text", [pytest.param(name, text, id=name) for name, text in [
    ("overflow", '{"format": "fp8route-routing-table", "version": 1e400}'),
    ("deep", '{"format": "fp8route-routing-table", "version": ' + "[" * 100000 + "]" * 100000 + "}"),
    ("utf8", b'{"format": "\xff\xfe"}'),
    ("version", '{"format": "fp8route-routing-table", "version": 4294967297}'),
]])
def test_bad_table_is_a_load_error_in_info_json(tmp_path, name, text):
    path = tmp_path / f"{name}.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    info = info_json(cli_path(), {**bare_env(), "FP8ROUTE_TABLE": str(path)})
    assert str(path) in info["routing_table_load_error"], info
    assert info["routing_table"].startswith("not loaded"), info


def ffi_lib():
    for path in (os.environ.get("FP8ROUTE_FFI_LIB"),
                 os.path.join(ROOT, "build", "release", "python", "fp8route", "_fp8route_ffi.so")):
        if path and os.path.exists(path):
            return os.path.abspath(path)
    pytest.skip("no native module built (FP8ROUTE_FFI_LIB)")


def python_json(code, env):
    """What `code` prints as JSON, run in a fresh process (the table is read on first use; the
    package from this tree, its dependencies from where this process found them)."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**env, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python"), *inherited])})
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_python_module_finds_the_table_beside_it(tmp_path):
    # A wheel's layout: fp8route/_fp8route_ffi.so with fp8route/routes/h200.json beside it.
    pkg = tmp_path / "fp8route"
    pkg.mkdir()
    lib = str(pkg / "_fp8route_ffi.so")
    shutil.copy2(ffi_lib(), lib)
    table = str(pkg / "routes" / "h200.json")
    small_table(table, gpu="module table")
    info = python_json("import json, fp8route; print(json.dumps(fp8route.table_info()))",
                       {**bare_env(), "FP8ROUTE_FFI_LIB": lib})
    assert info["path"] == table, info
    assert info["stamp"]["gpu"] == "module table"


def test_python_routes_by_the_heuristic_when_the_table_does_not_load(tmp_path):
    ffi_lib()
    path = tmp_path / "overflow.json"
    path.write_text('{"format": "fp8route-routing-table", "version": 1, "stamp": 1e400}')
    code = ("import json, fp8route; i = fp8route.table_info(); e = fp8route.explain(16, 4096, 4096); "
            "print(json.dumps({'info': i, 'again': fp8route.table_info(), 'explain': e}))")
    out = python_json(code, {**bare_env(), "FP8ROUTE_TABLE": str(path)})
    assert str(path) in out["info"]["load_error"], out
    assert "out of range" in out["info"]["load_error"], out
    assert out["again"]["load_error"] == out["info"]["load_error"]
    assert "source: heuristic" in out["explain"], out["explain"]
