"""The grouped routing table from Python without a GPU: fp8route.tune_grouped's workload (the routing
it draws), its catalog walk, the file it writes (read back by the library's own reader), merging a
run into an earlier file, its option errors; load_grouped_table, grouped_table_info and
explain_grouped; FP8ROUTE_GROUPED_TABLE in a fresh process."""
import json
import os
import subprocess
import sys

import pytest

import fp8route

torch = pytest.importorskip("torch")
from fp8route import tune_grouped as tg  # noqa: E402

ROOT = os.environ["FP8ROUTE_SOURCE_DIR"]
STAMP = {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.3.0",
         "date": "2026-12-05"}


def entry(form, scale, e, n, k, measured, source="test"):
    return dict(form=form, scale=scale, out="bf16", experts=e, n=n, k=k, source=source, measured=measured)


@pytest.mark.parametrize("experts,local,top_k,m_max", [(256, 32, 8, 1), (256, 32, 8, 64), (128, 128, 8, 5),
                                                        (8, 1, 2, 256), (8, 8, 2, 3)])
def test_masked_counts(experts, local, top_k, m_max):
    gen = torch.Generator().manual_seed(m_max)
    c = tg.masked_counts(experts, local, top_k, m_max, gen)
    assert c.dtype == torch.int32 and c.shape == (local,)
    assert int(c.min()) >= 0 and int(c.max()) <= m_max  # a token picks an expert at most once
    if local == experts:
        assert int(c.sum()) == m_max * top_k
    else:
        assert int(c.sum()) <= m_max * top_k


@pytest.mark.parametrize("experts,local,top_k,rows", [(256, 32, 8, 1), (256, 32, 8, 1000), (128, 128, 8, 7),
                                                      (8, 1, 2, 300), (8, 8, 2, 4096)])
def test_contiguous_counts(experts, local, top_k, rows):
    gen = torch.Generator().manual_seed(rows)
    c = tg.contiguous_counts(experts, local, top_k, rows, gen)
    assert c.dtype == torch.int32 and c.shape == (local,)
    assert int(c.sum()) == rows and int(c.min()) >= 0
    if local == 1:
        assert int(c[0]) == rows


@pytest.mark.parametrize("experts,local,top_k,m_max", [(128, 128, 8, 1), (128, 128, 8, 16), (256, 32, 8, 4),
                                                        (8, 8, 2, 64), (4, 4, 8, 3)])
def test_full_counts(experts, local, top_k, m_max):
    # The fullest experts a call can see: an expert-parallel rank's every expert; an unsplit layer's
    # top_k (its M_max tokens make M_max * top_k rows, at most M_max on one expert).
    c = tg.full_counts(experts, local, top_k, m_max, torch.Generator().manual_seed(3))
    assert c.shape == (local,) and c.dtype == torch.int32 and set(c.tolist()) <= {0, m_max}
    full = int((c == m_max).sum())
    assert full == (local if local < experts else min(top_k, local))
    assert int(c.sum()) <= (local * m_max if local < experts else m_max * top_k)


def test_routing_is_spread_uniformly():
    # 4096 tokens x top-8 over 128 experts: 256 rows an expert in expectation; none far from it.
    c = tg.masked_counts(128, 128, 8, 4096, torch.Generator().manual_seed(1))
    assert 150 < int(c.min()) and int(c.max()) < 370


def test_catalog_layers():
    with open(os.path.join(ROOT, "shapes", "models.json")) as f:
        catalog = json.load(f)
    got = list(tg.layers(catalog, ["deepseek-v3"]))
    assert ("deepseek-v3", 8, 256, 32, 8, "experts.gate_up_proj", 4096, 7168) in got
    assert ("deepseek-v3", 1, 256, 256, 8, "experts.down_proj", 7168, 2048) in got
    with pytest.raises(ValueError, match="not-a-model"):
        list(tg.layers(catalog, ["not-a-model"]))


def test_written_table_loads_in_the_library(tmp_path):
    path = str(tmp_path / "g.json")
    entries = [entry("masked", "block", 32, 4096, 7168, [[1, "decode", 10.5], [1, "wgmma", 12.25], [64, "wgmma", 40.0]]),
               entry("contiguous", "row", 8, 512, 256, [[4, "simt", 3.0], [4, "wgmma", 1.0]])]
    tg.write_table(path, STAMP, entries)
    fp8route.load_grouped_table(path)
    try:
        info = fp8route.grouped_table_info()
        assert info["path"] == path and info["entries"] == 2 and info["stamp"] == STAMP and info["load_error"] == ""
        text = fp8route.explain_grouped("masked", "block", 32, 1, 4096, 7168)
        assert "grouped table " + path in text and "exact" in text, text
        # Without a GPU no backend runs: the table's candidates say why, and the rule decides.
        assert "decode 10.5 us" in text, text
        text = fp8route.explain_grouped("contiguous", "row", 8, 3, 512, 256)
        assert "at measured rows 4" in text, text
        assert "wgmma 1 us" in text and "simt 3 us" in text, text  # fastest first
    finally:
        fp8route.load_grouped_table("")
    assert fp8route.grouped_table_info()["path"] == ""
    assert "the rule decides" in fp8route.explain_grouped("masked", "block", 32, 1, 4096, 7168)


def test_merge_replaces_entries_measured_again():
    a = entry("masked", "block", 32, 4096, 7168, [[1, "decode", 1.0]])
    b = entry("masked", "row", 32, 4096, 7168, [[1, "decode", 2.0]])
    a2 = entry("masked", "block", 32, 4096, 7168, [[1, "wgmma", 3.0]])
    c = entry("contiguous", "block", 32, 4096, 7168, [[1, "wgmma", 4.0]])
    assert tg.merge([a, b], [a2, c]) == [a2, b, c]


def test_bad_tables_and_options(tmp_path):
    with pytest.raises(ValueError, match="grouped routing table"):
        fp8route.load_grouped_table(str(tmp_path / "absent.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "fp8route-grouped-table", "version": 2}')
    with pytest.raises(ValueError, match="version"):
        fp8route.load_grouped_table(str(bad))
    with pytest.raises(ValueError, match="experts, rows, n, k"):
        fp8route.explain_grouped("masked", "block", 0, 1, 1, 1)
    with pytest.raises(ValueError, match="form"):
        fp8route.explain_grouped("ragged", "block", 1, 1, 1, 1)
    out = str(tmp_path / "t.json")
    for argv, message in [(["--forms", "ragged"], "--forms"), (["--masked-rows", "0"], "--masked-rows"),
                          (["--contiguous-rows", "x"], "--contiguous-rows"), (["--models", "nope"], "nope"),
                          (["--sets-max", "0"], "--sets-max")]:
        with pytest.raises(SystemExit, match=message):
            tg.main(["--out", out, "--dry-run"] + argv)
    (tmp_path / "other.json").write_text('{"format": "x"}')
    with pytest.raises(ValueError, match="not a fp8route-grouped-table"):
        tg.read_table(str(tmp_path / "other.json"))


def test_dry_run_lists_every_entry(capsys):
    assert tg.main(["--out", "/nonexistent/x.json", "--dry-run", "--models", "qwen3-30b-a3b,mixtral-8x7b"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # qwen3-30b-a3b (ep 1) and mixtral-8x7b (ep 1, 8): 3 (model, ep) x 2 layers x 2 forms x 3 scales.
    assert len(lines) == 36, lines
    assert any(line.startswith("masked block e=1 n=28672 k=4096 (mixtral-8x7b ep8") for line in lines), lines


def test_grouped_table_env_in_a_fresh_process(tmp_path):
    good, bad = str(tmp_path / "good.json"), str(tmp_path / "bad.json")
    tg.write_table(good, STAMP, [entry("masked", "row", 8, 512, 256, [[4, "simt", 3.0]])])
    with open(bad, "w") as f:
        f.write("{")
    code = "import json, fp8route; print(json.dumps(fp8route.grouped_table_info()))"
    for path, entries, error in [(good, 1, ""), (bad, 0, "grouped routing table " + bad)]:
        env = {**os.environ, "FP8ROUTE_GROUPED_TABLE": path,
               "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")])}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        info = json.loads(r.stdout)
        assert info["entries"] == entries and error in info["load_error"], info


def test_main_measures_writes_and_resumes(tmp_path, monkeypatch, capsys):
    # The measuring loop without a GPU: measure_point and weights replaced by fakes, the rest as it runs.
    calls = []

    def fake_point(form, scale, e_global, local, top_k, n, k, rows, backends, gen, b, sb, sets_max, full=False):
        calls.append((form, scale, local, n, k, rows) + (("full",) if full else ()))
        if full:  # every expert full: decode 1.8x behind wgmma at 8 rows (left out), 1.2x at 1 (kept at 0.2)
            return {"wgmma": 5.0, "decode": 6.0 if rows == 1 else 9.0}, {}, float(rows)
        return {"wgmma": 5.0, "decode": 1.0 + rows}, {"cutlass": "cannot run"}, 1.5

    monkeypatch.setattr(tg, "measure_point", fake_point)
    monkeypatch.setattr(tg, "weights", lambda scale, e, n, k: (None, None))
    monkeypatch.setattr(tg, "_built_backends", lambda: {"simt", "decode", "wgmma", "cutlass"})
    monkeypatch.setattr(tg, "_machine_stamp", lambda: dict(STAMP))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    out = str(tmp_path / "g.json")
    args = ["--out", out, "--models", "qwen3-30b-a3b", "--scales", "row", "--masked-rows", "1,8",
            "--contiguous-rows", "4"]
    assert tg.main(args + ["--forms", "masked", "--full-margin", "none"]) == 0
    assert len(calls) == 4  # gate_up and down, 2 rows each
    assert "not run (cannot run)" in capsys.readouterr().err
    table = tg.read_table(out)
    assert [e["measured"] for e in table["entries"]][0] == [[1, "decode", 2.0], [1, "wgmma", 5.0],
                                                            [8, "wgmma", 5.0], [8, "decode", 9.0]]
    # By default each masked point is timed again with every expert full, and a backend more than
    # --full-margin behind the fastest there is left out of the entry.
    calls.clear()
    assert tg.main(args + ["--forms", "masked", "--full-margin", "0.25"]) == 0
    assert len(calls) == 8 and sum(c[-1] == "full" for c in calls) == 4
    assert "decode left out (over the margin when full)" in capsys.readouterr().err
    table = tg.read_table(out)
    assert [e["measured"] for e in table["entries"]][0] == [[1, "decode", 2.0], [1, "wgmma", 5.0], [8, "wgmma", 5.0]]
    assert tg.robust({"a": 1.0, "b": 2.0}, {"a": 1.3, "b": 1.0}, 0.25) == {"b": 2.0}
    assert tg.robust({"a": 1.0, "b": 2.0}, {}, 0.0) == {"a": 1.0, "b": 2.0}
    # The library reads what the tune wrote and routes by it.
    fp8route.load_grouped_table(out)
    try:
        text = fp8route.explain_grouped("masked", "row", 128, 5, 1536, 2048)
        assert "interpolated between measured rows 1 and 8: wgmma 5 us" in text and "qwen3-30b-a3b ep1" in text, text
    finally:
        fp8route.load_grouped_table("")
    # --resume measures only the entries the file lacks; a second form adds entries, keeps the first.
    calls.clear()
    assert tg.main(args + ["--resume"]) == 0
    assert {c[0] for c in calls} == {"contiguous"} and len(calls) == 2
    assert len(tg.read_table(out)["entries"]) == 4
    with pytest.raises(SystemExit, match="--backends"):
        tg.main(args + ["--backends", "nope"])
    for bad in ("-0.1", "nan", "inf", "x"):
        with pytest.raises(SystemExit, match="--full-margin"):
            tg.main(args + ["--full-margin", bad])
    monkeypatch.setattr(tg, "_machine_stamp", lambda: dict(STAMP, gpu="NVIDIA H100 80GB HBM3"))
    with pytest.raises(SystemExit, match="measured on NVIDIA H200"):
        tg.main(args)
