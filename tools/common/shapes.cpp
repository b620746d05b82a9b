#include "common/shapes.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "fp8route/tuning/json_reader.h"
#include "fp8route/error.h"
#include "fp8route/tuning/data_files.h"

namespace fp8route::tools {

namespace {

using Json = nlohmann::json;
using json_reader::element;
using json_reader::kMaxDim;
using json_reader::member;

// The largest tensor-parallel degree a catalog may list (the command line's --tp takes as many).
constexpr int64_t kMaxTp = 1024;

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error,
                     json_reader::printable(path, 1000) << ": cannot open the " << what);
  std::stringstream buf;
  buf << f.rdbuf();
  return buf.str();
}

}  // namespace

std::string default_catalog_path() { return find_data_file("shapes/models.json"); }

ShapeCatalog load_catalog(const std::string& path) {
  if (path.empty())
    FP8ROUTE_FAIL(ErrorCategory::io_error, "shape catalog: " << data_file_not_found("shapes/models.json"));
  const json_reader::Reader rd("shape catalog " + path);
  const Json j = rd.parse(read_file(path, "shape catalog"));
  rd.object(j, "");
  ShapeCatalog c;
  const Json& m_grid = rd.array(rd.field(j, "m_grid", ""), "m_grid", 1);
  for (size_t i = 0; i < m_grid.size(); ++i)
    c.m_grid.push_back(rd.integer(m_grid[i], element("m_grid", i), 1, kMaxDim));
  const Json& tp = rd.array(rd.field(j, "tp", ""), "tp", 1);
  for (size_t i = 0; i < tp.size(); ++i)
    c.tp.push_back(static_cast<int>(rd.integer(tp[i], element("tp", i), 1, kMaxTp)));
  const Json& models = rd.object(rd.field(j, "models", ""), "models");
  for (const auto& [model, layers] : models.items()) {
    const std::string wm = member("models", model);
    rd.array(layers, wm);
    const size_t first = c.layers.size();
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string w = element(wm, i);
      const Json& l = rd.object(layers[i], w);
      LayerShape s{model, rd.str(rd.field(l, "name", w), member(w, "name"), true),
                   rd.str(rd.field(l, "parallel", w), member(w, "parallel")), 1,
                   rd.integer(rd.field(l, "n", w), member(w, "n"), 1, kMaxDim),
                   rd.integer(rd.field(l, "k", w), member(w, "k"), 1, kMaxDim)};
      if (s.parallel != "column" && s.parallel != "row" && s.parallel != "none")
        rd.fail(member(w, "parallel"), "expected column, row or none, got '" + s.parallel + "'");
      const auto same = std::find_if(c.layers.begin() + static_cast<std::ptrdiff_t>(first), c.layers.end(),
                                     [&](const LayerShape& x) { return x.layer == s.layer; });
      if (same != c.layers.end())
        rd.fail(member(w, "name"), "layer '" + s.layer + "' twice in " + model + " (also " +
                                       element(wm, static_cast<size_t>(same - c.layers.begin()) - first) + ")");
      c.layers.push_back(std::move(s));
    }
  }
  return c;
}

std::vector<LayerShape> load_shape_file(const std::string& path) {
  std::istringstream in(read_file(path, "shape file (--shapes)"));
  const std::string file = json_reader::printable(path, 1000);
  std::vector<LayerShape> out;
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream is(line);
    std::vector<std::string> tok;
    for (std::string t; is >> t;) tok.push_back(t);
    if (tok.empty()) continue;
    // Whole tokens only: "4096.5" or "1e3" is not a dimension (operator>> would stop at the '.' and
    // take the rest for the label).
    const auto dim = [&](size_t i) -> int64_t {
      int64_t v = 0;
      if (i >= tok.size()) return 0;
      const char* end = tok[i].data() + tok[i].size();
      const auto [ptr, ec] = std::from_chars(tok[i].data(), end, v);
      return ec == std::errc() && ptr == end && v >= 1 && v <= kMaxDim ? v : 0;
    };
    const int64_t n = dim(0), k = dim(1);
    FP8ROUTE_CHECK_CAT(n > 0 && k > 0, ErrorCategory::io_error,
                       file << ":" << no << ": expected 'N K [label]' with N and K integers in [1, " << kMaxDim
                            << "], got '" << json_reader::printable(line) << "'");
    std::string label = tok.size() > 2 ? tok[2] : std::to_string(n) + "x" + std::to_string(k);
    // Labels go into bench's JSON output, which takes UTF-8 only.
    FP8ROUTE_CHECK_CAT(json_reader::printable(label) == label, ErrorCategory::io_error,
                       file << ":" << no << ": the label '" << json_reader::printable(label) << "' is not UTF-8 text");
    out.push_back({"shapes", label, "none", 1, n, k});
  }
  FP8ROUTE_CHECK_CAT(!out.empty(), ErrorCategory::io_error, file << ": no shapes in the file");
  return out;
}

std::vector<LayerShape> at_tp(const std::vector<LayerShape>& layers, int tp) {
  FP8ROUTE_CHECK(tp >= 1, "tp: expected a tensor-parallel degree >= 1, got " << tp);
  std::vector<LayerShape> out;
  for (LayerShape s : layers) {
    s.tp = tp;
    if (s.parallel == "column") {
      if (s.n % tp) continue;
      s.n /= tp;
    } else if (s.parallel == "row") {
      if (s.k % tp) continue;
      s.k /= tp;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace fp8route::tools
