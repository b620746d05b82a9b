// The grouped "cutlass" backend: CUTLASS's SM90 pointer-array grouped GEMM (persistent, TMA,
// warp-specialized cooperative, FP8 with fp32 promotion every 128 of K) over the experts, bf16 out.
// Tensor and row scales are applied in the epilogue; block scales in the mainloop (CUTLASS's
// blockwise-scaled grouped mainloop), each group's activation scales first repacked to the compact
// [K / 128, rows] layout CUTLASS derives from the group's row count. A small kernel on the stream
// turns the device counts into CUTLASS's per-group arguments (problem shape, operand, output and
// scale pointers, scale layouts), so nothing is read back to the host and a call captures in a CUDA
// graph.
//
// Three tile shapes: "wide" (128 x 128 tiles of y, for groups of many rows) and, for the few rows
// per expert of decode steps, "narrow" and "mid" (swap-AB: CUTLASS computes y^T = b a^T per expert,
// the weight rows fill its 128-wide M and the expert's rows its 32- or 64-wide N). The narrowest
// tile that holds the most rows a group can have (M_max, or M_total) is taken, so that each weight
// tile is read once: a 32-wide tile over 64-row groups reads every weight tile twice. Each expert is
// one group; an expert without rows is a group of zero tiles, and so reads nothing.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "fp8route/error.h"
#include "moe/backend.h"
#include "moe/sm90/launch.cuh"

#ifdef FP8ROUTE_HAVE_CUTLASS
#include <array>
#include <mutex>
#include <type_traits>

#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "core/workspace.h"
#include "gemm/cutlass_sm90/kernel.cuh"
#include "fp8route/device.h"
#include "fp8route/tuning/cuda_check.h"
#include "moe/groups.cuh"
#endif

namespace fp8route::moe {

#ifdef FP8ROUTE_HAVE_CUTLASS
namespace cutlass_grouped {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

template <int kTileM, int kTileN, bool kSwapAB, bool kBlockScales>
struct Kernel {
  static constexpr bool kSwap = kSwapAB;
  static constexpr const char* kWho =
      !kSwap ? "grouped cutlass (wide)" : kTileN <= 32 ? "grouped cutlass (narrow)" : "grouped cutlass (mid)";
  static constexpr bool kBlock = kBlockScales;
  using TileShape = Shape<Int<kTileM>, Int<kTileN>, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using E4m3 = cutlass::float_e4m3_t;
  using OutT = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;     // K-major
  using LayoutB = cutlass::layout::ColumnMajor;  // K-major
  using LayoutD = std::conditional_t<kSwap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignAB = 16, kAlignD = 8;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // One pointer per group; each a vector or (tensor scales) a scalar, chosen at run time. Scalar
  // loads (alignment 1): a group's first row of scale_a can be any row.
  using PerRow = fusion::Sm90ColBroadcast<0, TileShape, float*, float, Stride<bool, _0, _0>, 1>;
  using PerCol = fusion::Sm90RowBroadcast<0, TileShape, float*, float, Stride<_0, bool, _0>, 1>;
  using ScaleA = std::conditional_t<kSwap, PerCol, PerRow>;  // per token: y's row
  using ScaleB = std::conditional_t<kSwap, PerRow, PerCol>;  // per channel: y's column
  // (acc * sa) * sb: the order of the reference and of the other grouped backends.
  using AccSa = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>,
                                fusion::Sm90AccFetch, ScaleA>;
  using RowFusion = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, OutT, float, kRound>, AccSa, ScaleB>;
  // Block scales are applied in the mainloop, each 128-wide K block's sum times sa x sb.
  using BlockFusion =
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, OutT, float, kRound>, fusion::Sm90AccFetch>;
  using Fusion = std::conditional_t<kBlock, BlockFusion, RowFusion>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, OutT, LayoutD*,
      kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, Fusion>::CollectiveOp;
  using Stages =
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>;
  // Block scales as the dense backend lays them out (1 x 128 activation, 128 x 128 weight blocks).
  using ScaleConfig = gemm::cutlass_sm90::detail::BlockScaleConfig<kSwap>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  struct RowMainloop {
    using Op = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4m3, LayoutA*, kAlignAB, E4m3, LayoutB*, kAlignAB, float,
        TileShape, ClusterShape, Stages, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  };
  struct BlockMainloop {
    using Op = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4m3, cute::tuple<LayoutA*, LayoutSFA*>, kAlignAB, E4m3,
        cute::tuple<LayoutB*, LayoutSFB*>, kAlignAB, float, TileShape, ClusterShape, Stages,
        cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
  };
  using Mainloop = typename std::conditional_t<kBlock, BlockMainloop, RowMainloop>::Op;
  using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
};

// The dense CUTLASS backend's helpers: a stride with its leading dimension set, a broadcast node's arguments.
using gemm::cutlass_sm90::detail::broadcast;
using gemm::cutlass_sm90::detail::leading_stride;

// CUTLASS's per-group arguments, in one workspace buffer.
template <class K>
struct Arrays {
  typename K::Shape3* shapes;
  const typename K::E4m3** a;
  const typename K::E4m3** b;
  typename K::OutT** d;
  const float** sa;
  const float** sb;
  typename K::StrideA* da;
  typename K::StrideB* db;
  typename K::StrideD* dd;
  // Block scales: each group's scale layouts (CUTLASS's SFA and SFB; sa and sb above are their
  // pointers, swapped with the operands), and the activation scales repacked per group.
  typename K::LayoutSFA* lsfa;
  typename K::LayoutSFB* lsfb;
  float* packed_sa;
};

template <class K>
struct PrepareParams {
  Arrays<K> arr;
  kernels::moe::Groups groups;
  const uint8_t* a;
  const uint8_t* b;
  void* out;
  const float* sa;
  const float* sb;
  int n, k, kblocks;
  bool row;            // row scales: sa per token, sb per channel of each expert
  bool sa_per_expert;  // tensor scales: sa [E] (else one element)
  typename K::StrideA da;
  typename K::StrideB db;
  typename K::StrideD dd;
};

// One thread per expert: its rows from the device counts (clamped as the other backends clamp them).
template <class K>
__global__ void prepare_groups(const PrepareParams<K> p) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= p.groups.experts) return;
  const kernels::moe::GroupRows g = kernels::moe::group_rows(p.groups, e);
  const auto* a = reinterpret_cast<const typename K::E4m3*>(p.a + int64_t(g.row0) * p.k);
  const auto* b = reinterpret_cast<const typename K::E4m3*>(p.b + int64_t(e) * p.n * p.k);
  if constexpr (K::kSwap) {
    p.arr.shapes[e] = typename K::Shape3(p.n, g.count, p.k);
    p.arr.a[e] = b;
    p.arr.b[e] = a;
  } else {
    p.arr.shapes[e] = typename K::Shape3(g.count, p.n, p.k);
    p.arr.a[e] = a;
    p.arr.b[e] = b;
  }
  p.arr.d[e] = static_cast<typename K::OutT*>(p.out) + int64_t(g.row0) * p.n;
  if constexpr (K::kBlock) {
    // The activation's scales of this group, repacked [kblocks, rows] (repack_block_sa), and the
    // expert's weight scales [ceil(N / 128), kblocks].
    const float* act = p.arr.packed_sa + int64_t(p.kblocks) * g.row0;
    const float* wgt = p.sb + int64_t(e) * ((p.n + 127) / 128) * p.kblocks;
    p.arr.sa[e] = K::kSwap ? wgt : act;
    p.arr.sb[e] = K::kSwap ? act : wgt;
    const auto shape = K::kSwap ? make_shape(p.n, g.count, p.k, 1) : make_shape(g.count, p.n, p.k, 1);
    p.arr.lsfa[e] = K::ScaleConfig::tile_atom_to_shape_SFA(shape);
    p.arr.lsfb[e] = K::ScaleConfig::tile_atom_to_shape_SFB(shape);
  } else {
    p.arr.sa[e] = p.row ? p.sa + g.row0 : (p.sa_per_expert ? p.sa + e : p.sa);
    p.arr.sb[e] = p.row ? p.sb + int64_t(e) * p.n : p.sb + e;
  }
  p.arr.da[e] = p.da;
  p.arr.db[e] = p.db;
  p.arr.dd[e] = p.dd;
}

// Block scale_a (any layout and storage the grouped API takes) as f32 [kblocks, rows] per group at
// kblocks * row0: the compact M-major layout CUTLASS builds from a group's own row count. One block
// row per expert.
struct RepackParams {
  kernels::moe::Groups groups;
  kernels::moe::BlockScaleA bsa;
  int kblocks;
  float* out;
};

__global__ void repack_block_sa(const RepackParams p) {
  const int e = blockIdx.y;
  const kernels::moe::GroupRows g = kernels::moe::group_rows(p.groups, e);
  float* dst = p.out + int64_t(p.kblocks) * g.row0;
  const int64_t n = int64_t(g.count) * p.kblocks;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int kb = static_cast<int>(i / g.count), r = static_cast<int>(i % g.count);
    dst[i] = kernels::moe::block_sa(p.bsa, g.batch, g.t0 + r, kb);
  }
}

constexpr size_t round16(size_t v) { return (v + 15) / 16 * 16; }

// The per-group arrays laid out from `base`, each 16-byte aligned; `bytes` gets the size they take.
// With a null base only the size is computed (every pointer null).
template <class K>
Arrays<K> carve(void* base, const GroupedProblem& p, size_t& bytes) {
  const size_t e = static_cast<size_t>(p.experts);
  bytes = 0;
  auto take = [&](size_t n) -> void* {
    const size_t at = bytes;
    bytes += round16(n);
    return base ? static_cast<char*>(base) + at : nullptr;
  };
  Arrays<K> r;
  r.shapes = static_cast<typename K::Shape3*>(take(e * sizeof(typename K::Shape3)));
  r.a = static_cast<const typename K::E4m3**>(take(e * sizeof(void*)));
  r.b = static_cast<const typename K::E4m3**>(take(e * sizeof(void*)));
  r.d = static_cast<typename K::OutT**>(take(e * sizeof(void*)));
  r.sa = static_cast<const float**>(take(e * sizeof(void*)));
  r.sb = static_cast<const float**>(take(e * sizeof(void*)));
  r.da = static_cast<typename K::StrideA*>(take(e * sizeof(typename K::StrideA)));
  r.db = static_cast<typename K::StrideB*>(take(e * sizeof(typename K::StrideB)));
  r.dd = static_cast<typename K::StrideD*>(take(e * sizeof(typename K::StrideD)));
  r.lsfa = nullptr, r.lsfb = nullptr, r.packed_sa = nullptr;
  if constexpr (K::kBlock) {
    r.lsfa = static_cast<typename K::LayoutSFA*>(take(e * sizeof(typename K::LayoutSFA)));
    r.lsfb = static_cast<typename K::LayoutSFB*>(take(e * sizeof(typename K::LayoutSFB)));
    r.packed_sa = static_cast<float*>(
        take(static_cast<size_t>(a_rows(p)) * static_cast<size_t>((p.k + 127) / 128) * sizeof(float)));
  }
  return r;
}

inline void check_status(cutlass::Status s, const char* what) {
  if (s == cutlass::Status::kSuccess) return;
  const cudaError_t e = cudaGetLastError();
  FP8ROUTE_FAIL(ErrorCategory::cuda_error, "grouped cutlass: " << what << " failed: " << cutlassGetStatusString(s)
                                                                 << (e != cudaSuccess ? std::string(" (") +
                                                                                            cudaGetErrorString(e) + ")"
                                                                                      : ""));
}

template <class K>
typename K::Gemm::Arguments arguments(const GroupedProblem& p, const Arrays<K>& arr, const DeviceInfo& dev) {
  typename K::Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {static_cast<int>(p.experts), arr.shapes, nullptr};  // shapes on the device only
  args.mainloop.ptr_A = arr.a;
  args.mainloop.dA = arr.da;
  args.mainloop.ptr_B = arr.b;
  args.mainloop.dB = arr.db;
  if constexpr (K::kBlock) {
    args.mainloop.ptr_SFA = arr.sa;
    args.mainloop.layout_SFA = arr.lsfa;
    args.mainloop.ptr_SFB = arr.sb;
    args.mainloop.layout_SFB = arr.lsfb;
    args.epilogue.thread = {{}, {}};
  } else {
    const bool row = p.scale == ScaleKind::row;
    args.epilogue.thread = {{{}, broadcast<typename K::ScaleA>(arr.sa, row), {}},
                            broadcast<typename K::ScaleB>(arr.sb, row),
                            {}};
  }
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = arr.d;
  args.epilogue.dD = arr.dd;
  args.hw_info.device_id = dev.index;
  args.hw_info.sm_count = dev.sm_count;
  return args;
}

template <class K>
void run_kernel(const GroupedProblem& p, const GroupedOperands& ops, Workspaces& workspaces, cudaStream_t stream) {
  const DeviceInfo& dev = device_info(-1);
  const char* who = K::kWho;
  // The per-group arrays first, then CUTLASS's own workspace (its tensor maps), in one buffer that
  // belongs to this stream (or to the graph being captured): concurrent calls never share it.
  // CUTLASS's part starts 256-byte aligned: it holds TMA descriptors (64-byte alignment).
  size_t arrays = 0;
  const Arrays<K> probe = carve<K>(nullptr, p, arrays);
  const size_t head = (arrays + 255) / 256 * 256;
  const size_t cutlass_bytes = K::Gemm::get_workspace_size(arguments<K>(p, probe, dev));
  void* base = workspaces.get(dev.index, head + cutlass_bytes, stream, who);
  const Arrays<K> arr = carve<K>(base, p, arrays);
  void* cutlass_ws = cutlass_bytes == 0 ? nullptr : static_cast<char*>(base) + head;

  PrepareParams<K> pp{};
  pp.arr = arr;
  pp.groups = {ops.groups, static_cast<int>(p.experts), static_cast<int>(p.rows), p.form == GroupedForm::masked,
               p.offsets_with_start};
  pp.a = ops.a;
  pp.b = ops.b;
  pp.out = ops.out;
  pp.sa = static_cast<const float*>(ops.sa);
  pp.sb = ops.sb;
  pp.n = static_cast<int>(p.n);
  pp.k = static_cast<int>(p.k);
  pp.kblocks = static_cast<int>((p.k + 127) / 128);
  pp.row = p.scale == ScaleKind::row;
  pp.sa_per_expert = p.sa_per_expert;
  // A and B are K-major with row stride K; D is y's rows (row stride N), or y^T column-major with
  // column stride N when swapped: the same bytes.
  pp.da = leading_stride<typename K::StrideA>(p.k);
  pp.db = leading_stride<typename K::StrideB>(p.k);
  pp.dd = leading_stride<typename K::StrideD>(p.n);
  constexpr int kThreads = 128;
  if constexpr (K::kBlock) {
    RepackParams rp{pp.groups,
                    {ops.sa, ops.sa_stride_e, ops.sa_stride_t, ops.sa_stride_c,
                     p.sa_storage == ScaleStorage::ue8m0_packed},
                    pp.kblocks, arr.packed_sa};
    // Enough blocks per expert for the most rows one expert can hold (M_max or M_total).
    const int64_t most = p.rows * pp.kblocks;
    const dim3 grid(static_cast<unsigned>(std::clamp<int64_t>((most + 255) / 256, 1, 64)),
                    static_cast<unsigned>(p.experts));
    repack_block_sa<<<grid, 256, 0, stream>>>(rp);
    FP8ROUTE_CUDA_CHECK(cudaGetLastError());
  }
  const int blocks = static_cast<int>((p.experts + kThreads - 1) / kThreads);
  prepare_groups<K><<<blocks, kThreads, 0, stream>>>(pp);
  FP8ROUTE_CUDA_CHECK(cudaGetLastError());

  const typename K::Gemm::Arguments args = arguments<K>(p, arr, dev);
  check_status(K::Gemm::can_implement(args), "can_implement");
  check_status(K::GemmKernel::initialize_workspace(args, cutlass_ws, stream), "workspace initialization");
  typename K::GemmKernel::Params params = K::GemmKernel::to_underlying_arguments(args, cutlass_ws);
  static std::array<std::once_flag, 64> once;
  std::call_once(once.at(static_cast<size_t>(dev.index)), [] {
    FP8ROUTE_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<typename K::GemmKernel>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             K::GemmKernel::SharedStorageSize));
  });
  check_status(K::Gemm::run(params, stream), "launch");
}

template <bool kBlock>
using Wide = Kernel<128, 128, false, kBlock>;
template <bool kBlock>
using Narrow = Kernel<128, 32, true, kBlock>;
template <bool kBlock>
using Mid = Kernel<128, 64, true, kBlock>;

template <bool kBlock>
void run_by_rows(const GroupedProblem& p, const GroupedOperands& ops, Workspaces& workspaces, cudaStream_t stream) {
  if (p.rows <= 32) run_kernel<Narrow<kBlock>>(p, ops, workspaces, stream);
  else if (p.rows <= 64) run_kernel<Mid<kBlock>>(p, ops, workspaces, stream);
  else run_kernel<Wide<kBlock>>(p, ops, workspaces, stream);
}

}  // namespace cutlass_grouped
#endif  // FP8ROUTE_HAVE_CUTLASS

namespace {

class CutlassGroupedBackend final : public GroupedBackend {
 public:
  std::string_view name() const override { return "cutlass"; }

  std::string supports(const GroupedProblem& p) const override {
#ifndef FP8ROUTE_HAVE_CUTLASS
    (void)p;
    return "cutlass: this build has no CUTLASS headers (scripts/setup.sh installs them)";
#else
    if (p.scale == ScaleKind::block && p.k % 128 != 0)
      return "cutlass: block scales need K % 128 == 0, got K = " + std::to_string(p.k);
    if (p.out != DType::bf16) return "cutlass: out must be bf16";
    if (std::string why = sm90_operands_reason(p, "cutlass", std::numeric_limits<int32_t>::max()); !why.empty())
      return why;
    if (p.n % 8 != 0) return "cutlass: N must be a multiple of 8 (16-byte aligned output rows for TMA stores), got " +
                             std::to_string(p.n);
    if (p.n > std::numeric_limits<int32_t>::max() || p.k > std::numeric_limits<int32_t>::max())
      return "cutlass: N and K must be int32";
    return sm90_device_reason("cutlass");
#endif
  }

  void run(const GroupedProblem& p, const GroupedOperands& ops, cudaStream_t stream) const override {
#ifdef FP8ROUTE_HAVE_CUTLASS
    // The most rows one group can hold (masked: M_max; contiguous: M_total) picks the tile.
    if (p.scale == ScaleKind::block) cutlass_grouped::run_by_rows<true>(p, ops, workspaces_, stream);
    else cutlass_grouped::run_by_rows<false>(p, ops, workspaces_, stream);
#else
    (void)p, (void)ops, (void)stream;
    FP8ROUTE_FAIL(ErrorCategory::unsupported, "cutlass: this build has no CUTLASS headers");
#endif
  }

#ifdef FP8ROUTE_HAVE_CUTLASS
 private:
  mutable Workspaces workspaces_{"grouped cutlass workspace"};
#endif
};

}  // namespace

const GroupedBackend& cutlass_backend() {
  static const CutlassGroupedBackend backend;
  return backend;
}

}  // namespace fp8route::moe
