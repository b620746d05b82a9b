#!/bin/bash
# Call C: the helpers' GPU tests (accum, LinearPlan scale forms), accum error by K, then the A/B of
# the decode changes through env switches of this measuring build, and the full e2e comparison.
cd "$(dirname "$0")/../.."
W=$PWD
tar xJf build/carry/pack22.tar.xz
python3 -m pip install -q --no-index --no-deps --target /tmp/site build/devpy/apache_tvm_ffi-*.whl 2>&1 | tail -1
export FP8ROUTE_SOURCE_DIR=$W
R=/tmp/r22; mkdir -p $R
snap() { tar czf $OUT/r22.tgz -C /tmp r22; }
t() { local name=$1; shift; local s=$(date +%s); timeout ${TMO:-200} "$@" > $R/$name.txt 2>&1; echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
nvidia-smi > $R/info.txt 2>&1
for s in test_accum test_linear_scales test_attention test_linear; do TMO=120 t $s build/gpu/tests/$s; grep -E "^\[  (PASSED|FAILED) |FAILED" $R/$s.txt | head -6; done
T=$W/build/carry/tree
export PYTHONPATH=/tmp/site:$T/python FP8ROUTE_FFI_LIB=$W/build/devpy/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$W/build/gpu/fp8route
cd $T
TMO=200 t pytest_gpu python3 -m pytest -q -p no:cacheprovider tests/python/test_accum.py tests/python/test_linear_scales_gpu.py tests/python/test_torch_gpu.py tests/python/test_gpu.py tests/python/test_attention_gpu.py
tail -6 $R/pytest_gpu.txt; snap
TMO=120 t accum_error python3 bench/accum_error.py --json $R/accum_error.json
TMO=90 t accum_error_pos python3 bench/accum_error.py --positive --json $R/accum_error_pos.json
tail -12 $R/accum_error.txt; tail -9 $R/accum_error_pos.txt; snap
for c in "0 0 0" "1 0 0" "1 1 0" "1 0 1" "1 1 1"; do
  set -- $c; n=pdl$1_pf$2_q$3
  FP8ROUTE_X_SKINNY_PDL=$1 FP8ROUTE_X_ATTN_PREFETCH=$2 FP8ROUTE_X_ATTN_QUANT=$3 TMO=100 t e2e_$n python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8,qwen2.5-72b-tp4 --variants fp8route --batches 1,8,32,128 --prefill none --iters 30 --json $R/e2e_$n.json
  echo "$n: $(grep -E 'decode batch +[0-9]+ fp8route' $R/e2e_$n.txt | awk '{print $8}' | tr '\n' ' ')"
done
snap
for c in "0 0 0" "1 1 1" "1 0 0"; do
  set -- $c; n=pdl$1_pf$2_q$3; P=$([ $3 = 1 ] && echo 8 || echo 9)
  FP8ROUTE_X_SKINNY_PDL=$1 FP8ROUTE_X_ATTN_PREFETCH=$2 FP8ROUTE_X_ATTN_QUANT=$3 TMO=60 t prof_8b_$n python3 $W/build/carry/profile_step.py --model llama-3.1-8b --batch 1 --out $R/prof_8b_$n
  python3 $W/build/carry/incr.py $R/prof_8b_$n.trace.json.gz $P 2 > $R/incr_8b_$n.txt; echo $n; cat $R/incr_8b_$n.txt
done
snap
TMO=200 t e2e_full python3 bench/e2e.py --models llama-3.1-8b,llama-3.1-70b-tp8,qwen2.5-72b-tp4 --batches 1,8,32,128 --prefill none --iters 30 --json $R/e2e_full.json
grep -E "decode batch" $R/e2e_full.txt | head -40
snap
