// The GEMM entry point's contract without a GPU: every bad argument raises an error naming it,
// M = 0 returns at once, problems print one way, backends give reasons. Pointers here are never
// dereferenced (checks happen before anything is enqueued), so fake device addresses suffice.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fp8route/tuning/backends.h"
#include "fp8route/tuning/measure.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"

namespace fp8route {
namespace {

// A fake device address; make_args puts its operands 16 GiB apart (offsets n << 34), so none overlaps another.
void* fake(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x10000000} + offset); }

struct Shape {
  int64_t m, n, k;
};

ScaledMmArgs make_args(Shape s, ScaleKind kind) {
  ScaledMmArgs a;
  a.scale = kind;
  a.a = TensorView::contiguous(fake(), DType::e4m3, {s.m, s.k});
  a.b = TensorView::contiguous(fake(1ull << 34), DType::e4m3, {s.n, s.k});
  a.out = TensorView::contiguous(fake(2ull << 34), DType::bf16, {s.m, s.n});
  const int64_t kb = (s.k + 127) / 128;
  switch (kind) {
    case ScaleKind::tensor:
      a.scale_a = TensorView::contiguous(fake(3ull << 34), DType::f32, {1});
      a.scale_b = TensorView::contiguous(fake(4ull << 34), DType::f32, {1});
      break;
    case ScaleKind::row:
      a.scale_a = TensorView::contiguous(fake(3ull << 34), DType::f32, {s.m});
      a.scale_b = TensorView::contiguous(fake(4ull << 34), DType::f32, {s.n});
      break;
    case ScaleKind::block:
      a.scale_a = TensorView::contiguous(fake(3ull << 34), DType::f32, {kb, (s.m + 3) / 4 * 4});
      a.scale_b = TensorView::contiguous(fake(4ull << 34), DType::f32, {(s.n + 127) / 128, kb});
      break;
  }
  return a;
}

// The error message of check_scaled_mm(args), or "" when it passes.
std::string check_error(const ScaledMmArgs& args) {
  try {
    check_scaled_mm(args);
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument) << e.what();
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_MENTIONS(args, needle)                           \
  do {                                                                \
    const std::string msg_ = check_error(args);                       \
    EXPECT_NE(msg_.find(needle), std::string::npos)                   \
        << "expected an error mentioning '" << (needle) << "', got: '" << msg_ << "'"; \
  } while (0)

TEST(GemmArgs, ValidProblemsDescribeThemselves) {
  for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block}) {
    const GemmProblem p = check_scaled_mm(make_args({64, 4096, 14336}, kind));
    EXPECT_EQ(p.m, 64);
    EXPECT_EQ(p.n, 4096);
    EXPECT_EQ(p.k, 14336);
    EXPECT_EQ(p.scale, kind);
    EXPECT_EQ(p.align, 16);
    EXPECT_FALSE(p.bias);
  }
  ScaledMmArgs a = make_args({64, 4096, 14336}, ScaleKind::row);
  a.scale_a = TensorView::contiguous(fake(3ull << 34), DType::f32, {1});
  const GemmProblem p = check_scaled_mm(a);
  EXPECT_FALSE(p.sa_vector);
  EXPECT_TRUE(p.sb_vector);
  EXPECT_EQ(to_string(p), "row bf16 m=64 n=4096 k=14336 sa=scalar sb=vec");
  EXPECT_EQ(to_string(make_problem(1, 2112, 7168, ScaleKind::block, DType::f16, true)),
            "block f16 m=1 n=2112 k=7168 bias");
}

TEST(GemmArgs, AlignmentIsMeasuredNotAssumed) {
  ScaledMmArgs a = make_args({3, 1000, 1000}, ScaleKind::tensor);
  EXPECT_EQ(check_scaled_mm(a).align, 8);  // K = 1000 bytes per row
  a = make_args({3, 1024, 1024}, ScaleKind::tensor);
  a.a.data = fake(4);
  EXPECT_EQ(check_scaled_mm(a).align, 4);
  a = make_args({3, 1004, 1024}, ScaleKind::tensor);  // out rows of 2008 bytes
  EXPECT_EQ(check_scaled_mm(a).align, 8);
}

TEST(GemmArgs, BadArgumentsNameTheArgument) {
  const Shape s{16, 256, 512};
  ScaledMmArgs a = make_args(s, ScaleKind::row);
  a.a.dtype = DType::bf16;
  EXPECT_ERROR_MENTIONS(a, "a: dtype bf16 not allowed");
  a = make_args(s, ScaleKind::row);
  a.b = TensorView::contiguous(fake(1ull << 34), DType::e4m3, {s.n, s.k + 16});
  EXPECT_ERROR_MENTIONS(a, "b: expected [N, K] with K = 512");
  a = make_args(s, ScaleKind::row);
  a.out = TensorView::contiguous(fake(2ull << 34), DType::f32, {s.m, s.n});
  EXPECT_ERROR_MENTIONS(a, "out: dtype f32 not allowed");
  a = make_args(s, ScaleKind::row);
  a.out = TensorView::contiguous(fake(2ull << 34), DType::bf16, {s.m, s.n + 1});
  EXPECT_ERROR_MENTIONS(a, "out: expected shape [16,256]");
  a = make_args(s, ScaleKind::row);
  a.a = TensorView::strided(fake(), DType::e4m3, {s.m, s.k}, {s.k - 16, 1});
  EXPECT_ERROR_MENTIONS(a, "a: row stride 496 must be >= 512");
  a = make_args(s, ScaleKind::row);
  a.b = TensorView::strided(fake(1ull << 34), DType::e4m3, {s.n, s.k}, {1, s.n});
  EXPECT_ERROR_MENTIONS(a, "b: last dim must have stride 1");
  a = make_args(s, ScaleKind::row);
  a.a.data = nullptr;
  EXPECT_ERROR_MENTIONS(a, "a: null pointer");
  a = make_args(s, ScaleKind::row);
  a.a.device = Device::cpu();
  EXPECT_ERROR_MENTIONS(a, "a: must be CUDA device memory");
  a = make_args(s, ScaleKind::row);
  a.scale_a = TensorView::contiguous(fake(3ull << 34), DType::f32, {s.m + 1});
  EXPECT_ERROR_MENTIONS(a, "scale_a: row scales: expected [M] or one element");
  a = make_args(s, ScaleKind::tensor);
  a.scale_b = TensorView::contiguous(fake(4ull << 34), DType::f32, {s.n});
  EXPECT_ERROR_MENTIONS(a, "scale_b: tensor scales: expected one element");
  a = make_args(s, ScaleKind::tensor);
  a.scale_a.dtype = DType::f16;
  EXPECT_ERROR_MENTIONS(a, "scale_a: dtype f16 not allowed");
  a = make_args(s, ScaleKind::row);
  a.scale_b.data = fake((4ull << 34) + 2);
  EXPECT_ERROR_MENTIONS(a, "scale_b: pointer");
  a = make_args({5, 256, 512}, ScaleKind::block);
  a.scale_a = TensorView::contiguous(fake(3ull << 34), DType::f32, {4, 5});  // M not padded to 8
  EXPECT_ERROR_MENTIONS(a, "scale_a (block: [ceil(K/128), align(M, 4)], M-major): expected shape [4,8]");
  a = make_args({5, 256, 512}, ScaleKind::block);
  a.scale_b = TensorView::contiguous(fake(4ull << 34), DType::f32, {4, 2});  // transposed
  EXPECT_ERROR_MENTIONS(a, "scale_b (block: [ceil(N/128), ceil(K/128)], contiguous or with rows padded to a multiple of 4): expected shape [2,4]");
  // K = 640: 5 blocks per row. Rows padded to 8 floats are the cuBLASLt form; padded to 6 is neither.
  a = make_args({8, 256, 640}, ScaleKind::block);
  a.scale_b = TensorView::strided(fake(4ull << 34), DType::f32, {2, 5}, {8, 1});
  EXPECT_TRUE(check_scaled_mm(a).sb_padded);
  EXPECT_NE(to_string(check_scaled_mm(a)).find("sb=padded4"), std::string::npos);
  EXPECT_NE(gemm_supports("cutlass_sm90", "block_128x128x128_1x2x1_coop", check_scaled_mm(a)).find("unpadded"), std::string::npos);
  a.scale_b = TensorView::strided(fake(4ull << 34), DType::f32, {2, 5}, {6, 1});
  EXPECT_ERROR_MENTIONS(a, "contiguous or with rows padded to a multiple of 4");
  a.scale_b = TensorView::contiguous(fake(4ull << 34), DType::f32, {2, 5});
  EXPECT_FALSE(check_scaled_mm(a).sb_padded);
  a = make_args(s, ScaleKind::row);
  a.bias = TensorView::contiguous(fake(5ull << 34), DType::f16, {s.n});
  EXPECT_ERROR_MENTIONS(a, "bias: dtype f16 not allowed");
  a.bias = TensorView::contiguous(fake(5ull << 34), DType::bf16, {s.n - 1});
  EXPECT_ERROR_MENTIONS(a, "bias: expected a contiguous [N] = [256] vector");
  a = make_args({16, 256, 0}, ScaleKind::tensor);
  EXPECT_ERROR_MENTIONS(a, "a: K must be >= 1");
  a = make_args(s, ScaleKind::row);
  a.a = TensorView::contiguous(fake(), DType::e4m3, {s.m, s.k, 1});
  EXPECT_ERROR_MENTIONS(a, "a: expected 2 dims");
}

TEST(GemmArgs, EmptyProblemReturnsAtOnce) {
  // No GPU is needed: nothing is enqueued for M = 0 or N = 0, on any backend.
  for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block}) {
    EXPECT_NO_THROW(scaled_mm(make_args({0, 256, 512}, kind), nullptr));
    EXPECT_NO_THROW(scaled_mm(make_args({0, 256, 512}, kind), "reference", "", nullptr));
    EXPECT_NO_THROW(scaled_mm(make_args({4, 0, 512}, kind), nullptr));
  }
}

// DLPack and torch give an empty tensor a null pointer: M = 0 or N = 0 with the empty operands
// null is an empty problem, not a bad pointer (nothing is enqueued, no GPU needed). A null pointer
// with elements behind it is still an error.
TEST(GemmArgs, EmptyOperandsMayBeNull) {
  for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block}) {
    ScaledMmArgs m0 = make_args({0, 256, 512}, kind);
    m0.a.data = m0.out.data = nullptr;
    if (kind != ScaleKind::tensor) m0.scale_a.data = nullptr;  // [0], or [ceil(K/128), 0]
    EXPECT_EQ(check_scaled_mm(m0).m, 0) << name(kind);
    EXPECT_NO_THROW(scaled_mm(m0, nullptr)) << name(kind);
    EXPECT_NO_THROW(scaled_mm(m0, "reference", "", nullptr)) << name(kind);
    ScaledMmArgs n0 = make_args({4, 0, 512}, kind);
    n0.b.data = n0.out.data = nullptr;
    if (kind != ScaleKind::tensor) n0.scale_b.data = nullptr;  // [0], or [0, ceil(K/128)]
    EXPECT_EQ(check_scaled_mm(n0).n, 0) << name(kind);
    EXPECT_NO_THROW(scaled_mm(n0, nullptr)) << name(kind);
    n0.a.data = nullptr;
    EXPECT_ERROR_MENTIONS(n0, "a: null pointer");
  }
}

TEST(GemmArgs, UnknownBackendsAndConfigsAreListed) {
  try {
    gemm_configs("cublas");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend: unknown name 'cublas' (this build has cublaslt, cutlass_sm90, skinny, decode, wgmma, reference"),
              std::string::npos) << e.what();
  }
  try {
    gemm_supports("reference", "tiles_of_9", make_problem(1, 16, 16, ScaleKind::row));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config: backend reference has no config 'tiles_of_9'"),
              std::string::npos) << e.what();
  }
}

// The wgmma backend takes block scales only and says so for the other kinds on any machine; a block
// problem it turns down only for a rule of its own (alignment, dtype) or for the GPU.
TEST(GemmArgs, WgmmaRunsBlockScalesOnly) {
  for (const std::string& c : gemm_configs("wgmma")) {
    for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row})
      EXPECT_NE(gemm_supports("wgmma", c, make_problem(4096, 4096, 4096, kind)).find("block scales only"),
                std::string::npos)
          << c;
    GemmProblem p = make_problem(4096, 4096, 4096, ScaleKind::block);
    const std::string why = gemm_supports("wgmma", c, p);
    if (cuda_device_count() == 0) EXPECT_NE(why, "") << c << ": no GPU, yet supported";
    p.align = 8;
    EXPECT_NE(gemm_supports("wgmma", c, p), "") << c << " took 8-byte aligned operands";
    p.align = 16;
    p.out = DType::f32;
    EXPECT_NE(gemm_supports("wgmma", c, p).find("out must be bf16 or f16"), std::string::npos) << c;
  }
}

// gemm_describe: only a rank-named config (cuBLASLt's heuristicN) has anything to add, and only
// with a GPU to ask; without one it is "" for every config (with one: test_gemm's
// GemmBackends.DescribeNamesCuBlasLtAlgorithms). Unknown names are errors, as for gemm_supports.
TEST(GemmArgs, DescribeIsEmptyUnlessARankNeedsNaming) {
  const GemmProblem p = make_problem(64, 4096, 1792, ScaleKind::row);
  for (const std::string& b : gemm_backends())
    for (const std::string& c : gemm_configs(b))
      if (b != "cublaslt" || cuda_device_count() == 0) EXPECT_EQ(gemm_describe(b, c, p), "") << b << "/" << c;
  EXPECT_THROW(gemm_describe("cublas", "heuristic", p), Error);
  EXPECT_THROW(gemm_describe("cublaslt", "heuristic9", p), Error);
}

TEST(GemmArgs, EveryValidProblemHasABackend) {
  // Unaligned and odd shapes: fast backends say why not; the reference takes them.
  GemmProblem p = make_problem(3, 1000, 1000, ScaleKind::row);
  p.align = 8;
  for (const std::string& b : gemm_backends()) {
    if (b == "reference") continue;
    for (const std::string& c : gemm_configs(b)) EXPECT_FALSE(gemm_supports(b, c, p).empty()) << b << "/" << c;
  }
  EXPECT_EQ(gemm_supports("reference", "", p), "");
  EXPECT_EQ(gemm_select(p).backend, "reference");
  for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block})
    for (int64_t m : {1, 3, 64, 4096})
      EXPECT_NO_THROW(gemm_select(make_problem(m, 2112, 7168, kind))) << m;
}


// The screen of `fp8route tune/bench --screen` (timing::screen_keep): fresh random quick-round times;
// what it keeps is checked against the rule written out independently here.
TEST(Screen, KeepsRoutedFailedEachBackendsFastestAndTheNearlyFastest) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> t(10.0, 40.0);
  const std::vector<std::string> names = {"cublaslt", "cutlass_sm90", "skinny"};
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 2 + rng() % 30;
    std::vector<std::string> backends(n);
    std::vector<double> us(n);
    std::vector<bool> failed(n);
    for (size_t i = 0; i < n; ++i) {
      backends[i] = i == 0 ? "" : names[rng() % names.size()];  // choice 0: the routed call
      us[i] = t(rng);
      failed[i] = rng() % 10 == 0;
    }
    const double pct = 5.0 + double(rng() % 40);
    const std::vector<bool> keep = timing::screen_keep(backends, us, failed, pct);
    double best = INFINITY;
    for (size_t i = 0; i < n; ++i)
      if (!failed[i]) best = std::min(best, us[i]);
    for (size_t i = 0; i < n; ++i) {
      bool fastest_of_backend = !backends[i].empty() && !failed[i];
      for (size_t j = 0; j < n; ++j)
        if (j != i && backends[j] == backends[i] && !failed[j] && (us[j] < us[i] || (us[j] == us[i] && j < i)))
          fastest_of_backend = false;
      const bool want = backends[i].empty() || failed[i] || fastest_of_backend || us[i] <= best * (1 + pct / 100);
      EXPECT_EQ(keep[i], want) << "choice " << i << " (" << backends[i] << ", " << us[i] << " us, failed "
                               << failed[i] << "), fastest " << best << ", pct " << pct;
    }
  }
  EXPECT_THROW(timing::screen_keep({"a"}, {1.0, 2.0}, {false}, 25), Error);
}

TEST(FinalRound, TheNearTiesFastestFirstOrNone) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> t(10.0, 14.0);
  for (int trial = 0; trial < 500; ++trial) {
    const size_t n = 1 + rng() % 12;
    std::vector<double> us(n);
    std::vector<bool> failed(n);
    for (size_t i = 0; i < n; ++i) us[i] = t(rng), failed[i] = rng() % 6 == 0;
    const double pct = double(rng() % 10);
    const std::vector<size_t> got = timing::final_round(us, failed, pct);
    double best = INFINITY;
    for (size_t i = 0; i < n; ++i)
      if (!failed[i]) best = std::min(best, us[i]);
    std::vector<size_t> want;
    for (size_t i = 0; i < n; ++i)
      if (!failed[i] && us[i] <= best * (1 + pct / 100)) want.push_back(i);
    if (want.size() < 2) want.clear();
    ASSERT_EQ(got.size(), want.size()) << "trial " << trial << ", pct " << pct;
    EXPECT_EQ(std::set<size_t>(got.begin(), got.end()), std::set<size_t>(want.begin(), want.end()));
    for (size_t j = 1; j < got.size(); ++j) EXPECT_LE(us[got[j - 1]], us[got[j]]);
  }
  EXPECT_TRUE(timing::final_round({10.0, 10.1}, {false, true}, 5).empty());     // one left: no tie
  EXPECT_EQ(timing::final_round({10.4, 10.0, 12.0}, {false, false, false}, 5), (std::vector<size_t>{1, 0}));
  EXPECT_THROW(timing::final_round({1.0}, {false, false}, 5), Error);
}

// The tuning tier's view of the backend registry agrees with the public names and configs, and says
// which backend is the slow fallback and which ranks its configs per problem.
TEST(TuningBackends, TheRegistryAsToolsSeeIt) {
  const std::vector<tuning::BackendInfo> all = tuning::backends();
  std::vector<std::string> names;
  for (const tuning::BackendInfo& b : all) {
    names.push_back(b.name);
    EXPECT_EQ(b.configs, gemm_configs(b.name)) << b.name;
    EXPECT_EQ(b.slow_fallback, b.name == "reference") << b.name;
    EXPECT_EQ(tuning::backend(b.name).name, b.name);
  }
  EXPECT_EQ(names, gemm_backends());
  EXPECT_TRUE(tuning::backend("cublaslt").ranks_configs_per_problem);
  EXPECT_THROW((void)tuning::backend("nope"), Error);
  EXPECT_EQ(tuning::m_tile("nope", "x"), 0);
}

}  // namespace
}  // namespace fp8route
