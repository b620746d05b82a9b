// scaled_mm with the argument forms inference engines pass (gemm.h): b as the [K, N] transpose view
// of an [N, K] weight, row scales as [M, 1] / [N, 1] / [1, N] / [1, 1], block scale_b as its
// transpose view, block scale_a as an [M, ceil(K/128)] view (read in place, or gathered).
// - Without a GPU (fake device addresses, never dereferenced): each form describes the same problem
//   and hands the kernels the same memory as the canonical form; infer_scale_kind's rule; bad
//   layouts are errors naming the argument and the accepted forms.
// - With one: each form's output equals the canonical form's bit for bit on fresh random inputs,
//   routed and on the reference backend, and the gathered form under CUDA-graph replay.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fp8route/buffer.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "gemm/backend.h"
#include "gpu_util.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::download;
using test::expect_invalid;
using test::upload;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align4(int64_t v) { return (v + 3) / 4 * 4; }

// Fake device addresses, each operand 16 GiB from the next: no two overlap.
void* fake(int slot, uintptr_t offset = 0) {
  return reinterpret_cast<void*>((uintptr_t{1} << 36) + (uintptr_t(slot) << 34) + offset);
}
enum Slot { kA, kB, kOut, kSA, kSB, kBias };

// The canonical call: b [N, K] row-major with row stride ldb, scales in the forms of gemm.h's table.
ScaledMmArgs canonical(int64_t m, int64_t n, int64_t k, ScaleKind kind, int64_t ldb) {
  ScaledMmArgs a;
  a.scale = kind;
  a.a = TensorView::contiguous(fake(kA), DType::e4m3, {m, k});
  a.b = TensorView::strided(fake(kB), DType::e4m3, {n, k}, {ldb, 1});
  a.out = TensorView::contiguous(fake(kOut), DType::bf16, {m, n});
  switch (kind) {
    case ScaleKind::tensor:
      a.scale_a = TensorView::contiguous(fake(kSA), DType::f32, {1});
      a.scale_b = TensorView::contiguous(fake(kSB), DType::f32, {1});
      break;
    case ScaleKind::row:
      a.scale_a = TensorView::contiguous(fake(kSA), DType::f32, {m});
      a.scale_b = TensorView::contiguous(fake(kSB), DType::f32, {n});
      break;
    case ScaleKind::block:
      a.scale_a = TensorView::contiguous(fake(kSA), DType::f32, {cdiv(k, 128), align4(m)});
      a.scale_b = TensorView::contiguous(fake(kSB), DType::f32, {cdiv(n, 128), cdiv(k, 128)});
      break;
  }
  return a;
}

// b given as the transpose view of the canonical b: [K, N], strides [1, ldb].
TensorView kn_view(const TensorView& b) {
  return TensorView::strided(b.data, b.dtype, {b.shape[1], b.shape[0]}, {b.strides[1], b.strides[0]}, b.device);
}

bool same_operands(const gemm::GemmOperands& x, const gemm::GemmOperands& y) {
  return x.a == y.a && x.lda == y.lda && x.b == y.b && x.ldb == y.ldb && x.sa == y.sa && x.sb == y.sb &&
         x.bias == y.bias && x.out == y.out && x.ldo == y.ldo;
}

// `form` is the memory of `want`: the same problem, the same operands.
void expect_same_call(const ScaledMmArgs& form, const ScaledMmArgs& want, const std::string& what) {
  const GemmProblem p = check_scaled_mm(form);
  EXPECT_EQ(p, check_scaled_mm(want)) << what << ": " << to_string(p) << " vs " << to_string(check_scaled_mm(want));
  EXPECT_TRUE(same_operands(gemm::operands_of(form), gemm::operands_of(want))) << what;
}

// ---- without a GPU ----------------------------------------------------------------------------

TEST(Conventions, BAsTheTransposeViewIsTheSameMemory) {
  std::mt19937_64 rng = test::make_rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t m = 1 + rng() % 300, k = 16 * (1 + rng() % 64);
    const int64_t n = trial % 4 == 0 ? k : 16 * (1 + rng() % 64);  // K == N: the strides decide
    const int64_t ldb = k + 16 * int64_t(rng() % 3);
    for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block}) {
      const ScaledMmArgs want = canonical(m, n, k, kind, ldb);
      ScaledMmArgs form = want;
      form.b = kn_view(want.b);
      expect_same_call(form, want, "b [K, N] m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                       " k=" + std::to_string(k) + " ldb=" + std::to_string(ldb));
      EXPECT_EQ(infer_scale_kind(form), infer_scale_kind(want));
    }
  }
}

TEST(Conventions, SquareBIsDecidedByItsStrides) {
  // K == N: [K, K] with unit last stride is the [N, K] weight (row stride 640); with unit first
  // stride it is the transpose view (the weight's row stride is the second stride, 640). Read the
  // other way, either would fail the unit-stride rule.
  const int64_t k = 512;
  ScaledMmArgs args = canonical(8, k, k, ScaleKind::tensor, k);
  args.b = TensorView::strided(fake(kB), DType::e4m3, {k, k}, {640, 1});
  EXPECT_EQ(gemm::operands_of(args).ldb, 640);
  args.b = TensorView::strided(fake(kB), DType::e4m3, {k, k}, {1, 640});
  EXPECT_EQ(gemm::operands_of(args).ldb, 640);
  EXPECT_EQ(check_scaled_mm(args).n, k);
  // N == 1 and K == 1: size-1 dims carry no stride rule.
  args = canonical(8, 1, 64, ScaleKind::tensor, 64);
  args.b = TensorView::strided(fake(kB), DType::e4m3, {64, 1}, {1, 1});
  EXPECT_EQ(check_scaled_mm(args).n, 1);
  args = canonical(8, 32, 1, ScaleKind::tensor, 1);
  args.b = TensorView::strided(fake(kB), DType::e4m3, {1, 32}, {32, 1});  // a [K, N] = [1, 32] row: the weight's column
  EXPECT_EQ(check_scaled_mm(args).n, 32);
  EXPECT_EQ(gemm::operands_of(args).ldb, 1);
}

TEST(Conventions, BadBLayoutsNameBAndTheAcceptedForms) {
  const int64_t m = 16, n = 256, k = 512;
  ScaledMmArgs args = canonical(m, n, k, ScaleKind::row, k);
  args.b = TensorView::contiguous(fake(kB), DType::e4m3, {k, n});  // row-major [K, N]
  expect_invalid([&] { check_scaled_mm(args); }, "b: a [K, N] b must be the transpose view of a row-major [N, K]");
  expect_invalid([&] { check_scaled_mm(args); }, "a row-major [K, N] b is not supported");
  expect_invalid([&] { infer_scale_kind(args); }, "a row-major [K, N] b is not supported");
  args.b = TensorView::strided(fake(kB), DType::e4m3, {n, k}, {1, n});  // column-major [N, K]
  expect_invalid([&] { check_scaled_mm(args); }, "b: last dim must have stride 1 in the [N, K] form");
  args.b = TensorView::strided(fake(kB), DType::e4m3, {k + 16, n}, {1, k + 16});  // K of the view is not a's K
  expect_invalid([&] { check_scaled_mm(args); }, "b: expected [N, K] with K = 512 (a's K) and unit last stride, or its "
                                                 "[K, N] transpose view with unit first stride");
  args.b = TensorView::strided(fake(kB), DType::e4m3, {k, n}, {1, k - 16});  // columns of the weight overlap
  expect_invalid([&] { check_scaled_mm(args); }, "b: row stride 496 must be >= 512");
  args.b = TensorView::strided(fake(kB), DType::e4m3, {k, n}, {1, k});
  args.b.dtype = DType::bf16;
  expect_invalid([&] { check_scaled_mm(args); }, "b: dtype bf16 not allowed");
}

TEST(Conventions, RowScalesOfEveryShapeAreTheVectors) {
  std::mt19937_64 rng = test::make_rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t m = 2 + rng() % 500, n = 16 * (1 + rng() % 100), k = 16 * (1 + rng() % 100);
    const ScaledMmArgs want = canonical(m, n, k, ScaleKind::row, k);
    for (int form = 0; form < 4; ++form) {
      ScaledMmArgs g = want;
      g.b = kn_view(want.b);
      g.scale_a = TensorView::contiguous(fake(kSA), DType::f32, {m, 1});
      g.scale_b = form == 0   ? TensorView::contiguous(fake(kSB), DType::f32, {n, 1})
                  : form == 1 ? TensorView::contiguous(fake(kSB), DType::f32, {1, n})
                  : form == 2 ? TensorView::strided(fake(kSB), DType::f32, {n, 1}, {1, n})  // a column view
                              : TensorView::contiguous(fake(kSB), DType::f32, {n});
      expect_same_call(g, want, "row form " + std::to_string(form));
      EXPECT_EQ(infer_scale_kind(g), ScaleKind::row) << "form " << form << " m=" << m << " n=" << n << " k=" << k;
    }
    // Scalars [1, 1] and [1]: per tensor, or one side of a row call.
    ScaledMmArgs g = want;
    g.scale_a = TensorView::contiguous(fake(kSA), DType::f32, {1, 1});
    g.scale_b = TensorView::contiguous(fake(kSB), DType::f32, {1});
    EXPECT_EQ(infer_scale_kind(g), ScaleKind::tensor);
    g.scale = ScaleKind::tensor;
    expect_same_call(g, canonical(m, n, k, ScaleKind::tensor, k), "scalars [1, 1], [1]");
    g.scale = ScaleKind::row;
    g.scale_b = TensorView::contiguous(fake(kSB), DType::f32, {n, 1});
    EXPECT_EQ(infer_scale_kind(g), ScaleKind::row);
    EXPECT_FALSE(check_scaled_mm(g).sa_vector);
    EXPECT_TRUE(check_scaled_mm(g).sb_vector);
  }
}

TEST(Conventions, InferredKindFollowsTheDocumentedRule) {
  const auto kind_of = [](int64_t m, int64_t n, int64_t k, std::initializer_list<int64_t> sa,
                          std::initializer_list<int64_t> sb) {
    ScaledMmArgs g = canonical(m, n, k, ScaleKind::tensor, k);
    g.scale_a = TensorView::contiguous(fake(kSA), DType::f32, sa);
    g.scale_b = TensorView::contiguous(fake(kSB), DType::f32, sb);
    return infer_scale_kind(g);
  };
  EXPECT_EQ(kind_of(64, 256, 512, {1}, {1, 1}), ScaleKind::tensor);
  EXPECT_EQ(kind_of(64, 256, 512, {}, {1}), ScaleKind::tensor);  // a 0-dim scalar
  EXPECT_EQ(kind_of(64, 256, 512, {64}, {256}), ScaleKind::row);
  EXPECT_EQ(kind_of(64, 256, 512, {64, 1}, {1}), ScaleKind::row);
  EXPECT_EQ(kind_of(64, 256, 512, {1}, {1, 256}), ScaleKind::row);
  EXPECT_EQ(kind_of(64, 256, 512, {4, 64}, {2, 4}), ScaleKind::block);   // physical scale_a
  EXPECT_EQ(kind_of(64, 256, 512, {64, 4}, {2, 4}), ScaleKind::block);   // [M, K/128] scale_a
  EXPECT_EQ(kind_of(64, 256, 512, {64, 4}, {4, 2}), ScaleKind::block);   // scale_b's transpose view
  EXPECT_EQ(kind_of(5, 256, 512, {4, 8}, {2, 4}), ScaleKind::block);     // align(M, 4) = 8
  // K <= 128: [M, 1] is a per-token vector and one block per row; with a one-element scale_b both
  // kinds are the same product, and row comes first. A [1, 1] scale_b with N > 128 is no block form.
  EXPECT_EQ(kind_of(64, 128, 128, {64, 1}, {1, 1}), ScaleKind::row);
  EXPECT_EQ(kind_of(64, 256, 128, {64, 1}, {2, 1}), ScaleKind::block);   // scale_b [ceil(N/128), 1]
  EXPECT_EQ(kind_of(64, 1, 128, {64, 1}, {1, 1}), ScaleKind::row);
  // No kind: a per-token scale_a with block scale_b, a scale_a of K/128 columns but the wrong M.
  expect_invalid([&] { kind_of(64, 256, 512, {64}, {2, 4}); }, "scale_a, scale_b: their shapes fit no scale kind");
  expect_invalid([&] { kind_of(64, 256, 512, {63, 4}, {2, 4}); }, "m=64 n=256 k=512");
  expect_invalid([&] { kind_of(64, 256, 512, {64, 2}, {256}); }, "scale_a, scale_b");
}

TEST(Conventions, BlockScaleAViewsInPlaceOrGathered) {
  std::mt19937_64 rng = test::make_rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t m = 1 + rng() % 300, n = 128 * (1 + rng() % 8), k = 128 * (1 + rng() % 8) - 16 * (rng() % 2);
    const int64_t kb = cdiv(k, 128), ld = align4(m);
    const ScaledMmArgs want = canonical(m, n, k, ScaleKind::block, k);
    const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
    // The kind these shapes imply: with one K block and one N block an [M, 1] scale_a and the one
    // element of scale_b also fit row (tensor with M = 1), which comes first (the same product).
    const ScaleKind inferred = kb == 1 && n <= 128 ? (m == 1 ? ScaleKind::tensor : ScaleKind::row) : ScaleKind::block;
    // The physical buffer's transpose view: [M, kb], strides [1, align(M, 4)], read in place.
    ScaledMmArgs g = want;
    g.scale_a = TensorView::strided(fake(kSA), DType::f32, {m, kb}, {1, ld});
    expect_same_call(g, want, "M-major view " + what);
    EXPECT_EQ(infer_scale_kind(g), inferred) << what;
    // K-major [M, kb] (row-major group quant), M-major with row stride M, M-major with a padded
    // row stride: the same problem. Each is the physical memory only where its element (m, j) lies
    // at j * align(M, 4) + m (listed per form); otherwise scaled_mm gathers it, which operands_of
    // cannot do in place. (A contiguous [M, kb] with M == kb == align(M, 4) is the physical form's
    // shape too, and read as that form: gemm.h.)
    const bool aligned = m % 4 == 0;
    const std::pair<TensorView, bool> views[] = {
        {TensorView::contiguous(fake(kSA), DType::f32, {m, kb}), (kb == 1 || kb == m) && aligned},
        {TensorView::strided(fake(kSA), DType::f32, {m, kb}, {1, m}), aligned},
        {TensorView::strided(fake(kSA), DType::f32, {m, kb}, {1, ld + 4}), kb == 1 && aligned}};
    for (const auto& [s, in_place] : views) {
      g.scale_a = s;
      EXPECT_EQ(check_scaled_mm(g), check_scaled_mm(want)) << what << " " << to_string(s);
      EXPECT_EQ(infer_scale_kind(g), inferred) << what << " " << to_string(s);
      if (in_place)
        expect_same_call(g, want, "in place " + what + " " + to_string(s));
      else
        expect_invalid([&] { gemm::operands_of(g); }, "scale_a: this [M, ceil(K/128)] block scale");
    }
  }
  // A contiguous tensor whose shape is both forms (M == kb == align(M, 4)) is the physical form.
  ScaledMmArgs g = canonical(4, 256, 512, ScaleKind::block, 512);
  expect_same_call(g, canonical(4, 256, 512, ScaleKind::block, 512), "square physical");
  g.scale_a = TensorView::strided(fake(kSA), DType::f32, {4, 4}, {1, 4});  // its transpose view
  expect_same_call(g, canonical(4, 256, 512, ScaleKind::block, 512), "square transpose view");
}

TEST(Conventions, BlockScaleBTransposeViews) {
  for (int64_t k : {512, 640, 1024}) {  // kb = 4, 5 (padded rows differ), 8 (square with N = 1024)
    const int64_t n = 1024, kb = cdiv(k, 128), nb = cdiv(n, 128), pad = align4(kb);
    const ScaledMmArgs want = canonical(32, n, k, ScaleKind::block, k);
    ScaledMmArgs g = want;
    g.b = kn_view(want.b);
    g.scale_b = TensorView::strided(fake(kSB), DType::f32, {kb, nb}, {1, kb});  // scale_b.t()
    expect_same_call(g, want, "scale_b.t() k=" + std::to_string(k));
    EXPECT_EQ(infer_scale_kind(g), ScaleKind::block);
    // The padded form cuBLASLt reads, and its transpose view.
    ScaledMmArgs padded = want;
    padded.scale_b = TensorView::strided(fake(kSB), DType::f32, {nb, kb}, {pad, 1});
    g.scale_b = TensorView::strided(fake(kSB), DType::f32, {kb, nb}, {1, pad});
    expect_same_call(g, padded, "padded scale_b.t() k=" + std::to_string(k));
    EXPECT_EQ(check_scaled_mm(g).sb_padded, kb % 4 != 0);
  }
  ScaledMmArgs g = canonical(32, 256, 512, ScaleKind::block, 512);
  g.scale_b = TensorView::contiguous(fake(kSB), DType::f32, {4, 2});  // row-major [kb, nb]: a K-major copy
  expect_invalid([&] { check_scaled_mm(g); },
                 "expected shape [2,4] (or its [4,2] transpose view, with unit first stride)");
}

TEST(Conventions, BadBlockScaleAFormsNameScaleA) {
  ScaledMmArgs g = canonical(5, 256, 512, ScaleKind::block, 512);
  g.scale_a = TensorView::contiguous(fake(kSA), DType::f32, {4, 5});
  expect_invalid([&] { check_scaled_mm(g); },
                 "scale_a (block: [ceil(K/128), align(M, 4)], M-major): expected shape [4,8], "
                 "or an [M, ceil(K/128)] = [5,4] view");
  g.scale_a = TensorView::strided(fake(kSA), DType::f32, {4, 8}, {16, 1});
  expect_invalid([&] { check_scaled_mm(g); },
                 "scale_a (block: [ceil(K/128), align(M, 4)], M-major): must be contiguous");
  g.scale_a = TensorView::contiguous(fake(kSA), DType::f16, {5, 4});  // gathered: its dtype still checked
  expect_invalid([&] { check_scaled_mm(g); }, "scale_a: dtype f16 not allowed");
  g.scale_a = TensorView::contiguous(fake(kSA, 2), DType::f32, {5, 4});
  expect_invalid([&] { check_scaled_mm(g); }, "scale_a: pointer");
  g.scale_a = TensorView::contiguous(fake(kSA), DType::f32, {5, 4});
  g.scale_a.device = Device::cpu();
  expect_invalid([&] { check_scaled_mm(g); }, "scale_a: must be CUDA device memory");
  g.scale_a = TensorView::contiguous(fake(kOut, 64), DType::f32, {5, 4});  // inside out
  expect_invalid([&] { check_scaled_mm(g); }, "out and scale_a overlap");
}

// ---- on the GPU ---------------------------------------------------------------------------------

// Random operands of one problem, on the device, in every form the tests pass.
struct Operands {
  int64_t m, n, k, kb, nb, ld;
  DeviceBuffer a, b, sa, sa_kmajor, sa_ld_m, sb, out;
  std::vector<float> host_sa;  // physical [kb, align(M, 4)]

  Operands(int64_t m_, int64_t n_, int64_t k_, ScaleKind kind, std::mt19937_64& rng)
      : m(m_), n(n_), k(k_), kb(cdiv(k_, 128)), nb(cdiv(n_, 128)), ld(align4(m_)) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.25f, 2.0f);
    const auto codes = [&](int64_t count) {
      std::vector<uint8_t> v(count);
      for (uint8_t& c : v) do c = uint8_t(byte(rng)); while ((c & 0x7F) == 0x7F);  // no NaN codes
      return v;
    };
    a = upload(codes(m * k));
    b = upload(codes(n * k));
    const int64_t sa_count = kind == ScaleKind::tensor ? 1 : kind == ScaleKind::row ? m : kb * ld;
    const int64_t sb_count = kind == ScaleKind::tensor ? 1 : kind == ScaleKind::row ? n : nb * kb;
    host_sa.assign(sa_count, 0.0f);
    for (int64_t j = 0; j < sa_count; ++j)
      if (kind != ScaleKind::block || j % ld < m) host_sa[j] = scale(rng);
    std::vector<float> host_sb(sb_count);
    for (float& v : host_sb) v = scale(rng);
    sa = upload(host_sa);
    sb = upload(host_sb);
    if (kind == ScaleKind::block) {
      std::vector<float> kmajor(m * kb), ld_m(m * kb);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < kb; ++j) kmajor[r * kb + j] = ld_m[j * m + r] = host_sa[j * ld + r];
      sa_kmajor = upload(kmajor);
      sa_ld_m = upload(ld_m);
    }
    out = DeviceBuffer(size_t(m * n * 2));
  }

  ScaledMmArgs args(ScaleKind kind) const {
    ScaledMmArgs g;
    g.scale = kind;
    g.a = TensorView::contiguous(a.data(), DType::e4m3, {m, k});
    g.b = TensorView::contiguous(b.data(), DType::e4m3, {n, k});
    g.out = TensorView::contiguous(out.data(), DType::bf16, {m, n});
    const int64_t sa_n = kind == ScaleKind::tensor ? 1 : m, sb_n = kind == ScaleKind::tensor ? 1 : n;
    g.scale_a = kind == ScaleKind::block ? TensorView::contiguous(sa.data(), DType::f32, {kb, ld})
                                         : TensorView::contiguous(sa.data(), DType::f32, {sa_n});
    g.scale_b = kind == ScaleKind::block ? TensorView::contiguous(sb.data(), DType::f32, {nb, kb})
                                         : TensorView::contiguous(sb.data(), DType::f32, {sb_n});
    return g;
  }

  // out's bytes after `run` (out poisoned with NaN first: an unwritten element shows). The device
  // is idle when `run` starts, whatever stream it uses (uploads and the poison have landed).
  std::vector<uint8_t> output(const std::function<void()>& run) const {
    EXPECT_EQ(cudaMemset(out.data(), 0xFF, out.bytes()), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    run();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return download(out.data(), out.bytes());
  }
};

struct Form {
  std::string name;
  std::function<void(ScaledMmArgs&, const Operands&)> edit;
};

std::vector<Form> forms_of(ScaleKind kind) {
  const auto bt = [](ScaledMmArgs& g, const Operands&) { g.b = kn_view(g.b); };
  std::vector<Form> f = {{"b [K, N] view", bt}};
  if (kind == ScaleKind::tensor)
    f.push_back({"b view, scalars [1, 1]", [bt](ScaledMmArgs& g, const Operands& o) {
                   bt(g, o);
                   g.scale_a = TensorView::contiguous(g.scale_a.data, DType::f32, {1, 1});
                   g.scale_b = TensorView::contiguous(g.scale_b.data, DType::f32, {1, 1});
                 }});
  if (kind == ScaleKind::row) {
    f.push_back({"b view, scale_a [M, 1], scale_b [N, 1]", [bt](ScaledMmArgs& g, const Operands& o) {
                   bt(g, o);
                   g.scale_a = TensorView::contiguous(g.scale_a.data, DType::f32, {o.m, 1});
                   g.scale_b = TensorView::contiguous(g.scale_b.data, DType::f32, {o.n, 1});
                 }});
    f.push_back({"scale_b [1, N]", [](ScaledMmArgs& g, const Operands& o) {
                   g.scale_b = TensorView::contiguous(g.scale_b.data, DType::f32, {1, o.n});
                 }});
  }
  if (kind == ScaleKind::block) {
    const auto sbt = [](ScaledMmArgs& g, const Operands& o) {
      g.scale_b = TensorView::strided(g.scale_b.data, DType::f32, {o.kb, o.nb}, {1, o.kb});
    };
    f.push_back({"b view, scale_b.t(), scale_a M-major view", [bt, sbt](ScaledMmArgs& g, const Operands& o) {
                   bt(g, o), sbt(g, o);
                   g.scale_a = TensorView::strided(g.scale_a.data, DType::f32, {o.m, o.kb}, {1, o.ld});
                 }});
    f.push_back({"scale_a K-major (gathered)", [](ScaledMmArgs& g, const Operands& o) {
                   g.scale_a = TensorView::contiguous(o.sa_kmajor.data(), DType::f32, {o.m, o.kb});
                 }});
    f.push_back({"b view, scale_b.t(), scale_a M-major with row stride M",
                 [bt, sbt](ScaledMmArgs& g, const Operands& o) {
                   bt(g, o), sbt(g, o);
                   g.scale_a = TensorView::strided(o.sa_ld_m.data(), DType::f32, {o.m, o.kb}, {1, o.m});
                 }});
  }
  return f;
}

struct Shape {
  int64_t m, n, k;
};

TEST(ConventionsGpu, EveryFormGivesTheCanonicalBits) {
  FP8ROUTE_REQUIRE_SM90();
  std::mt19937_64 rng = test::make_rng(4);
  // Decode and prefill M; K with a partial last block and a K/128 that is not a multiple of 4.
  const Shape shapes[] = {{1, 512, 1024}, {5, 384, 640}, {64, 1024, 1536}, {200, 768, 896}, {1000, 512, 512}};
  for (const Shape s : shapes)
    for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block}) {
      const Operands o(s.m, s.n, s.k, kind, rng);
      const ScaledMmArgs want = o.args(kind);
      const std::vector<uint8_t> routed = o.output([&] { scaled_mm(want, nullptr); });
      const std::vector<uint8_t> ref = o.output([&] { scaled_mm(want, "reference", "", nullptr); });
      for (const Form& f : forms_of(kind)) {
        ScaledMmArgs g = want;
        f.edit(g, o);
        const std::string what = std::string(name(kind)) + " " + f.name + " m=" + std::to_string(s.m) +
                                 " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k);
        ASSERT_EQ(check_scaled_mm(g), check_scaled_mm(want)) << what;  // one problem: one route
        EXPECT_EQ(infer_scale_kind(g), kind) << what;
        EXPECT_TRUE(test::bytes_equal(o.output([&] { scaled_mm(g, nullptr); }), routed, ("routed " + what).c_str(),
                                      s.n * 2));
        EXPECT_TRUE(test::bytes_equal(o.output([&] { scaled_mm(g, "reference", "", nullptr); }), ref,
                                      ("reference " + what).c_str(), s.n * 2));
      }
    }
}

TEST(ConventionsGpu, GatheredScaleAUnderGraphReplay) {
  // Captured once; each replay gathers the K-major scales as they are then (new values written
  // between replays), and equals the eager canonical call on those values.
  FP8ROUTE_REQUIRE_SM90();
  std::mt19937_64 rng = test::make_rng(5);
  Operands o(24, 1024, 2048, ScaleKind::block, rng);
  ScaledMmArgs g = o.args(ScaleKind::block);
  g.scale_a = TensorView::contiguous(o.sa_kmajor.data(), DType::f32, {o.m, o.kb});
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  scaled_mm(g, stream);  // the route of this problem decided outside the capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  std::string error;
  try {
    scaled_mm(g, stream);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(error, "");
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  std::uniform_real_distribution<float> scale(0.25f, 2.0f);
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> phys(o.kb * o.ld, 0.0f), kmajor(o.m * o.kb);
    for (int64_t r = 0; r < o.m; ++r)
      for (int64_t j = 0; j < o.kb; ++j) kmajor[r * o.kb + j] = phys[j * o.ld + r] = scale(rng);
    ASSERT_EQ(cudaMemcpy(o.sa.data(), phys.data(), phys.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(o.sa_kmajor.data(), kmajor.data(), kmajor.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const std::vector<uint8_t> want = o.output([&] { scaled_mm(o.args(ScaleKind::block), nullptr); });
    const std::vector<uint8_t> got = o.output([&] { ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess); });
    EXPECT_TRUE(test::bytes_equal(got, want, ("replay " + std::to_string(rep)).c_str(), o.n * 2));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fp8route
