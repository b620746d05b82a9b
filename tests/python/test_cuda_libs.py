"""Finding cuBLASLt before the native module loads (python/fp8route/_cuda_libs.py), CPU only, with
fake folders and fake libraries: the search order (the NVIDIA CUDA 13 wheels, the older NVIDIA
layout, torch/lib, $CUDA_HOME, then the system loader), that a loaded copy satisfies a library that
names it only by soname, that a broken copy is passed over, the ImportError naming the library and
the fix when it is nowhere, and the console script's LD_LIBRARY_PATH. Loading runs in subprocesses:
a fake libcublasLt.so.13 must never enter the process that later loads the real native module."""
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "python", "fp8route", "_cuda_libs.py")
NAME = "libcublasLt.so.13"


def cuda_libs():
    """_cuda_libs.py loaded on its own (importing fp8route would load the native module)."""
    spec = importlib.util.spec_from_file_location("fp8route_cuda_libs_under_test", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def touch(path, text="not a library"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_search_order():
    libs = cuda_libs()
    sites = [os.path.join(ROOT, "python"), os.path.join(ROOT, "tests")]  # two folders that exist
    got = libs.candidates(search_path=sites, environ={"CUDA_HOME": "/opt/cuda", "CUDA_PATH": "/opt/cuda2"})
    want = ([os.path.join(s, "nvidia", "cu13", "lib") for s in sites]
            + [os.path.join(s, "nvidia", "cublas", "lib") for s in sites]
            + [os.path.join(s, "torch", "lib") for s in sites]
            + ["/opt/cuda/lib64", "/opt/cuda/lib", "/opt/cuda2/lib64", "/opt/cuda2/lib"])
    assert [folder for _, folder in got] == want


def test_find_dir_takes_the_first_place_that_has_it(tmp_path):
    libs = cuda_libs()
    site_a, site_b, home = (str(tmp_path / n) for n in ("a", "b", "cuda"))
    for d in (site_a, site_b, home):
        os.makedirs(d)
    env = {"CUDA_HOME": home}
    sites = [site_a, site_b]
    assert libs.find_dir(search_path=sites, environ=env) is None
    touch(os.path.join(home, "lib64", NAME))
    assert libs.find_dir(search_path=sites, environ=env) == os.path.join(home, "lib64")
    touch(os.path.join(site_a, "torch", "lib", NAME))
    assert libs.find_dir(search_path=sites, environ=env) == os.path.join(site_a, "torch", "lib")
    touch(os.path.join(site_a, "nvidia", "cublas", "lib", NAME))
    assert libs.find_dir(search_path=sites, environ=env) == os.path.join(site_a, "nvidia", "cublas", "lib")
    # The CUDA 13 wheels' layout wins over the older one whichever site folder holds it.
    touch(os.path.join(site_b, "nvidia", "cu13", "lib", NAME))
    assert libs.find_dir(search_path=sites, environ=env) == os.path.join(site_b, "nvidia", "cu13", "lib")


def test_library_path_with_puts_the_folder_first_once():
    libs = cuda_libs()
    assert libs.library_path_with("/x", {}) == "/x"
    assert libs.library_path_with("/x", {"LD_LIBRARY_PATH": "/a:/x::/b"}) == "/x:/a:/b"


def run_python(code, env=None):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_nowhere_is_an_import_error_naming_the_library_and_the_fix(tmp_path):
    # A soname nobody has, so that the system loader (which finds the real cuBLASLt on a machine
    # with the toolkit) fails too.
    missing = "libfp8route_test_missing.so.13"
    out = run_python(f"""
        import importlib.util, json
        spec = importlib.util.spec_from_file_location("m", {MODULE!r})
        m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
        try:
            m.load({missing!r}, search_path=[{str(tmp_path)!r}], environ={{"CUDA_HOME": {str(tmp_path / "cuda")!r}}})
        except ImportError as e:
            print(json.dumps(str(e)))
        else:
            print(json.dumps("loaded"))
    """)
    msg = json.loads(out)
    assert msg.startswith(f"fp8route: {missing} (cuBLASLt, CUDA 13) was not found"), msg
    assert "pip install nvidia-cublas" in msg and "CUDA 13 toolkit" in msg, msg
    assert os.path.join(str(tmp_path), "nvidia", "cu13", "lib") in msg, msg
    assert os.path.join(str(tmp_path / "cuda"), "lib64") in msg and "system loader" in msg, msg


@pytest.fixture(scope="module")
def fake_libs(tmp_path_factory):
    """A fake libcublasLt.so.13 (soname libcublasLt.so.13) and libuser.so, which needs it by soname
    only (no run path), as the native module does; built with the C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the fake libraries")
    d = tmp_path_factory.mktemp("fake")
    (d / "lt.c").write_text("int cublasLtGetVersion(void) { return 130100; }\n")
    (d / "user.c").write_text("int cublasLtGetVersion(void);\nint user_version(void) { return cublasLtGetVersion(); }\n")
    lt = d / NAME
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname," + NAME, "-o", str(lt), str(d / "lt.c")], check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libuser.so"), str(d / "user.c"), str(lt)], check=True)
    return d


LOAD_THEN_USER = """
    import ctypes, importlib.util, json, os
    spec = importlib.util.spec_from_file_location("m", {module!r})
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    got = m.load(search_path={sites!r}, environ={{}})
    user = ctypes.CDLL({user!r})
    print(json.dumps([got, user.user_version()]))
"""


def test_loaded_copy_satisfies_a_library_that_names_it_by_soname(tmp_path, fake_libs):
    site = tmp_path / "site"
    lib = site / "nvidia" / "cu13" / "lib" / NAME
    os.makedirs(lib.parent)
    shutil.copy2(fake_libs / NAME, lib)
    # The copy found is the one libuser.so binds to, even where the system loader has another
    # (this machine's toolkit in ld.so.conf, say).
    out = run_python(LOAD_THEN_USER.format(module=MODULE, sites=[str(site)], user=str(fake_libs / "libuser.so")),
                     {"LD_LIBRARY_PATH": ""})
    got, version = json.loads(out)
    assert got == str(lib) and version == 130100


def test_a_broken_copy_is_passed_over(tmp_path, fake_libs):
    site = tmp_path / "site"
    touch(str(site / "nvidia" / "cu13" / "lib" / NAME), "garbage, not an ELF file")
    good = site / "nvidia" / "cublas" / "lib" / NAME
    os.makedirs(good.parent)
    shutil.copy2(fake_libs / NAME, good)
    out = run_python(LOAD_THEN_USER.format(module=MODULE, sites=[str(site)], user=str(fake_libs / "libuser.so")),
                     {"LD_LIBRARY_PATH": ""})
    got, version = json.loads(out)
    assert got == str(good) and version == 130100


def test_console_script_puts_the_found_folder_on_ld_library_path(tmp_path):
    pkg = tmp_path / "site" / "fp8route"
    os.makedirs(pkg / "bin")
    for name in ("_cli.py", "_cuda_libs.py"):
        shutil.copy2(os.path.join(ROOT, "python", "fp8route", name), pkg / name)
    tool = pkg / "bin" / "fp8route"
    tool.write_text('#!/bin/sh\necho "$LD_LIBRARY_PATH"\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    nvidia = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env.update(PYTHONPATH=str(tmp_path / "site"), LD_LIBRARY_PATH="/elsewhere")
    # -S: no site-packages, so that NVIDIA wheels installed beside this Python are not found.
    run = lambda: subprocess.run([sys.executable, "-S", str(pkg / "_cli.py")], capture_output=True, text=True,
                                 env=env, timeout=60)
    r = run()
    assert r.returncode == 0 and r.stdout.strip() == "/elsewhere", r.stdout + r.stderr  # nothing found: unchanged
    touch(str(nvidia / NAME))
    r = run()
    assert r.returncode == 0 and r.stdout.strip() == f"{nvidia}:/elsewhere", r.stdout + r.stderr
