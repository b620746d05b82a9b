#!/usr/bin/env bash
# The installed package, as a project outside the tree uses it: installs a build tree into a scratch
# prefix (cmake --install --prefix), then
#   consumer  configures, builds and runs tests/consumer against it (find_package(fp8route), the
#             exported target's headers and link dependencies; the program loads the shipped table
#             from <prefix>/share/fp8route, named by FP8ROUTE_DATA_DIR, and routes a problem);
#   example   builds examples/cpp against it, and runs it (example-run) where there is an SM90 GPU;
#   cli       runs the installed <prefix>/bin/fp8route info, which must find <prefix>/share/fp8route
#             by itself.
# No GPU needed; well under a minute on two cores (the build tree is only installed, not built).
#   scripts/consumer_test.sh [--junit report.xml] [build tree]   (default build/$FP8ROUTE_PRESET, release)
#   FP8ROUTE_INSTALL_TEST_DIR  scratch folder (default build/install-test): prefix/ and consumer/ in it
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
junit=""
if [ "${1:-}" = "--junit" ]; then junit="$2"; shift 2; fi
build="$(cd "${1:-$root/build/${FP8ROUTE_PRESET:-release}}" && pwd)" || exit 2
work="${FP8ROUTE_INSTALL_TEST_DIR:-$root/build/install-test}"
rm -rf "$work"
mkdir -p "$work"
work="$(cd "$work" && pwd -P)"  # as the installed tool sees its own folder (/proc/self/exe)
prefix="$work/prefix"
export PATH="/usr/local/cuda/bin:$PATH"  # FindCUDAToolkit, in the package's find_dependency

rc=0
cases=""
step() {  # step NAME COMMAND...: runs it, its output to $work/NAME.log
  local name="$1"; shift
  local start took r
  start=$(date +%s)
  "$@" >"$work/$name.log" 2>&1
  r=$?
  took=$(($(date +%s) - start))
  if [ $r -eq 0 ]; then
    printf 'consumer %-8s ok      %3d s\n' "$name" "$took"
    cases+="<testcase classname=\"consumer\" name=\"$name\" time=\"$took\"/>"
  else
    rc=1
    printf 'consumer %-8s FAILED  %3d s (rc %d), log %s\n' "$name" "$took" "$r" "$work/$name.log"
    tail -15 "$work/$name.log"
    cases+="<testcase classname=\"consumer\" name=\"$name\" time=\"$took\"><failure message=\"rc $r: see $work/$name.log\"/></testcase>"
  fi
  return $r
}
skip() {
  printf 'consumer %-8s skipped (%s)\n' "$1" "$2"
  cases+="<testcase classname=\"consumer\" name=\"$1\"><skipped message=\"$2\"/></testcase>"
}

data="$prefix/share/fp8route"
if step install cmake --install "$build" --prefix "$prefix"; then
  step consumer bash -c '
    cmake -S "$1/tests/consumer" -B "$2/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$3" &&
    cmake --build "$2/consumer" &&
    FP8ROUTE_DATA_DIR="$4" "$2/consumer/consumer" "$4/routes/h200.json"' _ "$root" "$work" "$prefix" "$data"
  # examples/cpp, the README's C++ example as a program: built here; run where there is an SM90 GPU
  # (it exits 2 without one, counted as skipped).
  if step example bash -c '
    cmake -S "$1/examples/cpp" -B "$2/example" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$3" &&
    cmake --build "$2/example"' _ "$root" "$work" "$prefix"; then
    FP8ROUTE_DATA_DIR="$data" "$work/example/linear" 4 >"$work/example-run.log" 2>&1
    if [ $? -eq 2 ]; then
      skip example-run "$(head -1 "$work/example-run.log")"
    else
      step example-run env FP8ROUTE_DATA_DIR="$data" "$work/example/linear" 4
    fi
  fi
  if [ -x "$prefix/bin/fp8route" ]; then
    step cli bash -c '
      env -u FP8ROUTE_DATA_DIR -u FP8ROUTE_SOURCE_DIR -u FP8ROUTE_TABLE "$1/bin/fp8route" info | tee /dev/stderr |
        grep -qF "routing table: $1/share/fp8route/routes/h200.json: "' _ "$prefix"
  else
    skip cli "no fp8route tool in $prefix/bin (FP8ROUTE_BUILD_TOOLS=OFF)"
  fi
else
  skip consumer "the install failed"
  skip example "the install failed"
  skip cli "the install failed"
fi
if [ -n "$junit" ]; then
  mkdir -p "$(dirname "$junit")"
  echo "<?xml version=\"1.0\"?><testsuite name=\"consumer\">$cases</testsuite>" >"$junit"
fi
exit $rc
