// fp8route: the command-line tool. With no subcommand it runs the main job: `bench` on
// llama-3.1-8b at TP 1 over the catalog's M grid (with no GPU: the routing plan of the table).

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "common/args.h"
#include "common/cli_validators.h"
#include "common/exit_codes.h"
#include "commands.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "fp8route/version.h"
#include "workload.h"

namespace {

using fp8route::cli::kMaxM;
using fp8route::cli::kMaxReps;
using fp8route::cli::kMaxTp;
using fp8route::tools::name_list;

// A comma-separated list of integers in [lo, hi], checked when parsed (each value at full width).
CLI::Validator int_list(int64_t lo, int64_t hi) {
  return CLI::Validator([lo, hi](std::string& s) { return fp8route::tools::int_list_error(s, lo, hi); },
                        "INT[,INT...] in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// Usage examples at the end of a command's --help (each runs as shown; docs/cli.md has more).
void examples(CLI::App* cmd, const std::string& lines) { cmd->footer("Examples:\n" + lines); }

void add_shape_options(CLI::App* cmd, fp8route::cli::ShapeOptions& s, const char* default_model) {
  cmd->add_option("--model", s.model, std::string("comma-separated models of the catalog, or all (default: ") +
                                          default_model + ")");
  cmd->add_option("--tp", s.tp, "tensor-parallel degrees, comma-separated")
      ->capture_default_str()
      ->check(int_list(1, kMaxTp));
  cmd->add_option("--m", s.m, "M values, comma-separated (default: the catalog's m_grid, 1..16384)")
      ->check(int_list(1, kMaxM));
  cmd->add_option("--shapes", s.shapes, "a shape file instead of models: one 'N K [label]' per line");
  cmd->add_option("--scale", s.scale, "scale kinds, comma-separated: tensor, row, block")
      ->capture_default_str()
      ->check(name_list({"tensor", "row", "block"}));
  cmd->add_option("--out", s.out, "output dtype: bf16 or f16")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f16"}));
  cmd->add_option("--catalog", s.catalog, "shape catalog (default: shapes/models.json of the project)");
  cmd->add_option("--reps", s.reps, "timed graph replays per measurement (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, static_cast<int>(kMaxReps)));
  cmd->add_option("--instances", s.instances,
                  "capture each candidate into this many CUDA graphs and average their medians (stream-K "
                  "graphs run at one of two speeds per instance)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
}

void add_screen_option(CLI::App* cmd, int& pct, const std::string& also) {
  cmd->add_option("--screen", pct,
                  "time every config once quickly first (1 graph instance, 5 replays) and measure fully only " + also +
                      "each backend's fastest and the configs within this % of the fastest (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fp8route::cli;
  CLI::App app{"fp8route " FP8ROUTE_VERSION
               ": measured routing of FP8 quantization and scaled GEMMs on NVIDIA Hopper.\n"
               "With no subcommand: bench llama-3.1-8b TP1 (routed vs each backend alone); without a GPU, the "
               "routing plan of the shipped table."};
  app.set_version_flag("--version", FP8ROUTE_VERSION);
  app.require_subcommand(0, 1);

  InfoOptions info;
  CLI::App* info_cmd =
      app.add_subcommand("info", "GPU, SM version, CUDA and cuBLASLt versions, usable components");
  info_cmd->add_flag("--json", info.json, "print the report as JSON");

  ExplainOptions ex;
  CLI::App* explain_cmd = app.add_subcommand(
      "explain", "which backend/config a GEMM routes to, from where (exact, nearest, heuristic), and why");
  explain_cmd->add_option("--m", ex.m, "tokens (rows of a)")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxM));
  explain_cmd->add_option("--n", ex.n, "output features (rows of the weight)")->check(CLI::Range(int64_t{1}, kMaxM));
  explain_cmd->add_option("--k", ex.k, "input features")->check(CLI::Range(int64_t{1}, kMaxM));
  explain_cmd->add_option("--scale", ex.scale, "tensor, row or block")
      ->capture_default_str()
      ->check(CLI::IsMember({"tensor", "row", "block"}));
  explain_cmd->add_option("--out", ex.out, "bf16 or f16")->capture_default_str()->check(CLI::IsMember({"bf16", "f16"}));
  explain_cmd->add_option("--accum", ex.accum,
                          "fast (every config) or precise (only configs that sum each 128 of K in fp32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fast", "precise"}));
  explain_cmd->add_option("--model", ex.model, "every layer of a shapes/models.json model instead of --n/--k");
  explain_cmd->add_option("--tp", ex.tp, "tensor-parallel degree with --model")
      ->capture_default_str()
      ->check(CLI::Range(1, static_cast<int>(kMaxTp)));
  explain_cmd->add_option("--table", ex.table, "routing table (default: $FP8ROUTE_TABLE, else routes/h200.json)");
  explain_cmd->add_option("--grouped", ex.grouped,
                          "a grouped GEMM instead: masked (--m is M_max) or contiguous (--m is M_total); "
                          "--table names a grouped routing table")
      ->check(CLI::IsMember({"masked", "contiguous"}));
  explain_cmd->add_option("--experts", ex.experts, "experts (E) of the grouped GEMM")
      ->check(CLI::Range(int64_t{1}, kMaxM));

  BenchOptions bench;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "the routed GEMM against each backend alone, side by side (CUDA-graph replay, cold L2)");
  add_shape_options(bench_cmd, bench.shapes, "llama-3.1-8b");
  bench_cmd->add_option("--table", bench.table, "routing table for the routed GEMM (default: $FP8ROUTE_TABLE, else routes/h200.json)");
  bench_cmd->add_option("--configs", bench.configs,
                        "a backend alone at: table (its best configs by the table, + cuBLASLt's heuristic) or all "
                        "(every config it has; slower)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "all"}));
  add_screen_option(bench_cmd, bench.screen_pct, "the routed call, ");
  bench_cmd->add_option("--probe", bench.probe,
                        "first time each shape's routing candidates on this GPU and route by those times "
                        "(LinearPlan::probe): off, unseen (the M the table has no exact entry for) or always")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "unseen", "always"}));
  bench_cmd->add_option("--probe-top", bench.probe_top, "with --probe: the table's candidates timed per M")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  bench_cmd->add_option("--recheck", bench.recheck_instances,
                        "a problem where routed is more than 3% slower than the best single backend is timed again: "
                        "routed and every config not slower than it, side by side, with this many graph instances; "
                        "the re-check's times are reported, the first pass's are printed too (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  bench_cmd->add_option("--backend", bench.backends, "backends to compare with")
      ->capture_default_str()
      ->check(name_list(fp8route::gemm_backends()));
  bench_cmd->add_option("--json", bench.json_path, "write one record per (problem, backend) and the routed one");
  bench_cmd->add_option("--csv", bench.csv_path, "write the --json records as CSV: a header row, one row per record");
  bench_cmd->add_option("--plot", bench.plot_path, "draw time against M per layer to this PNG (needs matplotlib)");

  TuneOptions tune;
  CLI::App* tune_cmd = app.add_subcommand(
      "tune", "measure every supported backend/config on a catalog's shapes and write a routing table");
  add_shape_options(tune_cmd, tune.shapes, "all");
  tune.shapes.tp = "1,2,4,8";
  tune_cmd->get_option("--tp")->default_str("1,2,4,8");
  tune_cmd->add_option("-o,--table", tune.table_path, "routing table to write")->capture_default_str();
  tune_cmd->add_option("--raw", tune.raw_path, "raw measurements, JSON lines, appended as problems finish "
                                               "(default: the table's name with .raw.jsonl)");
  tune_cmd->add_option("--backend", tune.backends, "backends to measure")
      ->capture_default_str()
      ->check(name_list(fp8route::gemm_backends()));
  add_screen_option(tune_cmd, tune.screen_pct, "");
  tune_cmd->add_option("--final", tune.final_pct,
                       "time the configs within this % of the best once more, side by side, with --final-instances "
                       "graph instances; their times in the table come from that round, and the configs not timed "
                       "again rank at least this % behind its fastest (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  tune_cmd->add_option("--final-instances", tune.final_instances,
                       "graph instances of the --final round (it is skipped when --instances is as many)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  tune_cmd->add_flag("--fresh", tune.fresh, "start over instead of resuming from the raw file");
  tune_cmd->add_flag("--build-only", tune.build_only, "measure nothing: write the table from the raw file (no GPU needed)");

  ProbeCommandOptions probe;
  CLI::App* probe_cmd = app.add_subcommand(
      "probe", "time a model's routing candidates on this GPU and write a routing table that routes by them");
  add_shape_options(probe_cmd, probe.shapes, "none: --model or --shapes is required");
  probe.shapes.instances = 4;  // ProbeOptions' default
  probe_cmd->get_option("--instances")->default_str("4");
  probe_cmd->get_option("--m")->description("M values, comma-separated (default: the catalog's m_grid up to 4096)");
  probe_cmd->add_option("--table", probe.table, "the input table (default: $FP8ROUTE_TABLE, else routes/h200.json)");
  probe_cmd->add_option("-o,--out-table", probe.out_table, "the routing table to write: the input with the timings merged")
      ->required();
  probe_cmd->add_option("--top", probe.top, "the table's candidates timed per M (with every cuBLASLt and skinny "
                                            "config and the heuristic's choice)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  probe_cmd->add_flag("--always", probe.always,
                      "time every M, not only those the table has no exact entry for (settles this GPU's near-ties)");

  CheckOptions check;
  CLI::App* check_cmd = app.add_subcommand("check", "quick correctness self-test of every backend on this GPU");
  check_cmd->add_flag("--quick", check.quick, "fewer shapes");

  TableOptions table;
  CLI::App* table_cmd = app.add_subcommand("table", "routing tables from measurement files (no GPU needed)");
  table_cmd->require_subcommand(1);
  CLI::App* table_build = table_cmd->add_subcommand(
      "build", "build a routing table from a manifest of measurement files, in the order they apply");
  table_build->add_option("manifest", table.manifest, "the manifest (routes/h200.sources.json builds routes/h200.json)")
      ->required();
  table_build->add_option("-o,--table", table.table, "routing table to write")->required();
  table_build->add_option("--records", table.records, "also write the measurements it was built from, one a line");

  CacheOptions cache;
  CLI::App* cache_cmd = app.add_subcommand(
      "cache", "the probe cache of automatic probing: what it holds, or clear it (no GPU needed)");
  cache_cmd->require_subcommand(1);
  CLI::App* cache_show = cache_cmd->add_subcommand("show", "every cached probe: shape, machine, date, cost, timings");
  CLI::App* cache_clear = cache_cmd->add_subcommand("clear", "remove every cached probe");

  examples(&app,
           "  fp8route                                   # the main job (no GPU: the routing plan)\n"
           "  fp8route info\n"
           "  fp8route explain --m 16 --n 4096 --k 4096 --scale row\n"
           "\nExit codes: 0 success; 1 a failure while running (a check, a measurement, CUDA); 2 an invalid\n"
           "argument or file, or no GPU for a command that needs one; 3 bench --plot could not draw.\n"
           "Every command and flag: docs/cli.md");
  examples(info_cmd, "  fp8route info\n  fp8route info --json\n");
  examples(explain_cmd,
           "  fp8route explain --m 16 --n 4096 --k 4096 --scale row\n"
           "  fp8route explain --model llama-3.1-70b --tp 8 --m 1 --scale block\n"
           "  fp8route explain --grouped masked --experts 32 --m 8 --n 4096 --k 7168 --scale block\n");
  examples(bench_cmd,
           "  fp8route bench --model llama-3.1-8b --m 1,16,4096\n"
           "  fp8route bench --model llama-3.1-70b --tp 8 --scale row --json b.json --csv b.csv\n"
           "  fp8route bench --model qwen2.5-72b --probe unseen\n");
  examples(tune_cmd,
           "  fp8route tune --model llama-3.1-70b --tp 8 -o my-h200.json    # resumable (my-h200.raw.jsonl)\n"
           "  fp8route tune --build-only -o my-h200.json                    # the table again from the raw file\n");
  examples(probe_cmd,
           "  fp8route probe --model llama-3.1-70b --tp 8 -o probed.json\n"
           "  FP8ROUTE_TABLE=probed.json fp8route bench --model llama-3.1-70b --tp 8\n");
  examples(check_cmd, "  fp8route check --quick\n");
  examples(table_cmd, "  fp8route table build routes/h200.sources.json -o h200.json\n");
  examples(cache_cmd,
           "  fp8route cache show\n"
           "  FP8ROUTE_CACHE_DIR=/tmp/fp8route-cache fp8route cache clear    # the cache of another folder\n");
  examples(cache_show, "  fp8route cache show\n  FP8ROUTE_CACHE_DIR=/tmp/fp8route-cache fp8route cache show\n");
  examples(cache_clear, "  FP8ROUTE_CACHE_DIR=/tmp/fp8route-cache fp8route cache clear\n");
  examples(table_build,
           "  fp8route table build routes/h200.sources.json -o h200.json    # the shipped table, from its runs\n"
           "  fp8route table build routes/h200.sources.json -o h200.json --records h200-measurements.json\n");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a bad option is an invalid argument like any other, with
    // CLI11's message naming it.
    return app.exit(e) == 0 ? fp8route::tools::kExitOk : fp8route::tools::kExitUsage;
  }
  return fp8route::tools::run_reporting_errors("fp8route", [&] {
    // The commands measure and report routing by the table they are given (bench --probe and probe
    // time shapes when asked): no automatic probing, and nothing written to the probe cache.
    fp8route::set_autoprobe(false);
    if (app.got_subcommand(explain_cmd)) return run_explain(ex);
    if (app.got_subcommand(info_cmd)) return run_info(info);
    if (app.got_subcommand(bench_cmd)) return run_bench(bench);
    if (app.got_subcommand(tune_cmd)) return run_tune(tune);
    if (app.got_subcommand(check_cmd)) return run_check(check);
    if (app.got_subcommand(probe_cmd)) return run_probe(probe);
    if (app.got_subcommand(table_cmd)) return run_table(table);
    if (app.got_subcommand(cache_cmd)) {
      cache.clear = cache_clear->parsed();
      return run_cache(cache);
    }
    BenchOptions main_job;
    main_job.main_job = true;
    return run_bench(main_job);
  });
}
