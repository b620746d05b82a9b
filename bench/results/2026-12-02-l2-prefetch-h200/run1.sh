#!/bin/bash
# Device call 1: the start-gate tests, the L2-prefetch decoder test, then the e2e A/B of l2_prefetch
# and the per-kernel increments of the 8B step with and without it.
R=/tmp/r1; mkdir -p $R; T0=$(date +%s); REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack1.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
python3 -m pip install -q --no-index --no-deps --target $C/pylib $C/wheels/apache_tvm_ffi*.whl > /dev/null 2>&1
export PYTHONPATH=$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so FP8ROUTE_CLI=$C/bin/fp8route
snap() { cd /tmp && tar czf $OUT/r1.tgz r1; cd $REPO; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
nvidia-smi > $R/smi.txt 2>&1
TMO=100 t test_gemm_conc $C/bin/test_gemm --gtest_filter='GemmBackends.GraphsReplayedConcurrentlyKeepTheirScratch'
TMO=60 t test_quant_conc $C/bin/test_quant --gtest_filter='*PerTensorDynamicGraphsReplayedConcurrently*'
grep -hE "^\[  (PASSED|FAILED) |note|checked" $R/test_gemm_conc.txt $R/test_quant_conc.txt
TMO=150 t pytest_models python3 -m pytest -q -p no:cacheprovider tests/python/test_models.py -k "prefetch or graph_replay or close_to_fp32"
tail -3 $R/pytest_models.txt; snap
TMO=330 t e2e_ab python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8 --variants fp8route,fp8route+pf16,fp8route+pf32,fp8route+pf48 --batches 1,8,32 --prefill none --iters 30 --json $R/e2e_ab.json
grep -E "decode batch" $R/e2e_ab.txt | head -30; snap
for pf in 0 32; do
  PF_MB=$pf TMO=60 t prof_8b_pf$pf python3 $C/profile_step.py --model llama-3.1-8b --batch 1 --out $R/prof_8b_pf$pf
  P=$([ $pf = 0 ] && echo 9 || echo 13)
  python3 $C/increments.py $R/prof_8b_pf$pf.trace.json.gz $P 2 > $R/incr_8b_pf$pf.txt 2>&1; cat $R/incr_8b_pf$pf.txt
done
echo "total $(( $(date +%s) - T0 )) s" | tee -a $R/rc.txt
snap
