#pragma once
// The CUTLASS 3.x SM90 kernels of the cutlass_sm90 backend: a chain of `using` declarations built
// from one ConfigSpec (config.h) and fed to CUTLASS's collective builders. Included only by the
// generated translation units (one per line of configs.def, see CMakeLists.txt), each of which
// instantiates kernel_fns<config, dtype> for bf16 and f16.
//
// Both operands are K-major (a [M, K] and b [N, K] row-major: the TN GEMM), fp32 accumulation.
// - row family: y = acc * sa * sb + bias in the epilogue (EVT). sa and sb are each a vector or a
//   scalar at run time (CUTLASS's dynamic broadcast: stride 1 or 0), so one kernel serves the
//   tensor kind and all four row cases; a null bias reads as 0 (EVT null default).
// - block family: CUTLASS's blockwise-scaled mainloop scales each 128-wide K block's partial sum
//   by sa[kb, m] * sb[n / 128, kb] before adding it; the epilogue adds the bias.
// - swapab: CUTLASS computes y^T = b a^T (its M is our N), so that a small M becomes the narrow N
//   of the tile; D is written column-major, which is y row-major, and the per-row and per-column
//   operands of the epilogue trade places.

#include <cuda_runtime_api.h>

#include <array>
#include <mutex>
#include <string>
#include <type_traits>

#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_visitor_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/error.h"
#include "gemm/cutlass_sm90/config.h"

namespace fp8route::gemm::cutlass_sm90 {
namespace detail {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

inline void check_status(cutlass::Status s, const char* what, const ConfigSpec& c) {
  if (s == cutlass::Status::kSuccess) return;
  const cudaError_t e = cudaGetLastError();  // a failed launch leaves its reason here
  FP8ROUTE_FAIL(ErrorCategory::cuda_error,
                "cutlass_sm90/" << config_name(c) << ": " << what << " failed: " << cutlassGetStatusString(s)
                                << (e != cudaSuccess ? std::string(" (") + cudaGetErrorString(e) + ")" : ""));
}

// A stride type with its one dynamic leading stride set (mode 0 for row-major / K-major, mode 1
// for column-major); the batch stride stays 0 (one batch).
template <class S>
S leading_stride(int64_t ld) {
  S s{};
  if constexpr (is_static_v<std::remove_cvref_t<decltype(get<0>(s))>>)
    get<1>(s) = ld;
  else
    get<0>(s) = ld;
  return s;
}

// Arguments of a dynamic broadcast node (Stride<bool, _0, _0> or Stride<_0, bool, _0>): `vector`
// true reads p[i] along the broadcast mode, false reads p[0] everywhere.
// `p` is the node's pointer, or its array of per-group pointers (pointer-array grouped kernels).
template <class Node, class P>
typename Node::Arguments broadcast(P p, bool vector) {
  typename Node::StrideMNL s{};
  if constexpr (std::is_same_v<std::remove_cvref_t<decltype(get<0>(s))>, bool>)
    get<0>(s) = vector;
  else
    get<1>(s) = vector;
  return {p, {}, s};  // null_default: zero
}

// Block scales: A (a, or b when swapped) and B granularities; a's scales are M-major, b's K-major.
template <bool kSwap>
using BlockScaleConfig =
    std::conditional_t<kSwap, cutlass::detail::Sm90BlockwiseScaleConfig<128, 1, 128, GMMA::Major::K, GMMA::Major::MN>,
                       cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, GMMA::Major::MN, GMMA::Major::K>>;

template <ConfigSpec C, class OutT>
struct Kernel {
  static constexpr bool kSwap = C.operands == Operands::swapab;
  static constexpr bool kBlock = C.family == Family::block;
  static constexpr bool kCoop = C.schedule == Schedule::coop;
  static constexpr bool kStreamK = C.tiles == Tiles::streamk;

  static_assert(C.tile_k == 128,
                "K tile must be 128: the block scales' K granularity, and the "
                "precise mainloop promotes every 4 wgmma k-steps of 32");
  static_assert(!kCoop || C.tile_m >= 128, "cooperative tiles split M over two 64-row warpgroups");
  static_assert(!kStreamK || kCoop, "CUTLASS's pingpong kernel has no stream-K scheduler");
  static_assert(!kBlock || C.accum == Accum::precise, "the blockwise mainloop always promotes to fp32");
  // The promoting mainloops (precise, block) keep a second accumulator in registers: 2 x 64 fp32
  // per thread fits the 232-register consumer budget, 2 x 128 spills.
  static_assert(C.accum == Accum::fastacc || C.tile_m / (kCoop ? 2 : 1) * C.tile_n <= 64 * 128,
                "a promoting mainloop with more than 64x128 fp32 per warpgroup spills: use fastacc");

  using TileShape = Shape<Int<C.tile_m>, Int<C.tile_n>, Int<C.tile_k>>;
  using ClusterShape = Shape<Int<C.cluster_m>, Int<C.cluster_n>, _1>;
  using E4m3 = cutlass::float_e4m3_t;
  using LayoutA = cutlass::layout::RowMajor;     // K-major
  using LayoutB = cutlass::layout::ColumnMajor;  // K-major
  using LayoutD = std::conditional_t<kSwap, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignAB = 16;  // elements: TMA moves 16-byte units
  static constexpr int kAlignD = 16 / sizeof(OutT);

  // ---- epilogue ----------------------------------------------------------------------------------
  // Per CUTLASS row (Col broadcast) or per CUTLASS column (Row broadcast), vector or scalar.
  template <class T>
  using PerRow = fusion::Sm90ColBroadcast<0, TileShape, T, float, Stride<bool, _0, _0>>;
  template <class T>
  using PerCol = fusion::Sm90RowBroadcast<0, TileShape, T, float, Stride<_0, bool, _0>>;
  template <class T>
  using PerY_Row = std::conditional_t<kSwap, PerCol<T>, PerRow<T>>;  // indexed by y's row m
  template <class T>
  using PerY_Col = std::conditional_t<kSwap, PerRow<T>, PerCol<T>>;  // indexed by y's column n
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  using ScaleA = PerY_Row<float>;
  using ScaleB = PerY_Col<float>;
  using Bias = PerY_Col<OutT>;
  // (acc * sa) * sb + bias: the reference's order (kernels/gemm_reference.cuh), the last two fused.
  using AccSa = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>,
                                fusion::Sm90AccFetch, ScaleA>;
  using RowFusion =
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::homogeneous_multiply_add, OutT, float, kRound>, AccSa,
                      ScaleB, Bias>;
  using BlockFusion =
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, OutT, float, kRound>, fusion::Sm90AccFetch, Bias>;
  using Fusion = std::conditional_t<kBlock, BlockFusion, RowFusion>;

  using EpilogueSchedule = std::conditional_t<kCoop, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                              cutlass::epilogue::TmaWarpSpecialized>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, OutT, LayoutD,
      kAlignD, EpilogueSchedule, Fusion>::CollectiveOp;
  using Stages = cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
      sizeof(typename Epilogue::SharedStorage))>;

  // ---- mainloop ----------------------------------------------------------------------------------
  using ScaleConfig = BlockScaleConfig<kSwap>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  struct RowMainloop {
    using Schedule = std::conditional_t<
        C.accum == Accum::fastacc,
        std::conditional_t<kCoop, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                           cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>,
        std::conditional_t<kCoop, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                           cutlass::gemm::KernelTmaWarpSpecializedPingpong>>;
    using Op = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4m3, LayoutA, kAlignAB, E4m3, LayoutB, kAlignAB,
        float, TileShape, ClusterShape, Stages, Schedule>::CollectiveOp;
  };
  struct BlockMainloop {
    using Schedule = std::conditional_t<kCoop, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                                        cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise>;
    using Op = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4m3, cute::tuple<LayoutA, LayoutSFA>, kAlignAB,
        E4m3, cute::tuple<LayoutB, LayoutSFB>, kAlignAB, float, TileShape, ClusterShape, Stages,
        Schedule>::CollectiveOp;
  };
  using Mainloop = typename std::conditional_t<kBlock, BlockMainloop, RowMainloop>::Op;

  using Scheduler =
      std::conditional_t<kStreamK, cutlass::gemm::StreamKScheduler, cutlass::gemm::PersistentScheduler>;
  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments arguments(const KernelArgs& x) {
    // CUTLASS's rows and columns: y's, or y^T's when swapped.
    const int rows = kSwap ? x.n : x.m, cols = kSwap ? x.m : x.n;
    const auto* pa = static_cast<const E4m3*>(kSwap ? x.b : x.a);
    const auto* pb = static_cast<const E4m3*>(kSwap ? x.a : x.b);
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {rows, cols, x.k, 1};
    args.mainloop.ptr_A = pa;
    args.mainloop.dA = leading_stride<typename GemmKernel::StrideA>(kSwap ? x.ldb : x.lda);
    args.mainloop.ptr_B = pb;
    args.mainloop.dB = leading_stride<typename GemmKernel::StrideB>(kSwap ? x.lda : x.ldb);
    const auto* bias = static_cast<const OutT*>(x.bias);
    if constexpr (kBlock) {
      // Our sa is [ceil(K/128), align(M, 4)]: CUTLASS's M-major layout for an M of align(M, 4),
      // which is exactly our row stride (TMA needs it 16-byte aligned; the padding rows scale
      // only rows past M, which are never stored).
      const int m_pad = (x.m + 3) / 4 * 4;
      const auto scale_shape = kSwap ? make_shape(x.n, m_pad, x.k, 1) : make_shape(m_pad, x.n, x.k, 1);
      args.mainloop.ptr_SFA = kSwap ? x.sb : x.sa;
      args.mainloop.layout_SFA = ScaleConfig::tile_atom_to_shape_SFA(scale_shape);
      args.mainloop.ptr_SFB = kSwap ? x.sa : x.sb;
      args.mainloop.layout_SFB = ScaleConfig::tile_atom_to_shape_SFB(scale_shape);
      args.epilogue.thread = {{}, broadcast<Bias>(bias, true), {}};
    } else {
      args.epilogue.thread = {{{}, broadcast<ScaleA>(x.sa, x.sa_vector), {}},
                              broadcast<ScaleB>(x.sb, x.sb_vector),
                              broadcast<Bias>(bias, true),
                              {}};
    }
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = leading_stride<typename GemmKernel::StrideC>(x.ldo);
    args.epilogue.ptr_D = static_cast<OutT*>(x.out);
    args.epilogue.dD = leading_stride<typename GemmKernel::StrideD>(x.ldo);
    args.hw_info.device_id = x.device;
    args.hw_info.sm_count = x.sm_count;
    return args;
  }

  static bool can_implement(const KernelArgs& x) {
    return Gemm::can_implement(arguments(x)) == cutlass::Status::kSuccess;
  }

  static size_t workspace_bytes(const KernelArgs& x) { return Gemm::get_workspace_size(arguments(x)); }

  static void launch(const KernelArgs& x, void* workspace, cudaStream_t stream) {
    const typename Gemm::Arguments args = arguments(x);
    check_status(GemmKernel::initialize_workspace(args, workspace, stream), "workspace initialization", C);
    typename GemmKernel::Params params = GemmKernel::to_underlying_arguments(args, workspace);
    allow_smem(x.device);
    check_status(Gemm::run(params, stream), "launch", C);
  }

  // Opts the kernel into its shared memory (> 48 KB) once per device, not per call.
  static void allow_smem(int device) {
    static std::array<std::once_flag, 64> once;
    std::call_once(once.at(device), [] {
      FP8ROUTE_CUDA_CHECK(cudaFuncSetAttribute(cutlass::device_kernel<GemmKernel>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               GemmKernel::SharedStorageSize));
    });
  }
};

}  // namespace detail

template <ConfigSpec C, DType Out>
KernelFns kernel_fns() {
  static_assert(Out == DType::bf16 || Out == DType::f16, "outputs are bf16 or f16");
  using K = detail::Kernel<C, std::conditional_t<Out == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>>;
  KernelFns f;  // assigned member by member: g++ rejects the braced form in nvcc's host output
  f.can_implement = &K::can_implement;
  f.workspace_bytes = &K::workspace_bytes;
  f.launch = &K::launch;
  return f;
}

}  // namespace fp8route::gemm::cutlass_sm90

// The one line of a generated translation unit: a dtype and the columns of one configs.def line.
#define FP8ROUTE_CUTLASS_KERNEL(dtype, ...)                                          \
  namespace fp8route::gemm::cutlass_sm90 {                                           \
  template KernelFns kernel_fns<FP8ROUTE_CUTLASS_SPEC(__VA_ARGS__), DType::dtype>(); \
  }
