"""Finds the CUDA libraries the native module and the tool link dynamically (cuBLASLt 13) where pip
installs put them, before the native module loads.

The wheel carries no CUDA library: as torch's wheels do, it leaves cuBLASLt to NVIDIA's own package
(`nvidia-cublas`, which torch's CUDA 13 wheels install) or to the CUDA toolkit. The system loader
does not look inside site-packages, so without this step `import fp8route` would work only where
the toolkit's folder is in ld.so.conf or LD_LIBRARY_PATH. The CUDA runtime is linked statically and
libcuda.so.1 comes with the driver; neither is looked for here.

This file imports nothing from the package: the console script (_cli.py) uses it without loading
the native module, and the tests load it on its own.
"""
import ctypes
import os
import sys

CUBLASLT = "libcublasLt.so.13"

FIX = ("install cuBLASLt for CUDA 13: `pip install nvidia-cublas` (the package torch's CUDA 13 wheels "
       "depend on), or the CUDA 13 toolkit with its lib64 folder in LD_LIBRARY_PATH or ld.so.conf")


def _site_dirs(search_path):
    """The folders of `search_path` (default sys.path) that exist, in order, without repeats."""
    seen, out = set(), []
    for d in (sys.path if search_path is None else search_path):
        d = os.path.abspath(d or os.curdir)
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            out.append(d)
    return out


def _cuda_homes(environ):
    homes = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            homes.append((var, environ[var]))
    return homes


def candidates(name=CUBLASLT, search_path=None, environ=None):
    """Where `name` is looked for, in order, as (where, folder) pairs; the system loader comes after
    all of them (see load). First the NVIDIA wheels, the copy torch's own CUDA 13 wheels load (so
    that fp8route and torch share one cuBLASLt, whichever is imported first): nvidia/cu13/lib
    (the CUDA 13 wheels), then nvidia/cublas/lib (the older per-library layout); then torch/lib (a
    torch that bundles its CUDA libraries); then $CUDA_HOME and $CUDA_PATH (lib64, lib)."""
    environ = os.environ if environ is None else environ
    sites = _site_dirs(search_path)
    out = []
    for sub in (("nvidia", "cu13", "lib"), ("nvidia", "cublas", "lib"), ("torch", "lib")):
        for site in sites:
            out.append((os.path.join(*sub), os.path.join(site, *sub)))
    for var, home in _cuda_homes(environ):
        for lib in ("lib64", "lib"):
            out.append((f"${var}/{lib}", os.path.join(home, lib)))
    return out


def find_dir(name=CUBLASLT, search_path=None, environ=None):
    """The first folder of candidates() that holds `name`, or None (the system loader's folders,
    LD_LIBRARY_PATH and ld.so.cache, are not searched here: a process started from this one finds
    the library there by itself)."""
    for _, folder in candidates(name, search_path, environ):
        if os.path.isfile(os.path.join(folder, name)):
            return folder
    return None


def _already_loaded(name):
    """Whether a library of this soname is in the process already (torch imported first, say)."""
    try:
        ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        return True
    except OSError:
        return False


def load(name=CUBLASLT, search_path=None, environ=None):
    """Makes `name` part of the process, loaded with RTLD_GLOBAL, so that the native module's
    dependency on it is satisfied by soname whatever the loader's search path; returns its path
    (or the soname, when the system loader found it or it was loaded already). Raises ImportError
    naming the library, every place looked in and the fix when it is nowhere."""
    if _already_loaded(name):
        return name
    tried = []
    for _, folder in candidates(name, search_path, environ):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        try:
            ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
            return path
        except OSError as e:  # a broken or foreign copy: note it and try the next place
            tried.append(f"{path}: {e}")
    try:
        ctypes.CDLL(name, mode=os.RTLD_GLOBAL)  # LD_LIBRARY_PATH, ld.so.cache, the default folders
        return name
    except OSError as e:
        tried.append(f"system loader: {e}")
    looked = list(dict.fromkeys(folder for _, folder in candidates(name, search_path, environ)))
    raise ImportError(
        f"fp8route: {name} (cuBLASLt, CUDA 13) was not found; {FIX}. Looked in: "
        + (", ".join(looked) if looked else "no site-packages folder")
        + ", then the system loader" + ("; " + "; ".join(tried) if tried else ""))


def library_path_with(folder, environ=None):
    """LD_LIBRARY_PATH with `folder` first (for a process that must find the library by itself)."""
    environ = os.environ if environ is None else environ
    rest = [p for p in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *rest])
