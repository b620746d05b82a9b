#pragma once
// The layer shapes of shapes/models.json (a copy of the team's catalog): what tests, benchmarks
// and the tuner run on.

#include <cstdint>
#include <string>
#include <vector>

namespace fp8route::bench {

struct LayerShape {
  std::string model, layer;  // "llama-3.1-8b", "down_proj"
  std::string parallel;      // "column" (splits n), "row" (splits k) or "none"
  int tp = 1;
  int64_t n = 0, k = 0;      // after tensor-parallel splitting
};

struct ShapeCatalog {
  std::vector<int64_t> m_grid;
  std::vector<int> tp;
  std::vector<LayerShape> layers;  // every model, at TP 1 only (see at_tp)
};

// The catalog path: $FP8ROUTE_SOURCE_DIR/shapes/models.json when set (a tree copied elsewhere),
// else the source tree this was built from.
std::string default_catalog_path();
// Throws Error(io_error) naming the file and the problem.
ShapeCatalog load_catalog(const std::string& path);
// The layers at tensor-parallel degree tp: 'column' layers split n, 'row' layers split k, 'none'
// stays whole. Layers whose split is not whole are left out.
std::vector<LayerShape> at_tp(const std::vector<LayerShape>& layers, int tp);

}  // namespace fp8route::bench
