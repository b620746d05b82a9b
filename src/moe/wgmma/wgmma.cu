// The grouped "wgmma" backend: launcher of moe/wgmma/kernel.cuh (persistent 128 x 128 wgmma tiles
// over (expert, n-tile, m-tile), any group sizes, every scale kind). Holds the requirements
// (supports) and the persistent grid size.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "gemm/tensor_map.h"
#include "moe/backend.h"
#include "moe/sm90/launch.cuh"
#include "moe/wgmma/kernel.cuh"

namespace fp8route::moe {
namespace {

namespace wk = kernels::moe_wgmma;

// Stages: as many 32.5 KB slots (a and b tiles, 128 scales) as fit 227 KB with the scan.
constexpr int kStages = 6;
using Traits = wk::Traits<kStages>;
static_assert(wk::kBK == 128, "GroupedArgs::kblocks counts 128-wide K blocks");

using Kernel = void (*)(const CUtensorMap, const CUtensorMap, const wk::Params);
constexpr Kernel kKernels[2] = {&wk::sm90_fp8_grouped_wgmma<__nv_bfloat16, kStages>,
                                &wk::sm90_fp8_grouped_wgmma<__half, kStages>};

// Blocks resident on the whole GPU at once, per output dtype and device; queried once.
int resident_blocks(int out_index, const DeviceInfo& dev) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find({out_index, dev.index}); it != cache.end()) return it->second;
  }
  const void* fn = reinterpret_cast<const void*>(kKernels[out_index]);
  allow_dynamic_smem(fn, Traits::kSmemBytes, dev.index);
  int per_sm = 0;
  FP8ROUTE_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernels[out_index], wk::kThreads, Traits::kSmemBytes));
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(std::pair{out_index, dev.index}, per_sm * dev.sm_count).first->second;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class WgmmaBackend final : public GroupedBackend {
 public:
  std::string_view name() const override { return "wgmma"; }

  std::string supports(const GroupedProblem& p) const override {
    if (std::string why = sm90_operands_reason(p, "wgmma", wk::kMaxExperts); !why.empty()) return why;
    // Tile indices are int32: the most tiles any routing makes must fit.
    if (bound_tiles(p) > std::numeric_limits<int32_t>::max())
      return "wgmma: more than 2^31 tiles (" + to_string(p) + ")";
    return sm90_device_reason("wgmma");
  }

  void run(const GroupedProblem& p, const GroupedOperands& ops, cudaStream_t stream) const override {
    const DeviceInfo& dev = device_info(-1);
    const int out_index = p.out == DType::bf16 ? 0 : 1;
    wk::Params kp{};
    set_grouped_args(kp, p, ops);
    kp.tiles_n = static_cast<int>(ceil_div(p.n, wk::kBN));
    kp.out_pairs = p.n % 2 == 0 && reinterpret_cast<uintptr_t>(ops.out) % 4 == 0;
    const CUtensorMap amap = gemm::byte_matrix_map(ops.a, a_rows(p), p.k, p.k, wk::kBM, "grouped wgmma");
    const CUtensorMap bmap = gemm::batched_byte_matrix_map(ops.b, p.experts, p.n, p.k, wk::kBN, "grouped wgmma");
    const int slots = resident_blocks(out_index, dev);
    FP8ROUTE_CHECK_CAT(slots > 0, ErrorCategory::cuda_error, "grouped wgmma: no block fits on this GPU");
    LaunchShape s;
    // Never more blocks than tiles any routing can make: a small problem starts no block that can
    // only find no work.
    s.grid = dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(bound_tiles(p), slots))));
    s.block = dim3(wk::kThreads);
    s.smem = Traits::kSmemBytes;
    s.pdl = true;
    launch_kernel(kKernels[out_index], s, stream, amap, bmap, kp);
  }

 private:
  // The most tiles any routing makes: every contiguous expert adds at most one partial m-tile;
  // masked experts hold at most M_max rows each.
  static int64_t bound_tiles(const GroupedProblem& p) {
    const int64_t m_tiles = p.form == GroupedForm::masked ? p.experts * ceil_div(p.rows, wk::kBM)
                                                          : ceil_div(p.rows, wk::kBM) + p.experts;
    return m_tiles * ceil_div(p.n, wk::kBN);
  }
};

}  // namespace

const GroupedBackend& wgmma_backend() {
  static const WgmmaBackend b;
  return b;
}

}  // namespace fp8route::moe
