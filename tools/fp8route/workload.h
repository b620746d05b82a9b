#pragma once
// The problems `tune` and `bench` run: layers (models of the catalog at TP degrees, or a shape
// file), an M grid, scale kinds and the out dtype, from the command-line options.

#include <cstdint>
#include <string>
#include <vector>

#include "fp8route/tuning/measure.h"
#include "common/shapes.h"
#include "commands.h"
#include "fp8route/dtype.h"
#include "fp8route/route.h"
#include "fp8route/scale_kind.h"

namespace fp8route::cli {

struct Workload {
  std::vector<tools::LayerShape> layers;  // distinct (n, k) when deduplicated
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
timing::MeasureOptions measure_options(const ShapeOptions& opt);

// probe_shape (route.h) of every layer and scale kind of the workload at po's M, with a progress
// line per shape: the timings, for Router::with_measurements (bench --probe, probe).
std::vector<MeasurementRecord> probe_workload(const Workload& w, const Router& router, const ProbeOptions& po);

// Ranges of the integer options, checked at full width when parsed (a TP degree narrowed to int
// could become 0 and divide by it).
inline constexpr int64_t kMaxTp = 1024;
inline constexpr int64_t kMaxM = (int64_t{1} << 31) - 1;  // M, N, K: the GEMM's limit (gemm.h)
inline constexpr int64_t kMaxReps = 100000;


}  // namespace fp8route::cli
