// Determinism: one problem run many times on one stream gives the same bits every time.
// - GEMM: every backend and config of this build (the router's candidates, the reference kernel
//   included) that supports the problem, on real layer shapes of shapes/models.json, M in
//   {1, 16, 128}, tensor, row and block scales. A config whose backend declares it deterministic
//   (GemmBackend::deterministic, the default) must give identical outputs; one declared otherwise
//   is run and reported, not failed.
// - Quantization and RMSNorm: every kernel of the family (the group kernel's shapes forced one by
//   one, fused silu_and_mul, masked, scatter with contested rows, per-token, per-tensor static and
//   dynamic on each of its three paths, the fused RMSNorm forms).
// Each run writes into outputs poisoned just before it, so a run that leaves part of its output
// unwritten differs from one that writes it. The inputs are drawn once per test from the printed
// seed (FP8ROUTE_TEST_SEED repeats them). Repetitions: 100, but 20 for GEMMs with M > 16 and for
// the reference kernel (tens of times slower than the others), so that the suite stays well under a
// minute on an H200; each test prints its time.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <random>
#include <string>
#include <vector>

#include "common/shapes.h"
#include "fp8route/buffer.h"
#include "fp8route/gemm.h"
#include "fp8route/norm.h"
#include "fp8route/quant.h"
#include "fp8route/reference.h"
#include "gemm/backend.h"
#include "gpu_util.h"
#include "fp8route/tuning/quant_knobs.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::random_codes;
using test::random_scales;

using test::download;
using test::upload;

// ---- the harness ----------------------------------------------------------------------------------

struct Output {
  void* data;
  size_t bytes;
};

struct Repeated {
  int reps = 0;
  int differing = 0;                // runs whose bytes differ from the first run's
  testing::AssertionResult first_difference = testing::AssertionSuccess();
  std::vector<uint8_t> first;       // the first run's bytes, outputs concatenated
};

// Runs `run` `reps` times on `stream`, each time on outputs poisoned with `poison` first, keeps a
// copy of every run's outputs on the device, and compares them with the first run's on the host.
Repeated repeat(const std::vector<Output>& outs, int reps, uint8_t poison, cudaStream_t stream,
                const std::function<void(cudaStream_t)>& run) {
  size_t total = 0;
  for (const Output& o : outs) total += o.bytes;
  DeviceBuffer history(std::max<size_t>(total * reps, 16));
  for (int r = 0; r < reps; ++r) {
    for (const Output& o : outs) EXPECT_EQ(cudaMemsetAsync(o.data, poison, o.bytes, stream), cudaSuccess);
    run(stream);
    size_t at = total * r;
    for (const Output& o : outs) {
      EXPECT_EQ(cudaMemcpyAsync(history.as<char>() + at, o.data, o.bytes, cudaMemcpyDeviceToDevice, stream),
                cudaSuccess);
      at += o.bytes;
    }
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<uint8_t> all = download(history.data(), total * reps);
  Repeated res;
  res.reps = reps;
  res.first.assign(all.begin(), all.begin() + total);
  for (int r = 1; r < reps; ++r) {
    if (std::memcmp(all.data() + total * r, all.data(), total) == 0) continue;
    if (res.differing++ == 0) {
      const std::vector<uint8_t> got(all.begin() + total * r, all.begin() + total * (r + 1));
      res.first_difference = test::bytes_equal(got, res.first, ("run " + std::to_string(r) + " vs run 0").c_str());
    }
  }
  return res;
}

// ---- GEMM: every config the router can pick ------------------------------------------------------

// Real layers: a square one, one with few N tiles and long K (the split-K and stream-K paths), and
// a TP-8 slice with fewer still.
struct Layer {
  const char* model;
  const char* layer;
  int tp;
};
constexpr Layer kLayers[] = {{"llama-3.1-8b", "o_proj", 1},
                             {"deepseek-v3", "fused_qkv_a_proj", 1},
                             {"llama-3.1-70b", "qkv_proj", 8}};
constexpr int64_t kMs[] = {1, 16, 128};
constexpr ScaleKind kKinds[] = {ScaleKind::tensor, ScaleKind::row, ScaleKind::block};

// Device operands of [max M, K] x [N, K] for every scale kind, drawn once; views of the first M rows.
struct GemmInputs {
  int64_t n, k, max_m;
  DeviceBuffer a, b, sa, sb, out;
  GemmInputs(int64_t n_, int64_t k_, int64_t max_m_, std::mt19937_64& rng) : n(n_), k(k_), max_m(max_m_) {
    const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128, ma = (max_m + 3) / 4 * 4;
    a = upload(random_codes(max_m * k, rng));
    b = upload(random_codes(n * k, rng));
    sa = upload(random_scales(std::max(kb * ma, max_m), rng));
    sb = upload(random_scales(std::max(nb * kb, n), rng));
    out = DeviceBuffer(max_m * n * 2);
  }
  ScaledMmArgs args(int64_t m, ScaleKind kind) const {
    ScaledMmArgs g;
    g.scale = kind;
    g.a = TensorView::contiguous(a.data(), DType::e4m3, {m, k});
    g.b = TensorView::contiguous(b.data(), DType::e4m3, {n, k});
    const int64_t kb = (k + 127) / 128;
    if (kind == ScaleKind::block) {  // block scale_a is M-major: a [kb, align(m, 4)] tensor of its own
      g.scale_a = TensorView::contiguous(sa.data(), DType::f32, {kb, (m + 3) / 4 * 4});
      g.scale_b = TensorView::contiguous(sb.data(), DType::f32, {(n + 127) / 128, kb});
    } else {
      g.scale_a = TensorView::contiguous(sa.data(), DType::f32, {kind == ScaleKind::row ? m : 1});
      g.scale_b = TensorView::contiguous(sb.data(), DType::f32, {kind == ScaleKind::row ? n : 1});
    }
    g.out = TensorView::contiguous(out.data(), DType::bf16, {m, n});
    return g;
  }
};

int gemm_reps(const gemm::GemmBackend& b, int64_t m) { return m > 16 || b.slow_fallback() ? 20 : 100; }

TEST(GemmDeterminism, EveryConfigThatClaimsItGivesIdenticalBits) {
  FP8ROUTE_REQUIRE_SM90();
  const auto start = std::chrono::steady_clock::now();
  const tools::ShapeCatalog cat = tools::load_catalog(tools::default_catalog_path());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::map<std::string, int> checked;       // backend/config -> problems run
  std::vector<std::string> undeclared;      // configs declared nondeterministic, and what they did
  std::set<std::string> not_built;          // backends this build has no kernels for (CUTLASS off)
  auto rng = test::make_rng(901);
  for (const Layer& want : kLayers) {
    const tools::LayerShape* found = nullptr;
    const std::vector<tools::LayerShape> layers = tools::at_tp(cat.layers, want.tp);
    for (const tools::LayerShape& l : layers)
      if (l.model == want.model && l.layer == want.layer) found = &l;
    ASSERT_NE(found, nullptr) << want.model << "/" << want.layer << " tp" << want.tp << " not in the catalog";
    const GemmInputs in(found->n, found->k, kMs[std::size(kMs) - 1], rng);
    for (int64_t m : kMs)
      for (ScaleKind kind : kKinds) {
        const ScaledMmArgs args = in.args(m, kind);
        const GemmProblem p = check_scaled_mm(args);
        for (const gemm::GemmBackend* b : gemm::all_backends())
          for (int c = 0; c < static_cast<int>(b->configs().size()); ++c) {
            const std::string name = std::string(b->name()) + "/" + b->configs()[c];
            if (const std::string why = b->supports(p, c); !why.empty()) {
              if (why.find("this build has no") != std::string::npos) not_built.insert(std::string(b->name()));
              continue;
            }
            const std::string what = name + " on " + found->model + "/" + found->layer + " tp" +
                                     std::to_string(want.tp) + ": " + to_string(p) +
                                     " seed=" + std::to_string(test::test_seed());
            const Repeated r = repeat({{args.out.data, size_t(m * p.n * 2)}}, gemm_reps(*b, m), 0xFF, stream,
                                      [&](cudaStream_t s) { scaled_mm(args, b->name(), b->configs()[c], s); });
            // The poison is a NaN in bf16 (0xFFFF); these outputs are finite, so the first run wrote them all.
            size_t unwritten = 0;
            for (size_t i = 0; i + 1 < r.first.size(); i += 2) unwritten += r.first[i] == 0xFF && r.first[i + 1] == 0xFF;
            EXPECT_EQ(unwritten, 0u) << what << ": the first run left outputs unwritten";
            if (b->deterministic(c)) {
              EXPECT_EQ(r.differing, 0) << what << ": " << r.differing << " of " << r.reps
                                        << " runs differ from the first, though the backend declares the config "
                                           "deterministic; "
                                        << r.first_difference.message();
            } else {
              undeclared.push_back(what + (r.differing ? ": differed in " + std::to_string(r.differing) + " of " +
                                                             std::to_string(r.reps) + " runs"
                                                       : ": identical in " + std::to_string(r.reps) + " runs"));
            }
            ++checked[name];
            if (testing::Test::HasFailure()) {
              cudaStreamDestroy(stream);
              return;  // one failing config is enough to read
            }
          }
      }
  }
  cudaStreamDestroy(stream);
  for (const auto& [name, n] : checked) std::printf("[determinism] %-52s %d problems\n", name.c_str(), n);
  for (const std::string& u : undeclared) std::printf("[determinism] declared nondeterministic: %s\n", u.c_str());
  // Every backend of the build met some problem (a config list that supports nothing here would
  // make this test vacuous for it).
  for (const gemm::GemmBackend* b : gemm::all_backends()) {
    if (not_built.count(std::string(b->name()))) {
      std::printf("[determinism] %s: not in this build, not checked\n", std::string(b->name()).c_str());
      continue;
    }
    int n = 0;
    for (const std::string& c : b->configs()) n += checked[std::string(b->name()) + "/" + c];
    EXPECT_GT(n, 0) << b->name() << " ran none of the problems";
  }
  std::printf("[determinism] GEMMs: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// ---- quantization and RMSNorm ---------------------------------------------------------------------

constexpr int kQuantReps = 100;
constexpr int64_t kTs[] = {1, 16, 128};  // tokens, as the GEMMs' M

// Expects `reps` identical runs of `run` writing `outs`.
void expect_identical(const std::string& what, const std::vector<Output>& outs, cudaStream_t stream,
                      const std::function<void(cudaStream_t)>& run) {
  const Repeated r = repeat(outs, kQuantReps, 0xAB, stream, run);
  EXPECT_EQ(r.differing, 0) << what << ": " << r.differing << " of " << r.reps << " runs differ from the first; "
                            << r.first_difference.message() << " (seed=" << test::test_seed() << ")";
}

std::vector<Output> outputs_of(const GroupQuantOutputs& o) {
  return {{o.code_buffer.data(), o.code_buffer.bytes()}, {o.scale_buffer.data(), o.scale_buffer.bytes()}};
}

// Forces one shape of the group kernel for its lifetime (detail::force_group_*), then the rule again.
struct GroupShape {
  const char* name;
  int items, threads, vec;
};
constexpr GroupShape kGroupShapes[] = {
    {"rule", 0, 0, 0}, {"items=4", 4, 0, 0}, {"threads=64", 1, 64, 8}, {"decode kernel", 1, 0, 4}};
struct ForcedShape {
  explicit ForcedShape(const GroupShape& g) {
    detail::force_group_items(g.items);
    detail::force_group_threads(g.threads);
    detail::force_group_vec(g.vec);
  }
  ~ForcedShape() {
    detail::force_group_items(0);
    detail::force_group_threads(0);
    detail::force_group_vec(0);
  }
};

const GroupQuantSpec kSpecs[] = {
    {128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma},
    {128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::col_major_tma},
    {64, DType::i8, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major}};

TEST(QuantDeterminism, EveryKernelGivesIdenticalBits) {
  FP8ROUTE_REQUIRE_SM90();
  const auto start = std::chrono::steady_clock::now();
  auto rng = test::make_rng(900);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  constexpr int64_t H = 7168;  // deepseek-v3's hidden size (models.json)
  int cases = 0;
  for (int64_t T : kTs) {
    const std::string at = " T=" + std::to_string(T) + " H=" + std::to_string(H);
    // Plain and fused group quant, each kernel shape, each encoding.
    const std::vector<uint8_t> x = test::random_activations(DType::bf16, T * 2 * H, rng);
    const DeviceBuffer dx = upload(x);
    for (const GroupQuantSpec& s : kSpecs)
      for (const GroupShape& g : kGroupShapes)
        for (bool fused : {false, true}) {
          const ForcedShape forced(g);
          GroupQuantOutputs out = allocate_group_quant_outputs(s, T, H);
          const TensorView xv = TensorView::contiguous(dx.data(), DType::bf16, {T, fused ? 2 * H : H});
          expect_identical(std::string(fused ? "silu_and_mul_per_token_group_quant " : "per_token_group_quant ") +
                               to_string(s) + " " + g.name + at,
                           outputs_of(out), stream, [&](cudaStream_t st) {
                             if (fused) silu_and_mul_per_token_group_quant(xv, s, out.q, out.s, st);
                             else per_token_group_quant(xv, s, out.q, out.s, st);
                           });
          ++cases;
        }
    // Masked (E = 4 experts of T rows, some partly valid) and scatter (each row named by two
    // tokens: the owner rule decides which one writes it).
    {
      const int64_t E = 4;
      const std::vector<int32_t> masked_m{static_cast<int32_t>(T), 0, static_cast<int32_t>((T + 1) / 2), 1};
      const std::vector<uint8_t> xe = test::random_activations(DType::bf16, E * T * 2 * H, rng);
      const DeviceBuffer dxe = upload(xe), dm = upload(masked_m);
      const GroupQuantSpec& s = kSpecs[1];
      for (bool fused : {false, true}) {
        GroupQuantOutputs out = allocate_group_quant_outputs(s, T, H, E);
        const TensorView xv = TensorView::contiguous(dxe.data(), DType::bf16, {E, T, fused ? 2 * H : H});
        const TensorView mv = TensorView::contiguous(dm.data(), DType::i32, {E});
        expect_identical(std::string(fused ? "masked_silu_and_mul_per_token_group_quant " : "masked_per_token_group_quant ") +
                             to_string(s) + at,
                         outputs_of(out), stream, [&](cudaStream_t st) {
                           if (fused) masked_silu_and_mul_per_token_group_quant(xv, mv, s, out.q, out.s, st);
                           else masked_per_token_group_quant(xv, mv, s, out.q, out.s, st);
                         });
        cases += 1;
      }
      const int64_t topk = 8, rows = std::max<int64_t>(1, T * topk / 2);
      std::vector<int32_t> src2dst(T * topk);
      for (int64_t i = 0; i < T * topk; ++i) src2dst[i] = static_cast<int32_t>((i * 7 + i / topk) % rows);
      const DeviceBuffer dmap = upload(src2dst);
      for (const GroupQuantSpec& sp : kSpecs) {
        GroupQuantOutputs out = allocate_group_quant_outputs(sp, rows, H);
        const TensorView xv = TensorView::contiguous(dx.data(), DType::bf16, {T, H});
        const TensorView map = TensorView::contiguous(dmap.data(), DType::i32, {T, topk});
        expect_identical("scatter_per_token_group_quant " + to_string(sp) + at + " rows=" + std::to_string(rows),
                         outputs_of(out), stream,
                         [&](cudaStream_t st) { scatter_per_token_group_quant(xv, map, sp, out.q, out.s, st); });
        ++cases;
      }
    }
    // Per-token (register and two-read rows), per-tensor static, per-tensor dynamic on each path:
    // one block (T = 1, H = 4096: 512 vectors), a cluster (T = 16, H = 1536: 3072), two launches.
    for (auto [h, code] : {std::pair<int64_t, DType>{4096, DType::e4m3}, {18432, DType::i8}}) {
      const std::vector<uint8_t> xr = test::random_activations(DType::f16, T * h, rng);
      const DeviceBuffer dxr = upload(xr), dq(T * h), ds(T * 4);
      const TensorView xv = TensorView::contiguous(dxr.data(), DType::f16, {T, h});
      const TensorView qv = TensorView::contiguous(dq.data(), code, {T, h});
      const std::string shape = " T=" + std::to_string(T) + " H=" + std::to_string(h) + " " + std::string(dtype_name(code));
      expect_identical("per_token_quant" + shape, {{dq.data(), dq.bytes()}, {ds.data(), ds.bytes()}}, stream,
                       [&](cudaStream_t st) {
                         per_token_quant(xv, qv, TensorView::contiguous(ds.data(), DType::f32, {T}), ScaleRounding::pow2, st);
                       });
      const DeviceBuffer dscale = upload(std::vector<float>{0.0078125f});
      expect_identical("per_tensor_quant_static" + shape, {{dq.data(), dq.bytes()}}, stream, [&](cudaStream_t st) {
        per_tensor_quant_static(xv, TensorView::contiguous(dscale.data(), DType::f32, {1}), qv, st);
      });
      cases += 2;
    }
    {
      const int64_t h = T == 1 ? 4096 : T == 16 ? 1536 : H;
      const std::vector<uint8_t> xr = test::random_activations(DType::bf16, T * h, rng);
      const DeviceBuffer dxr = upload(xr), dq(T * h), ds(4);
      expect_identical("per_tensor_quant_dynamic T=" + std::to_string(T) + " H=" + std::to_string(h),
                       {{dq.data(), dq.bytes()}, {ds.data(), ds.bytes()}}, stream, [&](cudaStream_t st) {
                         per_tensor_quant_dynamic(TensorView::contiguous(dxr.data(), DType::bf16, {T, h}),
                                                  TensorView::contiguous(dq.data(), DType::e4m3, {T, h}),
                                                  TensorView::contiguous(ds.data(), DType::f32, {1}), st);
                       });
      ++cases;
    }
    // RMSNorm with a residual, alone and fused with each quant.
    {
      const std::vector<uint8_t> xn = test::random_activations(DType::bf16, T * H, rng, H, -4, 3);
      const std::vector<uint8_t> rn = test::random_activations(DType::bf16, T * H, rng, 64, -6, 2);
      const std::vector<uint8_t> w = test::random_activations(DType::bf16, H, rng, H, -1, 1);
      const DeviceBuffer dxn = upload(xn), drn = upload(rn), dw = upload(w), dh(T * H * 2), dy(T * H * 2);
      const DeviceBuffer dq(T * H), ds(T * 4), dscale = upload(std::vector<float>{0.03125f});
      const RmsNormInput in{TensorView::contiguous(dxn.data(), DType::bf16, {T, H}),
                            TensorView::contiguous(dw.data(), DType::bf16, {H}), 1e-6f,
                            TensorView::contiguous(drn.data(), DType::bf16, {T, H}),
                            TensorView::contiguous(dh.data(), DType::bf16, {T, H})};
      const std::vector<Output> h_out{{dh.data(), dh.bytes()}};
      auto with = [&](std::vector<Output> v) {
        v.insert(v.end(), h_out.begin(), h_out.end());
        return v;
      };
      expect_identical("rms_norm" + at, with({{dy.data(), dy.bytes()}}), stream, [&](cudaStream_t st) {
        rms_norm(in, TensorView::contiguous(dy.data(), DType::bf16, {T, H}), st);
      });
      const GroupQuantSpec& s = kSpecs[0];
      GroupQuantOutputs out = allocate_group_quant_outputs(s, T, H);
      expect_identical("rms_norm_per_token_group_quant " + to_string(s) + at, with(outputs_of(out)), stream,
                       [&](cudaStream_t st) { rms_norm_per_token_group_quant(in, s, out.q, out.s, st); });
      const TensorView qv = TensorView::contiguous(dq.data(), DType::e4m3, {T, H});
      expect_identical("rms_norm_per_token_quant" + at, with({{dq.data(), dq.bytes()}, {ds.data(), ds.bytes()}}), stream,
                       [&](cudaStream_t st) {
                         rms_norm_per_token_quant(in, qv, TensorView::contiguous(ds.data(), DType::f32, {T}),
                                                  ScaleRounding::none, st);
                       });
      expect_identical("rms_norm_per_tensor_quant_static" + at, with({{dq.data(), dq.bytes()}}), stream,
                       [&](cudaStream_t st) {
                         rms_norm_per_tensor_quant_static(in, TensorView::contiguous(dscale.data(), DType::f32, {1}), qv, st);
                       });
      cases += 4;
    }
    if (testing::Test::HasFailure()) break;
  }
  cudaStreamDestroy(stream);
  std::printf("[determinism] %d quantization and RMSNorm problems x %d runs: %.1f s\n", cases, kQuantReps,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace
}  // namespace fp8route
