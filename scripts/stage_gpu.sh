#!/usr/bin/env bash
# Copies built binaries of build/release into build/gpu, small enough to carry to the GPU machine
# (the whole build tree, CUTLASS objects included, is not; the carry limit is 64 MiB with the tree).
# FP8ROUTE_STAGE picks what (default "tools tests python data"):
#   tools    fp8route, gemm_bench, quant_bench, cublaslt_prefs (FP8ROUTE_STAGE_TOOLS="fp8route" picks some)
#   tests    the GoogleTest binaries (FP8ROUTE_STAGE_TESTS="test_gemm test_linear" picks some)
#   python   the Python package's native module and a tvm-ffi wheel for the GPU machine's Python 3.12
#            (it has no registry; run_tests_direct.sh installs the wheel into build/gpu/pylib there)
#   data     routes/h200.json and shapes/models.json beside the tools (5.5 MB), where a binary run
#            without FP8ROUTE_SOURCE_DIR finds them (src/route/data_files.h)
# With the shared library (-DFP8ROUTE_SHARED=ON, off by default) everything staged is small; with
# the default static build each binary carries the whole library (~5-6 MB stripped) and a call may
# need to stage only some parts (all of it, 62 MiB, plus the tree is over the 64 MiB carry limit).
# There: FP8ROUTE_PRESET=gpu scripts/gpu_check.sh (or scripts/run_tests_direct.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/build/${FP8ROUTE_PRESET:-release}"
dst="$root/build/gpu"
what="${FP8ROUTE_STAGE:-tools tests python data}"
rm -rf "$dst"
mkdir -p "$dst/tests"
# The shared library (-DFP8ROUTE_SHARED=ON): the binaries find it through $ORIGIN-relative
# paths, so it goes where it sits in the build tree, next to the tool.
if [ -f "$src/libfp8route.so" ]; then cp "$src/libfp8route.so" "$dst/"; strip "$dst/libfp8route.so"; fi
for part in $what; do
  case "$part" in
    tools)
      for b in ${FP8ROUTE_STAGE_TOOLS:-fp8route gemm_bench quant_bench cublaslt_prefs}; do cp "$src/$b" "$dst/"; strip "$dst/$b"; done ;;
    tests)
      for t in ${FP8ROUTE_STAGE_TESTS:-$(cd "$src/tests" && ls test_* | grep -v '\.xml$')}; do
        cp "$src/tests/$t" "$dst/tests/"; strip "$dst/tests/$t"
      done ;;
    python)
      if [ -f "$src/python/fp8route/_fp8route_ffi.so" ]; then
        mkdir -p "$dst/python/fp8route" "$root/build/wheels"
        cp "$src/python/fp8route/_fp8route_ffi.so" "$dst/python/fp8route/"
        strip "$dst/python/fp8route/_fp8route_ffi.so"
        ls "$root"/build/wheels/apache_tvm_ffi-*cp312*.whl >/dev/null 2>&1 || "$root/build/venv/bin/python" -m pip \
          download -q "apache-tvm-ffi==0.1.15.post2" --python-version 3.12 --only-binary=:all: \
          --platform manylinux_2_28_x86_64 --no-deps -d "$root/build/wheels"
        cp "$root"/build/wheels/apache_tvm_ffi-*cp312*.whl "$dst/python/"
      else
        echo "stage_gpu: no Python module in $src/python/fp8route (tvm_ffi missing from the venv?)" >&2
      fi ;;
    data)
      mkdir -p "$dst/routes" "$dst/shapes"
      cp "$root/routes/h200.json" "$dst/routes/"
      for g in "$root"/routes/*-grouped.json; do [ -f "$g" ] && cp "$g" "$dst/routes/"; done
      cp "$root/shapes/models.json" "$dst/shapes/" ;;
    *) echo "stage_gpu: unknown part '$part' (tools, tests, python, data)" >&2; exit 2 ;;
  esac
done
du -sh "$dst"
# What a call carrying build/gpu sends: the working tree (tracked and untracked files git does not
# ignore) plus build/gpu, against the device tool's 64 MiB limit.
tree=$(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
# FP8ROUTE_STAGE_PACK=FILE (a path inside the repository that git ignores) packs build/gpu into one
# xz archive (about a tenth of its size: the CUDA binaries compress well); carry FILE and unpack it
# there first with `mkdir -p build && tar xJf FILE -C build`.
if [ -n "${FP8ROUTE_STAGE_PACK:-}" ]; then
  mkdir -p "$(dirname "$FP8ROUTE_STAGE_PACK")"
  tar cf - -C "$root/build" gpu | xz -T2 -9 > "$FP8ROUTE_STAGE_PACK"
  staged=$(stat -c %s "$FP8ROUTE_STAGE_PACK")
  what="$FP8ROUTE_STAGE_PACK"
else
  staged=$(du -sb "$dst" | cut -f1)
  what="build/gpu"
fi
echo "stage_gpu: carry = tree $((tree >> 20)) MiB + $what $((staged >> 20)) MiB = $(((tree + staged) >> 20)) MiB (limit 64)"
[ $((tree + staged)) -lt $((64 << 20)) ] || echo "stage_gpu: over the carry limit: stage less (FP8ROUTE_STAGE, FP8ROUTE_STAGE_TESTS), pack it (FP8ROUTE_STAGE_PACK), or carry a part in a later call of the same warm machine" >&2
