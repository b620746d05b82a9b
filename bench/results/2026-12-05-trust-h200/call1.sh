#!/bin/bash
set -u
cd /repo 2>/dev/null || cd "$(dirname "$0")/.."
W=$PWD R=/tmp/trust1 B=$PWD/build/gpu
mkdir -p $R /tmp/site build && tar xJf .stage/gpu1.tar.xz -C build
cp -r routes shapes $B/ 2>/dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/trust1.tgz -C /tmp trust1; }
nvidia-smi > $R/nvidia-smi.txt 2>&1; git log -1 --format=%H > $R/commit.txt
t test_watchdog 45 $B/tests/test_watchdog
t test_streams 100 $B/tests/test_streams
t test_moe 100 $B/tests/test_moe --gtest_filter='-MoeFast.RealExpertShapes'
grep -hE "^\[  (PASSED|FAILED) |^\[  FAILED|differing" $R/test_*.txt | head -30; snap
t main1 70 $B/fp8route
grep -hE "more than 3%|problems" $R/main1.txt | head -4; snap
t threads_py 90 python3 -m pytest -q -x -p no:cacheprovider tests/python/test_threads_gpu.py
t autoprobe_py 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_autoprobe.py -k 'sequences or bound or unseen_layer'
tail -5 $R/threads_py.txt $R/autoprobe_py.txt; snap
t quant 45 $B/quant_bench --ops floor,token,group --T 4096,16384 --H 4096,7168
t cublaslt_2112 40 $B/cublaslt_prefs --n 2112 --k 7168 --m 1,4,16,64
t python_bench 50 python3 bench/python_bench.py --model deepseek-v3 --m 1,4,16,64
snap
t main2 60 $B/fp8route
snap
