// LinearPlan's load-time half on the CPU (the GPU half is in test_gemm.cu): which backends a layer
// can use and which scale forms are prepared, and that the plan's router, made from a slice of the
// shipped table, routes every M exactly as the full table does under the same restriction, with a
// choice that supports the operands the plan will hand it.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/shapes.h"
#include "fp8route/error.h"
#include "fp8route/linear.h"
#include "fp8route/route.h"

namespace fp8route {
namespace {

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
  const bench::ShapeCatalog cat = bench::load_catalog(bench::default_catalog_path());
  std::vector<int64_t> ms = cat.m_grid;
  for (int64_t m : {3, 5, 100, 1000, 5000, 20000}) ms.push_back(m);
  size_t checked = 0, sliced_entries = 0, layers = 0;
  for (int tp : {1, 2, 4, 8})
    for (const bench::LayerShape& l : bench::at_tp(cat.layers, tp))
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

}  // namespace
}  // namespace fp8route
