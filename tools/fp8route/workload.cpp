// Workloads of tune and bench (workload.h).

#include "workload.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "bench/args.h"
#include "fp8route/error.h"

namespace fp8route::cli {

std::vector<int64_t> parse_int_list(const std::string& s, const char* option, int64_t min) {
  std::vector<int64_t> out;
  for (const std::string& tok : bench::parse_names(s)) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FP8ROUTE_CHECK(used == tok.size() && v >= min,
                   option << ": expected comma-separated integers >= " << min << ", got '" << tok << "'");
    out.push_back(v);
  }
  FP8ROUTE_CHECK(!out.empty(), option << ": expected at least one value, got '" << s << "'");
  return out;
}

namespace {

// A shape file: one layer per line, "N K [label]" (spaces or commas), '#' starts a comment.
std::vector<bench::LayerShape> load_shape_file(const std::string& path) {
  std::ifstream f(path);
  FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error, path << ": cannot open the shape file (--shapes)");
  std::vector<bench::LayerShape> out;
  std::string line;
  for (int no = 1; std::getline(f, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream is(line);
    std::string first;
    if (!(is >> first)) continue;
    std::istringstream again(line);
    int64_t n = 0, k = 0;
    std::string label;
    FP8ROUTE_CHECK_CAT(bool(again >> n >> k) && n > 0 && k > 0, ErrorCategory::io_error,
                       path << ":" << no << ": expected 'N K [label]' with positive N and K, got '" << line << "'");
    again >> label;
    if (label.empty()) label = std::to_string(n) + "x" + std::to_string(k);
    out.push_back({"shapes", label, "none", 1, n, k});
  }
  FP8ROUTE_CHECK_CAT(!out.empty(), ErrorCategory::io_error, path << ": no shapes in the file");
  return out;
}

}  // namespace

Workload select_workload(const ShapeOptions& opt, const std::string& default_model, bool dedupe) {
  Workload w;
  const std::string catalog_path = opt.catalog.empty() ? bench::default_catalog_path() : opt.catalog;
  std::vector<int64_t> catalog_m;
  std::vector<bench::LayerShape> all;
  if (!opt.shapes.empty()) {
    all = load_shape_file(opt.shapes);
    w.what = opt.shapes;
  } else {
    const bench::ShapeCatalog cat = bench::load_catalog(catalog_path);
    catalog_m = cat.m_grid;
    const std::string model = opt.model.empty() ? default_model : opt.model;
    std::vector<std::string> want = model == "all" ? std::vector<std::string>{} : bench::parse_names(model);
    for (const std::string& name : want) {
      bool known = false;
      for (const bench::LayerShape& l : cat.layers) known = known || l.model == name;
      std::string names;
      for (const bench::LayerShape& l : cat.layers)
        if (names.find(l.model) == std::string::npos) names += (names.empty() ? "" : ", ") + l.model;
      FP8ROUTE_CHECK(known, "--model: no model '" << name << "' in " << catalog_path << " (it has " << names
                                                  << ", or 'all')");
    }
    for (int64_t tp : parse_int_list(opt.tp, "--tp"))
      for (const bench::LayerShape& l : bench::at_tp(cat.layers, static_cast<int>(tp)))
        if (want.empty() || std::find(want.begin(), want.end(), l.model) != want.end()) all.push_back(l);
    w.what = (model == "all" ? std::string("all models") : model) + " tp " + opt.tp;
    FP8ROUTE_CHECK(!all.empty(), "--tp: no layer of " << w.what << " splits evenly at TP " << opt.tp);
  }
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const bench::LayerShape& l : all)
    if (!dedupe || seen.insert({l.n, l.k}).second) w.layers.push_back(l);
  w.m_grid = opt.m.empty() ? (catalog_m.empty() ? bench::load_catalog(catalog_path).m_grid : catalog_m)
                           : parse_int_list(opt.m, "--m");
  for (const std::string& s : bench::parse_names(opt.scale)) w.scales.push_back(parse_scale_kind(s));
  FP8ROUTE_CHECK(!w.scales.empty(), "--scale: expected tensor, row or block, got '" << opt.scale << "'");
  w.out = parse_dtype(opt.out, "--out");
  FP8ROUTE_CHECK(w.out == DType::bf16 || w.out == DType::f16, "--out: bf16 or f16, got " << opt.out);
  return w;
}

bench::MeasureOptions measure_options(const ShapeOptions& opt) {
  bench::MeasureOptions mo;
  mo.reps = opt.reps;
  mo.instances = opt.instances;
  return mo;
}

}  // namespace fp8route::cli
