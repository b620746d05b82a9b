// fp8route: the command-line tool. With no subcommand it runs the main job (for now: info).

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "fp8route/error.h"
#include "fp8route/version.h"
#include "commands.h"

int main(int argc, char** argv) {
  using namespace fp8route::cli;
  CLI::App app{"fp8route " FP8ROUTE_VERSION
               ": measured routing of FP8 quantization and scaled GEMMs on NVIDIA Hopper"};
  app.set_version_flag("--version", FP8ROUTE_VERSION);
  app.require_subcommand(0, 1);

  InfoOptions info;
  CLI::App* info_cmd =
      app.add_subcommand("info", "GPU, SM version, CUDA and cuBLASLt versions, usable components");
  info_cmd->add_flag("--json", info.json, "print the report as JSON");

  ExplainOptions ex;
  CLI::App* explain_cmd = app.add_subcommand(
      "explain", "which backend/config a GEMM routes to, from where (exact, nearest, heuristic), and why");
  explain_cmd->add_option("--m", ex.m, "tokens (rows of a)")->capture_default_str();
  explain_cmd->add_option("--n", ex.n, "output features (rows of the weight)");
  explain_cmd->add_option("--k", ex.k, "input features");
  explain_cmd->add_option("--scale", ex.scale, "tensor, row or block")->capture_default_str();
  explain_cmd->add_option("--out", ex.out, "bf16 or f16")->capture_default_str();
  explain_cmd->add_option("--model", ex.model, "every layer of a shapes/models.json model instead of --n/--k");
  explain_cmd->add_option("--tp", ex.tp, "tensor-parallel degree with --model")->capture_default_str();
  explain_cmd->add_option("--table", ex.table, "routing table (default: $FP8ROUTE_TABLE, else routes/h200.json)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand(explain_cmd)) return run_explain(ex);
    if (app.got_subcommand(info_cmd) || app.get_subcommands().empty()) return run_info(info);
  } catch (const fp8route::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8route: %s\n", e.what());
    return 1;
  }
  return 0;
}
