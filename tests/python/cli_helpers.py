"""Helpers of the tests that run the fp8route binary: where it is, an environment that names no
table or data folder, and a copy of it in another folder (a staged or installed layout)."""
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
