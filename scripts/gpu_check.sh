#!/usr/bin/env bash
# One call's worth of GPU work on the device machine (carry build/release): info, every test
# suite, then the benchmarks named in $FP8ROUTE_BENCH ("quant", "quant-quick", "torch", "gemm",
# "gemm-quick"; FP8ROUTE_GEMM_ARGS adds gemm_bench arguments).
# Logs go to $OUT (or /tmp/fp8route-out), packed into a few files.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-/tmp/fp8route-out}"; mkdir -p "$out"
build="$root/build/${FP8ROUTE_PRESET:-release}"
"$build/fp8route" info
bash "$root/scripts/run_tests_direct.sh" /tmp/fp8route-tests 2>&1 | tee "$out/tests.txt"
tar -C /tmp -czf "$out/test-results.tgz" fp8route-tests
for b in ${FP8ROUTE_BENCH:-}; do
  case "$b" in
    quant) "$build/quant_bench" --json "$out/quant_fp8route.json" | tee "$out/quant_fp8route.txt" ;;
    quant-quick) "$build/quant_bench" --quick --json "$out/quant_fp8route.json" | tee "$out/quant_fp8route.txt" ;;
    gemm) "$build/gemm_bench" --tp 1,8 --m 1,4,16,32,64,128,256,512,1024,4096 ${FP8ROUTE_GEMM_ARGS:-} --json "$out/gemm.json" > "$out/gemm.txt" ;;
    gemm-quick) "$build/gemm_bench" --model llama-3.1-8b --m 1,16,128,1024 ${FP8ROUTE_GEMM_ARGS:-} --json "$out/gemm.json" | tee "$out/gemm.txt" ;;
    torch) PYTHONUNBUFFERED=1 python3 "$root/bench/quant_torch.py" --json "$out/quant_torch.json" ${FP8ROUTE_TORCH_ARGS:-} | tee "$out/quant_torch.txt" ;;
  esac
done
