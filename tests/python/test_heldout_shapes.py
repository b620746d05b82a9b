"""shapes/heldout.json, the held-out catalog of gemm_bench --autoprobe (docs/benchmarks.md): its
models are not in shapes/models.json, no (N, K) of theirs at any of its TP degrees has an entry in
the shipped routing table routes/h200.json (at any scale kind or out dtype), so that every shape
goes through the automatic probe; and every layer is what its model's config numbers give. CPU
only, no build needed."""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return json.load(f)


def _at_tp(layer, tp):
    """(n, k) of a layer on one of tp ranks (tools/common/shapes.h at_tp); None when not whole."""
    n, k = layer["n"], layer["k"]
    if layer["parallel"] == "column":
        return (n // tp, k) if n % tp == 0 else None
    if layer["parallel"] == "row":
        return (n, k // tp) if k % tp == 0 else None
    return (n, k)


def test_heldout_models_are_not_in_the_catalog():
    held, cat = _load("shapes", "heldout.json"), _load("shapes", "models.json")
    assert len(held["models"]) == 4
    assert not set(held["models"]) & set(cat["models"])


def test_no_heldout_shape_has_an_entry_in_the_shipped_table():
    held = _load("shapes", "heldout.json")
    table = {(e["n"], e["k"]) for e in _load("routes", "h200.json")["entries"]}
    assert len(table) > 50  # the table was read
    found = []
    for tp in held["tp"]:
        for model, layers in held["models"].items():
            for layer in layers:
                nk = _at_tp(layer, tp)
                assert nk is not None, (model, layer, tp)
                if nk in table:
                    found.append((model, layer["name"], tp, nk))
    assert not found, f"in routes/h200.json, so not probed: {found}"


def test_heldout_layers_follow_their_configs():
    held = _load("shapes", "heldout.json")
    for model, layers in held["models"].items():
        c = held["configs"][model]
        h, d = c["hidden_size"], c["head_dim"]
        q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
        ffn = c.get("intermediate_size", c.get("moe_intermediate_size"))
        expect = {"qkv_proj": (q + 2 * kv, h, "column"), "o_proj": (h, q, "row")}
        prefix = "expert_" if "moe_intermediate_size" in c else ""
        expect[prefix + "gate_up_proj"] = (2 * ffn, h, "column")
        expect[prefix + "down_proj"] = (h, ffn, "row")
        got = {l["name"]: (l["n"], l["k"], l["parallel"]) for l in layers}
        assert got == expect, model
        # The kv heads split whole at every TP degree of the catalog (one rank holds whole heads).
        for tp in held["tp"]:
            assert c["num_key_value_heads"] % tp == 0 and c["num_attention_heads"] % tp == 0, (model, tp)
