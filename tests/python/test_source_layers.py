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
