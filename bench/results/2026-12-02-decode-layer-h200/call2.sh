#!/bin/bash
# Call A': Python GPU tests of the fused attention quant (fixed module), then old/new decode profiles and e2e.
cd "$(dirname "$0")/../.."
W=$PWD
tar xJf build/carry/pack21.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site build/devpy/apache_tvm_ffi-*.whl 2>&1 | tail -1
export FP8ROUTE_SOURCE_DIR=$W
R=/tmp/r21; mkdir -p $R
snap() { tar czf $OUT/r21.tgz -C /tmp r21; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
NEWLIB=$W/build/devpy/fp8route/_fp8route_ffi.so; OLDLIB=$W/build/oldso/_fp8route_ffi.so
cd $W/build/carry/tree
TMO=200 t pytest_gpu env PYTHONPATH=/tmp/site:$PWD/python FP8ROUTE_FFI_LIB=$NEWLIB python3 -m pytest -q -p no:cacheprovider tests/python/test_attention_gpu.py tests/python/test_models.py
tail -4 $R/pytest_gpu.txt; snap
for m in llama-3.1-8b llama-3.1-70b-tp8; do
  for v in old new; do
    if [ $v = old ]; then D=$W/build/carry/pyold; L=$OLDLIB; P=9; else D=$W/build/carry/tree; L=$NEWLIB; P=8; fi
    cd $D; TMO=100 t prof_${m}_$v env PYTHONPATH=/tmp/site:$D/python FP8ROUTE_FFI_LIB=$L python3 $W/build/carry/profile_step.py --model $m --batch 1 --out $R/prof_${m}_$v
    python3 $W/build/carry/incr.py $R/prof_${m}_$v.trace.json.gz $P 2 > $R/incr_${m}_$v.txt; echo "$m $v"; cat $R/incr_${m}_$v.txt
  done
done
snap
for v in old new; do
  if [ $v = old ]; then D=$W/build/carry/pyold; L=$OLDLIB; else D=$W/build/carry/tree; L=$NEWLIB; fi
  cd $D; TMO=200 t e2e_$v env PYTHONPATH=/tmp/site:$D/python FP8ROUTE_FFI_LIB=$L python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8,qwen2.5-72b-tp4 --variants fp8route --batches 1,8,32,128 --prefill none --iters 30 --json $R/e2e_$v.json
  grep -E "decode" $R/e2e_$v.txt | head -20
done
snap
