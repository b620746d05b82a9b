// fp8route explain: which backend and config a GEMM problem routes to, where the choice came from
// (exact table entry, nearest entry, heuristic), the ranked measured candidates and why any was
// skipped. Works without a GPU (the fast backends' static rules are all it can then check).

#include <cstdio>
#include <string>

#include "common/shapes.h"
#include "commands.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/moe.h"
#include "fp8route/route.h"
#include "fp8route/tuning/explain_policy.h"

namespace fp8route::cli {

namespace {

// A grouped GEMM (docs/moe.md, Routing): the grouped table's choice or the rule, and why.
int explain_grouped_problem(const ExplainOptions& opt) {
  FP8ROUTE_CHECK(opt.model.empty(), "--model: not taken with --grouped (give --experts, --n and --k)");
  FP8ROUTE_CHECK(opt.experts >= 1 && opt.n >= 1 && opt.k >= 1,
                 "--experts, --n and --k are required with --grouped, got experts=" << opt.experts << " n=" << opt.n
                                                                                   << " k=" << opt.k);
  if (!opt.table.empty()) load_default_grouped_table(opt.table);  // a named table must load
  GroupedProblem p;
  p.form = parse_grouped_form(opt.grouped);
  p.scale = parse_scale_kind(opt.scale);
  p.out = parse_dtype(opt.out, "--out");
  p.experts = opt.experts, p.rows = opt.m, p.n = opt.n, p.k = opt.k;
  p.sa_per_expert = p.scale != ScaleKind::tensor;
  std::printf("%s", explain_grouped(p).c_str());
  return 0;
}

}  // namespace

int run_explain(const ExplainOptions& opt) {
  FP8ROUTE_CHECK(opt.m >= 1, "--m: must be >= 1, got " << opt.m);
  if (!opt.grouped.empty()) return explain_grouped_problem(opt);
  FP8ROUTE_CHECK(opt.experts == 0, "--experts: only with --grouped");
  FP8ROUTE_CHECK(!opt.model.empty() || (opt.n >= 1 && opt.k >= 1),
                 "--n and --k (or --model) are required, got n=" << opt.n << " k=" << opt.k);
  // Without a GPU, the table's plan as measured on its GPU (route/explain_policy.h); every problem
  // explained here is aligned.
  const ExplainPolicy policy = explain_policy();
  if (policy.as_measured)
    std::printf("no GPU here (%s): showing the table's choices as measured, without checking this "
                "machine's backends\n\n", policy.no_gpu_reason.c_str());
  const SupportsFn& supports = policy.supports;
  // A table named with --table must load (Error(io_error) naming it); the default one falls back to
  // the heuristic rules, as scaled_mm does, and explain() says so.
  const Router router = opt.table.empty() ? Router::from_file(default_table_path(), supports)
                                          : Router(load_routing_table(opt.table), supports);
  const ScaleKind scale = parse_scale_kind(opt.scale);
  const DType out = parse_dtype(opt.out, "--out");
  const Accum accum = parse_accum(opt.accum);
  const auto problem = [&](int64_t n, int64_t k) {
    GemmProblem p = make_problem(opt.m, n, k, scale, out);
    p.accum = accum;
    return p;
  };
  if (!opt.model.empty()) {
    const tools::ShapeCatalog cat = tools::load_catalog(tools::default_catalog_path());
    int shown = 0;
    for (const tools::LayerShape& l : tools::at_tp(cat.layers, opt.tp)) {
      if (l.model != opt.model) continue;
      std::printf("== %s/%s tp%d\n%s\n", l.model.c_str(), l.layer.c_str(), l.tp,
                  router.explain(problem(l.n, l.k)).c_str());
      ++shown;
    }
    FP8ROUTE_CHECK(shown > 0, "--model: no layers of '" << opt.model << "' at TP " << opt.tp
                                                       << " in " << tools::default_catalog_path());
    return 0;
  }
  std::printf("%s\n", router.explain(problem(opt.n, opt.k)).c_str());
  return 0;
}

}  // namespace fp8route::cli
