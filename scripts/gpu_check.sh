#!/usr/bin/env bash
# One call's worth of GPU work on the device machine (carry build/gpu from scripts/stage_gpu.sh,
# run with FP8ROUTE_PRESET=gpu): info, every test suite (C++ and Python), then the benchmarks named
# in $FP8ROUTE_BENCH:
#   quant, quant-quick, torch        quantization (fp8route, PyTorch eager / torch.compile)
#   quant-decode                     decode T=1..64: the block-size rule vs --group-threads 64, and torch
#   gemm, gemm-quick                 gemm_bench (FP8ROUTE_GEMM_ARGS adds arguments)
#   check                            fp8route check
#   tune-tp1, tune-tp8               fp8route tune of one TP degree, M 1..4096 (10 values), resumable
#   routed-tp1, routed-tp8           fp8route bench --model all --configs all at that TP degree
#   main                             fp8route (the main job)
#   python                           bench/python_bench.py (fp8route vs torch._scaled_mm, Fp8Linear)
#   moe                              bench/moe_bench.py (grouped GEMM backends vs torch._scaled_grouped_mm)
# Logs go to $OUT (or /tmp/fp8route-out), packed into a few files.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-/tmp/fp8route-out}"; mkdir -p "$out"
build="$root/build/${FP8ROUTE_PRESET:-release}"
"$build/fp8route" info
bash "$root/scripts/run_tests_direct.sh" /tmp/fp8route-tests 2>&1 | tee "$out/tests.txt"
tar -C /tmp -czf "$out/test-results.tgz" fp8route-tests
grid=1,4,16,32,64,128,256,512,1024,4096
export FP8ROUTE_SOURCE_DIR="$root"
for b in ${FP8ROUTE_BENCH:-}; do
  case "$b" in
    quant) "$build/quant_bench" --json "$out/quant_fp8route.json" | tee "$out/quant_fp8route.txt" ;;
    quant-quick) "$build/quant_bench" --quick --json "$out/quant_fp8route.json" | tee "$out/quant_fp8route.txt" ;;
    quant-decode)
      for g in 0 64; do
        "$build/quant_bench" --T 1,2,4,8,16,32,64 --group-threads $g --json "$out/quant_decode_g$g.json" \
          > "$out/quant_decode_g$g.txt"
      done
      PYTHONUNBUFFERED=1 python3 "$root/bench/quant_torch.py" --T 1,4,16,64 --impls compile \
        --json "$out/quant_torch_decode.json" > "$out/quant_torch_decode.txt" ;;
    gemm) "$build/gemm_bench" --tp 1,8 --m 1,4,16,32,64,128,256,512,1024,4096 ${FP8ROUTE_GEMM_ARGS:-} --json "$out/gemm.json" > "$out/gemm.txt" ;;
    gemm-quick) "$build/gemm_bench" --model llama-3.1-8b --m 1,16,128,1024 ${FP8ROUTE_GEMM_ARGS:-} --json "$out/gemm.json" | tee "$out/gemm.txt" ;;
    check) "$build/fp8route" check | tee "$out/check.txt" ;;
    tune-tp1|tune-tp8) "$build/fp8route" tune --model all --tp "${b#tune-tp}" --m "$grid" -o "$out/h200_${b#tune-}.json" > "$out/${b}.txt" ;;
    routed-tp1|routed-tp8) "$build/fp8route" bench --model all --tp "${b#routed-tp}" --m "$grid" --configs all \
                             --json "$out/${b}.json" > "$out/${b}.txt" ;;
    main) "$build/fp8route" > "$out/main.txt" ;;
    python) PYTHONPATH="$build/pylib" FP8ROUTE_FFI_LIB="$build/python/fp8route/_fp8route_ffi.so" PYTHONUNBUFFERED=1 \
              python3 "$root/bench/python_bench.py" --json "$out/python_bench.json" | tee "$out/python_bench.txt" ;;
    torch) PYTHONUNBUFFERED=1 python3 "$root/bench/quant_torch.py" --json "$out/quant_torch.json" ${FP8ROUTE_TORCH_ARGS:-} | tee "$out/quant_torch.txt" ;;
    moe) PYTHONPATH="$build/pylib" FP8ROUTE_FFI_LIB="$build/python/fp8route/_fp8route_ffi.so" PYTHONUNBUFFERED=1 \
           python3 "$root/bench/moe_bench.py" --json "$out/moe_bench.json" | tee "$out/moe_bench.txt" ;;
  esac
done
