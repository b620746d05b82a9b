#pragma once
// The cutlass_sm90 configs as data (one line of configs.def each) and the CUTLASS-free interface
// between the backend (cutlass_sm90.cpp, host C++) and the kernels (kernel.cuh, one generated .cu
// per config and output dtype). Nothing here includes CUTLASS.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fp8route/dtype.h"

namespace fp8route::gemm::cutlass_sm90 {

enum class Family : uint8_t { row, block };  // scales in the epilogue / in the mainloop
enum class Schedule : uint8_t { pingpong, coop };
enum class Accum : uint8_t { precise, fastacc };
enum class Tiles : uint8_t { persistent, streamk };
enum class Operands : uint8_t { ab, swapab };

struct ConfigSpec {  // structural: a template argument
  Family family;
  int tile_m, tile_n, tile_k;
  int cluster_m, cluster_n;
  Schedule schedule;
  Accum accum;
  Tiles tiles;
  Operands operands;
};

// One line of configs.def as a ConfigSpec value, inside this namespace: the backend's table and
// the generated kernels both spell a config this way.
#define FP8ROUTE_CUTLASS_SPEC(family, tm, tn, tk, cm, cn, schedule, accum, tiles, operands)                \
  ConfigSpec {                                                                                             \
    Family::family, tm, tn, tk, cm, cn, Schedule::schedule, Accum::accum, Tiles::tiles, Operands::operands \
  }

// "row_128x128x128_1x2x1_pingpong_fastacc": the columns of configs.def in order (CMakeLists.txt
// names the generated files the same way).
std::string config_name(const ConfigSpec& c);

// One GEMM in our terms (y = a b^T, scales and bias as in gemm.h); a swapab kernel swaps them itself.
struct KernelArgs {
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;  // e4m3 [M, K], row stride lda
  int64_t lda = 0;
  const void* b = nullptr;  // e4m3 [N, K], row stride ldb
  int64_t ldb = 0;
  const float* sa = nullptr;  // row family: [M] or scalar; block family: [ceil(K/128), align(M, 4)]
  const float* sb = nullptr;  // row family: [N] or scalar; block family: [ceil(N/128), ceil(K/128)]
  bool sa_vector = false, sb_vector = false;
  const void* bias = nullptr;  // [N] of the output dtype, or null
  void* out = nullptr;         // [M, N], row stride ldo
  int64_t ldo = 0;
  int device = 0, sm_count = 0;  // the persistent and stream-K schedulers size their grid by SMs
};

// The entry points of one instantiated kernel.
struct KernelFns {
  // CUTLASS's own can_implement (shapes, alignment of extents and strides); pointers may be null.
  bool (*can_implement)(const KernelArgs&);
  // Global-memory workspace the launch needs (stream-K partial tiles and flags; 0 otherwise).
  size_t (*workspace_bytes)(const KernelArgs&);
  // Enqueues the kernel (and the workspace clear, if any) on `stream`; throws Error on failure.
  void (*launch)(const KernelArgs&, void* workspace, cudaStream_t stream);
};

// Defined by kernel.cuh, explicitly instantiated once per config and dtype in the generated files.
// Keyed by the config's value, not its position: a generated file depends on its own line only.
template <ConfigSpec C, DType Out>
KernelFns kernel_fns();

}  // namespace fp8route::gemm::cutlass_sm90
