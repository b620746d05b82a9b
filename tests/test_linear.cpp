// LinearPlan's load-time half on the CPU (the GPU half is in test_gemm.cu): which backends a layer
// can use and which scale forms are prepared, and that the plan's router, made from a slice of the
// shipped table, routes every M exactly as the full table does under the same restriction, with a
// choice that supports the operands the plan will hand it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "common/shapes.h"
#include "fp8route/buffer.h"
#include "fp8route/error.h"
#include "fp8route/linear.h"
#include "route/linear_layout.h"
#include "fp8route/route.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::expect_invalid;

std::string source_dir() {
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  return env ? env : FP8ROUTE_SOURCE_DIR;
}

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

TEST(LinearLayout, ScaleFormsPerActivationAndWeightScale) {
  // Per-tensor checkpoint, per-tensor activations: a tensor-scale GEMM, nothing prepared.
  LinearLayout l = plan_linear_layout(4096, 4096, ScaleKind::tensor, 1, DType::bf16, false);
  EXPECT_EQ(l.gemm, ScaleKind::tensor);
  EXPECT_FALSE(l.expand_weight_scale || l.pad_weight_scale);
  EXPECT_TRUE(has(l.backends, "cublaslt"));
  // Per-tensor checkpoint, per-token activations: the weight scale becomes an [N] vector at load,
  // so cuBLASLt (OUTER_VEC on both sides) can run it too.
  l = plan_linear_layout(4096, 4096, ScaleKind::row, 1, DType::bf16, false);
  EXPECT_EQ(l.gemm, ScaleKind::row);
  EXPECT_TRUE(l.expand_weight_scale);
  EXPECT_TRUE(l.problem(64, 16, "cublaslt").sb_vector);
  EXPECT_TRUE(has(l.backends, "cublaslt"));
  // Per-channel weight, per-tensor activations: a row GEMM with a scalar scale_a (cuBLASLt runs it
  // only at M = 1, where a scalar is the [M] vector).
  l = plan_linear_layout(4096, 4096, ScaleKind::tensor, 4096, DType::f16, true);
  EXPECT_EQ(l.gemm, ScaleKind::row);
  EXPECT_FALSE(l.problem(64, 16, "").sa_vector);
  EXPECT_TRUE(l.problem(64, 16, "").sb_vector);
  EXPECT_TRUE(l.problem(64, 16, "").bias);
  // Block scales with ceil(K/128) % 4 != 0 (K = 5376: 42 blocks): a padded copy for cuBLASLt only.
  l = plan_linear_layout(21504, 5376, ScaleKind::block, 168 * 42, DType::bf16, false);
  EXPECT_EQ(l.gemm, ScaleKind::block);
  EXPECT_TRUE(l.pad_weight_scale);
  EXPECT_TRUE(has(l.backends, "cublaslt")) << l.excluded;
  EXPECT_TRUE(l.problem(64, 16, "cublaslt").sb_padded);
  EXPECT_FALSE(l.problem(64, 16, "cutlass_sm90").sb_padded);
  // ... and none when the unpadded form is already what cuBLASLt reads.
  EXPECT_FALSE(plan_linear_layout(4096, 7168, ScaleKind::block, 32 * 56, DType::bf16, false).pad_weight_scale);
  // An odd shape: only the reference runs it, and the others say why.
  l = plan_linear_layout(1000, 1000, ScaleKind::row, 1000, DType::bf16, false);
  EXPECT_FALSE(has(l.backends, "cublaslt"));
  EXPECT_TRUE(has(l.backends, "reference"));
  EXPECT_NE(l.excluded.find("cublaslt:"), std::string::npos) << l.excluded;
}

TEST(LinearLayout, BadWeightScaleNamesTheArgument) {
  for (auto [act, numel] : {std::pair{ScaleKind::row, int64_t{7}}, std::pair{ScaleKind::tensor, int64_t{2}},
                            std::pair{ScaleKind::block, int64_t{1}}}) {
    try {
      plan_linear_layout(4096, 4096, act, numel, DType::bf16, false);
      ADD_FAILURE() << "accepted " << numel << " weight scales for " << name(act) << " activations";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("weight_scale"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(plan_linear_layout(4096, 4096, ScaleKind::row, 4096, DType::f32, false), Error);
}

// Load time and run time are one decision: for every models.json layer at TP 1, 2, 4, 8, every
// activation kind and every M of the catalog grid (and some between), the plan's router (a table
// slice) chooses what the full table chooses under the plan's restriction, and the choice supports
// the problem with the scale form the plan hands that backend.
TEST(LinearLayout, PlanRouterAgreesWithTheFullTable) {
  const Router full = Router::from_file(source_dir() + "/routes/h200.json");
  ASSERT_TRUE(full.load_error().empty()) << full.load_error();
  const tools::ShapeCatalog cat = tools::load_catalog(tools::default_catalog_path());
  std::vector<int64_t> ms = cat.m_grid;
  for (int64_t m : {3, 5, 100, 1000, 5000, 20000}) ms.push_back(m);
  size_t checked = 0, sliced_entries = 0, layers = 0;
  for (int tp : {1, 2, 4, 8})
    for (const tools::LayerShape& l : tools::at_tp(cat.layers, tp))
      for (auto [act, numel] : {std::pair{ScaleKind::tensor, int64_t{1}}, std::pair{ScaleKind::row, l.n},
                                std::pair{ScaleKind::row, int64_t{1}},
                                std::pair{ScaleKind::block, ((l.n + 127) / 128) * ((l.k + 127) / 128)}}) {
        const LinearLayout layout = plan_linear_layout(l.n, l.k, act, numel, DType::bf16, false);
        const Router plan = plan_router(full, layout);
        ++layers;
        sliced_entries += plan.table().entries.size();
        ASSERT_LE(plan.table().entries.size(), 3 * full.table().entries.size());
        // The same restriction, spelled out here: the plan's backends, each with its scale form.
        const SupportsFn restricted = [&](std::string_view b, std::string_view c, const GemmProblem& p) {
          if (!has(layout.backends, std::string(b))) return std::string("excluded");
          return gemm_supports(b, c, layout.problem(p.m, p.align, std::string(b)));
        };
        const Router whole(full.table(), restricted);
        for (int64_t m : ms) {
          const GemmProblem p = layout.problem(m, 16, "");
          const Route a = plan.select(p), b = whole.select(p);
          ASSERT_EQ(a.backend + "/" + a.config, b.backend + "/" + b.config)
              << l.model << "/" << l.layer << " tp" << tp << " " << to_string(p) << "\nplan: " << a.why
              << "\nfull: " << b.why;
          EXPECT_EQ(a.source, b.source) << to_string(p);
          EXPECT_EQ(gemm_supports(a.backend, a.config, layout.problem(m, 16, a.backend)), "")
              << to_string(layout.problem(m, 16, a.backend)) << " routed to " << a.backend << "/" << a.config;
          ++checked;
        }
      }
  std::printf("plan routers: %zu layers x activation kinds, %zu (layer, M) routes agree; %.1f table entries per plan\n",
              layers, checked, double(sliced_entries) / layers);
}

// Runs fn, expects Error(invalid_argument) whose message contains `word`.
// The layer's tensors share one device, checked before any load-time work (fake addresses: no GPU).
TEST(LinearPlanArgs, WeightScaleAndBiasOnTheWeightsDevice) {
  auto at = [](uintptr_t slot) { return reinterpret_cast<void*>((uintptr_t{1} << 36) + (slot << 32)); };
  const TensorView w = TensorView::contiguous(at(0), DType::e4m3, {256, 512});
  expect_invalid([&] { (void)LinearPlan(w, TensorView::contiguous(at(1), DType::f32, {256}, Device::cuda(1)), ScaleKind::row, DType::bf16); },
                 "weight_scale and weight: must be on one device");
  expect_invalid([&] {
    (void)LinearPlan(w, TensorView::contiguous(at(1), DType::f32, {256}), ScaleKind::row, DType::bf16,
               TensorView::contiguous(at(2), DType::bf16, {256}, Device::cuda(1)));
  }, "bias and weight: must be on one device");
}

// LinearPlan::run: an empty batch with the null pointers DLPack gives empty tensors returns at
// once; the call's tensors on another device, or an output over an input, are errors naming them,
// raised before anything runs (the output keeps its poison).
TEST(LinearPlanGpu, EmptyBatchDevicesAndOverlap) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  const int64_t n = 256, k = 512, m = 16;
  // bias's allocation holds a whole [M, N] output, so that an out view over it overlaps nothing else.
  DeviceBuffer w(n * k), ws(n * 4), a(m * k), as(m * 4), out(m * n * 2), bias(m * n * 2);
  for (const DeviceBuffer* b : {&w, &ws, &a, &as, &bias}) ASSERT_EQ(cudaMemset(b->data(), 0, b->bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemset(out.data(), 0x7B, out.bytes()), cudaSuccess);
  const LinearPlan plan(TensorView::contiguous(w.data(), DType::e4m3, {n, k}),
                        TensorView::contiguous(ws.data(), DType::f32, {n}), ScaleKind::row, DType::bf16,
                        TensorView::contiguous(bias.data(), DType::bf16, {n}));
  EXPECT_NO_THROW(plan.run(TensorView::contiguous(nullptr, DType::e4m3, {0, k}), TensorView::contiguous(nullptr, DType::f32, {0}),
                           TensorView::contiguous(nullptr, DType::bf16, {0, n}), nullptr));
  const TensorView av = TensorView::contiguous(a.data(), DType::e4m3, {m, k});
  const TensorView sv = TensorView::contiguous(as.data(), DType::f32, {m});
  const TensorView ov = TensorView::contiguous(out.data(), DType::bf16, {m, n});
  auto on1 = [](TensorView v) {
    v.device = Device::cuda(1);
    return v;
  };
  expect_invalid([&] { plan.run(on1(av), sv, ov, nullptr); }, "a and weight: must be on one device");
  expect_invalid([&] { plan.run(av, on1(sv), ov, nullptr); }, "a_scale and weight: must be on one device");
  expect_invalid([&] { plan.run(av, sv, on1(ov), nullptr); }, "out and weight: must be on one device");
  expect_invalid([&] { plan.run(av, sv, TensorView::contiguous(a.data(), DType::bf16, {m, n}), nullptr); }, "out and a overlap");
  expect_invalid([&] { plan.run(av, sv, TensorView::contiguous(bias.data(), DType::bf16, {m, n}), nullptr); },
                 "out and bias overlap");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> host(out.bytes());
  ASSERT_EQ(cudaMemcpy(host.data(), out.data(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint8_t b : host) ASSERT_EQ(b, 0x7B) << "out written by a call that raised";
}

}  // namespace
}  // namespace fp8route
