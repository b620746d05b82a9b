"""Loads the native module (_fp8route_ffi.so, the C++ library exported through apache-tvm-ffi)."""
import os

import tvm_ffi

_HERE = os.path.dirname(os.path.abspath(__file__))


def _find():
    env = os.environ.get("FP8ROUTE_FFI_LIB")
    if env:
        return env
    for cand in (os.path.join(_HERE, "_fp8route_ffi.so"),):
        if os.path.exists(cand):
            return cand
    # A source checkout: the module built by CMake next to the package sources.
    root = os.path.dirname(os.path.dirname(_HERE))
    preset = os.environ.get("FP8ROUTE_PRESET", "release")
    cand = os.path.join(root, "build", preset, "python", "fp8route", "_fp8route_ffi.so")
    if os.path.exists(cand):
        return cand
    raise ImportError(
        "fp8route: native module _fp8route_ffi.so not found (pip install . builds it; in a source tree, "
        "scripts/build.sh builds build/release/python/fp8route/_fp8route_ffi.so; FP8ROUTE_FFI_LIB names one)")


lib = tvm_ffi.load_module(_find())
