// Quantization benchmark: fp8route's kernels on bf16 activations, timed with the one method of
// src/timing/measure.h, next to a device-to-device copy of the same bytes (the bandwidth ceiling).
// Writes JSON records that bench/quant_table.py merges with bench/quant_torch.py's (--json), or the
// same as CSV rows (--csv). Exit codes as the fp8route tool's (tools/common/exit_codes.h).

#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/args.h"
#include "common/cli_validators.h"
#include "common/exit_codes.h"
#include "common/records.h"
#include "fp8route/tuning/gemm_operands.h"
#include "fp8route/tuning/measure.h"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/quant.h"
#include "fp8route/reference.h"
#include "fp8route/tuning/quant_knobs.h"

using namespace fp8route;

namespace {

using tools::parse_list;
using tools::parse_names;

GroupQuantSpec layout_spec(const std::string& layout) {
  GroupQuantSpec s;  // g128 e4m3
  if (layout == "ue8m0_tma") {
    s.rounding = ScaleRounding::pow2;
    s.storage = ScaleStorage::ue8m0_packed;
    s.layout = ScaleLayout::col_major_tma;
  } else {
    s.layout = parse_layout(layout);
  }
  return s;
}

// `sets` copies of random bf16 data of `elems` elements.
std::vector<DeviceBuffer> random_inputs(int64_t elems, int sets, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> host(static_cast<size_t>(elems));
  for (auto& h : host) h = ref::f32_to_bf16(nd(rng));
  std::vector<DeviceBuffer> v;
  for (int i = 0; i < sets; ++i) {
    v.emplace_back(static_cast<size_t>(elems * 2));
    FP8ROUTE_CUDA_CHECK(cudaMemcpy(v.back().data(), host.data(), elems * 2, cudaMemcpyHostToDevice));
  }
  return v;
}

// The JSON records' fields, in order, for --csv.
const std::vector<std::string> kCsvColumns = {"op", "layout", "T", "H", "impl", "us", "us_min", "us_max", "gbps",
                                              "bytes", "graph", "sets", "reps", "gpu", "items", "fp8route"};

struct Record {
  std::string op, layout;
  int64_t T, H, bytes;
  timing::Measurement m;
};

// A comma-separated list of integers in [lo, hi], checked when parsed, each at full width.
CLI::Validator int_list(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        const std::string why = tools::int_list_error(s, lo, hi);
        return why.empty() && parse_names(s).empty() ? "expected at least one integer in " + range : why;
      },
      "INT[,INT...] in " + range);
}

int run(int argc, char** argv) {
  CLI::App app{"fp8route quantization benchmark (bf16 -> e4m3, group 128)"};
  std::string ops = "floor,group,silu_group,token,tensor_dynamic", layouts = "row_major,col_major,col_major_tma,ue8m0_tma";
  std::string ts = "1,2,4,8,16,32,64,16384", hs = "4096,7168", json_path, csv_path;
  bool quick = false;
  int reps = 20, items = 0;
  app.add_option("--ops", ops, "comma list of group, silu_group, token, tensor_dynamic, floor (a kernel that "
                 "reads the bf16 [T, H] and writes T * H bytes, no arithmetic: the floor for these bytes)")
      ->check(tools::name_list({"floor", "group", "silu_group", "token", "tensor_dynamic"}));
  app.add_option("--layouts", layouts, "layouts for op group: row_major, col_major, col_major_tma, ue8m0_tma")
      ->check(tools::name_list({"row_major", "col_major", "col_major_tma", "ue8m0_tma"}));
  constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
  app.add_option("--T", ts, "comma list of token counts")->check(int_list(1, kMaxDim));
  app.add_option("--H", hs, "comma list of widths (output width for silu_group)")->check(int_list(16, kMaxDim));
  app.add_option("--reps", reps, "timed graph replays (median reported), >= 20")->check(CLI::Range(1, 100000));
  app.add_option("--json", json_path, "write one record per (op, layout, T, H)");
  app.add_option("--csv", csv_path, "write the --json records as CSV: a header row, one row per record");
  app.add_option("--items", items, "group kernel items per thread: 0 = automatic rule, 1 or 4 forced")
      ->check(CLI::IsMember({0, 1, 4}));
  int group_threads = 0;
  app.add_option("--group-threads", group_threads,
                 "group kernel threads per block, at most: 0 = the rule (256), or 32..256")
      ->check(CLI::Range(0, 256));
  int group_vec = 0;
  app.add_option("--group-vec", group_vec,
                 "elements per lane of the group kernel's small plain launches: 0 = the rule, 4 or 8")
      ->check(CLI::IsMember({0, 4, 8}));
  int64_t cluster_max = -1;
  app.add_option("--tensor-cluster-max", cluster_max,
                 "tensor_dynamic: largest input (8-element vectors) run as one cluster launch; "
                 "-1 = the library's rule, 0 = never")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 40));
  app.add_flag("--quick", quick, "T in 1,64,16384 and H 7168 only");
  app.footer("Examples:\n"
             "  quant_bench --quick --json quant.json\n"
             "  quant_bench --ops group --layouts ue8m0_tma --T 1,64 --H 7168 --csv quant.csv\n"
             "\nExit codes: 0 success; 1 a failure while running; 2 an invalid argument or file, or no GPU");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? tools::kExitOk : tools::kExitUsage;  // a bad option, like the checks below
  }
  if (quick) {
    ts = "1,64,16384";
    hs = "7168";
  }
  if (!json_path.empty()) tools::check_writable(json_path, "--json");
  if (!csv_path.empty()) tools::check_writable(csv_path, "--csv");
  FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported,
                     "quant_bench needs a GPU: " << cuda_unavailable_reason());
  const DeviceInfo& dev = device_info(0);
  detail::force_group_items(items);
  detail::force_group_threads(group_threads);
  detail::force_group_vec(group_vec);
  if (cluster_max >= 0) detail::set_tensor_cluster_max_vecs(cluster_max);
  timing::MeasureOptions opt;
  opt.reps = std::max(reps, 20);
  std::mt19937_64 rng(2026);
  std::vector<Record> records;

  // Copy ceiling: 256 MiB device-to-device, bytes read + written.
  {
    const int64_t bytes = 256ll << 20;
    std::vector<DeviceBuffer> src, dst;
    for (int i = 0; i < 3; ++i) {
      src.emplace_back(bytes);
      dst.emplace_back(bytes);
      FP8ROUTE_CUDA_CHECK(cudaMemset(src.back().data(), 1, bytes));
    }
    auto m = timing::measure([&](int i, cudaStream_t st) {
      FP8ROUTE_CUDA_CHECK(cudaMemcpyAsync(dst[i].data(), src[i].data(), bytes, cudaMemcpyDeviceToDevice, st));
    }, 3, opt);
    records.push_back({"copy", "", 0, 0, 2 * bytes, m});
    std::printf("%s, %d SMs; copy 256 MiB: %.1f us = %.0f GB/s (read + written)\n", dev.name.c_str(),
                dev.sm_count, m.median_us, 2.0 * bytes / m.median_us / 1e3);
  }
  const double copy_gbps = 2.0 * (256ll << 20) / records[0].m.median_us / 1e3;

  std::printf("%-15s %-14s %6s %6s %10s %9s %7s\n", "op", "layout", "T", "H", "us", "GB/s", "%copy");
  for (const std::string& op : parse_names(ops))
    for (const std::string& layout : op == "group" ? parse_names(layouts) : std::vector<std::string>{"row_major"})
      for (int64_t H : parse_list(hs))
        for (int64_t T : parse_list(ts)) {
          const bool fused = op == "silu_group";
          const int64_t in_elems = T * H * (fused ? 2 : 1);
          const GroupQuantSpec spec = layout_spec(layout);
          const QuantLayout L = quant_layout(spec, T, H);
          int64_t scale_bytes = 0;
          if (op == "group" || fused) scale_bytes = L.scale_bytes;
          else if (op == "token") scale_bytes = T * 4;
          else if (op == "floor") scale_bytes = 0;
          else scale_bytes = 4;
          const int64_t bytes = in_elems * 2 + T * H + scale_bytes;
          const int sets = timing::rotation_sets(bytes, opt);
          auto xs = random_inputs(in_elems, sets, rng);
          std::vector<DeviceBuffer> qs, ss;
          for (int i = 0; i < sets; ++i) {
            qs.emplace_back(static_cast<size_t>(T * H));
            ss.emplace_back(static_cast<size_t>(std::max<int64_t>(scale_bytes, 16)));
          }
          auto enqueue = [&](int i, cudaStream_t st) {
            const TensorView x = TensorView::contiguous(xs[i].data(), DType::bf16, {T, fused ? 2 * H : H});
            const TensorView q = TensorView::contiguous(qs[i].data(), DType::e4m3, {T, H});
            if (op == "group" || fused) {
              TensorView s = TensorView::contiguous(ss[i].data(), L.scale_dtype, {L.scale_shape[0], L.scale_shape[1]});
              if (fused) silu_and_mul_per_token_group_quant(x, spec, q, s, st);
              else per_token_group_quant(x, spec, q, s, st);
            } else if (op == "floor") {
              timing::enqueue_pass_floor(xs[i].data(), in_elems * 2, qs[i].data(), st);
            } else if (op == "token") {
              per_token_quant(x, q, TensorView::contiguous(ss[i].data(), DType::f32, {T}), ScaleRounding::none, st);
            } else {
              per_tensor_quant_dynamic(x, q, TensorView::contiguous(ss[i].data(), DType::f32, {1}), st);
            }
          };
          const timing::Measurement m = timing::measure(enqueue, sets, opt);
          records.push_back({op, op == "group" ? layout : "", T, H, bytes, m});
          const double gbps = bytes / m.median_us / 1e3;
          std::printf("%-15s %-14s %6lld %6lld %10.2f %9.0f %6.1f%%\n", op.c_str(),
                      op == "group" ? layout.c_str() : "-", static_cast<long long>(T),
                      static_cast<long long>(H), m.median_us, gbps, 100.0 * gbps / copy_gbps);
          std::fflush(stdout);
        }

  if (!json_path.empty() || !csv_path.empty()) {
    nlohmann::json out = nlohmann::json::array();
    const LibraryVersions v = library_versions();
    for (const Record& r : records) {
      nlohmann::json j = {{"op", r.op}, {"layout", r.layout.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.layout)},
                          {"T", r.T}, {"H", r.H}, {"impl", r.op == "copy" ? "cudaMemcpy" : "fp8route"},
                          {"us", r.m.median_us}, {"us_min", r.m.min_us}, {"us_max", r.m.max_us},
                          {"gbps", r.bytes / r.m.median_us / 1e3}, {"bytes", r.bytes}, {"graph", r.m.graph},
                          {"sets", r.m.sets}, {"reps", r.m.reps}, {"gpu", dev.name}, {"items", items},
                          {"fp8route", v.fp8route}};
      out.push_back(j);
    }
    if (!json_path.empty()) {
      tools::write_file_atomically(json_path, tools::json_text(out), "--json");
      std::printf("wrote %s\n", json_path.c_str());
    }
    if (!csv_path.empty()) {
      tools::write_file_atomically(csv_path, tools::csv_text(out, kCsvColumns), "--csv");
      std::printf("wrote %s\n", csv_path.c_str());
    }
  }
  return tools::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return tools::run_reporting_errors("quant_bench", [&] { return run(argc, argv); });
}
