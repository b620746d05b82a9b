"""fp8route.models for the tests, with or without the native module. The model code needs only torch
(the "fp8route" backend and the fused attention load the library when they are used), so without a
built module the package's sources are imported under a stand-in parent package whose __init__,
which loads the library, does not run."""
import importlib
import os
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = "_fp8route_sources"  # the stand-in parent's name: never shadows a real fp8route


def import_models():
    """The fp8route.models package (torch must be importable)."""
    try:
        return importlib.import_module("fp8route.models")
    except ImportError:
        pass
    if SOURCES not in sys.modules:
        parent = types.ModuleType(SOURCES)
        parent.__path__ = [os.path.join(ROOT, "python", "fp8route")]
        sys.modules[SOURCES] = parent
    return importlib.import_module(SOURCES + ".models")
