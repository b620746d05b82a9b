// Grouped routing tables, CPU only: the file format (round trip, damaged files named with their
// JSON path), the choice for a problem (entry, measured rows, supports), and the process-wide table
// that grouped_default_backend and explain_grouped consult.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "fp8route/device.h"
#include "fp8route/error.h"
#include "temp_files.h"
#include "fp8route/moe.h"

namespace fp8route {
namespace {

namespace fs = std::filesystem;

using test_files::temp_dir;
using test_files::temp_file;

GroupedTableEntry entry(GroupedForm form, ScaleKind scale, int64_t e, int64_t n, int64_t k,
                        std::vector<GroupedMeasured> measured) {
  GroupedTableEntry t;
  t.form = form, t.scale = scale, t.experts = e, t.n = n, t.k = k, t.measured = std::move(measured);
  t.source = "test";
  return t;
}

GroupedRoutingTable sample_table() {
  GroupedRoutingTable t;
  t.stamp = {"NVIDIA H200", 132, "13.0", "13.1", "0.3.0", "2026-12-05"};
  // Masked block, DeepSeek-V3 EP-8 gate_up: decode wins up to 8 rows, wgmma above.
  t.entries.push_back(entry(GroupedForm::masked, ScaleKind::block, 32, 4096, 7168,
                            {{1, "decode", 10.0}, {1, "wgmma", 14.0}, {8, "decode", 20.0}, {8, "wgmma", 21.0},
                             {64, "decode", 90.0}, {64, "wgmma", 40.0}, {64, "cutlass", 45.0}}));
  // The same layer of another model shape: cutlass wins everywhere.
  t.entries.push_back(entry(GroupedForm::masked, ScaleKind::block, 128, 1536, 2048,
                            {{1, "cutlass", 5.0}, {1, "decode", 6.0}, {64, "cutlass", 9.0}, {64, "wgmma", 11.0}}));
  t.entries.push_back(entry(GroupedForm::contiguous, ScaleKind::row, 32, 4096, 7168,
                            {{16, "decode", 30.0}, {16, "wgmma", 35.0}, {4096, "wgmma", 900.0}, {4096, "cutlass", 800.0}}));
  return t;
}

GroupedProblem problem(GroupedForm form, ScaleKind scale, int64_t e, int64_t rows, int64_t n, int64_t k) {
  GroupedProblem p;
  p.form = form, p.scale = scale, p.experts = e, p.rows = rows, p.n = n, p.k = k;
  p.sa_per_expert = scale != ScaleKind::tensor;
  return p;
}

const auto kAll = [](std::string_view) { return std::string(); };

TEST(GroupedTable, SaveLoadRoundTrip) {
  const GroupedRoutingTable t = sample_table();
  const std::string path = (temp_dir() / "round.json").string();
  save_grouped_table(t, path);
  EXPECT_EQ(load_grouped_table(path), t);
}

// Measured rows rank by their times; rows between two measured ones by each backend's time
// interpolated linearly in rows (those measured at both), then the others measured at the upper;
// outside the measured rows, the nearest end.
TEST(GroupedTable, InterpolatesBetweenMeasuredRows) {
  const GroupedRoutingTable t = sample_table();
  std::string why;
  const auto at = [&](int64_t rows, const std::function<std::string(std::string_view)>& supports = kAll) {
    return grouped_table_choice(t, problem(GroupedForm::masked, ScaleKind::block, 32, rows, 4096, 7168), supports,
                                &why);
  };
  EXPECT_EQ(at(1), "decode");
  EXPECT_EQ(at(2), "decode");  // decode 10 + 10 / 7 against wgmma 14 + 7 / 7
  EXPECT_NE(why.find("interpolated between measured rows 1 and 8: decode 11.43 us (chosen); wgmma 15 us;"),
            std::string::npos) << why;
  EXPECT_EQ(at(8), "decode");
  EXPECT_EQ(at(40), "wgmma");  // decode 20 + 70 x 32/56 = 60, wgmma 21 + 19 x 32/56 = 31.9; cutlass (64 only) after
  EXPECT_NE(why.find(" then at measured rows 64: cutlass 45 us;"), std::string::npos) << why;
  const auto no_wgmma = [](std::string_view b) { return b == "wgmma" ? std::string("not here") : std::string(); };
  EXPECT_EQ(at(40, no_wgmma), "decode");  // the interpolated ones first
  EXPECT_EQ(at(64), "wgmma");
  EXPECT_EQ(at(500), "wgmma");  // above the largest: the largest
  EXPECT_NE(why.find("largest"), std::string::npos) << why;
  EXPECT_NE(why.find("exact"), std::string::npos) << why;
}

// The shipped table with each interior measured rows of each entry held out and routed from the
// rows around it (a backend counts as able to run the problem where it was measured): the choice's
// measured time against the best there. Ranking at the smallest measured rows above lost 1.38%
// geometric mean (bench/results/2026-12-05-interpolation-cpu).
TEST(GroupedTable, HeldOutRowsInterpolate) {
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  const GroupedRoutingTable shipped =
      load_grouped_table(std::string(env ? env : FP8ROUTE_SOURCE_DIR) + "/routes/h100-grouped.json");
  double log_sum = 0;
  size_t n = 0;
  for (const GroupedTableEntry& e : shipped.entries) {
    std::map<int64_t, std::map<std::string, double>> at;
    for (const GroupedMeasured& m : e.measured) at[m.rows][m.backend] = m.us;
    for (auto it = std::next(at.begin()); it != at.end() && std::next(it) != at.end(); ++it) {
      GroupedRoutingTable held;
      held.stamp = shipped.stamp;
      held.entries.push_back(e);
      std::erase_if(held.entries[0].measured, [&](const GroupedMeasured& m) { return m.rows == it->first; });
      const auto& times = it->second;
      const auto measured_here = [&](std::string_view b) {
        return times.count(std::string(b)) ? std::string() : std::string("not measured at these rows");
      };
      GroupedProblem p = problem(e.form, e.scale, e.experts, it->first, e.n, e.k);
      p.out = e.out;
      const std::string chosen = grouped_table_choice(held, p, measured_here);
      if (chosen.empty()) continue;  // none of the neighbours' backends was measured here
      double best = INFINITY;
      for (const auto& [b, us] : times) best = std::min(best, us);
      log_sum += std::log(times.at(chosen) / best), ++n;
    }
  }
  const double geomean = std::exp(log_sum / double(std::max<size_t>(n, 1)));
  std::printf("held-out rows: %zu points, geomean loss %.2f%%\n", n, 100 * (geomean - 1));
  EXPECT_GT(n, 900u);
  EXPECT_LE(geomean, 1.012);
}

TEST(GroupedTable, SkipsBackendsThatCannotRun) {
  const GroupedRoutingTable t = sample_table();
  const GroupedProblem p = problem(GroupedForm::masked, ScaleKind::block, 32, 64, 4096, 7168);
  const auto no_wgmma = [](std::string_view b) { return b == "wgmma" ? std::string("not here") : std::string(); };
  std::string why;
  EXPECT_EQ(grouped_table_choice(t, p, no_wgmma, &why), "cutlass");
  EXPECT_NE(why.find("cannot run: not here"), std::string::npos) << why;
  const auto none = [](std::string_view) { return std::string("no GPU"); };
  EXPECT_EQ(grouped_table_choice(t, p, none, &why), "");
  EXPECT_NE(why.find("none of them"), std::string::npos) << why;
}

TEST(GroupedTable, NearestEntryOfTheSameFormAndScale) {
  const GroupedRoutingTable t = sample_table();
  std::string why;
  // Qwen3-235B-A22B's gate_up (128, 3072, 4096) is nearer the (128, 1536, 2048) entry than DeepSeek's.
  EXPECT_EQ(grouped_table_choice(t, problem(GroupedForm::masked, ScaleKind::block, 128, 4, 3072, 4096), kAll, &why),
            "cutlass");
  EXPECT_NE(why.find("nearest"), std::string::npos) << why;
  // No entry of this form and scale: no choice.
  EXPECT_EQ(grouped_table_choice(t, problem(GroupedForm::masked, ScaleKind::tensor, 32, 4, 4096, 7168), kAll, &why), "");
  EXPECT_NE(why.find("no entry"), std::string::npos) << why;
  EXPECT_EQ(grouped_table_choice(t, problem(GroupedForm::contiguous, ScaleKind::row, 32, 10, 4096, 7168), kAll), "decode");
  // 17 rows: wgmma, measured at 16 and 4096, interpolated (35.2 us), before cutlass, measured at 4096 only.
  EXPECT_EQ(grouped_table_choice(t, problem(GroupedForm::contiguous, ScaleKind::row, 32, 17, 4096, 7168), kAll), "wgmma");
}

TEST(GroupedTable, OtherOutDtypeOnlyWhenNoEntryOfItsOwn) {
  GroupedRoutingTable t = sample_table();
  GroupedTableEntry f16 = entry(GroupedForm::masked, ScaleKind::block, 256, 4096, 7168, {{1, "wgmma", 1.0}});
  f16.out = DType::f16;
  t.entries.push_back(f16);
  GroupedProblem p = problem(GroupedForm::masked, ScaleKind::block, 256, 1, 4096, 7168);
  EXPECT_EQ(grouped_table_choice(t, p, kAll), "decode");  // the bf16 entry of 32 experts, not the f16 one of 256
  p.out = DType::f16;
  EXPECT_EQ(grouped_table_choice(t, p, kAll), "wgmma");
}

std::string doc(const std::string& entries) {
  return R"({"format": "fp8route-grouped-table", "version": 1, "stamp": {"gpu": "g", "sm_count": 132, "cuda": "13.0",
  "cublaslt": "13.1", "fp8route": "0.3.0", "date": "2026-12-05"}, "entries": [)" + entries + "]}";
}

const std::string kEntry =
    R"({"form": "masked", "scale": "block", "out": "bf16", "experts": 32, "n": 4096, "k": 7168, "measured": [[1, "decode", 2.5]]})";

TEST(GroupedTable, DamagedFilesNameThePlace) {
  EXPECT_NO_THROW(load_grouped_table(temp_file("ok.json", doc(kEntry))));  // "source" is optional
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"{", "routing table"},
      {R"({"format": "fp8route-routing-table", "version": 1})", "format"},
      {doc(kEntry + "," + kEntry), "same (form, scale, out, experts, n, k) as entries[0]"},
      {doc(R"({"form": "ragged", "scale": "block", "out": "bf16", "experts": 32, "n": 1, "k": 1, "measured": [[1, "decode", 1]]})"),
       "entries[0].form"},
      {doc(R"({"form": "masked", "scale": "block", "out": "fp32", "experts": 32, "n": 1, "k": 1, "measured": [[1, "decode", 1]]})"),
       "entries[0].out"},
      {doc(R"({"form": "masked", "scale": "block", "out": "bf16", "experts": 0, "n": 1, "k": 1, "measured": [[1, "decode", 1]]})"),
       "entries[0].experts"},
      {doc(R"({"form": "masked", "scale": "block", "out": "bf16", "experts": 1, "n": 1, "k": 1, "measured": []})"),
       "entries[0].measured"},
      {doc(R"({"form": "masked", "scale": "block", "out": "bf16", "experts": 1, "n": 1, "k": 1, "measured": [[1, "cublaslt", 1]]})"),
       "unknown backend 'cublaslt'"},
      {doc(R"({"form": "masked", "scale": "block", "out": "bf16", "experts": 1, "n": 1, "k": 1, "measured": [[1, "decode", -1]]})"),
       "entries[0].measured[0][2] (us)"},
      {doc(R"({"form": "masked", "scale": "block", "out": "bf16", "experts": 1, "n": 1, "k": 1, "measured": [[1, "decode", 1], [1, "decode", 2]]})"),
       "same (rows, backend) as entries[0].measured[0]"},
      {doc(R"({"form": "masked", "scale": "block", "out": "bf16", "experts": 1, "n": 1, "measured": [[1, "decode", 1]]})"),
       "missing field 'k'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = temp_file("bad" + std::to_string(i) + ".json", cases[i].first);
    try {
      load_grouped_table(path);
      ADD_FAILURE() << "case " << i << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::io_error) << i;
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(cases[i].second), std::string::npos) << "case " << i << ": " << what;
    }
  }
  EXPECT_THROW(load_grouped_table((temp_dir() / "absent.json").string()), Error);
  EXPECT_THROW(load_grouped_table(""), Error);
}

TEST(GroupedTable, DefaultFilesThisGpuFirst) {
  const std::vector<std::string> files = default_grouped_table_files();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0], files[1]);
  for (const std::string& f : files)
    EXPECT_TRUE(f == "routes/h200-grouped.json" || f == "routes/h100-grouped.json") << f;
  if (cuda_device_count() > 0 && device_info(0).name.find("H100") != std::string::npos)
    EXPECT_EQ(files[0], "routes/h100-grouped.json");
  else
    EXPECT_EQ(files[0], "routes/h200-grouped.json");  // an H200, another GPU, or none
}

// The process-wide table: loaded, explained, dropped; a bad file keeps the table in use.
TEST(GroupedTable, DefaultTable) {
  const std::string path = (temp_dir() / "default.json").string();
  GroupedRoutingTable t = sample_table();
  // simt runs everywhere (also without a GPU), so the table's choice is visible on the CPU.
  t.entries.push_back(entry(GroupedForm::masked, ScaleKind::row, 8, 512, 256, {{4, "simt", 3.0}, {4, "wgmma", 1.0}}));
  save_grouped_table(t, path);
  load_default_grouped_table(path);
  GroupedTableInfo info = grouped_table_info();
  EXPECT_EQ(info.path, path);
  EXPECT_EQ(info.entries, t.entries.size());
  EXPECT_EQ(info.stamp, t.stamp);
  const GroupedProblem p = problem(GroupedForm::masked, ScaleKind::row, 8, 4, 512, 256);
  const std::string text = explain_grouped(p);
  EXPECT_NE(text.find("grouped table " + path), std::string::npos) << text;
  EXPECT_NE(text.find("e=8 n=512 k=256"), std::string::npos) << text;
  EXPECT_EQ(grouped_default_backend(p), grouped_supports("wgmma", p).empty() ? "wgmma" : "simt");

  EXPECT_THROW(load_default_grouped_table(temp_file("broken.json", "{")), Error);
  EXPECT_EQ(grouped_table_info().path, path);  // unchanged

  load_default_grouped_table("");
  info = grouped_table_info();
  EXPECT_EQ(info.path, "");
  EXPECT_EQ(info.entries, 0u);
  EXPECT_NE(explain_grouped(p).find("the rule decides"), std::string::npos);
}

}  // namespace
}  // namespace fp8route
