// Sizes past 2^31 elements.
// - Argument checks (no GPU needed; the tensors are fake device addresses, never dereferenced):
//   operands whose element counts pass 2^31 (but whose dimensions fit the kernels' int32 extents)
//   are valid problems; a dimension past what a kernel indexes, or a size whose product overflows
//   64 bits, is an Error(invalid_argument) naming the argument, never a wrapped size.
// - On a GPU with 20 GB free: per-token, per-token-group and RMSNorm + per-token quantization of
//   x [2^18 + 16, 8192] (2^31 + 2^17 elements), then GEMMs whose a (M x K) or b (N x K) has that
//   many elements, on every backend and config that supports them (the reference kernel on the
//   decode-sized row-scale problem only: it is slow) and through the router, against the CPU
//   reference on sampled rows or columns: those past element 2^31 (where a 32-bit offset would
//   wrap) and those before it, each group within the GEMM tolerance. Quantized codes and scales
//   are bit-exact on the sampled rows.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fp8route/buffer.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "route/linear_layout.h"
#include "fp8route/norm.h"
#include "fp8route/quant.h"
#include "fp8route/reference.h"
#include "gpu_util.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::random_codes;
using test::random_scales;

using test::download;
using test::expect_invalid;
using test::upload;

constexpr int64_t k2to31 = int64_t{1} << 31;

// ---- argument checks --------------------------------------------------------------------------

// Fake device addresses 2^46 bytes apart: no two tensors of these cases overlap (the largest spans
// 2^44 bytes), and every one is 16-byte aligned.
char* slot(int i) { return reinterpret_cast<char*>(uintptr_t(i + 1) << 46); }
TensorView fake(int i, DType d, std::initializer_list<int64_t> shape) { return TensorView::contiguous(slot(i), d, shape); }

// A GEMM's arguments on fake addresses: a [m, k], b [n, k], the scales of `kind`, out bf16 [m, n].
ScaledMmArgs gemm_args(int64_t m, int64_t n, int64_t k, ScaleKind kind) {
  ScaledMmArgs g;
  g.scale = kind;
  g.a = fake(0, DType::e4m3, {m, k});
  g.b = fake(1, DType::e4m3, {n, k});
  const int64_t kb = (k + 127) / 128;
  if (kind == ScaleKind::block) {
    g.scale_a = fake(2, DType::f32, {kb, (m + 3) / 4 * 4});
    g.scale_b = fake(3, DType::f32, {(n + 127) / 128, kb});
  } else {
    g.scale_a = fake(2, DType::f32, {kind == ScaleKind::row ? m : 1});
    g.scale_b = fake(3, DType::f32, {kind == ScaleKind::row ? n : 1});
  }
  g.out = fake(4, DType::bf16, {m, n});
  return g;
}

// The problems of the GPU test below: a with 2^31 + 2^17 elements (M = 2^18 + 16, K = 8192), and b
// with as many (N = 2^18 + 16) at decode M; and an output of 2^32 elements.
struct Shape {
  int64_t m, n, k;
};
constexpr Shape kLargeShapes[] = {{(1 << 18) + 16, 256, 8192}, {16, (1 << 18) + 16, 8192}, {1 << 20, 4096, 128}};
constexpr ScaleKind kKinds[] = {ScaleKind::tensor, ScaleKind::row, ScaleKind::block};

TEST(LargeSizeArgs, GemmOperandsPast2To31ElementsAreValidProblems) {
  for (const Shape& s : kLargeShapes)
    for (ScaleKind kind : kKinds) {
      const GemmProblem p = check_scaled_mm(gemm_args(s.m, s.n, s.k, kind));
      GemmProblem want = make_problem(s.m, s.n, s.k, kind);
      EXPECT_EQ(p, want) << to_string(p) << " vs " << to_string(want);
    }
}

// A backend may decline such a problem for other reasons (its M range, no GPU here), but never for
// its size: every backend's size rule names int32 or 2^31.
TEST(LargeSizeArgs, NoBackendRefusesThemForTheirSize) {
  for (const Shape& s : kLargeShapes)
    for (ScaleKind kind : kKinds) {
      const GemmProblem p = make_problem(s.m, s.n, s.k, kind);
      for (const std::string& b : gemm_backends())
        for (const std::string& c : gemm_configs(b)) {
          const std::string why = gemm_supports(b, c, p);
          EXPECT_EQ(why.find("int32"), std::string::npos) << b << "/" << c << " " << to_string(p) << ": " << why;
          EXPECT_EQ(why.find("2^31"), std::string::npos) << b << "/" << c << " " << to_string(p) << ": " << why;
        }
    }
}

TEST(LargeSizeArgs, GemmDimensionsPast2To31NameTheArgument) {
  const char* rule = "a, b: M, N and K must each be < 2^31";
  expect_invalid([] { check_scaled_mm(gemm_args(k2to31, 128, 128, ScaleKind::tensor)); }, rule);
  expect_invalid([] { check_scaled_mm(gemm_args(16, k2to31, 128, ScaleKind::row)); }, rule);
  expect_invalid([] { check_scaled_mm(gemm_args(16, 128, k2to31, ScaleKind::block)); }, rule);
  // Element counts past 64 bits: the tensor that overflows is named, before any product is used.
  const int64_t huge = int64_t{1} << 40;
  expect_invalid([&] {
    ScaledMmArgs g = gemm_args(16, 128, 128, ScaleKind::row);
    g.b = fake(1, DType::e4m3, {huge, huge});
    check_scaled_mm(g);
  }, "b: element count overflows 64 bits");
  expect_invalid([&] {
    ScaledMmArgs g = gemm_args(16, 128, 128, ScaleKind::row);
    g.out = fake(4, DType::bf16, {huge, huge});
    check_scaled_mm(g);
  }, "out: element count overflows 64 bits");
}

// Every backend holds M, N and K in int32 somewhere: each config declines a dimension of 2^31 with
// its reason, so that gemm_supports(), the router and LinearPlan never hand one to a kernel.
TEST(LargeSizeArgs, EveryBackendDeclinesADimensionPastInt32) {
  for (const GemmProblem& p : {make_problem(1, k2to31, 128, ScaleKind::row), make_problem(1, 128, k2to31, ScaleKind::row),
                               make_problem(k2to31, 128, 128, ScaleKind::tensor)})
    for (const std::string& b : gemm_backends())
      for (const std::string& c : gemm_configs(b))
        EXPECT_NE(gemm_supports(b, c, p), "") << b << "/" << c << " claims to run " << to_string(p);
}

// A layer whose weight has a dimension past int32 is refused at load, naming the weight, instead of
// routing to a backend that cannot run it and failing at the first call.
TEST(LargeSizeArgs, LinearPlanWeightPastInt32NamesTheWeight) {
  const char* rule = "weight: N and K must each be < 2^31";
  expect_invalid([] { plan_linear_layout(k2to31, 4096, ScaleKind::row, k2to31, DType::bf16, false); }, rule);
  expect_invalid([] { plan_linear_layout(4096, k2to31, ScaleKind::tensor, 1, DType::bf16, false); }, rule);
  expect_invalid([] {
    (void)LinearPlan(fake(0, DType::e4m3, {k2to31, 128}), fake(1, DType::f32, {k2to31}), ScaleKind::row, DType::bf16);
  }, rule);
  // A weight of 2^31 + 2^17 elements whose dimensions fit is a layer like any other.
  const LinearLayout l = plan_linear_layout((1 << 18) + 16, 8192, ScaleKind::row, (1 << 18) + 16, DType::bf16, false);
  EXPECT_FALSE(l.backends.empty()) << l.excluded;
}

TEST(LargeSizeArgs, QuantLayoutPast2To31Elements) {
  const GroupQuantSpec tma{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  const int64_t T = (int64_t{1} << 20) + 3, H = 4096;
  QuantLayout L = quant_layout(tma, T, H);
  EXPECT_EQ(L.code_bytes, T * H);
  EXPECT_EQ(L.code_strides[0], H);
  EXPECT_EQ(L.t_pad, T + 1);
  EXPECT_EQ(L.scale_stride_c, T + 1);
  EXPECT_EQ(L.scale_batch_stride, 32 * (T + 1));
  EXPECT_EQ(L.scale_bytes, 4 * 32 * (T + 1));
  // 16 experts of 2^16 tokens: 2^32 codes, 2^28 per expert.
  L = quant_layout(tma, int64_t{1} << 16, H, 16);
  EXPECT_EQ(L.code_bytes, int64_t{1} << 32);
  EXPECT_EQ(L.code_strides[0], int64_t{1} << 28);
  EXPECT_EQ(L.scale_strides[0], 32 * (int64_t{1} << 16));
  // Packed UE8M0, row-major: 56 groups in 14 words per token.
  const GroupQuantSpec packed{128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::row_major};
  L = quant_layout(packed, int64_t{1} << 22, 7168);
  EXPECT_EQ(L.code_bytes, (int64_t{1} << 22) * 7168);
  EXPECT_EQ(L.scale_bytes, (int64_t{1} << 22) * 14 * 4);
}

// q and s for spec on fake addresses (slots 1 and 2), shaped as quant_layout says.
std::pair<TensorView, TensorView> group_outputs(const GroupQuantSpec& spec, int64_t tokens, int64_t hidden,
                                                int64_t experts = 0) {
  const QuantLayout L = quant_layout(spec, tokens, hidden, experts);
  TensorView q = fake(1, spec.code, {}), s = fake(2, L.scale_dtype, {});
  q.ndim = L.code_ndim, s.ndim = L.scale_ndim;
  for (int i = 0; i < L.code_ndim; ++i) q.shape[i] = L.code_shape[i], q.strides[i] = L.code_strides[i];
  for (int i = 0; i < L.scale_ndim; ++i) s.shape[i] = L.scale_shape[i], s.strides[i] = L.scale_strides[i];
  return {q, s};
}

// Without a GPU, a call that passes every argument check stops at the device requirement (an error
// of another category); with one it would run on the fake addresses, so this needs no GPU.
TEST(LargeSizeArgs, QuantCallsPast2To31ElementsPassTheChecks) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: these calls would run on fake addresses (LargeSizeGpu runs such sizes)";
  auto accepted = [](const char* what, const std::function<void()>& fn) {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_NE(e.category(), ErrorCategory::invalid_argument) << what << " is refused: " << e.what();
    }
  };
  const int64_t T = int64_t{1} << 20, H = 4096;  // 2^32 elements
  const GroupQuantSpec spec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  const TensorView x = fake(0, DType::bf16, {T, H}), q = fake(1, DType::e4m3, {T, H});
  accepted("per_token_group_quant", [&] {
    const auto [gq, gs] = group_outputs(spec, T, H);
    per_token_group_quant(x, spec, gq, gs, nullptr);
  });
  accepted("silu_and_mul_per_token_group_quant", [&] {
    const auto [gq, gs] = group_outputs(spec, T, H / 2);
    silu_and_mul_per_token_group_quant(x, spec, gq, gs, nullptr);
  });
  accepted("masked_per_token_group_quant", [&] {
    const auto [gq, gs] = group_outputs(spec, T / 16, H, 16);
    masked_per_token_group_quant(fake(0, DType::bf16, {16, T / 16, H}), fake(3, DType::i32, {16}), spec, gq, gs, nullptr);
  });
  accepted("scatter_per_token_group_quant", [&] {
    const auto [gq, gs] = group_outputs(spec, 2 * T, H);
    scatter_per_token_group_quant(x, fake(3, DType::i32, {T, 8}), spec, gq, gs, nullptr);
  });
  accepted("per_token_quant", [&] { per_token_quant(x, q, fake(2, DType::f32, {T}), ScaleRounding::none, nullptr); });
  accepted("per_tensor_quant_static", [&] { per_tensor_quant_static(x, fake(2, DType::f32, {1}), q, nullptr); });
  accepted("per_tensor_quant_dynamic", [&] { per_tensor_quant_dynamic(x, q, fake(2, DType::f32, {1}), nullptr); });
  const RmsNormInput in{x, fake(3, DType::bf16, {H}), 1e-6f, {}, {}};
  accepted("rms_norm", [&] { rms_norm(in, fake(1, DType::bf16, {T, H}), nullptr); });
  accepted("rms_norm_per_token_quant", [&] { rms_norm_per_token_quant(in, q, fake(2, DType::f32, {T}), ScaleRounding::none, nullptr); });
  accepted("rms_norm_per_token_group_quant", [&] {
    const auto [gq, gs] = group_outputs(spec, T, H);
    rms_norm_per_token_group_quant(in, spec, gq, gs, nullptr);
  });
}

// Past what a kernel indexes: errors naming x (or the outputs) and the limit. Each call is refused
// before anything is enqueued, so this runs with or without a GPU.
TEST(LargeSizeArgs, QuantSizesPastTheKernelsLimitsNameTheArgument) {
  const GroupQuantSpec spec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  // Per-token: rows go in gridDim.x, and a row's elements are walked with int offsets.
  expect_invalid([] {
    per_token_quant(fake(0, DType::bf16, {k2to31, 16}), fake(1, DType::e4m3, {k2to31, 16}), fake(2, DType::f32, {k2to31}),
                    ScaleRounding::none, nullptr);
  }, "x: at most 2^31-1 rows");
  for (int64_t h : {k2to31, 2 * k2to31})
    expect_invalid([h] {
      per_token_quant(fake(0, DType::f16, {2, h}), fake(1, DType::i8, {2, h}), fake(2, DType::f32, {2}),
                      ScaleRounding::pow2, nullptr);
    }, "x: H = " + std::to_string(h) + " must be < 2^31");
  // Group quant: one row's elements, and one expert's scale words, are indexed in 32 bits.
  expect_invalid([&] {
    const auto [q, s] = group_outputs(spec, 1, k2to31);
    per_token_group_quant(fake(0, DType::bf16, {1, k2to31}), spec, q, s, nullptr);
  }, "x: too large for one launch");
  expect_invalid([&] {
    const auto [q, s] = group_outputs(spec, int64_t{1} << 30, 512);  // 2^30 tokens x 4 scale words
    per_token_group_quant(fake(0, DType::bf16, {int64_t{1} << 30, 512}), spec, q, s, nullptr);
  }, "x: too large for one launch");
  // Scatter: destination rows and map entries are int32.
  expect_invalid([&] {
    const auto [q, s] = group_outputs(spec, k2to31, 512);
    scatter_per_token_group_quant(fake(0, DType::bf16, {4, 512}), fake(3, DType::i32, {4, 2}), spec, q, s, nullptr);
  }, "src2dst, q: at most 2^31-1 entries and rows");
  // RMSNorm: rows go in gridDim.x.
  expect_invalid([] {
    const RmsNormInput in{fake(0, DType::bf16, {k2to31, 4096}), fake(3, DType::bf16, {4096}), 1e-6f, {}, {}};
    rms_norm(in, fake(1, DType::bf16, {k2to31, 4096}), nullptr);
  }, "x: at most 2^31-1 rows");
  // Layout sizes whose products pass 64 bits.
  // 2^40 tokens x 2^23: the scales (2^56 words) fit, the codes (2^63) do not.
  expect_invalid([&] { quant_layout(spec, int64_t{1} << 40, int64_t{1} << 23); }, "tokens, hidden: codes: size overflows 64 bits");
  expect_invalid([&] { quant_layout(spec, int64_t{1} << 20, 4096, int64_t{1} << 45); },
                 "experts, tokens, hidden: codes: size overflows 64 bits");
}

// ---- on a GPU: sizes past 2^31 for real ----------------------------------------------------------

uint64_t mix64(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// bf16 words of x [rows, cols] (cols % 4 == 0): a random sign and mantissa on a power of two drawn
// per row in [2^-8, 2^6] (rows' magnitudes differ by orders, as activations' do). A counter-based
// hash, four values per draw: 2^31 values take a second or two.
std::vector<uint16_t> random_bf16_rows(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<uint16_t> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t biased = static_cast<uint16_t>(127 + static_cast<int>(mix64(seed ^ ~uint64_t(r)) % 15) - 8);
    uint16_t* row = x.data() + r * cols;
    for (int64_t c = 0; c < cols; c += 4) {
      const uint64_t h = mix64(seed + uint64_t(r * cols + c));
      for (int j = 0; j < 4; ++j) {
        const auto b = static_cast<uint16_t>(h >> (16 * j));
        row[c + j] = static_cast<uint16_t>((b & 0x8000) | (biased << 7) | (b & 0x7F));
      }
    }
  }
  return x;
}

std::vector<float> floats_at(const void* device, int64_t first, int64_t count) {
  std::vector<float> v(count);
  const std::vector<uint8_t> b = download(static_cast<const float*>(device) + first, count * 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// Relative normwise error of got (16-bit words of `out`) against want, and the NaNs among got.
struct NormError {
  double diff2 = 0, ref2 = 0;
  int64_t nan = 0;
  void add(uint16_t got, DType out, float want) {
    const float g = out == DType::bf16 ? ref::bf16_to_f32(got) : ref::f16_to_f32(got);
    if (std::isnan(g)) ++nan;
    else diff2 += (double(g) - want) * (double(g) - want);
    ref2 += double(want) * want;
  }
  double rel() const { return std::sqrt(diff2 / std::max(ref2, 1e-30)); }
};

TEST(LargeSizeGpu, QuantAndGemmPast2To31Elements) {
  FP8ROUTE_REQUIRE_SM90();
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  if (free_bytes < (size_t{20} << 30))
    GTEST_SKIP() << "needs 20 GB of free GPU memory, " << (free_bytes >> 20) << " MB free";
  const int64_t T = (int64_t{1} << 18) + 16, H = 8192;  // T * H = 2^31 + 2^17
  const int64_t first_high = k2to31 / H;                 // the first row past element 2^31
  const uint64_t seed = test::test_seed() * 0x9E3779B97F4A7C15ull + 77;
  std::mt19937_64 rng = test::make_rng(700);

  // Rows sampled: the first two, 14 at random before first_high, the last before it, and every row
  // past element 2^31.
  std::set<int64_t> picked = {0, 1, first_high - 1};
  while (picked.size() < 17) picked.insert(static_cast<int64_t>(rng() % first_high));
  for (int64_t r = first_high; r < T; ++r) picked.insert(r);
  const std::vector<int64_t> rows(picked.begin(), picked.end());
  auto high = [&](int64_t r) { return r >= first_high; };

  DeviceBuffer x, q(T * H), s_tok(T * 4), s_norm(T * 4);
  std::vector<const uint16_t*> x_rows;  // the sampled rows, in the host copy
  std::vector<uint16_t> x_h = random_bf16_rows(T, H, seed);
  x = upload(x_h);
  for (int64_t r : rows) x_rows.push_back(x_h.data() + r * H);
  const TensorView xv = TensorView::contiguous(x.data(), DType::bf16, {T, H});
  const TensorView qv = TensorView::contiguous(q.data(), DType::e4m3, {T, H});
  auto q_row = [&](int64_t r) { return download(q.as<char>() + r * H, H); };

  // GEMM operands of the first problem's other side: b1 [256, K], its row and block scales.
  const int64_t N1 = 256, kb = H / 128;
  const std::vector<uint8_t> b1_h = random_codes(N1 * H, rng);
  const std::vector<float> sb1_row_h = random_scales(N1, rng), sb1_block_h = random_scales(2 * kb, rng);
  const DeviceBuffer b1 = upload(b1_h), sb1_row = upload(sb1_row_h), sb1_block = upload(sb1_block_h);
  DeviceBuffer out1(T * N1 * 2);

  // Runs the routed GEMM and every backend/config that supports `args`, each on a poisoned output,
  // and checks the sampled outputs (check adds them to the groups before and past element 2^31). A
  // config that declines the problem says why, and is listed. The reference kernel (CUDA cores,
  // 64-row tiles) runs only where `with_reference` says: it needs ~10 s for 16 rows of a 2^31-element
  // weight, and minutes for 2^18 rows.
  auto run_all = [&](const ScaledMmArgs& args, int64_t out_bytes, bool with_reference,
                     const std::function<void(NormError&, NormError&)>& check) {
    const GemmProblem p = check_scaled_mm(args);
    int fast = 0;
    std::vector<std::pair<std::string, std::string>> runs = {{"routed", ""}};
    for (const std::string& b : gemm_backends())
      for (const std::string& c : gemm_configs(b)) {
        const std::string why = gemm_supports(b, c, p);
        if (!why.empty()) {
          std::printf("[large] %-12s %-44s declines %s: %s\n", b.c_str(), c.c_str(), to_string(p).c_str(), why.c_str());
          continue;
        }
        if (b == "reference" && !with_reference) {
          std::printf("[large] %-12s %-44s not run on %s (slow)\n", b.c_str(), c.c_str(), to_string(p).c_str());
          continue;
        }
        runs.emplace_back(b, c);
        fast += b != "reference";
      }
    EXPECT_GT(fast, 0) << "no fast backend runs " << to_string(p);
    for (const auto& [b, c] : runs) {
      const std::string what = (b == "routed" ? std::string("routed") : b + "/" + c) + " " + to_string(p) +
                               " seed=" + std::to_string(test::test_seed());
      ASSERT_EQ(cudaMemset(args.out.data, 0xFF, out_bytes), cudaSuccess);
      try {
        if (b == "routed") scaled_mm(args, nullptr);
        else scaled_mm(args, b, c, nullptr);
      } catch (const Error& e) {
        ADD_FAILURE() << what << ": supported, but raised: " << e.what();
        continue;
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      NormError low, hi;
      check(low, hi);
      EXPECT_EQ(low.nan + hi.nan, 0) << what << ": sampled outputs left unwritten (poison) or NaN";
      EXPECT_LE(low.rel(), 1e-2) << what << ": rows or columns before element 2^31";
      EXPECT_LE(hi.rel(), 1e-2) << what << ": rows or columns past element 2^31";
      std::printf("[large] %-58s error %.1e / %.1e (before / past 2^31)\n", (b == "routed" ? b : b + "/" + c).c_str(),
                  low.rel(), hi.rel());
    }
  };
  // Compares sampled rows of out1 [T, N1] with want (one vector of N1 per sampled row).
  auto rows_of_out1 = [&](const std::vector<std::vector<float>>& want) {
    return [&, want](NormError& low, NormError& hi) {
      for (size_t i = 0; i < rows.size(); ++i) {
        const std::vector<uint8_t> got = download(out1.as<char>() + rows[i] * N1 * 2, N1 * 2);
        for (int64_t n = 0; n < N1; ++n) {
          uint16_t w;
          std::memcpy(&w, &got[n * 2], 2);
          (high(rows[i]) ? hi : low).add(w, DType::bf16, want[i][n]);
        }
      }
    };
  };

  // 1. Per-token quant of x, then a = its codes with per-token scales: GEMM [T, K] x [256, K]^T.
  per_token_quant(xv, qv, TensorView::contiguous(s_tok.data(), DType::f32, {T}), ScaleRounding::none, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  {
    std::vector<std::vector<float>> want;
    for (size_t i = 0; i < rows.size(); ++i) {
      const ref::RowQuantOutput r = ref::per_token_quant(x_rows[i], DType::bf16, 1, H, H, DType::e4m3, ScaleRounding::none);
      ASSERT_TRUE(test::bytes_equal(q_row(rows[i]), r.codes, "per_token_quant codes")) << "row " << rows[i];
      const float s = floats_at(s_tok.data(), rows[i], 1)[0];
      ASSERT_EQ(s, r.scales[0]) << "per_token_quant scale of row " << rows[i];
      want.push_back(ref::scaled_mm(r.codes, b1_h, 1, N1, H, ScaleKind::row, std::vector<float>{s}, sb1_row_h, {}, DType::bf16));
    }
    ScaledMmArgs g;
    g.scale = ScaleKind::row;
    g.a = qv;
    g.b = TensorView::contiguous(b1.data(), DType::e4m3, {N1, H});
    g.scale_a = TensorView::contiguous(s_tok.data(), DType::f32, {T});
    g.scale_b = TensorView::contiguous(sb1_row.data(), DType::f32, {N1});
    g.out = TensorView::contiguous(out1.data(), DType::bf16, {T, N1});
    run_all(g, T * N1 * 2, false, rows_of_out1(want));
  }
  if (HasFailure()) return;

  // 2. Per-token-group quant (1 x 128, scales in the TMA-aligned column-major layout, which is the
  // GEMM's block scale_a), then the block-scale GEMM on it.
  const GroupQuantSpec spec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  const QuantLayout L = quant_layout(spec, T, H);
  {
    DeviceBuffer s_grp(L.scale_bytes);
    const TensorView sv = TensorView::contiguous(s_grp.data(), DType::f32, {L.scale_shape[0], L.scale_shape[1]});
    per_token_group_quant(xv, spec, qv, sv, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> s_all = floats_at(s_grp.data(), 0, L.scale_elems);
    std::vector<std::vector<float>> want;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t r = rows[i];
      const ref::QuantOutput w = ref::per_token_group_quant(x_rows[i], DType::bf16, 1, H, H, spec);
      ASSERT_TRUE(test::bytes_equal(q_row(r), w.codes, "per_token_group_quant codes")) << "row " << r;
      std::vector<float> sa(kb * 4, 0.0f);  // [ceil(K/128), align(1, 4)]: this row's scales in column 0
      for (int64_t c = 0; c < kb; ++c) {
        float ws;
        std::memcpy(&ws, &w.scales[c * w.layout.scale_stride_c * 4], 4);
        ASSERT_EQ(s_all[c * L.scale_stride_c + r * L.scale_stride_t], ws) << "group scale " << c << " of row " << r;
        sa[c * 4] = ws;
      }
      want.push_back(ref::scaled_mm(w.codes, b1_h, 1, N1, H, ScaleKind::block, sa, sb1_block_h, {}, DType::bf16));
    }
    ScaledMmArgs g;
    g.scale = ScaleKind::block;
    g.a = qv;
    g.b = TensorView::contiguous(b1.data(), DType::e4m3, {N1, H});
    g.scale_a = TensorView::contiguous(s_grp.data(), DType::f32, {kb, (T + 3) / 4 * 4});
    g.scale_b = TensorView::contiguous(sb1_block.data(), DType::f32, {2, kb});
    g.out = TensorView::contiguous(out1.data(), DType::bf16, {T, N1});
    run_all(g, T * N1 * 2, false, rows_of_out1(want));
  }
  if (HasFailure()) return;

  // 3. RMSNorm + per-token quant of x; its codes [T, K] then serve as a weight b of N = T rows for
  // decode-sized GEMMs (M = 16), row and block scales: the small-M backends read past 2^31 in b.
  const std::vector<uint8_t> w = test::random_activations(DType::bf16, H, rng, H, -1, 1);
  const DeviceBuffer dw = upload(w);
  const RmsNormInput in{xv, TensorView::contiguous(dw.data(), DType::bf16, {H}), 1e-6f, {}, {}};
  rms_norm_per_token_quant(in, qv, TensorView::contiguous(s_norm.data(), DType::f32, {T}), ScaleRounding::none, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::vector<uint8_t>> b_rows;
  std::vector<float> sb_rows;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ref::RmsNormOutput y = ref::rms_norm(x_rows[i], nullptr, H, w.data(), DType::bf16, 1, H, 1e-6f);
    const ref::RowQuantOutput r = ref::per_token_quant(y.y.data(), DType::bf16, 1, H, H, DType::e4m3, ScaleRounding::none);
    b_rows.push_back(q_row(rows[i]));
    ASSERT_TRUE(test::bytes_equal(b_rows.back(), r.codes, "rms_norm_per_token_quant codes")) << "row " << rows[i];
    sb_rows.push_back(floats_at(s_norm.data(), rows[i], 1)[0]);
    ASSERT_EQ(sb_rows.back(), r.scales[0]) << "rms_norm_per_token_quant scale of row " << rows[i];
  }
  const int64_t M2 = 16, N2 = T, nb2 = (N2 + 127) / 128;
  const std::vector<uint8_t> a2_h = random_codes(M2 * H, rng);
  const std::vector<float> sa2_row_h = random_scales(M2, rng), sa2_block_h = random_scales(kb * M2, rng);
  const std::vector<float> sb2_block_h = random_scales(nb2 * kb, rng);
  const DeviceBuffer a2 = upload(a2_h), sa2_row = upload(sa2_row_h), sa2_block = upload(sa2_block_h);
  const DeviceBuffer sb2_block = upload(sb2_block_h);
  DeviceBuffer out2(M2 * N2 * 2);
  // Sampled columns (the sampled rows of b) of out2 [M2, N2] against want[i] (M2 values for column rows[i]).
  auto columns_of_out2 = [&](const std::vector<std::vector<float>>& want) {
    return [&, want](NormError& low, NormError& hi) {
      const std::vector<uint8_t> got = download(out2.data(), M2 * N2 * 2);
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t m = 0; m < M2; ++m) {
          uint16_t v;
          std::memcpy(&v, &got[(m * N2 + rows[i]) * 2], 2);
          (high(rows[i]) ? hi : low).add(v, DType::bf16, want[i][m]);
        }
    };
  };
  for (ScaleKind kind : {ScaleKind::row, ScaleKind::block}) {
    std::vector<std::vector<float>> want;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (kind == ScaleKind::row) {
        want.push_back(ref::scaled_mm(a2_h, b_rows[i], M2, 1, H, kind, sa2_row_h, std::vector<float>{sb_rows[i]}, {},
                                      DType::bf16));
      } else {
        const int64_t nblk = rows[i] / 128;  // this column's row of 128 x 128 weight blocks
        const std::vector<float> sb(sb2_block_h.begin() + nblk * kb, sb2_block_h.begin() + (nblk + 1) * kb);
        want.push_back(ref::scaled_mm(a2_h, b_rows[i], M2, 1, H, kind, sa2_block_h, sb, {}, DType::bf16));
      }
    }
    ScaledMmArgs g;
    g.scale = kind;
    g.a = TensorView::contiguous(a2.data(), DType::e4m3, {M2, H});
    g.b = qv;
    if (kind == ScaleKind::row) {
      g.scale_a = TensorView::contiguous(sa2_row.data(), DType::f32, {M2});
      g.scale_b = TensorView::contiguous(s_norm.data(), DType::f32, {N2});
    } else {
      g.scale_a = TensorView::contiguous(sa2_block.data(), DType::f32, {kb, M2});
      g.scale_b = TensorView::contiguous(sb2_block.data(), DType::f32, {nb2, kb});
    }
    g.out = TensorView::contiguous(out2.data(), DType::bf16, {M2, N2});
    run_all(g, M2 * N2 * 2, kind == ScaleKind::row, columns_of_out2(want));
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace fp8route
