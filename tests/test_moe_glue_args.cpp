// The MoE decode glue's contract without a GPU (moe.h, "Decode glue"; quant.h,
// scatter_per_token_quant): every bad argument raises Error(invalid_argument) naming it, and T = 0
// returns before anything is enqueued. Pointers are never dereferenced (checks come first, and empty
// calls enqueue nothing), so fake device addresses suffice; a call that passed its checks would need
// a GPU, so valid non-empty calls are not made here (tests/python/test_moe_glue_gpu.py runs them).

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "fp8route/error.h"
#include "fp8route/moe.h"
#include "fp8route/quant.h"

namespace fp8route {
namespace {

// Operands 16 GiB apart, so that none overlaps another.
void* fake(int slot) { return reinterpret_cast<void*>(uintptr_t{0x10000000} + (uintptr_t(slot) << 34)); }

TensorView tensor(int slot, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(slot), dtype, shape);
}

// The message of the invalid_argument `call` throws ("" if none).
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument) << e.what();
    return e.what();
  }
  return "";
}

#define EXPECT_NAMES(call, what)                                                                   \
  do {                                                                                             \
    const std::string msg_ = error_of([&] { call; });                                              \
    EXPECT_NE(msg_.find("invalid argument: " what), std::string::npos)                             \
        << "expected an error naming '" << (what) << "', got '" << msg_ << "'";                      \
  } while (0)

// ---- moe_softmax_topk ----------------------------------------------------------------------------

struct Topk {
  int64_t t = 3, e = 128, k = 8;
  DType logits = DType::bf16;
  TensorView l() const { return tensor(0, logits, {t, e}); }
  TensorView w() const { return tensor(1, DType::f32, {t, k}); }
  TensorView ids() const { return tensor(2, DType::i32, {t, k}); }
};

TEST(MoeGlueArgs, SoftmaxTopkNamesEachBadArgument) {
  const Topk a;
  EXPECT_NAMES(moe_softmax_topk(tensor(0, DType::i32, {3, 128}), true, a.w(), a.ids(), nullptr), "logits: dtype");
  EXPECT_NAMES(moe_softmax_topk(tensor(0, DType::bf16, {3, 2, 64}), true, a.w(), a.ids(), nullptr), "logits: expected 2 dims");
  EXPECT_NAMES(moe_softmax_topk(tensor(0, DType::bf16, {3, 1025}), true, a.w(), a.ids(), nullptr), "logits: E = 1025");
  EXPECT_NAMES(moe_softmax_topk(tensor(0, DType::bf16, {3, 0}), true, a.w(), a.ids(), nullptr), "logits: E = 0");
  // top_k is weights' last dim: above E, above 16, or 0.
  EXPECT_NAMES(moe_softmax_topk(tensor(0, DType::f32, {3, 8}), true, tensor(1, DType::f32, {3, 9}),
                                tensor(2, DType::i32, {3, 9}), nullptr),
               "top_k: 9");
  EXPECT_NAMES(moe_softmax_topk(a.l(), true, tensor(1, DType::f32, {3, 17}), tensor(2, DType::i32, {3, 17}), nullptr),
               "top_k: 17");
  EXPECT_NAMES(moe_softmax_topk(a.l(), true, tensor(1, DType::f32, {3, 0}), tensor(2, DType::i32, {3, 0}), nullptr),
               "top_k: 0");
  EXPECT_NAMES(moe_softmax_topk(a.l(), true, tensor(1, DType::bf16, {3, 8}), a.ids(), nullptr), "weights: dtype");
  EXPECT_NAMES(moe_softmax_topk(a.l(), true, tensor(1, DType::f32, {4, 8}), a.ids(), nullptr), "weights: expected shape");
  EXPECT_NAMES(moe_softmax_topk(a.l(), true, a.w(), tensor(2, DType::f32, {3, 8}), nullptr), "ids: dtype");
  EXPECT_NAMES(moe_softmax_topk(a.l(), true, a.w(), tensor(2, DType::i32, {3, 4}), nullptr), "ids: expected shape");
  EXPECT_NAMES(moe_softmax_topk(a.l(), true, a.w(), tensor(0, DType::i32, {3, 8}), nullptr), "ids and logits overlap");
  TensorView host = a.l();
  host.device = Device::cpu();
  EXPECT_NAMES(moe_softmax_topk(host, true, a.w(), a.ids(), nullptr), "logits: ");
}

TEST(MoeGlueArgs, SoftmaxTopkWithNoTokensEnqueuesNothing) {
  for (DType d : {DType::bf16, DType::f16, DType::f32}) {
    TensorView l = TensorView::contiguous(nullptr, d, {0, 256}), w = TensorView::contiguous(nullptr, DType::f32, {0, 8}),
               ids = TensorView::contiguous(nullptr, DType::i32, {0, 8});
    EXPECT_NO_THROW(moe_softmax_topk(l, true, w, ids, nullptr)) << dtype_name(d);
  }
}

// ---- moe_grouped_topk ----------------------------------------------------------------------------

TEST(MoeGlueArgs, GroupedTopkNamesEachBadArgument) {
  const Topk a;  // E = 128, top_k = 8
  const TensorView bias = tensor(3, DType::f32, {128});
  EXPECT_NAMES(moe_grouped_topk(tensor(0, DType::i32, {3, 128}), bias, 8, 4, true, 2.5, a.w(), a.ids(), nullptr),
               "logits: dtype");
  EXPECT_NAMES(moe_grouped_topk(tensor(0, DType::bf16, {3, 1}), tensor(3, DType::f32, {1}), 1, 1, true, 1.0, a.w(),
                                a.ids(), nullptr),
               "logits: E = 1");
  EXPECT_NAMES(moe_grouped_topk(a.l(), tensor(3, DType::bf16, {128}), 8, 4, true, 1.0, a.w(), a.ids(), nullptr),
               "bias: dtype");
  EXPECT_NAMES(moe_grouped_topk(a.l(), tensor(3, DType::f32, {64}), 8, 4, true, 1.0, a.w(), a.ids(), nullptr),
               "bias: expected shape");
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 3, 1, true, 1.0, a.w(), a.ids(), nullptr), "n_group: 3");     // 128 % 3
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 64, 4, true, 1.0, a.w(), a.ids(), nullptr), "n_group: 64");   // > 32
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 0, true, 1.0, a.w(), a.ids(), nullptr), "topk_group: 0");
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 9, true, 1.0, a.w(), a.ids(), nullptr), "topk_group: 9");
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 4, true, std::numeric_limits<double>::infinity(), a.w(), a.ids(), nullptr),
               "scaling_factor: must be finite");
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 4, true, 1e300, a.w(), a.ids(), nullptr),  // inf as a float
               "scaling_factor: must be finite");
  // top_k above what the kept groups hold: 1 group of 16 experts kept, 17 asked.
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 1, true, 1.0, tensor(1, DType::f32, {3, 17}),
                                tensor(2, DType::i32, {3, 17}), nullptr),
               "top_k: 17");
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 4, true, 1.0, tensor(1, DType::f32, {3, 0}),
                                tensor(2, DType::i32, {3, 0}), nullptr),
               "top_k: 0");
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 4, true, 1.0, a.w(), tensor(2, DType::i32, {3, 4}), nullptr),
               "ids: expected shape");
  EXPECT_NAMES(moe_grouped_topk(a.l(), bias, 8, 4, true, 1.0, a.w(), tensor(3, DType::i32, {3, 8}), nullptr),
               "ids and bias overlap");
  TensorView host = bias;
  host.device = Device::cpu();
  EXPECT_NAMES(moe_grouped_topk(a.l(), host, 8, 4, true, 1.0, a.w(), a.ids(), nullptr), "bias: ");
}

TEST(MoeGlueArgs, GroupedTopkWithNoTokensEnqueuesNothing) {
  TensorView l = TensorView::contiguous(nullptr, DType::bf16, {0, 256}), w = TensorView::contiguous(nullptr, DType::f32, {0, 8}),
             ids = TensorView::contiguous(nullptr, DType::i32, {0, 8});
  EXPECT_NO_THROW(moe_grouped_topk(l, tensor(3, DType::f32, {256}), 8, 4, true, 2.5, w, ids, nullptr));
}

// ---- moe_masked_dispatch -------------------------------------------------------------------------

TEST(MoeGlueArgs, MaskedDispatchNamesEachBadArgument) {
  const TensorView ids = tensor(0, DType::i32, {4, 8}), src2dst = tensor(1, DType::i32, {4, 8}),
                   masked_m = tensor(2, DType::i32, {128}), none{};
  EXPECT_NAMES(moe_masked_dispatch(tensor(0, DType::i8, {4, 8}), none, 4, src2dst, masked_m, nullptr), "ids: dtype");
  EXPECT_NAMES(moe_masked_dispatch(tensor(0, DType::i32, {32}), none, 4, src2dst, masked_m, nullptr), "ids: expected 2 dims");
  EXPECT_NAMES(moe_masked_dispatch(tensor(0, DType::i32, {4, 0}), none, 4, tensor(1, DType::i32, {4, 0}), masked_m, nullptr),
               "ids: top_k");
  // More entries than one block takes.
  EXPECT_NAMES(moe_masked_dispatch(tensor(0, DType::i32, {513, 8}), none, 4, tensor(1, DType::i32, {513, 8}), masked_m,
                                   nullptr),
               "ids: T * top_k = 4104 entries, at most 4096");
  // 4096 entries pass the bound (the next check, of m_max, fails).
  EXPECT_NAMES(moe_masked_dispatch(tensor(0, DType::i32, {512, 8}), none, 0, tensor(1, DType::i32, {512, 8}), masked_m,
                                   nullptr),
               "m_max: must be >= 1");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, 0, src2dst, masked_m, nullptr), "m_max: must be >= 1, got 0");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, -3, src2dst, masked_m, nullptr), "m_max: must be >= 1, got -3");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, int64_t{1} << 26, src2dst, masked_m, nullptr), "m_max: E * m_max");
  // Large enough that E * m_max would overflow int64.
  EXPECT_NAMES(moe_masked_dispatch(ids, none, int64_t{1} << 62, src2dst, masked_m, nullptr), "m_max: must be < 2^31");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, 4, src2dst, tensor(2, DType::f32, {128}), nullptr), "masked_m: dtype");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, 4, src2dst, tensor(2, DType::i32, {128, 1}), nullptr), "masked_m: expected 1 dims");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, 4, tensor(1, DType::i32, {4, 7}), masked_m, nullptr), "src2dst: expected shape");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, 4, tensor(1, DType::f32, {4, 8}), masked_m, nullptr), "src2dst: dtype");
  EXPECT_NAMES(moe_masked_dispatch(ids, tensor(3, DType::f32, {256}), 4, src2dst, masked_m, nullptr), "expert_map: dtype");
  EXPECT_NAMES(moe_masked_dispatch(ids, tensor(3, DType::i32, {2, 128}), 4, src2dst, masked_m, nullptr),
               "expert_map: expected 1 dims");
  EXPECT_NAMES(moe_masked_dispatch(ids, none, 4, tensor(0, DType::i32, {4, 8}), masked_m, nullptr), "src2dst and ids overlap");
}

// ---- moe_route_masked_dispatch -------------------------------------------------------------------

TEST(MoeGlueArgs, RouteMaskedDispatchNamesEachBadArgument) {
  const TensorView logits = tensor(0, DType::bf16, {4, 64}), w = tensor(1, DType::f32, {4, 8}),
                   ids = tensor(2, DType::i32, {4, 8}), src2dst = tensor(3, DType::i32, {4, 8}),
                   masked_m = tensor(4, DType::i32, {64}), bias = tensor(5, DType::f32, {64}), none{};
  const auto call = [&](const TensorView& l, const TensorView& b, int64_t g, int64_t tg, double sc, int64_t m_max,
                        const TensorView& s2d) {
    moe_route_masked_dispatch(l, b, g, tg, true, sc, none, m_max, w, ids, s2d, masked_m, nullptr);
  };
  EXPECT_NAMES(call(tensor(0, DType::i32, {4, 64}), none, 1, 1, 1.0, 4, src2dst), "logits: dtype");
  EXPECT_NAMES(call(logits, none, 8, 1, 1.0, 4, src2dst), "n_group, topk_group, scaling_factor: softmax routing");
  EXPECT_NAMES(call(logits, none, 1, 1, 2.5, 4, src2dst), "n_group, topk_group, scaling_factor: softmax routing");
  EXPECT_NAMES(call(logits, bias, 5, 1, 1.0, 4, src2dst), "n_group: 5 must divide E = 64");
  EXPECT_NAMES(call(logits, tensor(5, DType::f32, {63}), 8, 4, 1.0, 4, src2dst), "bias: expected shape");
  EXPECT_NAMES(call(logits, none, 1, 1, 1.0, 0, src2dst), "m_max: must be >= 1");
  EXPECT_NAMES(call(logits, none, 1, 1, 1.0, 4, tensor(3, DType::i32, {4, 7})), "src2dst: expected shape");
  EXPECT_NAMES(call(logits, none, 1, 1, 1.0, 4, tensor(2, DType::i32, {4, 8})), "src2dst and ids overlap");
  EXPECT_NAMES(call(logits, none, 1, 1, 1.0, 4, tensor(1, DType::i32, {4, 8})), "src2dst and weights overlap");
  // The routing writes ids and weights before the dispatch reads expert_map.
  EXPECT_NAMES(moe_route_masked_dispatch(logits, none, 1, 1, true, 1.0, tensor(2, DType::i32, {64}), 4, w, ids, src2dst,
                                         masked_m, nullptr),
               "ids and expert_map overlap");
  EXPECT_NAMES(moe_route_masked_dispatch(logits, none, 1, 1, true, 1.0, tensor(1, DType::i32, {64}), 4, w, ids, src2dst,
                                         masked_m, nullptr),
               "weights and expert_map overlap");
  EXPECT_NAMES(moe_route_masked_dispatch(tensor(0, DType::bf16, {513, 64}), none, 1, 1, true, 1.0, none, 4,
                                         tensor(1, DType::f32, {513, 8}), tensor(2, DType::i32, {513, 8}),
                                         tensor(3, DType::i32, {513, 8}), masked_m, nullptr),
               "ids: T * top_k = 4104 entries, at most 4096");
  // No tokens: nothing enqueued (masked_m keeps the caller's zeros).
  EXPECT_NO_THROW(moe_route_masked_dispatch(TensorView::contiguous(nullptr, DType::bf16, {0, 64}), none, 1, 1, true,
                                            1.0, none, 4, TensorView::contiguous(nullptr, DType::f32, {0, 8}),
                                            TensorView::contiguous(nullptr, DType::i32, {0, 8}),
                                            TensorView::contiguous(nullptr, DType::i32, {0, 8}), masked_m, nullptr));
}

// ---- moe_contiguous_dispatch ---------------------------------------------------------------------

TEST(MoeGlueArgs, ContiguousDispatchNamesEachBadArgument) {
  const TensorView ids = tensor(0, DType::i32, {4, 8}), src2dst = tensor(1, DType::i32, {4, 8}),
                   offsets = tensor(2, DType::i32, {129}), ws = tensor(4, DType::i32, {128}), none{};
  EXPECT_EQ(moe_contiguous_dispatch_workspace(32, 128), 128);  // one chunk of 1024 entries
  EXPECT_EQ(moe_contiguous_dispatch_workspace(1025, 16), 32);
  EXPECT_EQ(moe_contiguous_dispatch_workspace(0, 16), 0);
  EXPECT_NAMES(moe_contiguous_dispatch_workspace(-1, 16), "entries, experts: must be >= 0");
  EXPECT_NAMES(moe_contiguous_dispatch(tensor(0, DType::i8, {4, 8}), none, src2dst, offsets, ws, nullptr), "ids: dtype");
  EXPECT_NAMES(moe_contiguous_dispatch(tensor(0, DType::i32, {32}), none, src2dst, offsets, ws, nullptr),
               "ids: expected 2 dims");
  EXPECT_NAMES(moe_contiguous_dispatch(tensor(0, DType::i32, {4, 0}), none, tensor(1, DType::i32, {4, 0}), offsets, ws,
                                       nullptr),
               "ids: top_k");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, src2dst, tensor(2, DType::i32, {1}), ws, nullptr), "offsets: [E + 1]");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, src2dst, tensor(2, DType::i32, {1026}), ws, nullptr),
               "offsets: [E + 1] with 1 <= E <= 1024");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, src2dst, tensor(2, DType::f32, {129}), ws, nullptr), "offsets: dtype");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, tensor(1, DType::i32, {4, 7}), offsets, ws, nullptr),
               "src2dst: expected shape");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, src2dst, offsets, tensor(4, DType::i32, {127}), nullptr),
               "workspace: a contiguous int32 tensor of at least moe_contiguous_dispatch_workspace(T * top_k, E) = 128");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, src2dst, offsets, tensor(4, DType::f32, {128}), nullptr),
               "workspace: dtype");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, tensor(3, DType::f32, {256}), src2dst, offsets, ws, nullptr),
               "expert_map: dtype");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, tensor(0, DType::i32, {4, 8}), offsets, ws, nullptr),
               "src2dst and ids overlap");
  EXPECT_NAMES(moe_contiguous_dispatch(ids, none, src2dst, offsets, tensor(2, DType::i32, {128}), nullptr),
               "offsets and workspace overlap");
}

TEST(MoeGlueArgs, MaskedDispatchWithNoTokensEnqueuesNothing) {
  const TensorView ids = TensorView::contiguous(nullptr, DType::i32, {0, 8}),
                   src2dst = TensorView::contiguous(nullptr, DType::i32, {0, 8});
  EXPECT_NO_THROW(moe_masked_dispatch(ids, TensorView{}, 4, src2dst, tensor(2, DType::i32, {128}), nullptr));
  EXPECT_NO_THROW(moe_masked_dispatch(ids, tensor(3, DType::i32, {256}), 4, src2dst, tensor(2, DType::i32, {32}), nullptr));
}

// ---- moe_combine ----------------------------------------------------------------------------------

TEST(MoeGlueArgs, CombineNamesEachBadArgument) {
  const TensorView rows = tensor(0, DType::bf16, {64, 256}), src2dst = tensor(1, DType::i32, {4, 8}),
                   w = tensor(2, DType::f32, {4, 8}), out = tensor(3, DType::bf16, {4, 256});
  EXPECT_NAMES(moe_combine(tensor(0, DType::f32, {64, 256}), src2dst, w, out, nullptr), "down_rows: dtype");
  EXPECT_NAMES(moe_combine(tensor(0, DType::bf16, {64, 260}), src2dst, w, tensor(3, DType::bf16, {4, 260}), nullptr),
               "down_rows: H = 260");
  EXPECT_NAMES(moe_combine(tensor(0, DType::bf16, {8, 8, 256}), src2dst, w, out, nullptr), "down_rows: expected 2 dims");
  EXPECT_NAMES(moe_combine(rows, tensor(1, DType::f32, {4, 8}), w, out, nullptr), "src2dst: dtype");
  EXPECT_NAMES(moe_combine(rows, tensor(1, DType::i32, {4, 0}), tensor(2, DType::f32, {4, 0}), out, nullptr), "src2dst: top_k");
  EXPECT_NAMES(moe_combine(rows, src2dst, tensor(2, DType::bf16, {4, 8}), out, nullptr), "weights: dtype");
  EXPECT_NAMES(moe_combine(rows, src2dst, tensor(2, DType::f32, {4, 2}), out, nullptr), "weights: expected shape");
  EXPECT_NAMES(moe_combine(rows, src2dst, w, tensor(3, DType::f16, {4, 256}), nullptr), "out: dtype f16");
  EXPECT_NAMES(moe_combine(rows, src2dst, w, tensor(3, DType::bf16, {4, 128}), nullptr), "out: expected shape");
  EXPECT_NAMES(moe_combine(rows, src2dst, w, tensor(0, DType::bf16, {4, 256}), nullptr), "out and down_rows overlap");
}

TEST(MoeGlueArgs, CombineWithNoTokensEnqueuesNothing) {
  for (DType o : {DType::bf16, DType::f32})
    EXPECT_NO_THROW(moe_combine(tensor(0, DType::bf16, {16, 128}), TensorView::contiguous(nullptr, DType::i32, {0, 8}),
                                TensorView::contiguous(nullptr, DType::f32, {0, 8}),
                                TensorView::contiguous(nullptr, o, {0, 128}), nullptr))
        << dtype_name(o);
}

// ---- scatter_per_token_quant ----------------------------------------------------------------------

TEST(MoeGlueArgs, ScatterPerTokenQuantNamesEachBadArgument) {
  const TensorView x = tensor(0, DType::bf16, {4, 256}), src2dst = tensor(1, DType::i32, {4, 8}),
                   q = tensor(2, DType::e4m3, {64, 256}), s = tensor(3, DType::f32, {64});
  const ScaleRounding r = ScaleRounding::none;
  EXPECT_NAMES(scatter_per_token_quant(tensor(0, DType::i32, {4, 256}), src2dst, q, s, r, nullptr), "x: dtype");
  EXPECT_NAMES(scatter_per_token_quant(x, tensor(1, DType::f32, {4, 8}), q, s, r, nullptr), "src2dst: dtype");
  EXPECT_NAMES(scatter_per_token_quant(x, tensor(1, DType::i32, {5, 8}), q, s, r, nullptr), "src2dst: expected contiguous [T=4");
  EXPECT_NAMES(scatter_per_token_quant(x, src2dst, tensor(2, DType::bf16, {64, 256}), s, r, nullptr), "q: dtype");
  EXPECT_NAMES(scatter_per_token_quant(x, src2dst, tensor(2, DType::e4m3, {64, 128}), s, r, nullptr), "q: expected shape");
  EXPECT_NAMES(scatter_per_token_quant(x, src2dst, q, tensor(3, DType::f32, {63}), r, nullptr), "s: expected shape");
  EXPECT_NAMES(scatter_per_token_quant(x, src2dst, q, tensor(3, DType::bf16, {64}), r, nullptr), "s: dtype");
  EXPECT_NAMES(scatter_per_token_quant(x, src2dst, tensor(0, DType::e4m3, {64, 256}), s, r, nullptr), "q and x overlap");
}

TEST(MoeGlueArgs, ScatterPerTokenQuantWithNoTokensOrRowsEnqueuesNothing) {
  EXPECT_NO_THROW(scatter_per_token_quant(TensorView::contiguous(nullptr, DType::bf16, {0, 256}),
                                          TensorView::contiguous(nullptr, DType::i32, {0, 8}),
                                          tensor(2, DType::e4m3, {64, 256}), tensor(3, DType::f32, {64}),
                                          ScaleRounding::none, nullptr));
  EXPECT_NO_THROW(scatter_per_token_quant(tensor(0, DType::bf16, {4, 256}), tensor(1, DType::i32, {4, 8}),
                                          TensorView::contiguous(nullptr, DType::e4m3, {0, 256}),
                                          TensorView::contiguous(nullptr, DType::f32, {0}), ScaleRounding::none,
                                          nullptr));
}

// ---- masked_silu_and_mul_per_token_quant -------------------------------------------------------

TEST(MoeGlueArgs, MaskedSiluPerTokenQuantNamesEachBadArgument) {
  const TensorView x = tensor(0, DType::bf16, {8, 4, 512}), masked_m = tensor(1, DType::i32, {8}),
                   q = tensor(2, DType::e4m3, {8, 4, 256}), s = tensor(3, DType::f32, {8, 4});
  const ScaleRounding r = ScaleRounding::none;
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(tensor(0, DType::i32, {8, 4, 512}), masked_m, q, s, r, nullptr),
               "x: dtype");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(tensor(0, DType::bf16, {32, 512}), masked_m, q, s, r, nullptr),
               "x: expected 3 dims");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(tensor(0, DType::bf16, {8, 4, 511}), masked_m, q, s, r, nullptr),
               "x: [E, M_max, 2 x hidden]");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(x, tensor(1, DType::i32, {7}), q, s, r, nullptr),
               "masked_m: expected shape");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(x, tensor(1, DType::f32, {8}), q, s, r, nullptr), "masked_m: dtype");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(x, masked_m, tensor(2, DType::e4m3, {8, 4, 512}), s, r, nullptr),
               "q: expected shape");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(x, masked_m, q, tensor(3, DType::f32, {8, 5}), r, nullptr),
               "s: expected shape");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(x, masked_m, tensor(1, DType::e4m3, {8, 4, 256}), s, r, nullptr),
               "q and masked_m overlap");
  EXPECT_NAMES(masked_silu_and_mul_per_token_quant(x, masked_m, tensor(0, DType::e4m3, {8, 4, 256}), s, r, nullptr),
               "q and x overlap");
  // No rows: nothing enqueued.
  EXPECT_NO_THROW(masked_silu_and_mul_per_token_quant(TensorView::contiguous(nullptr, DType::bf16, {8, 0, 512}),
                                                      masked_m, TensorView::contiguous(nullptr, DType::e4m3, {8, 0, 256}),
                                                      TensorView::contiguous(nullptr, DType::f32, {8, 0}), r, nullptr));
}

}  // namespace
}  // namespace fp8route
