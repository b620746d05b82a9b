// Accumulation class as the caller's choice (Accum in gemm.h): every config has a class, a problem
// that asks for accum=precise never routes to a fast-class config (table lookup, nearest entries,
// interpolation, the heuristic, LinearPlan's router), and bad values raise naming `accum`. CPU,
// except the last tests: a precise result at large K against fp64, and the heuristic's precise
// fallback on an SM90 GPU.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/shapes.h"
#include "fp8route/buffer.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "route/linear_layout.h"
#include "fp8route/reference.h"
#include "fp8route/route.h"
#include "gpu_util.h"
#include "test_util.h"

namespace fp8route {
namespace {

std::string source_dir() {
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  return env ? env : FP8ROUTE_SOURCE_DIR;
}

constexpr ScaleKind kKinds[] = {ScaleKind::tensor, ScaleKind::row, ScaleKind::block};

// Every backend answers yes: what the router chooses then depends on the table and the class alone.
const SupportsFn kAny = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };

void* fake(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x10000000} + offset); }

ScaledMmArgs row_args(int64_t m, int64_t n, int64_t k) {
  ScaledMmArgs a;
  a.scale = ScaleKind::row;
  a.a = TensorView::contiguous(fake(), DType::e4m3, {m, k});
  a.b = TensorView::contiguous(fake(1ull << 34), DType::e4m3, {n, k});
  a.out = TensorView::contiguous(fake(2ull << 34), DType::bf16, {m, n});
  a.scale_a = TensorView::contiguous(fake(3ull << 34), DType::f32, {m});
  a.scale_b = TensorView::contiguous(fake(4ull << 34), DType::f32, {n});
  return a;
}

TEST(Accum, NamesParseAndBadValuesNameAccum) {
  EXPECT_EQ(parse_accum("fast"), Accum::fast);
  EXPECT_EQ(parse_accum("precise"), Accum::precise);
  EXPECT_EQ(name(Accum::fast), "fast");
  EXPECT_EQ(name(Accum::precise), "precise");
  for (const char* bad : {"", "Fast", "fp32", "fastacc", "precise "})
    test::expect_invalid([&] { parse_accum(bad); }, "accum");
}

TEST(Accum, CheckScaledMmCarriesAccumAndRejectsBadValues) {
  ScaledMmArgs args = row_args(16, 256, 512);
  EXPECT_EQ(check_scaled_mm(args).accum, Accum::fast);  // the default
  EXPECT_EQ(to_string(check_scaled_mm(args)).find("accum"), std::string::npos);
  args.accum = Accum::precise;
  const GemmProblem p = check_scaled_mm(args);
  EXPECT_EQ(p.accum, Accum::precise);
  EXPECT_NE(to_string(p).find(" accum=precise"), std::string::npos) << to_string(p);
  args.accum = static_cast<Accum>(7);
  test::expect_invalid([&] { check_scaled_mm(args); }, "accum");
}

// Each backend's class, from what its kernels do: CUTLASS _fastacc configs accumulate in the tensor
// core over all of K; cuBLASLt sets CUBLASLT_MATMUL_DESC_FAST_ACCUM for tensor and row scales only,
// and never in its "preciseN" configs; skinny, decode and reference add each K block into fp32 totals.
TEST(Accum, EveryConfigHasItsClass) {
  for (const std::string& b : gemm_backends())
    for (const std::string& c : gemm_configs(b))
      for (ScaleKind kind : kKinds) {
        const GemmProblem p = make_problem(64, 4096, 4096, kind);
        const Accum a = gemm_accum(b, c, p);
        ASSERT_TRUE(a == Accum::fast || a == Accum::precise) << b << "/" << c;
        Accum want = Accum::precise;
        if (b == "cutlass_sm90" && c.find("_fastacc") != std::string::npos) want = Accum::fast;
        if (b == "cublaslt" && kind != ScaleKind::block && !c.starts_with("precise")) want = Accum::fast;
        EXPECT_EQ(a, want) << b << "/" << c << " " << name(kind);
      }
  // Every scale kind has precise configs on a fast backend, so precise needs no slow path.
  for (ScaleKind kind : kKinds) {
    std::set<std::string> precise;
    for (const std::string& b : gemm_backends())
      if (b != "reference")
        for (const std::string& c : gemm_configs(b))
          if (gemm_accum(b, c, make_problem(64, 4096, 4096, kind)) == Accum::precise) precise.insert(b + "/" + c);
    EXPECT_FALSE(precise.empty()) << name(kind);
  }
}

// A fast-class config does not support a problem that asks for precise, whatever else holds; the
// reason says so. A precise-class config's answer is the same for both requests.
TEST(Accum, SupportsRefusesFastClassForPrecise) {
  for (const std::string& b : gemm_backends())
    for (const std::string& c : gemm_configs(b))
      for (ScaleKind kind : kKinds) {
        GemmProblem p = make_problem(64, 4096, 4096, kind);
        const std::string fast = gemm_supports(b, c, p);
        p.accum = Accum::precise;
        const std::string precise = gemm_supports(b, c, p);
        if (gemm_accum(b, c, p) == Accum::fast)
          EXPECT_NE(precise.find("accum=precise"), std::string::npos) << b << "/" << c << ": " << precise;
        else
          EXPECT_EQ(precise, fast) << b << "/" << c;
      }
}

// Every layer of shapes/models.json at every TP degree of the catalog, at every M of its grid, for
// each scale kind (bf16): what the router meets in practice.
const std::vector<GemmProblem>& catalog_problems() {
  static const std::vector<GemmProblem> problems = [] {
    const tools::ShapeCatalog catalog = tools::load_catalog(tools::default_catalog_path());
    std::set<std::pair<int64_t, int64_t>> shapes;
    for (int tp : catalog.tp)
      for (const tools::LayerShape& l : tools::at_tp(catalog.layers, tp)) shapes.insert({l.n, l.k});
    std::vector<GemmProblem> out;
    for (const auto& [n, k] : shapes)
      for (ScaleKind kind : kKinds)
        for (int64_t m : catalog.m_grid) out.push_back(make_problem(m, n, k, kind));
    return out;
  }();
  return problems;
}

const Router& shipped_router() {
  static const Router r(load_routing_table(source_dir() + "/routes/h200.json"), kAny);
  return r;
}

TEST(Accum, PreciseNeverRoutesToFastClass) {
  const Router& router = shipped_router();
  ASSERT_FALSE(router.table().entries.empty());
  size_t fast_choices = 0, points = 0;
  for (GemmProblem p : catalog_problems()) {
    const Route fast = router.select(p);
    fast_choices += gemm_accum(fast.backend, fast.config, p) == Accum::fast;
    p.accum = Accum::precise;
    const Route r = router.select(p);
    ++points;
    ASSERT_EQ(gemm_accum(r.backend, r.config, p), Accum::precise)
        << to_string(p) << " routed to " << r.backend << "/" << r.config << ": " << r.why;
  }
  // The table's own choices are often fast-class: the option changes routing.
  EXPECT_GT(fast_choices, points / 10) << fast_choices << " of " << points;
}

// Where the table measured the problem's very (N, K) and M, precise takes the fastest precise-class
// config measured there.
TEST(Accum, PreciseTakesTheFastestMeasuredPreciseConfig) {
  const Router& router = shipped_router();
  size_t checked = 0;
  for (const TableEntry& e : router.table().entries)
    for (const Breakpoint& bp : e.breakpoints) {
      GemmProblem p = make_problem(bp.max_m, e.n, e.k, e.scale, e.out);
      p.accum = Accum::precise;
      const Measured* best = nullptr;
      for (const Measured& r : e.measured)
        if (r.m == p.m && gemm_accum(r.backend, r.config, p) == Accum::precise && (!best || r.us < best->us))
          best = &r;
      const Route r = router.select(p);
      if (!best || r.source != Route::Source::exact) continue;
      EXPECT_EQ(r.backend + "/" + r.config, best->backend + "/" + best->config) << to_string(p) << ": " << r.why;
      ++checked;
    }
  EXPECT_GT(checked, 100u);
}

// A table without entries, or whose candidates are all fast-class: the heuristic, which keeps to the
// class too (its precise fallbacks, the reference last).
TEST(Accum, HeuristicKeepsToTheClass) {
  const Router empty(RoutingTable{}, kAny);
  for (GemmProblem p : {make_problem(1, 4096, 4096, ScaleKind::row), make_problem(4096, 4096, 4096, ScaleKind::tensor),
                        make_problem(24, 4096, 14336, ScaleKind::row), make_problem(512, 7168, 2048, ScaleKind::block)}) {
    p.accum = Accum::precise;
    const Route r = empty.select(p);
    EXPECT_EQ(r.source, Route::Source::heuristic);
    EXPECT_EQ(gemm_accum(r.backend, r.config, p), Accum::precise) << to_string(p) << ": " << r.why;
    const GemmChoice c = gemm_select(p);
    EXPECT_EQ(gemm_accum(c.backend, c.config, p), Accum::precise) << to_string(p) << ": " << c.why;
  }
}

// Per-tensor scales asked precise run cuBLASLt as torch._scaled_mm asks it ("precise": fast
// accumulation off), where the heuristic decides; the precise family leaves block scales to the
// configs that already run them without fast accumulation.
TEST(Accum, PreciseTensorRunsCuBlasLtAsTorchAsks) {
  for (int64_t m : {1, 64, 4096}) {
    GemmProblem p = make_problem(m, 4096, 14336, ScaleKind::tensor);
    p.accum = Accum::precise;
    const GemmChoice c = gemm_select(p);
    EXPECT_EQ(c.backend + "/" + c.config, "cublaslt/precise") << to_string(p) << ": " << c.why;
  }
  const GemmProblem block = make_problem(64, 4096, 4096, ScaleKind::block);
  for (const char* c : {"precise", "precise1"}) {
    const std::string why = gemm_supports("cublaslt", c, block);
    EXPECT_NE(why.find("heuristicN and ws1mN run it"), std::string::npos) << c << ": " << why;
  }
}

// explain() names the class asked for and the choice's, and lists fast-class candidates as skipped.
TEST(Accum, ExplainSaysTheClass) {
  const Router& router = shipped_router();
  GemmProblem p = make_problem(64, 4096, 4096, ScaleKind::row);
  const std::string fast = router.explain(p);
  EXPECT_NE(fast.find("\naccum: fast"), std::string::npos) << fast;
  p.accum = Accum::precise;
  const std::string precise = router.explain(p);
  EXPECT_NE(precise.find("accum=precise"), std::string::npos) << precise;
  EXPECT_NE(precise.find("\naccum: precise (precise-class configs only); the choice accumulates precise\n"),
            std::string::npos)
      << precise;
}

// A layer planned with accum=precise: its router (the table's slice, restricted to the layer's
// backends and forms) keeps every M to precise-class configs; its backends are the same as fast's
// (the class is chosen per route, not per backend).
TEST(Accum, LinearPlanRouterKeepsToTheClass) {
  const Router& full = shipped_router();
  for (ScaleKind act : kKinds)
    for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {6144, 4096}, {4096, 14336}, {1000, 4096}}) {
      const int64_t ws = act == ScaleKind::block ? ((n + 127) / 128) * ((k + 127) / 128) : n;
      LinearLayout layout = plan_linear_layout(n, k, act, ws, DType::bf16, false, kAny);
      const std::vector<std::string> backends = layout.backends;
      layout.accum = Accum::precise;
      EXPECT_EQ(layout.problem(8, 16, "").accum, Accum::precise);
      const Router plan = plan_router(full, layout, kAny);
      for (int64_t m : {1, 8, 24, 64, 100, 256, 1024, 4096, 10000}) {
        const GemmProblem p = layout.problem(m, 16, "");
        const Route r = plan.select(p);
        EXPECT_EQ(gemm_accum(r.backend, r.config, p), Accum::precise)
            << to_string(p) << " routed to " << r.backend << "/" << r.config << ": " << r.why;
      }
      EXPECT_EQ(layout.backends, backends);
    }
}

// ---- GPU -------------------------------------------------------------------------------------

// Positive E4M3 codes in [1/4, 4) (every product exact in fp32, every sum growing: what makes a
// reduced-precision accumulator's loss add up), or signed ones of the same magnitudes.
std::vector<uint8_t> codes(int64_t n, bool positive, std::mt19937_64& rng) {
  std::vector<uint8_t> v(static_cast<size_t>(n));
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::bernoulli_distribution sign(0.5);
  for (uint8_t& c : v) c = ref::e4m3_encode(std::exp2(u(rng)) * (positive || sign(rng) ? 1.f : -1.f));
  return v;
}

// A precise-class result against the fp64 sum of the exact products. In the precise class each
// product is exact in fp32 (two 4-bit significands), a 128-wide K block is summed by the tensor
// core and promoted to fp32 (its reduced-precision alignment loses at most a few units of 2^-14 of
// the block's sum of |products| per k32 step, four steps per block: 2^-10 bounds it with room), the
// blocks are summed in fp32 (K u, u = 2^-24, of the sum of |products| at most, with any order), the
// scales multiply in fp32, and bf16 rounds once (2^-9 of |y|; 2^-8 covers both roundings). So
// |y - ref| <= (2^-10 + K 2^-24) S + 2^-8 |ref|, S = sa sb sum |a b|. Fast accumulation carries the
// tensor core's accumulator over all of K instead, and its loss grows with K (docs/numerics.md).
TEST(AccumGpu, PreciseMatchesFp64AtLargeK) {
  FP8ROUTE_REQUIRE_SM90();
  std::mt19937_64 rng = test::make_rng(0xACC);
  const int64_t m = 32, n = 1024;
  // FP8ROUTE_TEST_QUICK (the sanitizers): every precise config once, at a K of 16 blocks.
  const std::vector<int64_t> ks = test::quick() ? std::vector<int64_t>{2048} : std::vector<int64_t>{16384, 18432};
  const std::vector<bool> signs = test::quick() ? std::vector<bool>{false} : std::vector<bool>{true, false};
  for (int64_t k : ks)
    for (bool positive : signs) {
      const std::vector<uint8_t> a = codes(m * k, positive, rng), b = codes(n * k, positive, rng);
      std::vector<float> sa(m), sb(n);
      std::uniform_real_distribution<float> us(0.5f, 1.f);
      for (float& s : sa) s = us(rng) / 64;
      for (float& s : sb) s = us(rng) / 64;
      std::vector<double> ref(m * n), mag(m * n);
      {
        std::vector<double> da(a.size()), db(b.size());
        for (size_t i = 0; i < a.size(); ++i) da[i] = ref::e4m3_decode(a[i]);
        for (size_t i = 0; i < b.size(); ++i) db[i] = ref::e4m3_decode(b[i]);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0, s_abs = 0;
            const double* x = &da[i * k];
            const double* y = &db[j * k];
            for (int64_t q = 0; q < k; ++q) s += x[q] * y[q], s_abs += std::abs(x[q] * y[q]);
            ref[i * n + j] = s * sa[i] * sb[j];
            mag[i * n + j] = s_abs * sa[i] * sb[j];
          }
      }
      DeviceBuffer da = test::upload(a), db = test::upload(b), dsa = test::upload(sa), dsb = test::upload(sb);
      DeviceBuffer dout(size_t(m * n) * 2);
      ScaledMmArgs args;
      args.scale = ScaleKind::row;
      args.accum = Accum::precise;
      args.a = TensorView::contiguous(da.data(), DType::e4m3, {m, k});
      args.b = TensorView::contiguous(db.data(), DType::e4m3, {n, k});
      args.scale_a = TensorView::contiguous(dsa.data(), DType::f32, {m});
      args.scale_b = TensorView::contiguous(dsb.data(), DType::f32, {n});
      args.out = TensorView::contiguous(dout.data(), DType::bf16, {m, n});
      const GemmProblem p = check_scaled_mm(args);
      // The routed call, then every precise-class config that runs the problem.
      std::vector<std::pair<std::string, std::string>> runs = {{"", ""}};
      for (const std::string& bk : gemm_backends())
        for (const std::string& c : gemm_configs(bk))
          if (gemm_supports(bk, c, p).empty()) runs.emplace_back(bk, c);
      for (const auto& [bk, c] : runs) {
        test::poison(dout, 0xFF);
        if (bk.empty()) scaled_mm(args, nullptr);
        else scaled_mm(args, bk, c, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<uint8_t> out = test::download(dout.data(), dout.bytes());
        const std::string who = bk.empty() ? "routed " + default_router()->select(p).config : bk + "/" + c;
        double worst = 0;  // error / bound
        for (int64_t i = 0; i < m * n; ++i) {
          uint16_t h;
          std::memcpy(&h, &out[i * 2], 2);
          const double got = ref::bf16_to_f32(h);
          const double bound = (std::exp2(-10) + double(k) * std::exp2(-24)) * mag[i] + std::exp2(-8) * std::abs(ref[i]);
          ASSERT_TRUE(std::isfinite(got)) << who << " k=" << k << " at " << i;
          worst = std::max(worst, std::abs(got - ref[i]) / bound);
        }
        EXPECT_LE(worst, 1.0) << who << " k=" << k << (positive ? " positive" : " signed")
                              << ": error up to " << worst << "x the precise-class bound";
      }
    }
}

// On an SM90 GPU with the CUTLASS backend, the heuristic finds a fast precise config for aligned
// problems of every scale kind and M: precise never falls to the reference kernel there.
TEST(AccumGpu, HeuristicPreciseNeedsNoSlowPath) {
  FP8ROUTE_REQUIRE_SM90();
  if (gemm_supports("cutlass_sm90", "", make_problem(64, 4096, 4096, ScaleKind::row)).find("no CUTLASS") !=
      std::string::npos)
    GTEST_SKIP() << "this build has no CUTLASS backend";
  for (ScaleKind kind : kKinds)
    for (int64_t m : {1, 16, 24, 64, 128, 256, 4096}) {
      GemmProblem p = make_problem(m, 4096, 4096, kind);
      p.accum = Accum::precise;
      const GemmChoice c = gemm_select(p);
      EXPECT_EQ(gemm_accum(c.backend, c.config, p), Accum::precise) << to_string(p) << ": " << c.why;
      EXPECT_NE(c.backend, "reference") << to_string(p) << ": " << c.why;
    }
}

}  // namespace
}  // namespace fp8route
