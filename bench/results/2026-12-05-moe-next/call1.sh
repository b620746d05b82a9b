#!/bin/bash
# Planned device calls: what the MoE commits since the glue run need on a GPU, then their
# measurements. Five steps, at most 1050 s of timeouts in all, more than one call may run (600 s):
# STEPS picks them, e.g. STEPS="1 2" in one call (about 6 minutes), STEPS="3 4 5" in the next
# (default: all). Carry .stage/moe.tar.xz (staged as README.md says) and unpack it first:
# `mkdir -p build && tar xJf .stage/moe.tar.xz -C build && STEPS="1 2" bash <this script>`.
# Outputs in $OUT/moe1.tgz, re-packed after each step.
set -u
cd "$(dirname "$0")/../../.."
W=$PWD R=/tmp/moe1 B=$PWD/build/gpu
mkdir -p $R /tmp/site
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W \
  FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so FP8ROUTE_CLI=$B/fp8route
t() { local name=$1 tmo=$2; shift 2; local s=$(date +%s); timeout "$tmo" "$@" > $R/$name.txt 2>&1
      echo "$name rc $? $(( $(date +%s) - s )) s" | tee -a $R/rc.txt; }
snap() { tar czf $OUT/moe1.tgz -C /tmp moe1; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
STEPS=" ${STEPS:-1 2 2b 3 3r 3b 4 5} "
on() { [[ "$STEPS" == *" $1 "* ]]; }
# 1. Correctness: the grouped cutlass backend, the default rule, the Python MoE suites (the rewritten
#    tolerances, every glue kernel against its reference, Fp8MoE on both glues).
if on 1; then
t test_moe 150 stdbuf -oL $B/tests/test_moe --gtest_filter='MoeFast.*:-MoeFast.RealExpertShapes'
grep -hE "^\[  (PASSED|FAILED|SKIPPED) " $R/test_moe.txt
t moe_py 150 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe.py tests/python/test_moe_glue_gpu.py \
  -k "not split_counts"
tail -3 $R/moe_py.txt; snap
# The decode backend's split knobs, run-ahead included (new, its own process: a hang stops only it).
t moe_splits_test 60 python3 -m pytest -q -p no:cacheprovider tests/python/test_moe.py -k split_counts
tail -3 $R/moe_splits_test.txt; snap
fi
# 2. Grouped backends side by side (cutlass included), contiguous and masked, few and all experts.
if on 2; then
t moe_bench 150 python3 bench/moe_bench.py --layers qwen3_30b_a3b.gate_up,deepseek_v3.gate_up,deepseek_v3.down \
  --m 1,4,16,64 --active 8,all --prefill 512,2048 --scales row,block --json $R/moe_bench.json
tail -30 $R/moe_bench.txt; snap
fi
# 2b. The decode backend's split counts (decode@sN) at 1 row on 8 active experts: what its split
#     rule chooses between where the batch-1 layer spends its GEMM time.
if on 2b; then
t moe_splits 120 python3 bench/moe_bench.py --layers qwen3_30b_a3b.gate_up,qwen3_30b_a3b.down,deepseek_v3.gate_up,deepseek_v3.down \
  --m 1 --active 8 --prefill "" --scales row,block --backends default,decode,wgmma --decode-splits 1,2,4,8 \
  --json $R/moe_splits.json
tail -30 $R/moe_splits.txt; snap
fi
# 3. The Qwen3-30B-A3B MoE layer and decoder end to end (16 layers), and a DeepSeek-V3 EP-8 rank's MoE
#    layer (sigmoid grouped top-k in moe_grouped_topk), each against torch.
if on 3; then
t moe_layer 75 python3 bench/moe_e2e.py --mode layer --batches 1,8,32 --torch-glue --profile --json $R/moe_layer.json
tail -12 $R/moe_layer.txt; snap
fi
# 3r. The layer at batch 1 and 8, row and block scales, each with and without the decode backend's
#     run-ahead split K (its own rule), with the per-kernel profile.
if on 3r; then
t moe_layer_ra 75 python3 bench/moe_e2e.py --mode layer --batches 1,8 --variants fp8route,fp8route:block \
  --decode-run-ahead --profile --json $R/moe_layer_ra.json
tail -6 $R/moe_layer_ra.txt; snap
fi
# 3b. The decoder, the DeepSeek-V3 EP-8 layer and the contiguous form's layer.
if on 3b; then
t moe_model 90 python3 bench/moe_e2e.py --mode model --layers 16 --batches 1,32 --iters 30 --json $R/moe_model.json
t moe_layer_ds 90 python3 bench/moe_e2e.py --mode layer --model deepseek-v3-ep8 --moe-layers 4 --batches 1,8,32 \
  --variants fp8route,torch_fp8 --torch-glue --json $R/moe_layer_ds.json
# The contiguous form (prefill batches): moe_contiguous_dispatch and the rest of the glue as kernels
# against the same layer on the torch glue.
t moe_layer_prefill 90 python3 bench/moe_e2e.py --mode layer --batches 128,512,2048 --moe-layers 4 --torch-glue \
  --variants fp8route,torch_fp8 --json $R/moe_layer_prefill.json
tail -12 $R/moe_model.txt $R/moe_layer_ds.txt $R/moe_layer_prefill.txt; snap
fi
# 4. The grouped backends on the catalog's real expert shapes against simt (about 1 GB of random
#    weights per case, 48 cases: about a minute; never run to the end so far).
if on 4; then
t real_shapes 120 stdbuf -oL $B/tests/test_moe --gtest_filter=MoeFast.RealExpertShapes
tail -3 $R/real_shapes.txt; snap
fi
# 5. The new glue kernels under compute-sanitizer memcheck (their tests' small problems).
if on 5; then
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t memcheck_glue 150 $CS --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/python/test_moe_glue_gpu.py -k "route_masked or contiguous_dispatch or masked_silu or unique_rows"
tail -5 $R/memcheck_glue.txt; snap
fi
