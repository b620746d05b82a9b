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
    fp8route.set_autoprobe(saved["enabled"], saved["cache_dir"], saved["budget_s"], saved["call_budget_s"])


def test_environment_turns_off_and_moves_the_cache(tmp_path):
    code = "import json, fp8route; print(json.dumps(fp8route.autoprobe_info()))"
    on = json.loads(run_python(code, FP8ROUTE_AUTOPROBE=None, FP8ROUTE_CACHE_DIR=str(tmp_path),
                               FP8ROUTE_AUTOPROBE_BUDGET="42", FP8ROUTE_AUTOPROBE_CALL_BUDGET="1.5"))
    assert on["enabled"] is True
    assert on["cache_dir"] == str(tmp_path)
    assert on["budget_s"] == 42
    assert on["call_budget_s"] == 1.5
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
    fp8route.set_autoprobe(False, call_budget_s=0.5)
    assert fp8route.autoprobe_info()["call_budget_s"] == 0.5
    with pytest.raises(ValueError, match="call_budget_s"):
        fp8route.set_autoprobe(False, call_budget_s=float("nan"))


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


# Unseen shapes one after another in one process, with probing on: every call returns (a candidate
# that does not finish within the timing bound is quarantined, never waited for) and is right.
SEQUENCE = r'''
import sys, torch, fp8route
kind, shapes = sys.argv[1], [tuple(int(v) for v in s.split(",")) for s in sys.argv[2:]]
for m, n, k in shapes:
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda") * 0.1).to(torch.float8_e4m3fn)
    kb, nb = (k + 127) // 128, (n + 127) // 128
    ad, wd = a.double(), w.double()
    if kind == "tensor":
        sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([2.0], device="cuda")
        ref = ad @ wd.t()
    elif kind == "row":
        sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
        ref = (ad @ wd.t()) * sa.double()[:, None] * sb.double()[None, :]
    else:
        sam = torch.rand(m, kb, device="cuda") + 0.5
        sa = sam.t().contiguous()
        if m % 4:
            sa = torch.nn.functional.pad(sa, (0, (m + 3) // 4 * 4 - m))
        sb = torch.rand(nb, kb, device="cuda") + 0.5
        ref = torch.zeros(m, n, dtype=torch.float64, device="cuda")
        rows = torch.arange(n, device="cuda") // 128
        for j in range(kb):
            part = ad[:, j * 128:(j + 1) * 128] @ wd[:, j * 128:(j + 1) * 128].t()
            ref += part * sam.double()[:, j:j + 1] * sb.double()[rows, j][None, :]
    y = fp8route.scaled_mm(a, w, sa, sb, out_dtype=torch.bfloat16, scale=kind)
    torch.cuda.synchronize()
    err = ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err < 2e-2, f"{kind} m={m} n={n} k={k}: relative error {err}"
    print(f"ok {kind} {m} {n} {k} {err:.1e}", flush=True)
'''


@pytest.mark.parametrize("kind", ["tensor", "row", "block"])
@pytest.mark.parametrize("order", ["small-large", "large-small"])
def test_unseen_shape_sequences_return(tmp_path, kind, order):
    _gpu()
    shapes = ["1,8,16", "5,24,2048", "3,40,256", "33,200,1000"]
    if order == "large-small":
        shapes.reverse()
    r = subprocess.run([sys.executable, "-c", SEQUENCE, kind, *shapes], capture_output=True, text=True, timeout=300,
                       env=python_env(FP8ROUTE_AUTOPROBE=None, FP8ROUTE_CACHE_DIR=str(tmp_path)))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok ") == len(shapes), r.stdout + r.stderr


def test_first_call_probes_within_its_bound_and_warmup_does_the_rest(tmp_path, restore_autoprobe):
    torch = _gpu()
    n, k = 2944, 3200  # a shape the shipped table lacks
    assert "source: exact" not in fp8route.explain(4, n, k, scale="tensor")
    fp8route.set_autoprobe(True, cache_dir=tmp_path, budget_s=600, call_budget_s=0.3)
    before = len(fp8route.autoprobe_info()["records"])
    a = torch.randn(4, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones(1, device="cuda")
    fp8route.scaled_mm(a, w, one, one, out_dtype=torch.bfloat16)
    (first,) = fp8route.autoprobe_info()["records"][before:]
    assert first["outcome"] == "probed" and first["caller"] == "scaled_mm", first
    grid = fp8route.autoprobe_info()["m_grid"]
    assert 4 in first["m"] and len(first["m"]) < len(grid), first  # the call's own M first, not the grid
    with open(first["file"]) as f:
        due = json.load(f)["probe"]["due"]
    assert due and not set(due) & set(first["m"]), due
    fp8route.scaled_mm(a, w, one, one, out_dtype=torch.bfloat16)  # nothing near M = 4 is due
    assert len(fp8route.autoprobe_info()["records"]) == before + 1
    big = torch.randn(2048, k, device="cuda").to(torch.float8_e4m3fn)
    fp8route.scaled_mm(big, w, one, one, out_dtype=torch.bfloat16)
    second = fp8route.autoprobe_info()["records"][before + 1:]
    if 2048 in due:  # M = 2048 was due: this call probed it
        assert len(second) == 1 and 2048 in second[0]["m"], second
    rest = fp8route.warmup([(n, k)], scales="tensor")
    assert len(rest) == 1 and rest[0]["caller"] == "warmup" and rest[0]["outcome"] == "probed", rest
    with open(first["file"]) as f:
        assert "due" not in json.load(f)["probe"], "warmup left M due"
    assert fp8route.warmup([(n, k)], scales="tensor") == [], "a second warmup probed again"
    assert "source: exact" in fp8route.explain(64, n, k, scale="tensor")
