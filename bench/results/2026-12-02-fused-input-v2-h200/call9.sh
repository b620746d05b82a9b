#!/bin/bash
# Device call 9 (a measuring build of a0b2b06 with two environment switches, not in the product:
# FP8ROUTE_X_ATTN_EARLY=1 makes the decode attention execute griddepcontrol.launch_dependents at its
# start instead of after its main loop; FP8ROUTE_X_GEMM_EARLY=1 makes the decode GEMM's producer
# execute it at its start instead of after its last load): the decoder end to end (two rounds,
# interleaved) and per-kernel increments.
R=/tmp/r9; mkdir -p $R; T0=$(date +%s); REPO=$PWD; C=$REPO/build/carry
cd $C && tar xf pack9.tar.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
python3 -m pip install -q --no-index --no-deps --target $C/pylib $C/wheels/apache_tvm_ffi*.whl > /dev/null 2>&1
snap() { cd /tmp && tar czf $OUT/r9.tgz r9; cd $REPO; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
PY="env PYTHONPATH=$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so"
for round in 1 2; do
  for v in 00 10 01 11; do
    TMO=90 t e2e_${v}_r$round env FP8ROUTE_X_ATTN_EARLY=${v:0:1} FP8ROUTE_X_GEMM_EARLY=${v:1:1} $PY python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8,qwen2.5-72b-tp4 --variants fp8route --batches 1,8,32 --prefill none --iters 30
  done
  snap
done
grep -H "decode batch .* fp8route " $R/e2e_*.txt | sed 's/ms\/step.*tok\/s/tok\/s/'
for m in llama-3.1-8b llama-3.1-70b-tp8; do
  for v in 00 10 01 11; do
    TMO=60 t prof_${v}_$m env FP8ROUTE_X_ATTN_EARLY=${v:0:1} FP8ROUTE_X_GEMM_EARLY=${v:1:1} $PY python3 $C/profile_step.py --model $m --batch 1 --out $R/prof_${v}_$m
    python3 $C/increments.py $R/prof_${v}_$m.trace.json.gz 9 2 > $R/incr_${v}_$m.txt 2>&1
    echo "== $v $m"; cat $R/incr_${v}_$m.txt
  done
done
echo "total $(( $(date +%s) - T0 )) s" | tee -a $R/rc.txt
snap
