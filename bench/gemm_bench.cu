// GEMM benchmark: every backend and config that supports a problem, side by side in one run, on
// the models.json layer shapes and an M grid, with the one method of src/timing/measure.h
// (CUDA-graph replay, operands rotated through >= 3x L2, median of >= 20). Prints a table per
// problem (best config of each backend, the ratio of the best non-cuBLASLt backend to cuBLASLt)
// and writes every measurement as a JSON record (--json) or a CSV row (--csv). --floor adds the
// weight-read floor: a kernel that only reads the N x K weight bytes, timed the same way, as backend
// "floor", config "read". Exit codes as the fp8route tool's (tools/common/exit_codes.h).

#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/args.h"
#include "common/cli_validators.h"
#include "common/exit_codes.h"
#include "common/records.h"
#include "timing/gemm_operands.h"
#include "timing/measure.h"
#include "common/shapes.h"
#include "core/cuda_check.h"
#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"

using namespace fp8route;

namespace {

struct Row {
  std::string model, layer;
  int tp;
  GemmProblem p;
  std::string backend, config;
  timing::Measurement m;
};

constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;  // M, N, K of a GEMM (gemm.h)

// The JSON records' fields, in order, for --csv.
const std::vector<std::string> kCsvColumns = {"model", "layer", "tp", "m", "n", "k", "scale", "out", "bias",
                                              "backend", "config", "us", "min_us", "max_us", "sets", "tflops",
                                              "weight_gbps"};


}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8route GEMM benchmark: every backend and config side by side on models.json shapes"};
  std::string models, tps = "1", ms, scales = "tensor,row,block", backends = tools::timed_backends();
  std::string out_name = "bf16", json_path, csv_path, catalog = tools::default_catalog_path(), shapes;
  bool bias = false, with_floor = false;
  int reps = 20;
  int64_t scale_offset = 0;
  app.add_option("--model", models, "comma-separated model names (default: all in the catalog)");
  app.add_option("--tp", tps, "tensor-parallel degrees, comma-separated")->capture_default_str();
  app.add_option("--m", ms, "M values, comma-separated (default: the catalog's m_grid)");
  app.add_option("--shapes", shapes, "explicit N:K pairs instead of models, e.g. 4096:14336,2112:7168");
  app.add_option("--scale", scales, "scale kinds")
      ->capture_default_str()
      ->check(tools::name_list({"tensor", "row", "block"}));
  app.add_option("--backend", backends,
                 "backends to time (reference is slow; add it by name; 'routed' times the routed scaled_mm)")
      ->capture_default_str()
      ->check(tools::name_list([] {
        std::vector<std::string> names = gemm_backends();
        names.push_back("routed");
        return names;
      }()));
  app.add_option("--scale-offset", scale_offset,
                 "scale_a, scale_b and bias start this many elements into their buffers (a slice of a larger tensor)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--out", out_name, "output dtype bf16 or f16")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "f16"}));
  app.add_flag("--bias", bias, "add a bias vector");
  app.add_flag("--floor", with_floor, "also time a kernel that only reads the weight (backend floor, config read)");
  app.add_option("--reps", reps, "timed graph replays (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--catalog", catalog, "shape catalog")->capture_default_str();
  app.add_option("--json", json_path, "write every measurement here");
  app.add_option("--csv", csv_path, "write every measurement here as CSV: a header row, one row per --json record");
  app.footer("Examples:\n"
             "  gemm_bench --model llama-3.1-8b --m 1,16,128,1024 --json gemm.json\n"
             "  gemm_bench --shapes 4096:14336 --scale row --backend cublaslt,cutlass_sm90,routed --csv gemm.csv\n"
             "\nExit codes: 0 success; 1 a failure while running; 2 an invalid argument or file, or no GPU");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? tools::kExitOk : tools::kExitUsage;  // a bad option, like the checks below
  }

  return tools::run_reporting_errors("gemm_bench", [&] {
    set_autoprobe(false);  // "routed" times the table's routing, the route its row names (route.h)
    // Every option is checked before the GPU is looked for.
    const std::vector<int64_t> tp_list = tools::parse_int_list(tps, "--tp", 1, 1024);
    const std::vector<int64_t> m_list = ms.empty() ? std::vector<int64_t>{} : tools::parse_int_list(ms, "--m", 1, kMaxDim);
    std::vector<std::pair<int64_t, int64_t>> nk_list;
    for (const std::string& nk : tools::parse_names(shapes)) {
      const auto colon = nk.find(':');
      FP8ROUTE_CHECK(colon != std::string::npos, "--shapes: expected N:K, got '" << nk << "'");
      nk_list.emplace_back(tools::parse_int_list(nk.substr(0, colon), "--shapes (N)", 1, kMaxDim).at(0),
                           tools::parse_int_list(nk.substr(colon + 1), "--shapes (K)", 1, kMaxDim).at(0));
    }
    if (!json_path.empty()) tools::check_writable(json_path, "--json");
    if (!csv_path.empty()) tools::check_writable(csv_path, "--csv");
    FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported,
                       "gemm_bench needs a GPU: " << cuda_unavailable_reason());
    const tools::ShapeCatalog cat = tools::load_catalog(catalog);
    // Layers: one per distinct (n, k), labelled by the first model/layer that has it.
    std::vector<tools::LayerShape> layers;
    std::set<std::pair<int64_t, int64_t>> seen;
    if (!shapes.empty()) {
      for (const auto& [n, k] : nk_list)
        layers.push_back({"custom", std::to_string(n) + ":" + std::to_string(k), "none", 1, n, k});
    } else {
      const std::vector<std::string> want = tools::parse_names(models);
      for (int64_t tp : tp_list)
        for (const tools::LayerShape& l : tools::at_tp(cat.layers, static_cast<int>(tp))) {
          if (!want.empty() && std::find(want.begin(), want.end(), l.model) == want.end()) continue;
          if (seen.insert({l.n, l.k}).second) layers.push_back(l);
        }
    }
    const std::vector<int64_t> m_grid = ms.empty() ? cat.m_grid : m_list;
    const DType out = parse_dtype(out_name, "--out");
    timing::MeasureOptions opt;
    opt.reps = reps;

    const DeviceInfo& dev = device_info(0);
    std::printf("fp8route gemm_bench on %s (%d SMs): %zu layer shapes x %zu M x %s scales\n",
                dev.name.c_str(), dev.sm_count, layers.size(), m_grid.size(), scales.c_str());
    std::printf("per problem, each backend's fastest config (vs cublaslt: cuBLASLt's time / its own)\n");
    // Rows fit 120 columns with the longest backend/config name (a routed CUTLASS config, 61).
    std::printf("    %-12s %9s %8s %7s %11s  %s\n", "backend", "us", "TFLOP/s", "GB/s", "vs cublaslt", "config");
    const size_t total = layers.size() * m_grid.size() * tools::parse_names(scales).size();
    size_t done = 0;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Row> rows;
    for (const tools::LayerShape& l : layers) {
      for (int64_t m : m_grid) {
        for (const std::string& sk : tools::parse_names(scales)) {
          const GemmProblem p = make_problem(m, l.n, l.k, parse_scale_kind(sk), out, bias);
          const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), opt);
          const timing::GemmOperandSets o = timing::make_gemm_operands(p, sets, 0x5EEDull * (done + 1), false, scale_offset);
          std::map<std::string, Row> best;  // per backend
          for (const std::string& b : tools::parse_names(backends)) {
            // "routed": the routed entry point, its row's config naming the route it took.
            const bool routed = b == "routed";
            std::vector<std::string> cs = routed ? std::vector<std::string>{""} : gemm_configs(b);
            for (const std::string& c : cs) {
              if (!routed && !gemm_supports(b, c, p).empty()) continue;
              std::string label = c;
              if (routed) {
                const Route rt = default_router()->select(check_scaled_mm(o.args[0]));
                label = rt.backend + "/" + rt.config;
              }
              Row r{l.model, l.layer, l.tp, p, b, label, {}};
              try {
                r.m = timing::measure_gemm(o, routed ? "" : b, c, opt);
              } catch (const Error& e) {
                std::printf("  %s/%s failed on %s: %s\n", b.c_str(), c.c_str(), to_string(p).c_str(), e.what());
                continue;
              }
              rows.push_back(r);
              if (!best.count(b) || r.m.median_us < best[b].m.median_us) best[b] = r;
            }
          }
          if (with_floor) {
            Row r{l.model, l.layer, l.tp, p, "floor", "read", {}};
            r.m = timing::measure_read_floor(o, opt);
            rows.push_back(r);
            best["floor"] = r;
          }
          ++done;
          const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::printf("[%zu/%zu, eta %.0fs] %s/%s tp%d  %s\n", done, total, el / done * (total - done),
                      l.model.c_str(), l.layer.c_str(), l.tp, to_string(p).c_str());
          const double lt = best.count("cublaslt") ? best["cublaslt"].m.median_us : 0;
          for (const auto& [b, r] : best) {
            char vs[32] = "";
            if (lt > 0 && b != "cublaslt") std::snprintf(vs, sizeof vs, "%.3fx", lt / r.m.median_us);
            std::printf("    %-12s %9.2f %8.1f %7.0f %11s  %s\n", b.c_str(), r.m.median_us,
                        timing::tflops(p, r.m.median_us), timing::weight_gbps(p, r.m.median_us), vs, r.config.c_str());
          }
          std::fflush(stdout);
        }
      }
    }
    if (!json_path.empty() || !csv_path.empty()) {
      nlohmann::json j = nlohmann::json::array();
      for (const Row& r : rows)
        j.push_back({{"model", r.model}, {"layer", r.layer}, {"tp", r.tp}, {"m", r.p.m}, {"n", r.p.n},
                     {"k", r.p.k}, {"scale", std::string(name(r.p.scale))}, {"out", std::string(dtype_name(r.p.out))},
                     {"bias", r.p.bias}, {"backend", r.backend}, {"config", r.config},
                     {"us", r.m.median_us}, {"min_us", r.m.min_us}, {"max_us", r.m.max_us}, {"sets", r.m.sets},
                     {"tflops", timing::tflops(r.p, r.m.median_us)}, {"weight_gbps", timing::weight_gbps(r.p, r.m.median_us)}});
      if (!json_path.empty()) tools::write_file_atomically(json_path, tools::json_text(j), "--json");
      if (!csv_path.empty()) tools::write_file_atomically(csv_path, tools::csv_text(j, kCsvColumns), "--csv");
      for (const std::string& path : {json_path, csv_path})
        if (!path.empty()) std::printf("wrote %zu records to %s\n", rows.size(), path.c_str());
    }
    return tools::kExitOk;
  });
}
