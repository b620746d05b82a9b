#!/bin/bash
# Device call 2: racecheck of the wgmma edge test and test_accum (quick lists) beside the start-gate
# tests; then, alone on the GPU, the held-out automatic-probing run with the 21-M probe grid.
R=/tmp/r2; mkdir -p $R; T0=$(date +%s); REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack2.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
snap() { cd /tmp && tar czf $OUT/r2.tgz r2; cd $REPO; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
nvidia-smi > $R/smi.txt 2>&1
( FP8ROUTE_TEST_QUICK=1 TMO=220 t race_wgmma $CS --tool racecheck --error-exitcode 9 $C/bin/test_gemm --gtest_filter='WgmmaBackend.*' ) &
( FP8ROUTE_TEST_QUICK=1 TMO=220 t race_accum $CS --tool racecheck --error-exitcode 9 $C/bin/test_accum --gtest_filter='AccumGpu.*' ) &
TMO=100 t test_gemm_conc $C/bin/test_gemm --gtest_filter='GemmBackends.GraphsReplayedConcurrentlyKeepTheirScratch'
TMO=60 t test_quant_conc $C/bin/test_quant --gtest_filter='*PerTensorDynamicGraphsReplayedConcurrently*'
TMO=60 t test_accum_full $C/bin/test_accum
wait
grep -hE "^\[  (PASSED|FAILED) |note|checked|ERROR SUMMARY|RACECHECK SUMMARY" $R/*.txt; snap
python3 -m pip install -q --no-index --no-deps --target $C/pylib $C/wheels/apache_tvm_ffi*.whl > /dev/null 2>&1
PYTHONPATH=$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so TMO=90 t overhead python3 bench/python_bench.py --overhead --json $R/overhead.json
tail -12 $R/overhead.txt
snap
CD=$(mktemp -d)
FP8ROUTE_CACHE_DIR=$CD FP8ROUTE_AUTOPROBE_BUDGET=1200 TMO=280 t heldout21 $C/bin/gemm_bench --catalog shapes/heldout.json --tp 1 --scale row,block --autoprobe --interleave --screen 25 --recheck 8 --probe-m 1,2,4,8,16,24,32,48,64,96,128,192,256,384,512,768,1024,1536,2048,3072,4096 --json $R/heldout21.json
tail -45 $R/heldout21.txt
echo "total $(( $(date +%s) - T0 )) s" | tee -a $R/rc.txt
snap
