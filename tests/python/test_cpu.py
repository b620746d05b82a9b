"""The Python package without a GPU (CI): module loading, the routing table, explain, the layout
function, and argument errors raised as ValueError with the C++ message."""
import json
import os

import numpy as np
import pytest

import fp8route

ROOT = os.environ["FP8ROUTE_SOURCE_DIR"]


def test_version_and_table():
    assert fp8route.__version__.count(".") == 2
    info = fp8route.table_info()
    assert info["load_error"] == ""
    assert info["entries"] > 100
    assert info["stamp"]["gpu"] == "NVIDIA H200"
    assert info["path"].endswith("h200.json")


def test_explain_names_source_and_choice():
    text = fp8route.explain(64, 4096, 14336, scale="row", out_dtype="bf16")
    assert "problem: row bf16 m=64 n=4096 k=14336" in text
    assert "source: exact" in text
    assert "choice: " in text
    # A shape no model has (and every fast backend can run, so a GPU does not change the source):
    # routed by the nearest entries.
    assert "source: nearest" in fp8route.explain(16, 5000, 3072, scale="row")
    with pytest.raises(ValueError, match="m, n, k"):
        fp8route.explain(0, 4096, 4096)
    with pytest.raises(ValueError, match="out_dtype"):
        fp8route.explain(1, 4096, 4096, out_dtype="f32")


def test_load_table_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="nonexistent.json"):
        fp8route.load_table(tmp_path / "nonexistent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "fp8route-routing-table", "version": 1')
    with pytest.raises(ValueError, match="bad.json"):
        fp8route.load_table(bad)
    assert fp8route.table_info()["load_error"] == ""  # the table in use stays
    fp8route.load_table(os.path.join(ROOT, "routes", "h200.json"))
    assert fp8route.table_info()["path"] == os.path.join(ROOT, "routes", "h200.json")


def test_save_table_with_timings(tmp_path):
    # Timings as Fp8Linear.probe returns them, for a shape no table has: saved with the table in use,
    # loaded back, the shape routes exactly by them.
    shipped = os.path.join(ROOT, "routes", "h200.json")
    fp8route.load_table(shipped)
    before = fp8route.table_info()["entries"]
    assert "source: nearest" in fp8route.explain(24, 3328, 2560, scale="row")
    timings = [
        {"m": m, "n": 3328, "k": 2560, "scale": "row", "out": "bf16", "backend": b, "config": c, "us": us}
        for m, b, c, us in [(1, "skinny", "m8_n32_k128x4_splitk", 6.8), (1, "cublaslt", "heuristic", 9.0),
                            (24, "cublaslt", "heuristic", 7.0),
                            (24, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab", 7.4)]]
    path = tmp_path / "probed.json"
    fp8route.save_table(path, timings)
    try:
        fp8route.load_table(path)
        assert fp8route.table_info()["entries"] == before + 1
        text = fp8route.explain(24, 3328, 2560, scale="row")
        assert "source: exact" in text and "choice: cublaslt/heuristic" in text, text
        assert "choice: skinny/m8_n32_k128x4_splitk" in fp8route.explain(1, 3328, 2560, scale="row")
    finally:
        fp8route.load_table(shipped)
    for bad, match in [([{"m": 1}], r"timings\[0\]: expected"), ([dict(timings[0], us=0)], r"us > 0"),
                       ([dict(timings[0], config="nope")], "no config 'nope'"),
                       ([dict(timings[0], scale="col")], "unknown scale kind")]:
        with pytest.raises(ValueError, match=match):
            fp8route.save_table(tmp_path / "bad.json", bad)
    with pytest.raises(ValueError, match="nonexistent_dir"):
        fp8route.save_table(tmp_path / "nonexistent_dir" / "t.json", timings)


@pytest.mark.parametrize("layout,tokens,want_s", [
    ("row_major", 5, [5, 4]), ("col_major", 5, [4, 5]), ("col_major_tma", 5, [4, 8])])
def test_quant_layout(layout, tokens, want_s):
    lay = fp8route.quant_layout(tokens, 512, group_size=128, layout=layout)
    assert lay == {"q": [tokens, 512], "s": want_s, "s_dtype": "f32"}
    packed = fp8route.quant_layout(3, 7168, rounding="pow2", storage="ue8m0_packed")
    assert packed["s"] == [3, 14] and packed["s_dtype"] == "i32"  # 56 groups, 4 bytes a word
    assert fp8route.quant_layout(4, 256, experts=2)["q"] == [2, 4, 256]


def test_quant_layout_errors():
    with pytest.raises(ValueError, match="group_size"):
        fp8route.quant_layout(4, 512, group_size=100)
    with pytest.raises(ValueError, match="128"):
        fp8route.quant_layout(4, 500, group_size=128)
    with pytest.raises(ValueError, match="pow2"):
        fp8route.quant_layout(4, 512, storage="ue8m0_packed")


def test_host_memory_is_refused_with_the_argument_named():
    a = np.zeros((4, 32), np.uint8)
    b = np.zeros((8, 32), np.uint8)
    one = np.ones(1, np.float32)
    out = np.zeros((4, 8), np.float16)
    with pytest.raises(ValueError, match="a: must be CUDA device memory"):
        fp8route.scaled_mm(a, b, one, one, out_dtype="f16", out=out)
    with pytest.raises(ValueError, match="dtype"):
        fp8route.scaled_mm(a, b, one, one, out_dtype="f16", out=np.zeros((4, 8), np.uint16))
    with pytest.raises(ValueError, match="out_dtype"):
        fp8route.scaled_mm(a, b, one, one, out_dtype="f32", out=out)
    x = np.zeros((4, 256), np.float32)
    with pytest.raises(ValueError, match="x: must be CUDA device memory"):
        fp8route.per_token_group_quant(x, out=(np.zeros((4, 256), np.uint8), np.zeros((4, 2), np.float32)))
    with pytest.raises(ValueError, match="out: required"):
        fp8route.per_token_group_quant(x)  # numpy in, no out=: fp8route allocates only with torch
    with pytest.raises(ValueError, match=r"x: expected \[T, H\]"):
        fp8route.per_token_quant(np.zeros(8, np.float32))


def test_moe_glue_refuses_host_memory_with_the_argument_named():
    # The MoE decode glue (docs/moe.md): argument errors without a GPU (torch not needed with out=).
    down, src2dst, w = np.zeros((16, 64), np.float16), np.zeros((2, 4), np.int32), np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="down_rows: must be CUDA device memory"):
        fp8route.moe_combine(down, src2dst, w, out=np.zeros((2, 64), np.float16))
    x = np.zeros((2, 64), np.float32)
    with pytest.raises(ValueError, match="x: must be CUDA device memory"):
        fp8route.scatter_per_token_quant(x, src2dst, 16, out=(np.zeros((16, 64), np.uint8), np.zeros(16, np.float32)))
    with pytest.raises(ValueError, match=r"x: expected \[T, H\]"):
        fp8route.scatter_per_token_quant(np.zeros(8, np.float32), src2dst, 16)
    with pytest.raises(ValueError, match="out: required"):
        fp8route.moe_softmax_topk(np.zeros((2, 8), np.float32), 2)  # numpy in: fp8route allocates only with torch
    with pytest.raises(ValueError, match="out: required"):
        fp8route.moe_masked_dispatch(src2dst, 8, 2)
    with pytest.raises(ValueError, match="out: required"):
        fp8route.moe_grouped_topk(np.zeros((2, 8), np.float32), 2, np.zeros(8, np.float32), 4, 2)


def test_explain_output_is_the_cli_format():
    text = fp8route.explain(1, 4096, 4096, scale="tensor")
    assert "measured candidates for tensor bf16 n=4096 k=4096" in text
    json.dumps(fp8route.table_info())  # plain data


def test_probe_arguments():
    # fp8route.probe: bad arguments are ValueErrors naming them; a grid whose every M has an exact
    # entry times nothing (no GPU needed); any M to time needs a GPU.
    for kwargs, match in [(dict(shapes=[(1536,)]), "shapes"), (dict(shapes=[(0, 5120)]), "shapes"),
                          (dict(shapes=[(1536, 5120)], scales="col"), "scale"),
                          (dict(shapes=[(1536, 5120)], m_grid=[0]), "m_grid"),
                          (dict(shapes=[(1536, 5120)], top=0), "top"),
                          (dict(shapes=[(1536, 5120)], out_dtype="f32"), "out_dtype"),
                          (dict(shapes=[]), "shapes")]:
        with pytest.raises(ValueError, match=match):
            fp8route.probe(**kwargs)
    fp8route.load_table(os.path.join(ROOT, "routes", "h200.json"))
    assert "source: exact" in fp8route.explain(64, 4096, 4096, scale="tensor")
    assert fp8route.probe([(4096, 4096)], scales="tensor", m_grid=[64]) == []
    if "no GPU here" in fp8route.explain(64, 1536, 5120, scale="tensor"):
        with pytest.raises(RuntimeError, match="needs a GPU"):
            fp8route.probe([(1536, 5120)], scales="tensor", m_grid=[64])


def test_integer_arguments_are_checked_at_full_width():
    # A group size that a 32-bit int would read as 128 (or as another valid size) is refused.
    for g in (2**32 + 128, 2**32 + 16, -(2**32) + 64, 2**62):
        with pytest.raises(ValueError, match="group_size"):
            fp8route.quant_layout(4, 512, group_size=g)
    x = np.zeros((4, 256), np.float32)
    out = (np.zeros((4, 256), np.uint8), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="group_size"):
        fp8route.per_token_group_quant(x, group_size=2**32 + 128, out=out)
    with pytest.raises(ValueError, match="group_size"):
        fp8route.scatter_per_token_group_quant(x, np.zeros((4, 2), np.int32), rows=8, group_size=2**32 + 128, out=out)
    # Sizes whose product passes 64 bits are refused too, not wrapped.
    with pytest.raises(ValueError, match="overflows"):
        fp8route.quant_layout(2**62, 1024)


def test_linear_plan_object():
    # fp8route.LinearPlan is the native module's registered object type: made by Fp8Linear (through
    # linear_plan_create, which checks its tensors), never by calling the class, never copied.
    import copy
    from fp8route._native import lib
    with pytest.raises(TypeError):
        fp8route.LinearPlan()
    with pytest.raises(TypeError, match="not copied"):
        copy.deepcopy(fp8route.LinearPlan.__new__(fp8route.LinearPlan))
    w, s = np.zeros((64, 128), np.uint8), np.ones(64, np.float32)
    with pytest.raises(ValueError, match="weight: must be CUDA device memory"):
        lib.linear_plan_create(w, s, "row", "bf16", None, "fast")
    with pytest.raises(ValueError, match="unknown scale kind"):
        lib.linear_plan_create(w, s, "col", "bf16", None, "fast")
