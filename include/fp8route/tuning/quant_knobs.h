#pragma once
#include <cstdint>
// Knobs of the quantization launchers for benchmarks and tests only.

namespace fp8route::detail {
// Items per thread of the group kernel: 0 = the automatic rule, 1 or 4 to force one (not
// thread-safe; for benchmarks that re-measure the rule).
void force_group_items(int items);

// The group family's decode kernel (4 elements per lane; plain one-item launches with E4M3 codes
// and f32 or packed UE8M0 scales): 0 = the automatic rule, 4 = wherever it applies, 8 = never.
// Not thread-safe; for the benchmark and tests.
void force_group_vec(int vec);

// Threads per block of the group kernel, at most: 0 = 256 (the rule), or a multiple of 32 below.
// Not thread-safe; for the benchmark and tests.
void force_group_threads(int threads);

// Dynamic per-tensor quant: the largest tensor, in 8-element vectors, run as one cluster launch
// (default 4096; 0 = never). Tensors of up to 1024 vectors with contiguous rows take the
// one-block path whatever this says. Not thread-safe; for benchmarks and tests.
void set_tensor_cluster_max_vecs(int64_t vecs);
int64_t tensor_cluster_max_vecs();

// Floats a in [kAmaxFloor, FLT_MAX] where the quant kernels' scale divisions (qmax / a, a / qmax)
// differ from the IEEE division __fdiv_rn; for the test that proves them exact (needs a GPU).
unsigned long long scale_division_mismatches(float qmax);
}  // namespace fp8route::detail
