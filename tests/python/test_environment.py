"""Every environment variable the product reads is read in one place and documented: C++ reads go
through fp8route::env (src/core/env.cpp lists them), the Python package's are listed there too, and
docs/environment.md has the same rows. CPU only: it reads the source tree."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRODUCT = ["src", "tools", "bench", os.path.join("python", "src"), os.path.join("python", "fp8route")]


def _files(exts):
    for top in PRODUCT:
        for folder, _, names in os.walk(os.path.join(ROOT, top)):
            if "results" in folder.split(os.sep):
                continue
            for n in names:
                if n.endswith(exts):
                    yield os.path.join(folder, n)


def listed():
    text = open(os.path.join(ROOT, "src", "core", "env.cpp")).read()
    return dict(re.findall(r'\{"([A-Z_0-9]+)", "(library|cli|python)"', text))


def test_cpp_reads_go_through_env():
    names = set(listed())
    for path in _files((".cpp", ".cu", ".h", ".cuh")):
        rel = os.path.relpath(path, ROOT)
        text = open(path, errors="replace").read()
        if not rel.startswith(os.path.join("src", "core", "env")):
            assert "getenv(" not in text, f"{rel} calls getenv: read through fp8route::env (fp8route/tuning/env.h)"
        for name in re.findall(r'env::(?:get|seconds)\("([A-Z_0-9]+)"', text):
            assert name in names, f"{rel} reads {name}, which src/core/env.cpp does not list"


def test_python_reads_are_listed():
    names = listed()
    for path in _files((".py",)):
        text = open(path).read()
        for name in re.findall(r'environ(?:\.get\(|\[)\s*"([A-Z_0-9]+)"', text):
            if name.startswith("FP8ROUTE_"):
                assert name in names, f"{os.path.relpath(path, ROOT)} reads {name}, not listed in src/core/env.cpp"


def test_docs_list_every_variable():
    doc = open(os.path.join(ROOT, "docs", "environment.md")).read()
    rows = dict(re.findall(r"^\| `([A-Z_0-9]+)` \| ([a-z, ]+) \|", doc, re.M))
    for name, reader in listed().items():
        assert name in rows, f"docs/environment.md lacks {name}"
        assert reader in rows[name], f"docs/environment.md: {name} is read by {reader}"
    assert set(rows) == set(listed()), set(rows) ^ set(listed())
