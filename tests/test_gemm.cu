// Every GEMM backend against an independent reference (docs/numerics.md, GEMM accumulation and tolerance):
// - the GPU reference kernel against the CPU fp64 reference (small and odd shapes);
// - every backend x scale kind x out dtype x bias on the models.json shapes at TP 1 and 8 and
//   M in {1, 4, 16, 64, 128, 1000, 4096}, against the GPU reference on a sample of rows, normwise;
// - every config of every backend exactly on small-integer data;
// - outputs poisoned with NaN before each run (unwritten elements are caught), row padding of a
//   strided output never written, determinism and CUDA-graph replay.
// Fresh random data each run (the seed is printed; FP8ROUTE_TEST_SEED repeats one).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "timing/fill.cuh"
#include "common/shapes.h"
#include "fp8route/buffer.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "fp8route/route.h"
#include "fp8route/reference.h"
#include "gemm/backend.h"
#include "fp8route/tuning/gemm_knobs.h"
#include "gemm/simt/simt.h"
#include "gpu_util.h"
#include "start_gate.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::download;
using test::upload;

// ---- device-side data and checks ------------------------------------------------------------

using timing::fill_bias;
using timing::fill_codes;
using timing::fill_scales;
using timing::from_float;
using timing::kFillBlock;
using timing::kFillGrid;

template <class T>
__device__ float to_float(T v) { return static_cast<float>(v); }

struct Stats {
  double diff2, ref2;
  unsigned long long mismatches;  // sampled elements whose bits differ from round(ref)
  unsigned long long nonfinite;   // elements of the whole output that are NaN/inf (poison left)
  unsigned long long padding;     // padding elements (columns N..ldo) that were written
};

// Sampled rows against the f32 reference.
template <class T>
__global__ void compare_rows(const T* y, int64_t ldo, const float* ref, const int32_t* rows, int64_t num_rows,
                             int64_t n, Stats* st) {
  double d2 = 0, r2 = 0;
  unsigned long long mis = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < num_rows * n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    const T got = y[rows[r] * ldo + c];
    const float want = ref[i];
    const double d = double(to_float(got)) - double(want);
    d2 += d * d;
    r2 += double(want) * want;
    const T rounded = from_float<T>(want);
    mis += *reinterpret_cast<const uint16_t*>(&rounded) != *reinterpret_cast<const uint16_t*>(&got);
  }
  atomicAdd(&st->diff2, d2);
  atomicAdd(&st->ref2, r2);
  atomicAdd(&st->mismatches, mis);
}

// The whole output: no poison (NaN) left inside [M, N], and the padding columns untouched.
template <class T>
__global__ void scan_output(const T* y, int64_t m, int64_t n, int64_t ldo, Stats* st) {
  unsigned long long bad = 0, pad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < m * ldo; i += int64_t(gridDim.x) * blockDim.x) {
    const uint16_t bits = *reinterpret_cast<const uint16_t*>(&y[i]);
    if (i % ldo < n) bad += !isfinite(to_float(y[i]));
    else pad += bits != 0xFFFF;
  }
  atomicAdd(&st->nonfinite, bad);
  atomicAdd(&st->padding, pad);
}

// ---- one problem's inputs, reference and checks -----------------------------------------------

// Grow-only device buffers reused across cases (the largest layer's weight is 1.7 GB).
struct Pool {
  std::map<std::string, DeviceBuffer> bufs;
  void* get(const std::string& name, size_t bytes) {
    DeviceBuffer& b = bufs[name];
    if (b.bytes() < bytes) b = DeviceBuffer(std::max<size_t>(bytes, 256));
    return b.data();
  }
};
Pool& pool() {
  static Pool p;
  return p;
}

struct Result {
  double rel_err = 0;
  uint64_t mismatches = 0, nonfinite = 0, padding = 0, sampled = 0;
};

class Problem {
 public:
  // ldo_pad > 0: the output has row stride N + ldo_pad and the padding must stay untouched.
  Problem(const GemmProblem& p, bool exact, uint64_t seed, int64_t ldo_pad = 0) : p_(p), exact_(exact) {
    Pool& pl = pool();
    const int64_t kb = (p.k + 127) / 128, ma = (p.m + 3) / 4 * 4;
    args_.scale = p.scale;
    auto* a = static_cast<uint8_t*>(pl.get("a", p.m * p.k));
    auto* b = static_cast<uint8_t*>(pl.get("b", p.n * p.k));
    fill_codes<<<kFillGrid, kFillBlock>>>(a, p.m, p.k, p.k, seed ^ 1, exact);
    fill_codes<<<kFillGrid, kFillBlock>>>(b, p.n, p.k, p.k, seed ^ 2, exact);
    args_.a = TensorView::contiguous(a, DType::e4m3, {p.m, p.k});
    args_.b = TensorView::contiguous(b, DType::e4m3, {p.n, p.k});
    int64_t na = 1, nb = 1;
    if (p.scale == ScaleKind::row) na = p.sa_vector ? p.m : 1, nb = p.sb_vector ? p.n : 1;
    if (p.scale == ScaleKind::block) na = kb * ma, nb = (p.n + 127) / 128 * kb;
    auto* sa = static_cast<float*>(pl.get("sa", na * 4));
    auto* sb = static_cast<float*>(pl.get("sb", nb * 4));
    fill_scales<<<kFillGrid, kFillBlock>>>(sa, na, seed ^ 3, exact);
    fill_scales<<<kFillGrid, kFillBlock>>>(sb, nb, seed ^ 4, exact);
    if (p.scale == ScaleKind::block) {
      args_.scale_a = TensorView::contiguous(sa, DType::f32, {kb, ma});
      args_.scale_b = TensorView::contiguous(sb, DType::f32, {(p.n + 127) / 128, kb});
    } else {
      args_.scale_a = TensorView::contiguous(sa, DType::f32, {na});
      args_.scale_b = TensorView::contiguous(sb, DType::f32, {nb});
    }
    if (p.bias) {
      void* bias = pl.get("bias", p.n * 2);
      if (p.out == DType::bf16) fill_bias<<<kFillGrid, kFillBlock>>>(static_cast<__nv_bfloat16*>(bias), p.n, seed ^ 5, exact);
      else fill_bias<<<kFillGrid, kFillBlock>>>(static_cast<__half*>(bias), p.n, seed ^ 5, exact);
      args_.bias = TensorView::contiguous(bias, p.out, {p.n});
    }
    ldo_ = p.n + ldo_pad;
    void* out = pl.get("out", p.m * ldo_ * 2);
    args_.out = TensorView::strided(out, p.out, {p.m, p.n}, {ldo_, 1});

    // Sampled rows: all when M <= 32; else the first, the last and 30 drawn at random.
    std::mt19937_64 rng(seed);
    std::set<int32_t> rows;
    if (p.m <= 32) {
      for (int32_t r = 0; r < p.m; ++r) rows.insert(r);
    } else {
      rows = {0, static_cast<int32_t>(p.m - 1)};
      while (rows.size() < 32) rows.insert(static_cast<int32_t>(rng() % p.m));
    }
    rows_host_.assign(rows.begin(), rows.end());
    rows_ = upload(rows_host_);
    ref_ = DeviceBuffer(rows_host_.size() * p.n * 4);
    const GemmProblem got = check_scaled_mm(args_);  // the alignment is what the buffers have
    p_.align = got.align;
    EXPECT_EQ(got, p_) << "the test built other arguments than it meant to: " << to_string(got);
    gemm::GemmOperands ops;
    ops.a = a, ops.lda = p.k, ops.b = b, ops.ldb = p.k, ops.sa = sa, ops.sb = sb;
    ops.bias = p.bias ? args_.bias.data : nullptr;
    gemm::simt_rows_f32(p, ops, rows_.as<int32_t>(), static_cast<int64_t>(rows_host_.size()),
                        ref_.as<float>(), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  const ScaledMmArgs& args() const { return args_; }
  const GemmProblem& problem() const { return p_; }

  // Poisons the output, runs backend/config, checks it.
  Result run(const std::string& backend, const std::string& config, cudaStream_t stream = nullptr) {
    // On `stream` itself: a non-blocking stream does not wait for the legacy stream's memset.
    EXPECT_EQ(cudaMemsetAsync(args_.out.data, 0xFF, p_.m * ldo_ * 2, stream), cudaSuccess);
    scaled_mm(args_, backend, config, stream);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return check();
  }

  Result check() {
    DeviceBuffer st(sizeof(Stats));
    EXPECT_EQ(cudaMemset(st.data(), 0, sizeof(Stats)), cudaSuccess);
    const int64_t nr = static_cast<int64_t>(rows_host_.size());
    if (p_.out == DType::bf16) {
      auto* y = static_cast<const __nv_bfloat16*>(args_.out.data);
      compare_rows<<<kFillGrid, kFillBlock>>>(y, ldo_, ref_.as<float>(), rows_.as<int32_t>(), nr, p_.n, st.as<Stats>());
      scan_output<<<kFillGrid, kFillBlock>>>(y, p_.m, p_.n, ldo_, st.as<Stats>());
    } else {
      auto* y = static_cast<const __half*>(args_.out.data);
      compare_rows<<<kFillGrid, kFillBlock>>>(y, ldo_, ref_.as<float>(), rows_.as<int32_t>(), nr, p_.n, st.as<Stats>());
      scan_output<<<kFillGrid, kFillBlock>>>(y, p_.m, p_.n, ldo_, st.as<Stats>());
    }
    Stats s{};
    EXPECT_EQ(cudaMemcpy(&s, st.data(), sizeof s, cudaMemcpyDeviceToHost), cudaSuccess);
    Result r;
    r.rel_err = s.ref2 > 0 ? std::sqrt(s.diff2 / s.ref2) : std::sqrt(s.diff2);
    r.mismatches = s.mismatches, r.nonfinite = s.nonfinite, r.padding = s.padding;
    r.sampled = nr * p_.n;
    return r;
  }

  std::string repro(const std::string& backend, const std::string& config) const {
    return backend + "/" + config + " on " + to_string(p_) + (exact_ ? " (small integers)" : "") +
           " seed=" + std::to_string(test::test_seed());
  }

 private:
  GemmProblem p_;
  bool exact_;
  int64_t ldo_ = 0;
  ScaledMmArgs args_;
  std::vector<int32_t> rows_host_;
  DeviceBuffer rows_, ref_;
};

void expect_good(const Result& r, bool exact, const std::string& what) {
  EXPECT_EQ(r.nonfinite, 0u) << what << ": outputs left unwritten (poison) or non-finite";
  EXPECT_EQ(r.padding, 0u) << what << ": wrote past N into the row padding";
  if (exact)
    EXPECT_EQ(r.mismatches, 0u) << what << ": " << r.mismatches << " of " << r.sampled << " outputs differ";
  else
    EXPECT_LE(r.rel_err, 1e-2) << what << ": normwise error";
}

uint64_t case_seed(uint64_t salt) { return test::test_seed() * 0x9E3779B97F4A7C15ull + salt; }

constexpr ScaleKind kKinds[] = {ScaleKind::tensor, ScaleKind::row, ScaleKind::block};

// ---- the GPU reference against the CPU fp64 reference ------------------------------------------

TEST(GemmReference, MatchesCpuReference) {
  FP8ROUTE_REQUIRE_SM90();
  struct S { int64_t m, n, k; };
  const S shapes[] = {{1, 16, 16}, {3, 1000, 1000}, {130, 264, 384}, {64, 200, 300}, {5, 2112, 136}};
  std::mt19937_64 rng = test::make_rng(11);
  int idx = 0;
  for (const S& s : shapes) {
    for (ScaleKind kind : kKinds) {
      for (bool exact : {false, true}) {
        const DType out = idx % 2 ? DType::f16 : DType::bf16;
        const bool bias = (idx / 2) % 2;
        ++idx;
        GemmProblem p = make_problem(s.m, s.n, s.k, kind, out, bias);
        if (kind == ScaleKind::row && idx % 3 == 0) p.sa_vector = false;  // a scalar side too
        Problem prob(p, exact, case_seed(idx));
        const ScaledMmArgs& a = prob.args();
        // Host copies of the inputs for the CPU reference.
        auto a_h = download(a.a.data, s.m * s.k), b_h = download(a.b.data, s.n * s.k);
        auto to_floats = [](const std::vector<uint8_t>& v) {
          std::vector<float> f(v.size() / 4);
          std::memcpy(f.data(), v.data(), v.size());
          return f;
        };
        const auto sa = to_floats(download(a.scale_a.data, a.scale_a.numel() * 4));
        const auto sb = to_floats(download(a.scale_b.data, a.scale_b.numel() * 4));
        std::vector<float> bias_f;
        if (bias) {
          auto bh = download(a.bias.data, s.n * 2);
          for (int64_t i = 0; i < s.n; ++i) {
            uint16_t h;
            std::memcpy(&h, &bh[i * 2], 2);
            bias_f.push_back(out == DType::bf16 ? ref::bf16_to_f32(h) : ref::f16_to_f32(h));
          }
        }
        const std::vector<float> want = ref::scaled_mm(a_h, b_h, s.m, s.n, s.k, kind, sa, sb, bias_f, out);
        const Result r = prob.run("reference", "");
        expect_good(r, exact, prob.repro("reference", ""));
        auto y = download(a.out.data, s.m * s.n * 2);
        double d2 = 0, r2 = 0;
        int64_t differ = 0;
        for (int64_t i = 0; i < s.m * s.n; ++i) {
          uint16_t h;
          std::memcpy(&h, &y[i * 2], 2);
          const double got = out == DType::bf16 ? ref::bf16_to_f32(h) : ref::f16_to_f32(h);
          d2 += (got - want[i]) * (got - want[i]);
          r2 += double(want[i]) * want[i];
          differ += got != want[i];
        }
        const std::string what = prob.repro("reference", "") + " vs CPU";
        if (exact) EXPECT_EQ(differ, 0) << what;
        // fp32 accumulation against fp64: far inside the 1e-2 contract; a rare last-bit
        // difference of the rounded output is allowed.
        EXPECT_LE(std::sqrt(d2 / std::max(r2, 1e-30)), 1e-3) << what;
        EXPECT_LE(differ, s.m * s.n / 50 + 1) << what;
      }
    }
  }
}

// ---- every backend on the models.json shapes ----------------------------------------------------

TEST(GemmBackends, ModelShapesAgainstReference) {
  FP8ROUTE_REQUIRE_SM90();
  const tools::ShapeCatalog cat = tools::load_catalog(tools::default_catalog_path());
  std::set<std::pair<int64_t, int64_t>> nk;
  for (int tp : {1, 8})
    for (const tools::LayerShape& l : tools::at_tp(cat.layers, tp)) nk.insert({l.n, l.k});
  const int64_t ms[] = {1, 4, 16, 64, 128, 1000, 4096};
  std::map<std::string, int> ran, skipped;
  std::map<std::string, std::set<std::string>> reasons;
  std::map<std::string, size_t> rotate;  // which config of a backend runs next
  uint64_t idx = 0;
  for (const auto& [n, k] : nk) {
    for (int64_t m : ms) {
      for (ScaleKind kind : kKinds) {
        const int combo = static_cast<int>(idx++ % 4);  // out dtype x bias rotate through the sweep
        GemmProblem p = make_problem(m, n, k, kind, combo % 2 ? DType::f16 : DType::bf16, combo / 2);
        Problem prob(p, false, case_seed(idx));
        for (const std::string& b : gemm_backends()) {
          if (b == "reference" && m > 16) continue;  // checked against the CPU above; slow at large M
          const std::vector<std::string> cs = gemm_configs(b);
          // The next config (round-robin) that supports the problem: across the sweep every
          // config meets many shapes; AllConfigs below runs each on every kind.
          std::string chosen, why;
          for (size_t t = 0; t < cs.size() && chosen.empty(); ++t) {
            const std::string& c = cs[(rotate[b] + t) % cs.size()];
            const std::string w = gemm_supports(b, c, p);
            if (w.empty()) chosen = c;
            else if (why.empty()) why = w;
          }
          const std::string key = b + " " + std::string(name(kind));
          if (chosen.empty()) {
            ++skipped[key];
            reasons[key].insert(why);
            continue;
          }
          ++rotate[b];
          ++ran[key];
          expect_good(prob.run(b, chosen), false, prob.repro(b, chosen));
        }
        if (testing::Test::HasFailure()) return;  // one failing case is enough to read
      }
    }
  }
  for (const auto& [key, count] : ran) std::printf("[gemm] %-24s ran %d problems\n", key.c_str(), count);
  for (const auto& [key, count] : skipped) {
    std::printf("[gemm] %-24s unsupported on %d problems:", key.c_str(), count);
    for (const std::string& r : reasons[key]) std::printf(" [%s]", r.c_str());
    std::printf("\n");
  }
  // Every backend ran every scale kind it takes (some take one: wgmma runs block scales only).
  for (const std::string& b : gemm_backends())
    for (ScaleKind kind : kKinds) {
      bool takes_kind = false;
      for (const std::string& c : gemm_configs(b))
        for (int64_t m : {int64_t{1}, int64_t{4096}})
          takes_kind = takes_kind || gemm_supports(b, c, make_problem(m, 4096, 4096, kind)).empty();
      if (takes_kind)
        EXPECT_GT(ran[b + " " + std::string(name(kind))], 0) << b << " never ran " << name(kind) << " scales";
    }
}

// ---- every config, exactly, on small integers; odd shapes; padding ------------------------------

TEST(GemmBackends, AllConfigsExactOnSmallIntegers) {
  FP8ROUTE_REQUIRE_SM90();
  struct S { int64_t m, n, k; };
  // Sums stay below 2^13 (|code| <= 2, K <= 1024), exact even under FP8 fast accumulation.
  const S shapes[] = {{128, 256, 512}, {4, 4096, 1024}, {64, 2112, 1024}, {1000, 1536, 256}, {1, 512, 256}};
  uint64_t idx = 1000;
  std::map<std::string, int> ran;
  std::set<std::string> quick_done;
  for (const S& s : shapes) {
    for (ScaleKind kind : kKinds) {
      for (int combo = 0; combo < 4; ++combo) {
        GemmProblem p = make_problem(s.m, s.n, s.k, kind, combo % 2 ? DType::f16 : DType::bf16, combo / 2);
        if (kind == ScaleKind::row && combo == 3) p.sa_vector = false;
        if (kind == ScaleKind::row && combo == 1) p.sb_vector = false;
        std::vector<std::pair<std::string, std::string>> todo;
        for (const std::string& b : gemm_backends())
          for (const std::string& c : gemm_configs(b))
            // FP8ROUTE_TEST_QUICK: each config once per scale kind and output dtype.
            if (gemm_supports(b, c, p).empty() &&
                (!test::quick() || quick_done.insert(b + "/" + c + " " + std::string(name(kind)) + " " +
                                                     std::string(dtype_name(p.out))).second))
              todo.emplace_back(b, c);
        if (todo.empty()) continue;
        Problem prob(p, true, case_seed(++idx), /*ldo_pad=*/combo == 2 ? 8 : 0);
        for (const auto& [b, c] : todo) {
          ++ran[b + "/" + c];
          expect_good(prob.run(b, c), true, prob.repro(b, c));
        }
        if (testing::Test::HasFailure()) return;
      }
    }
  }
  for (const std::string& b : gemm_backends())
    for (const std::string& c : gemm_configs(b)) {
      std::printf("[gemm] %-48s exact on %d problems\n", (b + "/" + c).c_str(), ran[b + "/" + c]);
      EXPECT_GT(ran[b + "/" + c], 0) << b << "/" << c << " supported none of the exactness problems";
    }
}

TEST(GemmBackends, OddShapesRouteToACorrectBackend) {
  FP8ROUTE_REQUIRE_SM90();
  struct S { int64_t m, n, k; };
  const S shapes[] = {{1, 1000, 1000}, {1000, 1000, 1000}, {7, 2112, 7168}, {3, 24, 40}, {33, 136, 4096}};
  uint64_t idx = 2000;
  for (const S& s : shapes) {
    for (ScaleKind kind : kKinds) {
      for (bool exact : {false, true}) {
        GemmProblem p = make_problem(s.m, s.n, s.k, kind, exact ? DType::f16 : DType::bf16, !exact);
        Problem prob(p, exact, case_seed(++idx));
        const Route c = default_router()->select(prob.problem());
        EXPECT_EQ(cudaMemset(prob.args().out.data, 0xFF, s.m * s.n * 2), cudaSuccess);
        scaled_mm(prob.args(), nullptr);  // the routed entry point
        expect_good(prob.check(), exact, "routed to " + c.backend + ": " + prob.repro(c.backend, c.config));
      }
    }
  }
}

// A table that sends every M of one layer to one backend first (then the plan falls through).
std::shared_ptr<const Router> router_preferring(const std::string& backend, const std::string& config,
                                                const GemmProblem& p) {
  RoutingTable t;
  t.stamp = {"test", 1, "0", "0", "0", "2026-11-30"};
  t.entries.push_back({p.scale, p.out, p.n, p.k, {{1 << 30, backend, config}}, {{1, backend, config, 1.0}}});
  return std::make_shared<const Router>(std::move(t));
}

// ---- the decode backend: every models.json shape at decode M ---------------------------------------

// Every distinct (N, K) of models.json at TP 1, 2, 4 and 8, M from 1 to 64 (odd M included), every
// scale kind: each problem runs on one decode config that supports it, rotating through the
// configs (so each meets 64- and 128-row blocks, every token tile, and the split-K clusters that
// small N needs), against the GPU reference with all rows sampled up to M = 32.
TEST(DecodeBackend, EveryModelShapeAtDecodeM) {
  FP8ROUTE_REQUIRE_SM90();
  const tools::ShapeCatalog cat = tools::load_catalog(tools::default_catalog_path());
  std::set<std::pair<int64_t, int64_t>> nk;
  for (int tp : {1, 2, 4, 8})
    for (const tools::LayerShape& l : tools::at_tp(cat.layers, tp)) nk.insert({l.n, l.k});
  const std::vector<std::string> cs = gemm_configs("decode");
  std::map<std::string, int> ran;
  size_t rotate = 0;
  uint64_t idx = 9000;
  for (const auto& [n, k] : nk)
    for (int64_t m : {1, 2, 3, 8, 13, 16, 24, 33, 64})
      for (ScaleKind kind : kKinds) {
        const int combo = static_cast<int>(idx % 4);
        GemmProblem p = make_problem(m, n, k, kind, combo % 2 ? DType::f16 : DType::bf16, combo / 2);
        std::string chosen;
        for (size_t t = 0; t < cs.size() && chosen.empty(); ++t)
          if (gemm_supports("decode", cs[(rotate + t) % cs.size()], p).empty()) chosen = cs[(rotate + t) % cs.size()];
        ASSERT_FALSE(chosen.empty()) << "no decode config runs " << to_string(p);
        ++rotate;
        ++ran[chosen];
        Problem prob(p, false, case_seed(++idx));
        expect_good(prob.run("decode", chosen), false, prob.repro("decode", chosen));
        if (testing::Test::HasFailure()) return;
      }
  for (const auto& [c, count] : ran) std::printf("[decode] %-16s ran %d problems\n", c.c_str(), count);
  for (const std::string& c : cs) EXPECT_GT(ran[c], 0) << c << " never ran";
}

// ---- the wgmma backend: tile edges, K tails, persistent loops --------------------------------------

// Every wgmma config on shapes that leave partial tiles along M and N (N tiles crossing 128-row
// weight scale blocks at every tile width), a K that is not a multiple of 128, one to three K blocks
// (the two-accumulator loop's pairs and its odd tail), a single row, an odd count of row tiles (the
// second block of a cluster gets a tile past M), many tiles per block, and both output dtypes, with
// and without bias; against the GPU reference, random data.
TEST(WgmmaBackend, EdgesOfEveryConfig) {
  FP8ROUTE_REQUIRE_SM90();
  struct S { int64_t m, n, k; };
  // The quick list (sanitizers) keeps the first six: one, two and three K blocks, M = 1, K not a
  // multiple of 128, partial tiles, and an odd row-tile count (a cluster's second block past M).
  const S shapes[] = {{130, 264, 112}, {64, 136, 240}, {200, 520, 368},
                      {1, 1000, 2000}, {129, 200, 1040}, {384, 1000, 2000},
                      {257, 4096, 1536}, {3000, 2112, 7168}, {4096, 7168, 512}};
  const size_t count = test::quick() ? 6 : std::size(shapes);
  uint64_t idx = 12000;
  for (const S& s : std::span(shapes, count))
    for (const std::string& c : gemm_configs("wgmma")) {
      const int combo = static_cast<int>(idx % 4);
      GemmProblem p = make_problem(s.m, s.n, s.k, ScaleKind::block, combo % 2 ? DType::f16 : DType::bf16, combo / 2);
      ASSERT_EQ(gemm_supports("wgmma", c, p), "") << c << " on " << to_string(p);
      Problem prob(p, false, case_seed(++idx));
      expect_good(prob.run("wgmma", c), false, prob.repro("wgmma", c));
      if (testing::Test::HasFailure()) return;
    }
}

// The decode kernels start streaming a layer's weight before the previous kernel in the stream has
// finished (programmatic dependent launch, LinearPlan's static weights), and wait for it before
// reading the activations. A chain that rewrites the activations with a kernel right before each
// GEMM, captured in a graph and replayed, gives each GEMM the activations of its own step: the
// bytes of an eager run of the same steps without PDL.
__global__ void copy_codes(const uint8_t* src, uint8_t* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

TEST(DecodeBackend, DependentLaunchChainReadsEachStepsActivations) {
  FP8ROUTE_REQUIRE_SM90();
  constexpr int kSteps = 6;
  for (ScaleKind kind : kKinds)
    for (int64_t m : {1, 16}) {
      GemmProblem p = make_problem(m, 4096, 4096, kind, DType::bf16, false);
      Problem prob(p, false, case_seed(9500 + m));
      const ScaledMmArgs& a = prob.args();
      const LinearPlan plan(a.b, a.scale_b, kind, p.out, {}, router_preferring("decode", "m16_n64_s8", p));
      ASSERT_EQ(plan.route(m).backend, "decode") << plan.explain(m);
      const int64_t abytes = m * p.k, obytes = m * p.n * 2;
      // Step inputs: distinct random codes per step; outputs: one buffer per step.
      std::vector<DeviceBuffer> src, out;
      for (int s = 0; s < kSteps; ++s) {
        src.emplace_back(abytes);
        timing::fill_codes<<<kFillGrid, kFillBlock>>>(src.back().as<uint8_t>(), m, p.k, p.k, case_seed(9600 + s), false);
        out.emplace_back(obytes);
      }
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      // The fills ran on the legacy stream, which a non-blocking stream does not wait for.
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto steps = [&] {
        for (int s = 0; s < kSteps; ++s) {
          copy_codes<<<264, 256, 0, stream>>>(src[s].as<uint8_t>(), static_cast<uint8_t*>(a.a.data), abytes);
          plan.run(a.a, a.scale_a, TensorView::contiguous(out[s].data(), p.out, {m, p.n}), stream);
        }
      };
      set_programmatic_dependent_launch(false);
      steps();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<std::vector<uint8_t>> want;
      for (int s = 0; s < kSteps; ++s) want.push_back(download(out[s].data(), obytes));
      set_programmatic_dependent_launch(true);
      for (int s = 0; s < kSteps; ++s) ASSERT_EQ(cudaMemsetAsync(out[s].data(), 0xFF, obytes, stream), cudaSuccess);
      steps();  // eager with PDL
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      for (int s = 0; s < kSteps; ++s)
        EXPECT_TRUE(test::bytes_equal(download(out[s].data(), obytes), want[s],
                                      ("eager PDL step " + std::to_string(s) + " " + to_string(p)).c_str()));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      steps();
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int rep = 0; rep < 3; ++rep) {
        for (int s = 0; s < kSteps; ++s) ASSERT_EQ(cudaMemsetAsync(out[s].data(), 0xFF, obytes, stream), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        for (int s = 0; s < kSteps; ++s)
          EXPECT_TRUE(test::bytes_equal(download(out[s].data(), obytes), want[s],
                                        ("graph PDL step " + std::to_string(s) + " " + to_string(p)).c_str()));
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
}

// The deep ring (fp8route/tuning/gemm_knobs.h) requests more of a block's weight tiles before
// griddepcontrol.wait and, for tensor and row scales, lays out no block-scale slices. In a PDL chain
// whose producer rewrites the activations before every GEMM, each output equals the config's own
// ring's, bit for bit, eagerly and replayed from a graph: layers whose blocks have K slices longer
// than the config's stages, in one-wave grids on an H200 (where the rule deepens the ring).
TEST(DecodeBackend, DeepRingGivesTheSameBits) {
  FP8ROUTE_REQUIRE_SM90();
  struct Case {
    int64_t m, n, k;
    const char* config;
  };
  const Case cases[] = {{1, 4096, 4096, "m8_n128_s8"},     // Llama-3.1-8B o_proj
                        {1, 6144, 4096, "m8_n128_s8"},     // 8B qkv_proj
                        {8, 4096, 14336, "m8_n128_s8"},    // 8B down_proj
                        {16, 8192, 3584, "m16_n128_s8"},   // 70B TP-8 down_proj
                        {1, 1280, 8192, "m8_n64_s8"}};     // 70B TP-8 qkv_proj (2 blocks per SM: own ring)
  constexpr int kSteps = 3;
  const bool was = gemm::decode_deep_ring();
  for (ScaleKind kind : kKinds)
    for (const Case& c : cases) {
      GemmProblem p = make_problem(c.m, c.n, c.k, kind, DType::bf16, false);
      Problem prob(p, false, case_seed(9700 + c.n + c.k + c.m));
      const ScaledMmArgs& a = prob.args();
      const LinearPlan plan(a.b, a.scale_b, kind, p.out, {}, router_preferring("decode", c.config, p));
      if (plan.route(c.m).backend != "decode") continue;  // block scales whose slices need more splits
      const int64_t abytes = c.m * p.k, obytes = c.m * p.n * 2;
      std::vector<DeviceBuffer> src, out;
      for (int st = 0; st < kSteps; ++st) {
        src.emplace_back(abytes);
        timing::fill_codes<<<kFillGrid, kFillBlock>>>(src.back().as<uint8_t>(), c.m, p.k, p.k, case_seed(9800 + st),
                                                      false);
        out.emplace_back(obytes);
      }
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto steps = [&] {
        for (int st = 0; st < kSteps; ++st) {
          ASSERT_EQ(cudaMemsetAsync(out[st].data(), 0xFF, obytes, stream), cudaSuccess);
          copy_codes<<<264, 256, 0, stream>>>(src[st].as<uint8_t>(), static_cast<uint8_t*>(a.a.data), abytes);
          plan.run(a.a, a.scale_a, TensorView::contiguous(out[st].data(), p.out, {c.m, p.n}), stream);
        }
      };
      auto outputs = [&] {
        std::vector<std::vector<uint8_t>> v;
        for (int st = 0; st < kSteps; ++st) v.push_back(download(out[st].data(), obytes));
        return v;
      };
      gemm::set_decode_deep_ring(false);
      steps();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const auto want = outputs();
      gemm::set_decode_deep_ring(true);
      steps();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const std::string what = to_string(p) + " " + c.config;
      auto expect_want = [&](const std::string& when) {
        const auto got = outputs();
        for (int st = 0; st < kSteps; ++st)
          EXPECT_TRUE(test::bytes_equal(got[st], want[st], (when + " step " + std::to_string(st) + ": " + what).c_str()));
      };
      expect_want("eager, deep ring");
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      steps();
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      gemm::set_decode_deep_ring(was);
      for (int rep = 0; rep < 3; ++rep) {
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        expect_want("graph, deep ring, replay " + std::to_string(rep));
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
  gemm::set_decode_deep_ring(was);
}

// ---- LinearPlan: the route it reports is the one it runs, with the scale form prepared for it ----

TEST(LinearPlanGpu, RunsTheReportedRouteWithItsScaleForm) {
  FP8ROUTE_REQUIRE_SM90();
  struct Case {
    ScaleKind gemm;
    bool sa_vector, sb_vector;  // row: the GEMM the layer becomes
    ScaleKind act;
    int64_t n, k;
    const char* prefer;  // backend the test table puts first ("" = the shipped table)
  };
  const Case cases[] = {
      {ScaleKind::tensor, false, false, ScaleKind::tensor, 4096, 4096, ""},
      {ScaleKind::row, true, true, ScaleKind::row, 6144, 4096, ""},
      {ScaleKind::row, true, false, ScaleKind::row, 4096, 4096, "cublaslt"},   // scalar weight scale, expanded
      {ScaleKind::row, false, true, ScaleKind::tensor, 4096, 4096, "cublaslt"}, // cuBLASLt only at M = 1
      {ScaleKind::block, true, true, ScaleKind::block, 2048, 5376, "cublaslt"}, // padded scale_b for cuBLASLt
      {ScaleKind::block, true, true, ScaleKind::block, 7168, 2048, ""},
  };
  uint64_t idx = 5000;
  std::map<std::string, int> ran;
  // FP8ROUTE_TEST_QUICK: M = 1 (cuBLASLt's scalar case), 4 and 16 (bias) only.
  const std::vector<int64_t> ms = test::quick() ? std::vector<int64_t>{1, 4, 16}
                                                : std::vector<int64_t>{1, 3, 4, 16, 64, 130, 1000};
  for (const Case& c : cases)
    for (int64_t m : ms) {
      GemmProblem p = make_problem(m, c.n, c.k, c.gemm, m % 2 ? DType::f16 : DType::bf16, m == 16);
      if (c.gemm == ScaleKind::row) p.sa_vector = c.sa_vector && m != 1, p.sb_vector = c.sb_vector;
      Problem prob(p, false, case_seed(++idx));
      const ScaledMmArgs& a = prob.args();
      const std::shared_ptr<const Router> router =
          *c.prefer ? router_preferring(c.prefer, "heuristic", p) : default_router();
      const LinearPlan plan(a.b, a.scale_b, c.act, p.out, a.bias, router);
      const Route r = plan.route(m);
      EXPECT_EQ(cudaMemset(a.out.data, 0xFF, m * c.n * 2), cudaSuccess);
      plan.run(a.a, a.scale_a, a.out, nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string what = "LinearPlan " + std::string(name(c.act)) + " act, " + to_string(p) + " routed to " +
                               r.backend + "/" + r.config + " (" + r.why + ")";
      expect_good(prob.check(), false, what);
      ++ran[std::string(name(c.act)) + "->" + r.backend];
      // The padded form is what cuBLASLt ran: it needs M % 4 == 0, and the unpadded scale_b alone
      // would not have let it run this layer at all.
      if (c.gemm == ScaleKind::block && std::string(c.prefer) == "cublaslt") {
        EXPECT_TRUE(plan.layout().pad_weight_scale);
        EXPECT_EQ(r.backend == "cublaslt", m % 4 == 0) << what;
        EXPECT_NE(gemm_supports("cublaslt", "heuristic", p), "") << "K = 5376 should need the padded form";
      }
      if (c.act == ScaleKind::tensor && c.gemm == ScaleKind::row && std::string(c.prefer) == "cublaslt")
        EXPECT_EQ(r.backend == "cublaslt", m == 1) << what;
      if (c.sb_vector == false && c.gemm == ScaleKind::row && std::string(c.prefer) == "cublaslt")
        EXPECT_EQ(r.backend, "cublaslt") << what << ": the expanded weight scale lets cuBLASLt run every M";
    }
  for (const auto& [k, v] : ran) std::printf("LinearPlan ran %s on %d problems\n", k.c_str(), v);
}

// A probe (LinearPlan::probe) times the table's best guesses for a shape the table lacks on this GPU,
// then routes by those times; the records carried to another plan through Router::with_measurements
// route it the same, and every route runs correctly.
TEST(LinearPlanGpu, ProbeTimesAnUnseenShapeAndRoutesByIt) {
  FP8ROUTE_REQUIRE_SM90();
  struct Case {
    ScaleKind act;
    int64_t n, k;
  };
  // None of these (N, K) is in the shipped table; K = 2688 is 21 blocks: cuBLASLt reads a padded
  // weight scale, timed on its own operands.
  const Case cases[] = {{ScaleKind::tensor, 1536, 5120}, {ScaleKind::row, 3328, 2560}, {ScaleKind::block, 2432, 2688}};
  ProbeOptions opt;
  opt.m_grid = {1, 16, 96, 512};
  opt.reps = 10;
  uint64_t idx = 7000;
  for (const Case& c : cases) {
    const auto problem_at = [&](int64_t m) {
      GemmProblem p = make_problem(m, c.n, c.k, c.act, DType::bf16);
      return p;
    };
    Problem first(problem_at(16), false, case_seed(++idx));
    LinearPlan plan(first.args().b, first.args().scale_b, c.act, DType::bf16, {}, default_router());
    std::map<int64_t, std::vector<std::pair<std::string, std::string>>> candidates;
    for (int64_t m : opt.m_grid) {
      const Route before = plan.route(m);
      ASSERT_NE(before.source, Route::Source::exact) << to_string(problem_at(m)) << " is in the table: pick another shape";
      candidates[m] = plan.router().probe_candidates(plan.layout().problem(m, 16, ""), opt.top);
    }
    const std::vector<MeasurementRecord> records = plan.probe(opt);
    std::map<int64_t, std::pair<double, std::string>> fastest;
    for (const MeasurementRecord& r : records) {
      const auto& cs = candidates.at(r.m);  // throws for an M that was not asked for
      EXPECT_NE(std::find(cs.begin(), cs.end(), std::make_pair(r.backend, r.config)), cs.end())
          << r.backend << "/" << r.config << " timed at m=" << r.m << " but not a probe candidate";
      EXPECT_GT(r.us, 0) << r.backend << "/" << r.config;
      auto [it, fresh] = fastest.try_emplace(r.m, r.us, r.backend + "/" + r.config);
      if (!fresh && r.us < it->second.first) it->second = {r.us, r.backend + "/" + r.config};
    }
    size_t padded_cublaslt = 0;
    for (const MeasurementRecord& r : records) padded_cublaslt += r.backend == "cublaslt" && r.scale == ScaleKind::block;
    if (c.act == ScaleKind::block)
      EXPECT_GT(padded_cublaslt, 0u) << "cuBLASLt should have run the block layer in its padded form at M % 4 == 0";
    for (int64_t m : opt.m_grid) {
      ASSERT_TRUE(fastest.count(m)) << "nothing timed at m=" << m;
      const Route r = plan.route(m);
      EXPECT_EQ(r.source, Route::Source::exact) << r.why;
      EXPECT_EQ(r.backend + "/" + r.config, fastest[m].second) << "m=" << m << ": " << r.why;
      std::printf("probe %s n=%lld k=%lld m=%lld: %zu configs timed, fastest %s %.2f us\n", std::string(name(c.act)).c_str(),
                  (long long)c.n, (long long)c.k, (long long)m, candidates[m].size(), fastest[m].second.c_str(),
                  fastest[m].first);
    }
    EXPECT_NE(plan.explain(16).find("probed on this GPU"), std::string::npos) << plan.explain(16);
    EXPECT_TRUE(plan.probe(opt).empty()) << "a second probe has nothing left to time";
    ProbeOptions again = opt;
    again.always = true, again.m_grid = {16};
    EXPECT_FALSE(plan.probe(again).empty()) << "always: time M = 16 again";

    // The records, merged into the process-wide table, route new plans of the shape alike; each
    // route runs correctly (M = 40 lies between probed M).
    const auto merged = std::make_shared<const Router>(default_router()->with_measurements(records));
    for (int64_t m : {1, 16, 40, 96, 512}) {
      Problem prob(problem_at(m), false, case_seed(++idx));
      const ScaledMmArgs& a = prob.args();
      const LinearPlan other(a.b, a.scale_b, c.act, DType::bf16, {}, merged);
      const Route r = other.route(m);
      EXPECT_EQ(r.source, Route::Source::exact) << r.why;
      if (m != 40 && m != 16) EXPECT_EQ(r.backend + "/" + r.config, plan.route(m).backend + "/" + plan.route(m).config);
      EXPECT_EQ(cudaMemset(a.out.data, 0xFF, m * c.n * 2), cudaSuccess);
      other.run(a.a, a.scale_a, a.out, nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expect_good(prob.check(), false, "probed " + to_string(prob.problem()) + " routed to " + r.backend + "/" + r.config);
    }
  }
}

// ---- determinism and CUDA-graph replay -----------------------------------------------------------

// Captures scaled_mm(prob's args, b, c) on `stream` in `mode` (output poisoned first), replays it
// `reps` times and expects the bytes `want` (a direct run's output).
void expect_graph_replays(Problem& prob, const std::string& b, const std::string& c, cudaStream_t stream,
                          cudaStreamCaptureMode mode, int reps, const std::vector<uint8_t>& want,
                          const std::string& what) {
  const int64_t bytes = static_cast<int64_t>(want.size());
  EXPECT_EQ(cudaMemsetAsync(prob.args().out.data, 0xFF, bytes, stream), cudaSuccess);  // before the replays
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, mode), cudaSuccess);
  std::string error;
  try {
    scaled_mm(prob.args(), b, c, stream);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << prob.repro(b, c);
  ASSERT_EQ(error, "") << prob.repro(b, c);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < reps; ++rep) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(test::bytes_equal(download(prob.args().out.data, bytes), want, (what + prob.repro(b, c)).c_str()));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(GemmBackends, DeterministicAndGraphCapturable) {
  FP8ROUTE_REQUIRE_SM90();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  uint64_t idx = 3000;
  for (ScaleKind kind : kKinds) {
    for (int64_t m : {1, 64, 1000}) {
      GemmProblem p = make_problem(m, 4096, 14336 / 8, kind, DType::bf16, true);
      Problem prob(p, false, case_seed(++idx));
      const int64_t bytes = m * p.n * 2;
      for (const std::string& b : gemm_backends())
        for (const std::string& c : gemm_configs(b)) {
          if (!gemm_supports(b, c, p).empty()) continue;
          // First on the same stream outside capture: one-time set-up (workspaces) happens here.
          const Result first = prob.run(b, c, stream);
          expect_good(first, false, prob.repro(b, c));
          expect_graph_replays(prob, b, c, stream, cudaStreamCaptureModeThreadLocal, 2,
                               download(prob.args().out.data, bytes), "graph replay vs direct run: ");
        }
    }
  }
  cudaStreamDestroy(stream);
}

// The first call of every backend on a stream may itself be under capture (torch.cuda.graph
// captures on a stream of its own): its one-time set-up (workspaces) allocates in relaxed mode, the
// graph replays correctly, and a later direct call on the same stream (which reuses the workspace,
// zero-filled counters included) gives the same bytes. Global capture mode, as PyTorch uses, so an
// allocation that was not legal under capture would fail the capture.
TEST(GemmBackends, FirstCallOnAStreamUnderCapture) {
  FP8ROUTE_REQUIRE_SM90();
  uint64_t idx = 4000;
  for (ScaleKind kind : kKinds) {
    GemmProblem p = make_problem(64, 4096, 14336 / 8, kind, DType::bf16, false);
    Problem prob(p, false, case_seed(++idx));
    const int64_t bytes = p.m * p.n * 2;
    for (const std::string& b : gemm_backends()) {
      bool ran_one = false;
      for (const std::string& c : gemm_configs(b)) {
        if (!gemm_supports(b, c, p).empty()) continue;
        if (test::quick() && ran_one) break;  // FP8ROUTE_TEST_QUICK: one config per backend and kind
        ran_one = true;
        cudaStream_t stream;  // new per config: its first call on this stream is the captured one
        ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
        const Result reference = prob.run(b, c);  // the legacy default stream, against the reference
        expect_good(reference, false, prob.repro(b, c));
        const std::vector<uint8_t> want = download(prob.args().out.data, bytes);
        expect_graph_replays(prob, b, c, stream, cudaStreamCaptureModeGlobal, 2, want,
                             "first call under capture vs direct run: ");
        expect_good(prob.run(b, c, stream), false, prob.repro(b, c) + " (direct, after the capture)");
        EXPECT_TRUE(test::bytes_equal(download(prob.args().out.data, bytes), want,
                                      ("direct run on the captured stream: " + prob.repro(b, c)).c_str()));
        ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
      }
    }
  }
}

// gemm_describe names the algorithm behind each cuBLASLt rank: every supported rank gets the full
// attribute list, distinct ranks name distinct algorithms (a rank that repeated another would be a
// config timed twice), the answer does not change within a process, and no other backend (their
// config names already say what runs) nor an unsupported rank describes anything.
TEST(GemmBackends, DescribeNamesCuBlasLtAlgorithms) {
  FP8ROUTE_REQUIRE_SM90();
  const std::regex form(
      "algo=\\d+ tile=\\d+ stages=\\d+ splitk=\\d+ reduction=\\d+ swizzle=\\d+ custom=\\d+ inner=\\d+ cluster=\\d+"
      "( accum=precise)?");
  int described = 0;
  for (ScaleKind kind : kKinds)
    for (int64_t m : {1, 96, 2048}) {
      const GemmProblem p = make_problem(m, 57344 / 8, 8192, kind, DType::bf16, false);
      std::set<std::string> seen;
      for (const std::string& b : gemm_backends())
        for (const std::string& c : gemm_configs(b)) {
          const std::string what = gemm_describe(b, c, p);
          if (b != "cublaslt" || !gemm_supports(b, c, p).empty()) {
            EXPECT_EQ(what, "") << b << "/" << c << " " << to_string(p);
            continue;
          }
          EXPECT_TRUE(std::regex_match(what, form)) << c << " " << to_string(p) << ": '" << what << "'";
          EXPECT_EQ(what.ends_with(" accum=precise"), c.starts_with("precise")) << c << " " << to_string(p);
          EXPECT_TRUE(seen.insert(what).second) << c << " repeats another rank's algorithm: " << what << " "
                                                << to_string(p);
          EXPECT_EQ(gemm_describe(b, c, p), what) << c << " " << to_string(p);
          ++described;
        }
    }
  EXPECT_GT(described, 0) << "cuBLASLt ran none of the problems";
}

// ---- operands of its own: graphs replayed at once, element-aligned scales and bias ----------------

// One GEMM's operands in buffers of its own (Problem's share a pool), small-integer data (every
// backend's output is then exactly the rounded reference), and the expected output bytes. Scales and
// bias may sit one element past a 16-byte boundary, as a slice of a larger tensor does (one
// expert's or one request's rows).
struct OwnGemm {
  GemmProblem p;
  DeviceBuffer a, b, sa, sb, bias, out;
  ScaledMmArgs args;
  std::vector<uint8_t> want;  // y, rounded to out's dtype

  OwnGemm(const GemmProblem& prob, uint64_t seed, bool offset_sa = false, bool offset_sb = false,
          bool offset_bias = false)
      : p(prob) {
    const int64_t kb = (p.k + 127) / 128, ma = (p.m + 3) / 4 * 4, nb = (p.n + 127) / 128;
    int64_t na = 1, nbs = 1;
    if (p.scale == ScaleKind::row) na = p.sa_vector ? p.m : 1, nbs = p.sb_vector ? p.n : 1;
    if (p.scale == ScaleKind::block) na = kb * ma, nbs = nb * kb;
    const int es = dtype_size(p.out);
    a = DeviceBuffer(p.m * p.k), b = DeviceBuffer(p.n * p.k);
    sa = DeviceBuffer((na + 4) * 4), sb = DeviceBuffer((nbs + 4) * 4);
    bias = DeviceBuffer((p.n + 8) * es), out = DeviceBuffer(p.m * p.n * es);
    fill_codes<<<kFillGrid, kFillBlock>>>(a.as<uint8_t>(), p.m, p.k, p.k, seed ^ 1, true);
    fill_codes<<<kFillGrid, kFillBlock>>>(b.as<uint8_t>(), p.n, p.k, p.k, seed ^ 2, true);
    float* sa_p = sa.as<float>() + (offset_sa ? 1 : 0);
    float* sb_p = sb.as<float>() + (offset_sb ? 1 : 0);
    fill_scales<<<kFillGrid, kFillBlock>>>(sa_p, na, seed ^ 3, true);
    fill_scales<<<kFillGrid, kFillBlock>>>(sb_p, nbs, seed ^ 4, true);
    char* bias_p = bias.as<char>() + (offset_bias ? es : 0);
    if (p.out == DType::bf16) fill_bias<<<kFillGrid, kFillBlock>>>(reinterpret_cast<__nv_bfloat16*>(bias_p), p.n, seed ^ 5, true);
    else fill_bias<<<kFillGrid, kFillBlock>>>(reinterpret_cast<__half*>(bias_p), p.n, seed ^ 5, true);
    args.scale = p.scale;
    args.a = TensorView::contiguous(a.data(), DType::e4m3, {p.m, p.k});
    args.b = TensorView::contiguous(b.data(), DType::e4m3, {p.n, p.k});
    if (p.scale == ScaleKind::block) {
      args.scale_a = TensorView::contiguous(sa_p, DType::f32, {kb, ma});
      args.scale_b = TensorView::contiguous(sb_p, DType::f32, {nb, kb});
    } else {
      args.scale_a = TensorView::contiguous(sa_p, DType::f32, {na});
      args.scale_b = TensorView::contiguous(sb_p, DType::f32, {nbs});
    }
    if (p.bias) args.bias = TensorView::contiguous(bias_p, p.out, {p.n});
    args.out = TensorView::contiguous(out.data(), p.out, {p.m, p.n});
    DeviceBuffer ref(p.m * p.n * 4);
    gemm::simt_rows_f32(p, gemm::operands_of(args), nullptr, p.m, ref.as<float>(), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> r(p.m * p.n);
    std::memcpy(r.data(), download(ref.data(), r.size() * 4).data(), r.size() * 4);
    want.resize(r.size() * 2);
    for (size_t i = 0; i < r.size(); ++i) {
      const uint16_t h = p.out == DType::bf16 ? ref::f32_to_bf16(r[i]) : ref::f32_to_f16(r[i]);
      std::memcpy(&want[i * 2], &h, 2);
    }
  }

  size_t out_bytes() const { return want.size(); }
  // The output now, against `want` (a NaN poison left anywhere fails too).
  testing::AssertionResult check(const std::string& what) const {
    return test::bytes_equal(download(out.data(), out_bytes()), want, what.c_str(), p.n * 2);
  }
};

// The configs that keep state in scratch between or within launches: skinny's split-K partials and
// counters, CUTLASS's stream-K partials and flags, cuBLASLt's workspace (used when its algorithm
// splits K).
std::vector<std::pair<std::string, std::string>> scratch_configs(const GemmProblem& p) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<std::string> built = gemm_backends();
  for (const std::string& b : {std::string("skinny"), std::string("cutlass_sm90"), std::string("cublaslt")}) {
    if (std::find(built.begin(), built.end(), b) == built.end()) continue;
    for (const std::string& c : gemm_configs(b))
      if ((b != "cutlass_sm90" || c.find("streamk") != std::string::npos) && gemm_supports(b, c, p).empty())
        out.emplace_back(b, c);
  }
  return out;
}

// Two graphs captured on one stream, the same GEMM on different inputs, replayed at once on two other
// streams: each replay gives its own output, and eager calls afterwards on the capture stream and on
// a replay stream too. M = 8, N = 256, K = 1152 (9 K blocks) makes every config use its scratch:
// skinny splits K 9 ways, more than a cluster holds, so the splits meet in global memory (partials,
// counters); CUTLASS stream-K spreads 2 output tiles over the SMs through its workspace. With scratch
// shared per capture stream, the two replays' blocks write one partials buffer and count on one
// counter array (skinny: wrong sums, and counters left off zero, after which a call on the capture
// stream writes nothing), or one replay's flag reset lands in the other's reduction (CUTLASS).
TEST(GemmBackends, GraphsReplayedConcurrentlyKeepTheirScratch) {
  FP8ROUTE_REQUIRE_SM90();
  // Per stream, released together; with a copy after each, 2 x 2 x 16 held operations stay within
  // what the driver queues while they wait (start_gate.h).
  constexpr int kReplays = 16;
  const GemmProblem p = make_problem(8, 256, 1152, ScaleKind::row, DType::bf16, false);
  const auto configs = scratch_configs(p);
  ASSERT_FALSE(configs.empty());
  uint64_t idx = 5000;
  for (const auto& [b, c] : configs) {
    const std::string name = b + "/" + c;
    OwnGemm g[2] = {OwnGemm(p, case_seed(++idx)), OwnGemm(p, case_seed(++idx))};
    OwnGemm eager(p, case_seed(++idx));
    cudaStream_t cap, replay[2];
    ASSERT_EQ(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking), cudaSuccess);
    for (cudaStream_t& r : replay) ASSERT_EQ(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking), cudaSuccess);
    // A warm-up call on the capture stream first, as a server makes: the stream has scratch before
    // the captures.
    scaled_mm(eager.args, b, c, cap);
    ASSERT_EQ(cudaStreamSynchronize(cap), cudaSuccess);
    ASSERT_TRUE(eager.check("warm-up on the capture stream, " + name));
    cudaGraph_t graph[2];
    cudaGraphExec_t exec[2];
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal), cudaSuccess);
      std::string error;
      try {
        if (cudaMemsetAsync(g[i].out.data(), 0xFF, g[i].out_bytes(), cap) != cudaSuccess) error = "memset";
        scaled_mm(g[i].args, b, c, cap);
      } catch (const std::exception& e) {
        error = e.what();
      }
      ASSERT_EQ(cudaStreamEndCapture(cap, &graph[i]), cudaSuccess) << name;
      ASSERT_EQ(error, "") << name;
      ASSERT_EQ(cudaGraphInstantiate(&exec[i], graph[i], 0), cudaSuccess) << name;
    }
    DeviceBuffer history[2] = {DeviceBuffer(kReplays * g[0].out_bytes()), DeviceBuffer(kReplays * g[1].out_bytes())};
    {
      test::StartGate gate;
      ASSERT_TRUE(gate.ok());
      for (cudaStream_t r : replay) ASSERT_TRUE(gate.hold(r));
      for (int k = 0; k < kReplays; ++k)
        for (int i = 0; i < 2; ++i) {
          ASSERT_EQ(cudaGraphLaunch(exec[i], replay[i]), cudaSuccess);
          ASSERT_EQ(cudaMemcpyAsync(history[i].as<char>() + k * g[i].out_bytes(), g[i].out.data(), g[i].out_bytes(),
                                    cudaMemcpyDeviceToDevice, replay[i]),
                    cudaSuccess);
        }
      gate.open();
      EXPECT_FALSE(gate.opened_by_watchdog()) << "the host blocked while enqueueing the held replays";
    }
    for (cudaStream_t r : replay) ASSERT_EQ(cudaStreamSynchronize(r), cudaSuccess) << name;
    for (int i = 0; i < 2; ++i) {
      const std::vector<uint8_t> h = download(history[i].data(), kReplays * g[i].out_bytes());
      int wrong = 0;
      for (int k = 0; k < kReplays; ++k)
        wrong += !std::equal(g[i].want.begin(), g[i].want.end(), h.begin() + k * g[i].out_bytes());
      EXPECT_EQ(wrong, 0) << name << ": graph " << i << ": " << wrong << " of " << kReplays
                          << " concurrent replays differ from the reference";
    }
    for (cudaStream_t s : {cap, replay[0]}) {
      ASSERT_EQ(cudaMemsetAsync(eager.out.data(), 0xFF, eager.out_bytes(), s), cudaSuccess);
      scaled_mm(eager.args, b, c, s);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_TRUE(eager.check((s == cap ? "eager on the capture stream after the replays, "
                                        : "eager on a replay stream after the replays, ") + name));
    }
    for (int i = 0; i < 2; ++i) cudaGraphExecDestroy(exec[i]), cudaGraphDestroy(graph[i]);
    for (cudaStream_t r : replay) cudaStreamDestroy(r);
    cudaStreamDestroy(cap);
    if (testing::Test::HasFailure()) return;  // one failing config is enough to read
  }
  std::printf("[gemm] concurrent graph replays checked on %zu configs\n", configs.size());
}

// Scales and bias one element past a 16-byte boundary (a slice of a larger tensor: an MoE loop's
// expert, a request's rows) route and run exactly as aligned ones: the problem (the routing key)
// is the aligned problem, the router picks a fast backend, and every config that supports the
// aligned problem gives the reference's bytes with each operand offset: scale pointers do not count
// in the problem's alignment, which would send such calls to the slow reference kernel. Row scales
// at small M, block and tensor scales with bias.
TEST(GemmBackends, ElementAlignedScalesAndBiasRunOnFastBackends) {
  FP8ROUTE_REQUIRE_SM90();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<GemmProblem> problems;
  for (int64_t m : {1, 2, 8}) problems.push_back(make_problem(m, 4096, 7168, ScaleKind::row, DType::bf16, false));
  problems.push_back(make_problem(8, 4096, 7168, ScaleKind::row, DType::f16, true));
  problems.push_back(make_problem(64, 2048, 7168, ScaleKind::block, DType::bf16, true));
  problems.push_back(make_problem(16, 4096, 1024, ScaleKind::tensor, DType::bf16, true));
  uint64_t idx = 6000;
  std::map<std::string, int> ran;
  std::set<std::string> quick_done;
  for (const GemmProblem& p : problems) {
    const OwnGemm aligned(p, case_seed(++idx));
    for (int which = 0; which < 3; ++which) {
      if (which == 2 && !p.bias) continue;
      const char* operand = which == 0 ? "scale_a" : which == 1 ? "scale_b" : "bias";
      OwnGemm g(p, case_seed(++idx), which == 0, which == 1, which == 2);
      const std::string what = std::string(operand) + " one element off 16 bytes, " + to_string(p);
      const GemmProblem got = check_scaled_mm(g.args);
      EXPECT_EQ(got, check_scaled_mm(aligned.args)) << what << ": the routing key changed: " << to_string(got);
      const Route r = default_router()->select(got);
      EXPECT_NE(r.backend, "reference") << what << ": routed to the reference: " << r.why;
      ASSERT_EQ(cudaMemsetAsync(g.out.data(), 0xFF, g.out_bytes(), stream), cudaSuccess);
      scaled_mm(g.args, stream);  // the routed entry point
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_TRUE(g.check("routed to " + r.backend + "/" + r.config + ", " + what));
      for (const std::string& b : gemm_backends()) {
        if (b == "reference") continue;
        for (const std::string& c : gemm_configs(b)) {
          if (!gemm_supports(b, c, got).empty()) continue;
          // FP8ROUTE_TEST_QUICK: each config once per offset operand (on the first problem it runs).
          if (test::quick() && !quick_done.insert(b + "/" + c + " " + operand).second) continue;
          ASSERT_EQ(cudaMemsetAsync(g.out.data(), 0xFF, g.out_bytes(), stream), cudaSuccess);
          scaled_mm(g.args, b, c, stream);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          EXPECT_TRUE(g.check(b + "/" + c + ", " + what));
          ++ran[b];
        }
      }
      if (testing::Test::HasFailure()) return;
    }
  }
  for (const auto& [b, n] : ran) std::printf("[gemm] %-14s ran %d element-aligned cases\n", b.c_str(), n);
  for (const char* b : {"cublaslt", "skinny"}) EXPECT_GT(ran[b], 0) << b << " ran none";
  // The same offsets inside a captured graph: the aligned copies are made by the graph's own nodes.
  OwnGemm g(problems[2], case_seed(++idx), true, true, false);
  for (const std::string& b : gemm_backends()) {
    if (b == "reference") continue;
    for (const std::string& c : gemm_configs(b)) {
      if (!gemm_supports(b, c, g.p).empty()) continue;
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
      std::string error;
      try {
        if (cudaMemsetAsync(g.out.data(), 0xFF, g.out_bytes(), stream) != cudaSuccess) error = "memset";
        scaled_mm(g.args, b, c, stream);
      } catch (const std::exception& e) {
        error = e.what();
      }
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << b << "/" << c;
      ASSERT_EQ(error, "") << b << "/" << c;
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int rep = 0; rep < 2; ++rep) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_TRUE(g.check("graph replay, " + b + "/" + c + ", offset scale_a and scale_b"));
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fp8route
