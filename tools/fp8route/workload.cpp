// Workloads of tune and bench (workload.h).

#include "workload.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "common/args.h"
#include "fp8route/error.h"

namespace fp8route::cli {

Workload select_workload(const ShapeOptions& opt, const std::string& default_model, bool dedupe) {
  Workload w;
  const std::string catalog_path = opt.catalog.empty() ? tools::default_catalog_path() : opt.catalog;
  std::vector<int64_t> catalog_m;
  std::vector<tools::LayerShape> all;
  if (!opt.shapes.empty()) {
    all = tools::load_shape_file(opt.shapes);  // tools/common/shapes.h: the format and its checks
    w.what = opt.shapes;
  } else {
    const tools::ShapeCatalog cat = tools::load_catalog(catalog_path);
    catalog_m = cat.m_grid;
    const std::string model = opt.model.empty() ? default_model : opt.model;
    std::vector<std::string> want = model == "all" ? std::vector<std::string>{} : tools::parse_names(model);
    for (const std::string& name : want) {
      bool known = false;
      for (const tools::LayerShape& l : cat.layers) known = known || l.model == name;
      std::string names;
      for (const tools::LayerShape& l : cat.layers)
        if (names.find(l.model) == std::string::npos) names += (names.empty() ? "" : ", ") + l.model;
      FP8ROUTE_CHECK(known, "--model: no model '" << name << "' in " << catalog_path << " (it has " << names
                                                  << ", or 'all')");
    }
    for (int64_t tp : tools::parse_int_list(opt.tp, "--tp", 1, kMaxTp))
      for (const tools::LayerShape& l : tools::at_tp(cat.layers, static_cast<int>(tp)))
        if (want.empty() || std::find(want.begin(), want.end(), l.model) != want.end()) all.push_back(l);
    w.what = (model == "all" ? std::string("all models") : model) + " tp " + opt.tp;
    FP8ROUTE_CHECK(!all.empty(), "--tp: no layer of " << w.what << " splits evenly at TP " << opt.tp);
  }
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const tools::LayerShape& l : all)
    if (!dedupe || seen.insert({l.n, l.k}).second) w.layers.push_back(l);
  w.m_grid = opt.m.empty() ? (catalog_m.empty() ? tools::load_catalog(catalog_path).m_grid : catalog_m)
                           : tools::parse_int_list(opt.m, "--m", 1, kMaxM);
  for (const std::string& s : tools::parse_names(opt.scale)) w.scales.push_back(parse_scale_kind(s));
  FP8ROUTE_CHECK(!w.scales.empty(), "--scale: expected tensor, row or block, got '" << opt.scale << "'");
  w.out = parse_dtype(opt.out, "--out");
  FP8ROUTE_CHECK(w.out == DType::bf16 || w.out == DType::f16, "--out: bf16 or f16, got " << opt.out);
  return w;
}

timing::MeasureOptions measure_options(const ShapeOptions& opt) {
  FP8ROUTE_CHECK(opt.reps >= 1 && opt.reps <= kMaxReps, "--reps: expected an integer in [1, " << kMaxReps << "], got "
                                                                                            << opt.reps);
  FP8ROUTE_CHECK(opt.instances >= 1, "--instances: expected an integer >= 1, got " << opt.instances);
  timing::MeasureOptions mo;
  mo.reps = opt.reps;
  mo.instances = opt.instances;
  return mo;
}

}  // namespace fp8route::cli
