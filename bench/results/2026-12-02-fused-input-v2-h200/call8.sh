#!/bin/bash
# Device call 8 (build of wip/fused-input-v2, 896f344's tree): decode GEMM with fused input (quant /
# rms_norm / silu_and_mul per-token quant inside the decode kernel): bit-identity tests, the
# fused_input_bench stack A/B, then the decoder end to end and per-kernel increments with fusion on
# and off (FP8ROUTE_FUSE_INPUT=0).
R=/tmp/r8; mkdir -p $R; T0=$(date +%s); REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack8.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
python3 -m pip install -q --no-index --no-deps --target $C/pylib $C/wheels/apache_tvm_ffi*.whl > /dev/null 2>&1
snap() { cd /tmp && tar czf $OUT/r8.tgz r8; cd $REPO; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
PY="env PYTHONPATH=$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
TMO=150 t test_gemm_fused $C/bin/test_gemm --gtest_filter='DecodeBackend.*:LinearPlanGpu.*'
grep -hE "^\[  (PASSED|FAILED) |FAILED|decode fused" $R/test_gemm_fused.txt | head -20; snap
for spec in "llama-3.1-8b 1" "llama-3.1-70b 8" "qwen2.5-72b 4"; do set -- $spec
  TMO=90 t bench_$1_tp$2 $C/bin/fused_input_bench --model $1 --tp $2 --m 1,2,4,8 --catalog shapes/models.json
done
tail -n 12 $R/bench_*.txt; snap
TMO=150 t pytest $PY python3 -m pytest -q -p no:cacheprovider tests/python/test_torch_gpu.py tests/python/test_models.py -k "forward_input or graph_replay or close_to_fp32"
tail -3 $R/pytest.txt; snap
for f in 1 0; do
  TMO=90 t e2e_fuse$f env FP8ROUTE_FUSE_INPUT=$f $PY python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8,qwen2.5-72b-tp4 --variants fp8route --batches 1,4,8,32 --prefill none --iters 30
done
grep -H "decode batch .* fp8route " $R/e2e_*.txt; snap
for m in llama-3.1-8b llama-3.1-70b-tp8; do
  for f in 1 0; do
    TMO=60 t prof_fuse${f}_$m env FP8ROUTE_FUSE_INPUT=$f $PY python3 $C/profile_step.py --model $m --batch 1 --out $R/prof_fuse${f}_$m
    python3 $C/increments.py $R/prof_fuse${f}_$m.trace.json.gz $([ $f = 1 ] && echo 5 || echo 9) 2 > $R/incr_fuse${f}_$m.txt 2>&1
    echo "== fuse$f $m"; cat $R/incr_fuse${f}_$m.txt
  done
done
echo "total $(( $(date +%s) - T0 )) s" | tee -a $R/rc.txt
snap
