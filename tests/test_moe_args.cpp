// The grouped GEMM's contract without a GPU: every bad argument raises an error naming it, empty
// problems return at once, problems print one way. Pointers are never dereferenced (checks happen
// before anything is enqueued, and empty problems enqueue nothing), so fake device addresses suffice.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "fp8route/error.h"
#include "fp8route/moe.h"
#include "fp8route/quant_layout.h"

namespace fp8route {
namespace {

// Operands 16 GiB apart, so that none overlaps another.
void* fake(int slot) { return reinterpret_cast<void*>(uintptr_t{0x10000000} + (uintptr_t(slot) << 34)); }

struct Shape {
  int64_t e = 4, m = 32, n = 256, k = 512;
};

GroupedMmArgs make(GroupedForm form, ScaleKind kind, Shape s = {}, ScaleLayout layout = ScaleLayout::col_major_tma,
                   bool packed = false) {
  GroupedMmArgs a;
  a.form = form;
  a.scale = kind;
  a.scale_a_layout = layout;
  const bool masked = form == GroupedForm::masked;
  a.a = masked ? TensorView::contiguous(fake(0), DType::e4m3, {s.e, s.m, s.k})
               : TensorView::contiguous(fake(0), DType::e4m3, {s.m, s.k});
  a.b = TensorView::contiguous(fake(1), DType::e4m3, {s.e, s.n, s.k});
  a.out = masked ? TensorView::contiguous(fake(2), DType::bf16, {s.e, s.m, s.n})
                 : TensorView::contiguous(fake(2), DType::bf16, {s.m, s.n});
  if (masked) a.masked_m = TensorView::contiguous(fake(5), DType::i32, {s.e});
  else a.offsets = TensorView::contiguous(fake(5), DType::i32, {s.e + 1});
  switch (kind) {
    case ScaleKind::tensor:
      a.scale_a = TensorView::contiguous(fake(3), DType::f32, {1});
      a.scale_b = TensorView::contiguous(fake(4), DType::f32, {s.e});
      break;
    case ScaleKind::row:
      a.scale_a = masked ? TensorView::contiguous(fake(3), DType::f32, {s.e, s.m})
                         : TensorView::contiguous(fake(3), DType::f32, {s.m});
      a.scale_b = TensorView::contiguous(fake(4), DType::f32, {s.e, s.n});
      break;
    case ScaleKind::block: {
      GroupQuantSpec q;
      q.layout = layout;
      if (packed) q.rounding = ScaleRounding::pow2, q.storage = ScaleStorage::ue8m0_packed;
      QuantLayout L = quant_layout(q, s.m, s.k, masked ? std::max<int64_t>(s.e, 1) : 0);
      if (masked) L.scale_shape[0] = s.e;  // batched also with no experts
      a.scale_a.data = fake(3);
      a.scale_a.dtype = L.scale_dtype;
      a.scale_a.ndim = L.scale_ndim;
      for (int i = 0; i < L.scale_ndim; ++i) a.scale_a.shape[i] = L.scale_shape[i], a.scale_a.strides[i] = L.scale_strides[i];
      a.scale_b = TensorView::contiguous(fake(4), DType::f32, {s.e, (s.n + 127) / 128, s.k / 128});
      break;
    }
  }
  return a;
}

std::string error_of(const GroupedMmArgs& args) {
  try {
    check_grouped_scaled_mm(args);
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument) << e.what();
    return e.what();
  }
  return "";
}

#define EXPECT_NAMES(args, what)                                                              \
  do {                                                                                        \
    const std::string msg_ = error_of(args);                                                  \
    EXPECT_NE(msg_.find(": " what), std::string::npos)                                       \
        << "expected an error naming '" << (what) << "', got '" << msg_ << "'";               \
  } while (0)

TEST(MoeArgs, ValidCallsPassEveryFormKindAndLayout) {
  for (GroupedForm f : {GroupedForm::contiguous, GroupedForm::masked}) {
    for (ScaleKind k : {ScaleKind::tensor, ScaleKind::row})
      EXPECT_EQ(error_of(make(f, k)), "") << name(f) << " " << name(k);
    for (ScaleLayout l : {ScaleLayout::row_major, ScaleLayout::col_major, ScaleLayout::col_major_tma})
      for (bool packed : {false, true}) {
        const GroupedMmArgs a = make(f, ScaleKind::block, {}, l, packed);
        EXPECT_EQ(error_of(a), "") << name(f) << " " << name(l) << " packed=" << packed;
        const GroupedProblem p = check_grouped_scaled_mm(a);
        EXPECT_EQ(p.sa_layout, l);
        EXPECT_EQ(p.sa_storage, packed ? ScaleStorage::ue8m0_packed : ScaleStorage::f32);
      }
  }
  // torch's offs: the ends only.
  GroupedMmArgs a = make(GroupedForm::contiguous, ScaleKind::row);
  a.offsets.shape[0] = 4;
  EXPECT_FALSE(check_grouped_scaled_mm(a).offsets_with_start);
}

TEST(MoeArgs, ProblemString) {
  const GroupedProblem p = check_grouped_scaled_mm(make(GroupedForm::masked, ScaleKind::block, {}, ScaleLayout::col_major_tma, true));
  EXPECT_EQ(to_string(p), "masked block bf16 e=4 rows=32 n=256 k=512 sa=col_major_tma.ue8m0_packed");
  EXPECT_EQ(parse_grouped_form("masked"), GroupedForm::masked);
  EXPECT_THROW(parse_grouped_form("dense"), Error);
}

TEST(MoeArgs, EachBadArgumentIsNamed) {
  const GroupedForm C = GroupedForm::contiguous, M = GroupedForm::masked;
  GroupedMmArgs a;

  a = make(C, ScaleKind::block);
  a.a.dtype = DType::bf16;
  EXPECT_NAMES(a, "a: dtype");
  a = make(C, ScaleKind::block);
  a.a.shape[1] = 256, a.a.strides[0] = 256;
  EXPECT_NAMES(a, "a: expected [M_total, K]");
  a = make(M, ScaleKind::block);
  a.a.shape[0] = 3, a.a.strides[0] = 32 * 512;
  EXPECT_NAMES(a, "a: expected [E, M_max, K]");
  a = make(C, ScaleKind::block);
  a.a.strides[0] = 1024;
  EXPECT_NAMES(a, "a: must be contiguous");
  a = make(C, ScaleKind::block);
  a.b.ndim = 2;
  EXPECT_NAMES(a, "b: expected 3 dims");
  a = make(C, ScaleKind::block);
  a.out.dtype = DType::f32;
  EXPECT_NAMES(a, "out: dtype");
  a = make(M, ScaleKind::block);
  a.out.shape[2] = 128;
  EXPECT_NAMES(a, "out: expected [E, M_max, N]");

  // Device counts.
  a = make(C, ScaleKind::row);
  a.offsets.shape[0] = 3;
  EXPECT_NAMES(a, "offsets: expected int32 [E + 1]");
  a = make(C, ScaleKind::row);
  a.offsets.dtype = DType::f32;
  EXPECT_NAMES(a, "offsets: dtype");
  a = make(C, ScaleKind::row);
  a.offsets = TensorView{};
  EXPECT_NAMES(a, "offsets: required");
  a = make(C, ScaleKind::row);
  a.masked_m = TensorView::contiguous(fake(6), DType::i32, {4});
  EXPECT_NAMES(a, "masked_m: the contiguous form takes offsets");
  a = make(M, ScaleKind::row);
  a.masked_m.shape[0] = 5;
  EXPECT_NAMES(a, "masked_m: expected int32 [E]");

  // Scales.
  a = make(C, ScaleKind::tensor);
  a.scale_b.shape[0] = 1;
  EXPECT_NAMES(a, "scale_b: expected tensor scales");
  a = make(C, ScaleKind::row);
  a.scale_a.shape[0] = 31;
  EXPECT_NAMES(a, "scale_a: expected row scales");
  a = make(M, ScaleKind::row);
  a.scale_b.shape[1] = 255;
  EXPECT_NAMES(a, "scale_b: expected row scales");
  a = make(C, ScaleKind::row, {4, 32, 256, 320});
  a.scale = ScaleKind::block;
  EXPECT_NAMES(a, "a, b: block scales need K a multiple of 128");
  // A scale_a of the wrong layout: col_major_tma pads T = 30 to 32, col_major does not.
  a = make(C, ScaleKind::block, {4, 30, 256, 512}, ScaleLayout::col_major);
  a.scale_a_layout = ScaleLayout::col_major_tma;
  EXPECT_NAMES(a, "scale_a: block scales in layout col_major_tma");
  a = make(C, ScaleKind::block);
  a.scale_a.dtype = DType::f16;
  EXPECT_NAMES(a, "scale_a: dtype");
  a = make(M, ScaleKind::block);
  a.scale_b.shape[1] = 1;
  EXPECT_NAMES(a, "scale_b: expected block scales");

  // Overlap, alignment, devices.
  a = make(C, ScaleKind::row);
  a.out.data = a.a.data;
  EXPECT_NAMES(a, "out and a overlap");
  a = make(C, ScaleKind::row);
  a.out.data = static_cast<char*>(a.out.data) + 1;
  EXPECT_NAMES(a, "out: pointer");
  a = make(C, ScaleKind::row);
  a.b.device = Device::cuda(1);
  EXPECT_NAMES(a, "b and a: must be on one device");
  a = make(C, ScaleKind::row);
  a.a.device = a.b.device = a.out.device = a.scale_a.device = a.scale_b.device = a.offsets.device = Device::cpu();
  EXPECT_NAMES(a, "b: must be CUDA device memory");
  a = make(C, ScaleKind::row, {4, 32, 256, 0});
  EXPECT_NAMES(a, "b: K must be >= 1");
}

TEST(MoeArgs, EmptyProblemsEnqueueNothing) {
  // M_total = 0, M_max = 0, E = 0, N = 0: checked, then nothing runs (the fake pointers are never
  // read, with or without a GPU).
  for (GroupedForm f : {GroupedForm::contiguous, GroupedForm::masked})
    for (Shape s : {Shape{4, 0, 256, 512}, Shape{0, 32, 256, 512}, Shape{4, 32, 0, 512}}) {
      GroupedMmArgs a = make(f, ScaleKind::block, s);
      // A tensor without elements may have a null pointer, as DLPack gives it.
      if (s.m == 0 || (f == GroupedForm::masked && s.e == 0)) a.a.data = nullptr;
      EXPECT_NO_THROW(grouped_scaled_mm(a, nullptr)) << name(f) << " e=" << s.e << " m=" << s.m << " n=" << s.n;
    }
}

TEST(MoeArgs, Backends) {
  ASSERT_EQ(grouped_backends(), (std::vector<std::string>{"simt", "decode", "wgmma", "cutlass"}));
  try {
    grouped_scaled_mm(make(GroupedForm::masked, ScaleKind::row), "nope", nullptr);
    FAIL() << "an unknown backend ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend: unknown grouped backend 'nope'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8route
