#!/usr/bin/env bash
# The group family's decode kernel on the GPU machine, in one call: quant_bench with the library's
# rule (--group-vec 0), never (8), wherever it applies (4) and in blocks of 64 threads (4, 64),
# T = 1..256, then
# torch.compile of the same ops on the T list given. Staged binaries in build/gpu
# (scripts/stage_gpu.sh). The generated Triton kernels are kept in triton_kernels.tar.gz.
#   bench/results/2026-11-30-quant-v4-h200/quant_decode_vec.sh OUT_DIR [torch T list] [torch timeout s]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="$1"; torch_t="${2:-}"; torch_timeout="${3:-300}"
mkdir -p "$out/json"
b="$root/build/gpu/quant_bench"
common=(--ops floor,group,silu_group --layouts row_major,ue8m0_tma --T 1,2,4,8,16,32,64,128,256 --H 4096,7168)
for cfg in "0 0" "8 0" "4 0" "4 64"; do
  read -r vec threads <<< "$cfg"
  echo "== --group-vec $vec --group-threads $threads" | tee -a "$out/quant_vec.txt"
  "$b" "${common[@]}" --group-vec "$vec" --group-threads "$threads" --json "$out/json/vec${vec}_g$threads.json" \
    >> "$out/quant_vec.txt" 2>&1
done
if [ -n "$torch_t" ]; then
  PYTHONUNBUFFERED=1 timeout "$torch_timeout" python3 "$root/bench/quant_torch.py" --ops group,silu_group \
    --layouts row_major,ue8m0_tma --T "$torch_t" --H 4096,7168 --impls compile --json "$out/json/torch.json" \
    > "$out/torch.txt" 2>&1
  find /tmp/torchinductor_* ~/.triton/cache -name '*.py' -o -name '*.ptx' 2>/dev/null | head -200 \
    | tar -czf "$out/triton_kernels.tar.gz" -T - 2>/dev/null
fi
tar -C "$out" -czf "$out/json.tar.gz" json && rm -rf "$out/json"
