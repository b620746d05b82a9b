"""Automatic probing from Python and the command line: the configuration from the environment and
from fp8route.set_autoprobe, `fp8route cache show|clear` on a probe cache (no GPU needed), and on a
GPU with torch an Fp8Linear of a shape the table lacks probed once, a second layer and the next
process probing nothing. The rest of the suite runs with FP8ROUTE_AUTOPROBE=0 (conftest.py)."""
import json
import os
import subprocess
import sys

import pytest

import fp8route
from cli_helpers import ROOT, cli_path

MACHINE = {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1.0", "fp8route": "0.1.0",
           "date": "2026-12-01"}


def python_env(**changes):
    """This environment for a Python subprocess that imports the package of the tree, with changes
    (None unsets a variable)."""
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_python(code, **env):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=python_env(**env))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.fixture
def restore_autoprobe():
    saved = fp8route.autoprobe_info()
    yield
    fp8route.set_autoprobe(saved["enabled"], saved["cache_dir"], saved["budget_s"])


def test_environment_turns_off_and_moves_the_cache(tmp_path):
    code = "import json, fp8route; print(json.dumps(fp8route.autoprobe_info()))"
    on = json.loads(run_python(code, FP8ROUTE_AUTOPROBE=None, FP8ROUTE_CACHE_DIR=str(tmp_path),
                               FP8ROUTE_AUTOPROBE_BUDGET="42"))
    assert on["enabled"] is True
    assert on["cache_dir"] == str(tmp_path)
    assert on["budget_s"] == 42
    assert on["m_grid"][0] == 1 and on["m_grid"][-1] == 4096
    assert on["records"] == []
    off = json.loads(run_python(code, FP8ROUTE_AUTOPROBE="0", FP8ROUTE_CACHE_DIR=None, XDG_CACHE_HOME=None,
                                HOME=str(tmp_path)))
    assert off["enabled"] is False
    assert off["cache_dir"] == os.path.join(str(tmp_path), ".cache", "fp8route")


def test_set_autoprobe(tmp_path, restore_autoprobe):
    assert fp8route.autoprobe_info()["enabled"] is False  # conftest.py
    fp8route.set_autoprobe(True, cache_dir=tmp_path, budget_s=7.5)
    info = fp8route.autoprobe_info()
    assert (info["enabled"], info["cache_dir"], info["budget_s"]) == (True, str(tmp_path), 7.5)
    fp8route.set_autoprobe(False)
    info = fp8route.autoprobe_info()
    assert (info["enabled"], info["cache_dir"], info["budget_s"]) == (False, str(tmp_path), 7.5)
    with pytest.raises(ValueError, match="budget_s"):
        fp8route.set_autoprobe(True, budget_s=float("inf"))


def cache_file(folder, machine, n, k, measured):
    slug = f"{machine['gpu'].replace(' ', '_')}-{machine['sm_count']}sm-cuda{machine['cuda']}-cublaslt" \
           f"{machine['cublaslt']}-fp8route{machine['fp8route']}"
    path = os.path.join(folder, "probes", slug, f"row-bf16-n{n}-k{k}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"format": "fp8route-probe-cache", "version": 1, "machine": machine,
                   "shape": {"scale": "row", "out": "bf16", "n": n, "k": k},
                   "probe": {"caller": "LinearPlan", "seconds": 2.5}, "measured": measured}, f)
    return path


def test_cli_cache_show_and_clear(tmp_path):
    cli = cli_path()
    env = {**os.environ, "FP8ROUTE_CACHE_DIR": str(tmp_path)}
    good = cache_file(tmp_path, MACHINE, 3328, 2560,
                      [[1, "reference", "simt_64x64", 50.0], [16, "reference", "simt_64x64", 60.0]])
    other = cache_file(tmp_path, {**MACHINE, "gpu": "NVIDIA H100 80GB HBM3"}, 1536, 5120,
                       [[1, "reference", "simt_64x64", 40.0]])
    broken = os.path.join(os.path.dirname(good), "row-bf16-n16-k16.json")
    with open(broken, "w") as f:
        f.write('{"format": "fp8route-probe-cache", "vers')
    r = subprocess.run([cli, "cache", "show"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"probe cache: {tmp_path}" in r.stdout
    assert good in r.stdout and other in r.stdout and broken in r.stdout
    assert "row bf16 n=3328 k=2560: 2 timings at 2 M, probed by LinearPlan on 2026-12-01 in 2.50 s" in r.stdout
    assert "machine: NVIDIA H100 80GB HBM3, 132 SMs" in r.stdout
    assert "ignored: probe cache file " + broken in r.stdout
    assert "3 files" in r.stdout and "5.00 s of probing" in r.stdout
    r = subprocess.run([cli, "cache", "clear"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"removed 3 files from {tmp_path}" in r.stdout
    assert not os.path.exists(good)
    r = subprocess.run([cli, "cache", "show"], capture_output=True, text=True, timeout=120, env=env)
    assert "0 files" in r.stdout, r.stdout
    r = subprocess.run([cli, "cache"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stdout + r.stderr  # show or clear is required


# ---- on a GPU --------------------------------------------------------------------------------------

def _gpu():
    torch = pytest.importorskip("torch", reason="torch is not installed (the GPU test uses it)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def test_unseen_layer_probed_once_and_cached_for_the_next_process(tmp_path, restore_autoprobe):
    torch = _gpu()
    n, k = 3328, 2560  # a shape the shipped table lacks
    assert "source: exact" not in fp8route.explain(16, n, k, scale="row")
    fp8route.set_autoprobe(True, cache_dir=tmp_path, budget_s=600)
    before = len(fp8route.autoprobe_info()["records"])
    w = torch.randn(n, k, device="cuda") / 16
    layer = fp8route.Fp8Linear.from_float(w, act="row")
    records = fp8route.autoprobe_info()["records"][before:]
    assert len(records) == 1, records
    (rec,) = records
    assert (rec["outcome"], rec["caller"], rec["n"], rec["k"], rec["scale"]) == ("probed", "LinearPlan", n, k, "row")
    assert rec["seconds"] > 0 and rec["timings"] > 0 and os.path.exists(rec["file"]), rec
    print(f"probed row bf16 n={n} k={k}: {rec['timings']} timings at {len(rec['m'])} M in {rec['seconds']:.2f} s")
    assert "automatic probe: probed on this GPU" in layer.explain(16)
    assert "source: exact" in layer.explain(16)
    x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
    want = x.float() @ w.t()
    got = layer(x).float()
    assert (got - want).norm() / want.norm() < 0.1
    again = fp8route.Fp8Linear.from_float(w, act="row")
    assert len(fp8route.autoprobe_info()["records"]) == before + 1, "a second layer of the shape probed again"
    assert again.route(16) == layer.route(16)
    code = ("import json, torch, fp8route\n"
            f"fp8route.Fp8Linear.from_float(torch.randn({n}, {k}, device='cuda'), act='row')\n"
            "print(json.dumps(fp8route.autoprobe_info()['records']))")
    (next_process,) = json.loads(run_python(code, FP8ROUTE_AUTOPROBE=None, FP8ROUTE_CACHE_DIR=str(tmp_path)))
    assert next_process["outcome"] == "cached" and next_process["file"] == rec["file"], next_process
