"""The library's layers, as docs/design.md draws them, checked on the source tree (CPU only):
core at the bottom; quantization, attention, the reference and the GEMM backends above it; timing
above the backends; routing (tables, the router, probing, the routed call, LinearPlan) on top. A
layer includes only the layers below it."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")

# Which src/ folders each folder's files may include (besides its own and the public headers).
MAY_INCLUDE = {
    "core": set(),
    "reference": {"core"},
    "quant": {"core"},
    "attention": {"core", "quant"},
    "gemm": {"core"},
    "moe": {"core", "gemm", "reference", "quant"},
    "timing": {"core", "gemm"},
    "route": {"core", "gemm", "timing", "quant"},
}


def test_each_layer_includes_only_the_layers_below():
    bad = []
    for folder in sorted(os.listdir(SRC)):
        top = os.path.join(SRC, folder)
        if not os.path.isdir(top):
            continue
        assert folder in MAY_INCLUDE, f"src/{folder} is not a known layer: add it to MAY_INCLUDE and docs/design.md"
        for dirpath, _, names in os.walk(top):
            for n in names:
                path = os.path.join(dirpath, n)
                for inc in re.findall(r'^#include "([a-z_]+)/', open(path, errors="replace").read(), re.M):
                    if inc in ("fp8route", folder) or inc in MAY_INCLUDE[folder]:
                        continue
                    if inc in MAY_INCLUDE:
                        bad.append(f"{os.path.relpath(path, ROOT)} includes {inc}/")
    assert not bad, "\n".join(bad)


def test_programs_outside_the_library_use_its_headers_only():
    """The CLI, the benchmarks and the Python bindings reach the library through include/fp8route
    (the tuning tier include/fp8route/tuning among it), never through src/: no src/ folder is on
    their include path, and none of their files names one."""
    bad = []
    for top in ("tools", "bench", os.path.join("python", "src")):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            if "results" in dirpath.split(os.sep):
                continue
            for n in names:
                if not n.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, n)
                for inc in re.findall(r'^#include "([a-z_]+)/', open(path, errors="replace").read(), re.M):
                    if inc in MAY_INCLUDE:
                        bad.append(f"{os.path.relpath(path, ROOT)} includes src/{inc}/")
    assert not bad, "\n".join(bad)
    cmake = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    for target in ("fp8route_toolkit", "fp8route_cli", "quant_bench", "gemm_bench", "fp8route_ffi", "probe_dump"):
        for m in re.finditer(r"target_include_directories\(" + target + r"\b([^)]*)\)", cmake):
            assert "/src" not in m.group(1), f"{target} has src/ on its include path"
