#pragma once
// The layer shapes of shapes/models.json (a copy of the team's catalog): what tests, benchmarks
// and the tuner run on; and the shape files of the command-line tool's --shapes.

#include <cstdint>
#include <string>
#include <vector>

namespace fp8route::tools {

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

// The catalog: the first shapes/models.json of data_file_candidates() (include/fp8route/tuning/data_files.h:
// $FP8ROUTE_SOURCE_DIR, beside the library or executable, <prefix>/share/fp8route, the source tree);
// "" when there is none (load_catalog("") then names the places looked in).
std::string default_catalog_path();
// Throws Error(io_error) naming the file, the JSON path and the problem: a missing or mistyped
// field, m_grid or tp empty or out of range (M in [1, 2^31), TP in [1, 1024]), a layer's n or k
// out of [1, 2^31), an unknown parallel kind, a layer name twice in one model.
ShapeCatalog load_catalog(const std::string& path);
// A shape file: one layer per line, "N K [label]" (spaces or commas), '#' starts a comment; N and
// K integers in [1, 2^31). Throws Error(io_error) naming the file and the line.
std::vector<LayerShape> load_shape_file(const std::string& path);
// The layers at tensor-parallel degree tp (>= 1): 'column' layers split n, 'row' layers split k,
// 'none' stays whole. Layers whose split is not whole are left out.
std::vector<LayerShape> at_tp(const std::vector<LayerShape>& layers, int tp);

}  // namespace fp8route::tools
