#pragma once
// Subcommands of the fp8route tool. Each returns the process exit code.

#include <cstdint>
#include <string>

#include "common/args.h"

namespace fp8route::cli {

struct InfoOptions {
  bool json = false;
};
int run_info(const InfoOptions& opt);

struct ExplainOptions {
  int64_t m = 1, n = 0, k = 0;
  std::string scale = "row", out = "bf16", table, model;
  std::string accum = "fast";  // the accumulation class asked for (Accum in gemm.h)
  int tp = 1;
  std::string grouped;  // "masked" or "contiguous": a grouped GEMM of `experts` experts (rows = m)
  int64_t experts = 0;
};
int run_explain(const ExplainOptions& opt);

}  // namespace fp8route::cli

namespace fp8route::cli {

// What tune and bench run on: models of a catalog at TP degrees, or a shape file.
struct ShapeOptions {
  std::string model;          // comma-separated names, "all", or "" (the command's default)
  std::string tp = "1";       // comma-separated TP degrees
  std::string m;              // comma-separated M values ("" = the catalog's m_grid)
  std::string shapes;         // a shape file instead of models (see README)
  std::string scale = "tensor,row,block";
  std::string out = "bf16";
  std::string catalog;        // "" = shapes/models.json of the project
  int reps = 20;
  int instances = 1;          // graphs captured per candidate (MeasureOptions::instances)
};

// Graph instances of the finer timings: bench's re-check of a problem routed > 3% behind and tune's
// final round. One number, so that a config whose graph instances run at different speeds (stream-K,
// some cuBLASLt kernels) is judged alike by the tune that builds a table and the bench that checks it.
inline constexpr int kFineInstances = 16;

struct TuneOptions {
  ShapeOptions shapes;
  std::string table_path = "fp8route-table.json";  // the routing table written
  std::string raw_path;                             // "" = <table_path without .json>.raw.jsonl
  std::string backends = tools::timed_backends();
  int screen_pct = 25;      // > 0: a quick first round drops configs more than this % behind (timing::screen_gemms)
  int final_pct = 5;        // > 0: the configs within this % of the best are timed again (timing::final_round) ...
  int final_instances = kFineInstances;  // ... with this many graph instances (when more than --instances)
  bool fresh = false;       // ignore (and overwrite) an existing raw file instead of resuming from it
  bool build_only = false;  // measure nothing: build the table from the raw file (no GPU needed)
};
int run_tune(const TuneOptions& opt);

struct BenchOptions {
  ShapeOptions shapes;
  std::string table;       // routing table for the routed GEMM ("" = the default table)
  std::string configs = "table";  // per backend: "table" (its best configs by the table) or "all"
  std::string backends = tools::timed_backends();
  std::string json_path, plot_path, csv_path;  // --json, --plot, --csv
  int screen_pct = 25;     // > 0: a quick first round drops configs more than this % behind (timing::screen_gemms)
  std::string probe = "off";  // off, unseen or always: probe_shape (route.h) every shape first, route by it
  int probe_top = 5;          // ProbeOptions::top
  int recheck_instances = kFineInstances; // > 0: a problem where routed is > 3% behind the best single backend is timed
                              // again (routed and the choices not slower than it) with this many graph instances
  bool main_job = false;   // the tool's main job: explain the plan instead when there is no GPU
};
int run_bench(const BenchOptions& opt);

struct ProbeCommandOptions {
  ShapeOptions shapes;    // --model or --shapes required; --m "" = ProbeOptions' grid (the catalog's M to 4096)
  std::string table;      // the input table ("" = the default table)
  std::string out_table;  // the table written: the input with the probe's timings merged
  int top = 5;            // ProbeOptions::top
  bool always = false;    // ProbeOptions::always
};
int run_probe(const ProbeCommandOptions& opt);

struct CheckOptions {
  bool quick = false;
};
int run_check(const CheckOptions& opt);

// table build (table.cpp): a routing table from a manifest of measurement files.
struct TableOptions {
  std::string manifest;  // the sources manifest (routes/h200.sources.json)
  std::string table;     // the routing table written
  std::string records;   // "" or where the gathered records are written too
};
int run_table(const TableOptions& opt);

// cache show|clear (cache.cpp): the probe cache of automatic probing (route.h).
struct CacheOptions {
  bool clear = false;  // clear: remove every file; else show them
};
int run_cache(const CacheOptions& opt);

}  // namespace fp8route::cli
