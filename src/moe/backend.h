#pragma once
// Grouped GEMM backends (include/fp8route/moe.h): what a backend is given once the arguments are
// checked, and the registry. A backend's supports() is kept apart from run(), as for the dense GEMMs.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fp8route/moe.h"

namespace fp8route::moe {

// The operands of a checked call, as raw pointers. Block scale_a element (t, c) of expert batch
// `be` is at be * sa_stride_e + t * sa_stride_t + c * sa_stride_c, in elements of its storage (f32,
// or int32 words of four UE8M0 bytes); contiguous calls have one batch (sa_stride_e unused), t the
// row of a, masked calls one batch per expert and t the row within it.
struct GroupedOperands {
  const uint8_t* a = nullptr;
  const uint8_t* b = nullptr;
  const void* sa = nullptr;
  const float* sb = nullptr;
  const int32_t* groups = nullptr;  // offsets (contiguous) or masked_m (masked)
  void* out = nullptr;
  int64_t sa_stride_e = 0, sa_stride_t = 0, sa_stride_c = 0;
};

class GroupedBackend {
 public:
  virtual ~GroupedBackend() = default;
  virtual std::string_view name() const = 0;
  // Why this backend cannot run p on the current device, or "".
  virtual std::string supports(const GroupedProblem& p) const = 0;
  // Runs a checked, supported, non-empty problem.
  virtual void run(const GroupedProblem& p, const GroupedOperands& ops, cudaStream_t stream) const = 0;
};

const GroupedBackend& simt_backend();
const GroupedBackend& decode_backend();  // moe/decode: groups of <= 64 rows, mma.sync, split K
const GroupedBackend& wgmma_backend();   // moe/wgmma: persistent 128-row wgmma tiles, any groups
const GroupedBackend& cutlass_backend(); // moe/cutlass: CUTLASS's pointer-array grouped GEMM, every scale kind
const std::vector<const GroupedBackend*>& all_grouped_backends();
const GroupedBackend& find_grouped_backend(std::string_view name);
// The default backend for p (docs/moe.md, Routing): the grouped table's choice, else the rule in
// grouped_mm.cpp.
const GroupedBackend& default_grouped_backend(const GroupedProblem& p);
// The process-wide grouped routing table (grouped_default_table.cpp), loaded at the first call;
// nullptr: none.
std::shared_ptr<const GroupedRoutingTable> default_grouped_table();

}  // namespace fp8route::moe
