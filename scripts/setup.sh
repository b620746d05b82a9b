#!/usr/bin/env bash
# Installs everything fp8route needs to build and test, idempotently, on a fresh Debian 12 machine
# with the CUDA 13 toolkit (nvcc on PATH or in /usr/local/cuda/bin).
#   Debian packages (apt-get): cmake, ninja-build, g++, libgtest-dev, nlohmann-json3-dev, libcli11-dev,
#                              zlib1g-dev (fp8route table build reads gzip-compressed run records),
#                              python3-venv; clang and libclang-rt-14-dev (libFuzzer, for scripts/fuzz.sh)
#   Python packages (pip, into $FP8ROUTE_VENV, default build/venv): nvidia-cutlass (CUTLASS headers),
#   apache-tvm-ffi, pytest, numpy (the Python package's native module and its tests)
# Re-running is cheap: packages already present are not fetched again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FP8ROUTE_VENV:-$root/build/venv}"
cutlass_version="4.2.0.0"

apt_packages=(cmake ninja-build g++ libgtest-dev nlohmann-json3-dev libcli11-dev zlib1g-dev clang libclang-rt-14-dev)
# Debian's own python3 needs python3-venv for "python3 -m venv"; other Pythons (pyenv) carry venv.
"${FP8ROUTE_PYTHON:-python3}" -c "import venv, ensurepip" 2>/dev/null || apt_packages+=(python3-venv)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] apt-get install ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  else
    echo "[setup] error: nvcc (CUDA toolkit 13) not found on PATH or in /usr/local/cuda/bin" >&2
    exit 1
  fi
fi

py="${FP8ROUTE_PYTHON:-python3}"
tvm_ffi_version=0.1.15.post2
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating virtual environment $venv"
  "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import importlib.metadata as m,sys; sys.exit(m.version('nvidia-cutlass')!='$cutlass_version')" 2>/dev/null; then
  # --no-deps: only the C++ headers inside the wheel are used; its Python deps (cuda-python, scipy,
  # ...) serve CUTLASS's Python generator, which fp8route does not run.
  echo "[setup] pip install nvidia-cutlass==$cutlass_version"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "nvidia-cutlass==$cutlass_version"
fi
# The Python package's build and tests: apache-tvm-ffi (the native module's ABI), pytest, numpy.
if ! "$venv/bin/python" -c "import importlib.metadata as m,sys; sys.exit(m.version('apache-tvm-ffi')!='$tvm_ffi_version')" 2>/dev/null \
   || ! "$venv/bin/python" -c "import pytest, numpy" 2>/dev/null; then
  echo "[setup] pip install apache-tvm-ffi==$tvm_ffi_version pytest numpy"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "apache-tvm-ffi==$tvm_ffi_version" pytest numpy
fi
echo "[setup] ok: $(nvcc --version | tail -1), venv $venv"
