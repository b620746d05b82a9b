"""The tree's boundaries (CPU, no build needed).

- bench/results/ is an archive of recorded runs: no build file, test, script, tool or library code
  reads it. Comments may link a measurement there (the reason behind a rule); code and data may not
  name a path into it.
- The shipped routing table's sources live beside it: every file routes/h200.sources.json lists is
  under routes/, and every file under routes/h200-sources/ is listed.
- The models package imports module by module, and its public names are importable from
  fp8route.models and fp8route.models.llama alike (needs torch; skipped without it).
"""
import ast
import importlib
import json
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARCHIVE = "bench/results"
SELF = "tests/python/test_layout.py"

# What the build, the tests and the product are made of.
SCANNED_DIRS = ("tests", "scripts", "tools", "python", "src", "include", "cmake", "fuzz", "examples", ".ci")
SCANNED_FILES = ("CMakeLists.txt", "CMakePresets.json", "routes/h200.sources.json")

_SLASH_COMMENT = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".def")
_HASH_COMMENT = (".sh", ".cmake", ".in", ".dict", ".txt")
# A path into the archive spelled whole, or joined from its parts ("bench", "results").
_JOINED = re.compile(r"""["']bench["']\s*[,/+]\s*["']results["']""")


def _tracked(paths):
    out = subprocess.run(["git", "ls-files", "--", *paths], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # not a git checkout (an unpacked sdist): walk the folders instead
        found = []
        for p in paths:
            full = os.path.join(ROOT, p)
            if os.path.isfile(full):
                found.append(p)
            for d, _, files in os.walk(full):
                found += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
        return sorted(found)
    return out.stdout.split()


def _code_lines(path, text):
    """(line number, text) of each line with its comment removed; whole-comment lines dropped."""
    if path.endswith(_SLASH_COMMENT):
        marker = "//"
    elif path.endswith(_HASH_COMMENT) or os.path.basename(path) == "run" or text.startswith("#!"):
        marker = "#"
    else:  # data (JSON, JSONL, Markdown): every line counts
        marker = None
    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if marker and (stripped.startswith(marker) or stripped.startswith(("/*", "*"))):
            continue
        if marker:
            cut = line.find(marker)
            line = line[:cut] if cut >= 0 else line
        yield no, line


def _python_refs(text):
    """Line numbers where Python code names the archive: a string constant other than a docstring,
    or consecutive "bench", "results" arguments of a call (os.path.join)."""
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if ARCHIVE in node.value.replace("\\", "/"):
                hits.append(node.lineno)
        elif isinstance(node, ast.Call):
            words = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            if any(a == "bench" and b == "results" for a, b in zip(words, words[1:])):
                hits.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # pathlib: root / "bench" / "results"
            left = node.left.right if isinstance(node.left, ast.BinOp) else node.left
            if (isinstance(node.right, ast.Constant) and node.right.value == "results"
                    and isinstance(left, ast.Constant) and left.value == "bench"):
                hits.append(node.lineno)
    return hits


def test_no_build_test_or_tool_reads_bench_results():
    offending = []
    for rel in _tracked(list(SCANNED_DIRS) + list(SCANNED_FILES)):
        if rel == SELF:  # names the archive to look for it
            continue
        path = os.path.join(ROOT, rel)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary data
        if rel.endswith(".py"):
            lines = text.splitlines()
            offending += [f"{rel}:{no}: {lines[no - 1].strip()}" for no in _python_refs(text)]
            continue
        for no, line in _code_lines(rel, text):
            if ARCHIVE in line or _JOINED.search(line):
                offending.append(f"{rel}:{no}: {line.strip()}")
    assert not offending, "bench/results/ is an archive no build or test reads; named by:\n" + "\n".join(offending)


def _manifest():
    with open(os.path.join(ROOT, "routes", "h200.sources.json")) as f:
        return json.load(f)


def test_table_sources_are_under_routes():
    routes = os.path.join(ROOT, "routes")
    listed = [f for group in _manifest()["groups"] for f in group["files"]]
    assert listed
    for rel in listed:
        path = os.path.normpath(os.path.join(routes, rel))  # relative to the manifest's folder
        assert os.path.commonpath([path, routes]) == routes, f"{rel}: outside routes/"
        assert os.path.isfile(path), f"{rel}: listed in routes/h200.sources.json but missing"
    assert len(set(listed)) == len(listed), "a source listed twice"


def test_every_file_under_h200_sources_is_listed():
    routes = os.path.join(ROOT, "routes")
    listed = {os.path.normpath(os.path.join(routes, f)) for group in _manifest()["groups"] for f in group["files"]}
    present = {os.path.join(d, f) for d, _, files in os.walk(os.path.join(routes, "h200-sources")) for f in files}
    assert present == listed, f"unlisted: {sorted(present - listed)}"


def test_sdist_leaves_out_the_archive():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        skbuild = tomllib.load(f)["tool"]["scikit-build"]
    assert any(p.strip("/") == ARCHIVE for p in skbuild["sdist"]["exclude"])
    assert skbuild["wheel"]["packages"] == ["python/fp8route"]  # the wheel: the package and CMake's installs


MODEL_MODULES = ("config", "weights", "checkpoint", "sharding", "backends", "llama", "moe_config", "experts", "moe_ffn",
                 "moe_model")
PUBLIC = ("BACKENDS", "DecodeGraph", "LinearWeight", "LlamaConfig", "LlamaModel", "RankWeights", "SafetensorsState",
          "linear_from_state", "quantize", "random_state_dict", "rank_linear_shapes", "rope_inv_freq", "tp_shard")
# The MoE models' public names, each from its own module (llama.py does not re-export them).
MOE_PUBLIC = {"MoeConfig": "moe_config", "expert_map": "moe_config", "expert_range": "moe_config",
              "ExpertWeights": "experts", "MoeFfn": "moe_ffn", "MoeModel": "moe_model", "MoeRankWeights": "moe_model",
              "moe_block_from_state": "moe_model", "random_moe_block": "moe_model", "random_moe_state_dict": "moe_model"}


def test_models_modules_import():
    pytest.importorskip("torch", reason="torch is not installed (the models package needs it)")
    from models_import import import_models
    models = import_models()
    for name in MODEL_MODULES:
        importlib.import_module(f"{models.__name__}.{name}")
    weight_quant = importlib.import_module(models.__name__.rsplit(".", 1)[0] + ".weight_quant")
    assert callable(weight_quant.quantize_weight)
    for name in PUBLIC:
        assert getattr(models, name) is getattr(models.llama, name), name
    for name, module in MOE_PUBLIC.items():
        assert getattr(models, name) is getattr(getattr(models, module), name), name
    assert sorted(models.__all__) == sorted(PUBLIC + tuple(MOE_PUBLIC))
