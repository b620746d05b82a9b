#!/bin/bash
# Device call B (H200, same machine as run.sh, at most 330 s; run from the repository root, carry
# .stage/h200head.tar.xz): the Qwen3-30B-A3B decoder (8 layers) at batch 1, 8, 32 against torch FP8
# and bf16, and Llama decode at batch 8 and 32 against torch FP8 with our attention.
set -u; W=$PWD B=$PWD/build/gpu R=/tmp/h2; mkdir -p $R /tmp/site build; tar xJf .stage/h200head.tar.xz -C build
python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/python/apache_tvm_ffi-*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$W/python FP8ROUTE_SOURCE_DIR=$W FP8ROUTE_CLI=$B/fp8route FP8ROUTE_FFI_LIB=$B/python/fp8route/_fp8route_ffi.so
nvidia-smi -L > $R/gpu.txt
timeout 150 python3 bench/moe_e2e.py --mode model --layers 8 --batches 1,8,32 --json $R/moe_model.json > $R/moe_model.txt 2>&1
timeout 120 python3 bench/e2e.py --prefill none --iters 30 --models llama-3.1-8b,llama-3.1-70b-tp8 --batches 8,32 \
  --variants torch_fp8:fused,fp8route --json $R/e2e_b.json > $R/e2e_b.txt 2>&1
tar czf $OUT/h2.tgz -C /tmp h2
