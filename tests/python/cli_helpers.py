"""Helpers of the tests that run the fp8route binary: where it is, an environment that names no
table or data folder, and a copy of it in another folder (a staged or installed layout)."""
import json
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli_path():
    for path in (os.environ.get("FP8ROUTE_CLI"), os.path.join(ROOT, "build", "release", "fp8route")):
        if path and os.access(path, os.X_OK):
            return os.path.abspath(path)
    pytest.skip("no fp8route binary built (set FP8ROUTE_CLI)")


def bare_env():
    """The environment without the variables that point at a table, a data folder or a source tree."""
    return {k: v for k, v in os.environ.items()
            if k not in ("FP8ROUTE_SOURCE_DIR", "FP8ROUTE_TABLE", "FP8ROUTE_DATA_DIR")}


def staged_copy(bin_dir):
    """The binary copied into bin_dir (with libfp8route.so when it was built shared)."""
    os.makedirs(bin_dir, exist_ok=True)
    src = cli_path()
    shutil.copy2(src, os.path.join(bin_dir, "fp8route"))
    lib = os.path.join(os.path.dirname(src), "libfp8route.so")
    if os.path.exists(lib):
        shutil.copy2(lib, bin_dir)
    return os.path.join(bin_dir, "fp8route")


def small_table(path, gpu="staged table"):
    """A valid table unlike the shipped one; its stamp's GPU name says which one was read."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"format": "fp8route-routing-table", "version": 1,
                   "stamp": {"gpu": gpu, "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.1.0",
                             "date": "2026-11-30"},
                   "entries": [{"scale": "row", "out": "bf16", "n": 4096, "k": 4096,
                                "breakpoints": [[4096, "cublaslt", "heuristic"]],
                                "measured": [[4096, "cublaslt", "heuristic", 100.0]]}]}, f)
    return path
