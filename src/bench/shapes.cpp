#include "bench/shapes.h"

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fp8route/error.h"

namespace fp8route::bench {

std::string default_catalog_path() {
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  return std::string(env ? env : FP8ROUTE_SOURCE_DIR) + "/shapes/models.json";
}

ShapeCatalog load_catalog(const std::string& path) {
  std::ifstream f(path);
  FP8ROUTE_CHECK_CAT(f.good(), ErrorCategory::io_error, path << ": cannot open the shape catalog");
  ShapeCatalog c;
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    c.m_grid = j.at("m_grid").get<std::vector<int64_t>>();
    c.tp = j.at("tp").get<std::vector<int>>();
    for (const auto& [model, layers] : j.at("models").items()) {
      for (const auto& l : layers) {
        LayerShape s{model, l.at("name").get<std::string>(), l.at("parallel").get<std::string>(), 1,
                     l.at("n").get<int64_t>(), l.at("k").get<int64_t>()};
        FP8ROUTE_CHECK_CAT(s.parallel == "column" || s.parallel == "row" || s.parallel == "none",
                           ErrorCategory::io_error,
                           path << ": " << model << "/" << s.layer
                                << ": parallel must be column, row or none, got '" << s.parallel << "'");
        FP8ROUTE_CHECK_CAT(s.n > 0 && s.k > 0, ErrorCategory::io_error,
                           path << ": " << model << "/" << s.layer << ": n and k must be positive");
        c.layers.push_back(std::move(s));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    FP8ROUTE_FAIL(ErrorCategory::io_error, path << ": not a valid shape catalog: " << e.what());
  }
  return c;
}

std::vector<LayerShape> at_tp(const std::vector<LayerShape>& layers, int tp) {
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

}  // namespace fp8route::bench
