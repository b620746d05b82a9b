#!/bin/bash
# Device call 7: decode attention with cache_ready (K/V loads before griddepcontrol.wait): tests, then
# before/after A/B of the decoder end to end and per-kernel increments (before = the previous commit's
# Python package and native module, in build/carry/before).
R=/tmp/r7; mkdir -p $R; T0=$(date +%s); REPO=$PWD; C=$REPO/build/carry; B=$C/before
cd $C && tar xf pack7.tar.xz && xz -dkf before/_fp8route_ffi.so.xz && cd $REPO
export FP8ROUTE_SOURCE_DIR=$REPO
python3 -m pip install -q --no-index --no-deps --target $C/pylib $C/wheels/apache_tvm_ffi*.whl > /dev/null 2>&1
snap() { cd /tmp && tar czf $OUT/r7.tgz r7; cd $REPO; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
NEW="env PYTHONPATH=$C/pylib FP8ROUTE_FFI_LIB=$C/bin/_fp8route_ffi.so"
OLD="env PYTHONPATH=$C/pylib FP8ROUTE_FFI_LIB=$B/_fp8route_ffi.so"
TMO=120 t test_attention $C/bin/test_attention &
TMO=150 t pytest $NEW python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py tests/python/test_models.py -k "attention or graph_replay or close_to_fp32"
wait
grep -hE "^\[  (PASSED|FAILED) |FAILED|passed|failed" $R/test_attention.txt $R/pytest.txt | head; snap
for i in 1; do
  TMO=90 t e2e_old$i $OLD python3 $B/bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8 --variants fp8route --batches 1,8,32 --prefill none --iters 30
  TMO=90 t e2e_new$i $NEW python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8 --variants fp8route --batches 1,8,32 --prefill none --iters 30
done
grep -H "decode batch .* fp8route " $R/e2e_*.txt; snap
for m in llama-3.1-8b llama-3.1-70b-tp8; do
  P=$([ $m = llama-3.1-8b ] && echo 9 || echo 8)
  (cd $B && TMO=60 t prof_old_$m $OLD python3 $C/profile_step.py --model $m --batch 1 --out $R/prof_old_$m)
  TMO=60 t prof_new_$m $NEW python3 $C/profile_step.py --model $m --batch 1 --out $R/prof_new_$m
  for v in old new; do python3 $C/increments.py $R/prof_${v}_$m.trace.json.gz $P 2 > $R/incr_${v}_$m.txt 2>&1; echo "== $v $m"; cat $R/incr_${v}_$m.txt; done
done
echo "total $(( $(date +%s) - T0 )) s" | tee -a $R/rc.txt
snap
