"""The wheel's `fp8route` command: runs the command-line tool built into the package
(fp8route/bin/fp8route) with the arguments given; its exit status is the command's.

The tool finds the routing table and the model catalog the wheel ships (fp8route/routes,
fp8route/shapes) through FP8ROUTE_DATA_DIR, set to the package unless already set, and cuBLASLt
through LD_LIBRARY_PATH, with the folder _cuda_libs.find_dir() finds (the NVIDIA wheels, torch,
$CUDA_HOME) put first; where none of them has it the system loader looks as usual.
"""
import os
import sys

try:
    from . import _cuda_libs
except ImportError:  # run as a file (python .../fp8route/_cli.py): its folder is sys.path[0]
    import _cuda_libs


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    exe = os.path.join(here, "bin", "fp8route")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        sys.stderr.write(
            f"fp8route: the command-line tool is not in this installation ({exe} is missing or not "
            "executable). The wheel built by `pip install .` carries it; a source checkout has it in "
            "build/release/fp8route after scripts/build.sh.\n")
        return 127
    env = dict(os.environ)
    if not env.get("FP8ROUTE_DATA_DIR"):
        env["FP8ROUTE_DATA_DIR"] = here
    cublas = _cuda_libs.find_dir(environ=env)
    if cublas:
        env["LD_LIBRARY_PATH"] = _cuda_libs.library_path_with(cublas, env)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # argv[0] "fp8route": the tool's usage line names the command run, not the package path.
        os.execve(exe, ["fp8route", *sys.argv[1:]], env)  # replaces this process: its status is ours
    except OSError as e:
        sys.stderr.write(f"fp8route: cannot run {exe}: {e}\n")
        return 126


if __name__ == "__main__":
    sys.exit(main())
