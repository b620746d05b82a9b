#pragma once
// The problems `tune` and `bench` run: layers (models of the catalog at TP degrees, or a shape
// file), an M grid, scale kinds and the out dtype, from the command-line options.

#include <cstdint>
#include <string>
#include <vector>

#include "bench/measure.h"
#include "bench/shapes.h"
#include "commands.h"
#include "fp8route/dtype.h"
#include "fp8route/route.h"
#include "fp8route/scale_kind.h"

namespace fp8route::cli {

struct Workload {
  std::vector<bench::LayerShape> layers;  // distinct (n, k) when deduplicated
  std::vector<int64_t> m_grid;
  std::vector<ScaleKind> scales;
  DType out = DType::bf16;
  std::string what;  // "llama-3.1-8b tp1", "shapes.txt", for the header line
};

// default_model: used when opt.model is empty ("all" = every model). dedupe: one layer per
// distinct (n, k), labelled by the first model/layer that has it (tune measures a shape once).
// Throws Error(invalid_argument) naming the option when a value is bad.
Workload select_workload(const ShapeOptions& opt, const std::string& default_model, bool dedupe);

// The measurement options of --reps and --instances (the rest at their defaults).
bench::MeasureOptions measure_options(const ShapeOptions& opt);

// probe_shape (route.h) of every layer and scale kind of the workload at po's M, with a progress
// line per shape: the timings, for Router::with_measurements (bench --probe, probe).
std::vector<MeasurementRecord> probe_workload(const Workload& w, const Router& router, const ProbeOptions& po);

// "1,16,4096" -> {1, 16, 4096}; each value must be an integer >= min.
std::vector<int64_t> parse_int_list(const std::string& s, const char* option, int64_t min = 1);

}  // namespace fp8route::cli
