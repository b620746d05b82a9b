#!/bin/bash
# Device call (about 9 minutes of timeouts at most; carry build/gpu from scripts/stage_gpu.sh): the
# trust and MoE suites, the unseen-shape sequences with probing on, the main job twice, per-token and
# per-token-group quant, cuBLASLt's preferences against the routed call, and the DeepSeek shapes
# against torch. Everything lands in $OUT/trust1.tgz (re-packed after each step, so a timeout keeps
# what ran).
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/trust1 B=$PWD/build/gpu
mkdir -p $R /tmp/site
python3 -c "import tvm_ffi" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site \
  $B/python/apache_tvm_ffi-*.whl
export PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so \
  FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/trust1.tgz -C /tmp trust1; }
nvidia-smi > $R/nvidia-smi.txt 2>&1; git log -1 --format=%H > $R/commit.txt
t test_watchdog 60 $B/tests/test_watchdog
t test_streams 180 $B/tests/test_streams
t test_moe 150 $B/tests/test_moe --gtest_filter='-MoeFast.RealExpertShapes'
grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED|differing" $R/test_*.txt | head -30; snap
t threads_py 120 python3 -m pytest -q -p no:cacheprovider tests/python/test_threads_gpu.py
t autoprobe_py 240 python3 -m pytest -q -p no:cacheprovider tests/python/test_autoprobe.py \
  -k 'sequences or bound or unseen_layer'
tail -5 $R/autoprobe_py.txt; snap
t main1 60 $B/fp8route
t main2 60 $B/fp8route
grep -hE "more than 3%|problems" $R/main*.txt | head -6; snap
t quant 60 $B/quant_bench --ops floor,token,group --T 4096,16384 --H 4096,7168
t cublaslt_2112 60 $B/cublaslt_prefs --n 2112 --k 7168 --m 1,4,16,64
t cublaslt_4096 45 $B/cublaslt_prefs --n 4096 --k 14336 --m 1,16
snap
t python_bench 60 python3 bench/python_bench.py --model deepseek-v3 --m 1,4,16,64
tail -20 $R/python_bench.txt; snap
