"""Loads the native module (_fp8route_ffi.so, the C++ library exported through apache-tvm-ffi) and
registers its object type, LinearPlan."""
import os
from collections.abc import Mapping

import tvm_ffi

from . import _cuda_libs

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


_path = _find()
# cuBLASLt first, from wherever pip or the toolkit put it: the module names it only by soname
# (_cuda_libs.py); an ImportError here names the library and the fix.
_cuda_libs.load()
lib = tvm_ffi.load_module(_path)


@tvm_ffi.register_object("fp8route.LinearPlan")
class LinearPlan(tvm_ffi.Object):
    """A C++ LinearPlan (include/fp8route/linear.h), made by Fp8Linear: reference counted, freed on its
    GPU when the last holder drops it, and holding the weight, scale and bias tensors it reads.
    Read-only fields n, k, device, act, out_dtype; methods run(a, a_scale, out), route(m),
    explain(m), probe(m_grid, top, always)."""

    # Fp8Linear's op finds its plan through a weak reference (torch_ops.py).
    __slots__ = ("__weakref__",)

    def __reduce__(self):  # copy, deepcopy, pickle
        raise TypeError("LinearPlan: a plan is bound to the device memory of its weight and is not copied; "
                        "make a new Fp8Linear from the (copied) weight and scale instead")


def plain(value):
    """A result of the native module as plain Python data: tvm-ffi Maps as dicts, Arrays as lists."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, tvm_ffi.Array):
        return [plain(v) for v in value]
    return value
