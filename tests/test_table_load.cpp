// The file readers on damaged and hostile input, CPU only: the routing table (load_routing_table,
// Router::from_file, default_router), tune's raw file (read_tune_raw), the shape catalog
// (tools::load_catalog) and the tool's --shapes files (tools::load_shape_file); and where the
// shipped table is looked for. A file that does not load is an Error(io_error) naming the file and the
// place; nothing a file holds may crash the process, escape as another exception type or put bytes
// that are not UTF-8 into a message (fp8route info --json and Python's table_info() embed them).
// Every file of fuzz/corpus is replayed here too, so a crash the fuzzers found stays fixed in a build
// without clang.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "../fuzz/fuzz_readers.h"
#include "common/shapes.h"
#include "fp8route/error.h"
#include "temp_files.h"
#include "fp8route/route.h"
#include "fp8route/tuning/data_files.h"
#include "fp8route/tuning/tune_raw.h"

namespace fp8route {
namespace {

namespace fs = std::filesystem;

std::string source_dir() {
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  return env ? env : FP8ROUTE_SOURCE_DIR;
}

using test_files::temp_dir;
using test_files::temp_file;

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

std::string nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// nlohmann's dump throws on bytes that are not UTF-8: what info --json and table_info() would do.
bool utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// Runs `load`, which must throw Error(io_error) whose message holds every one of `expect`.
template <class F>
void expect_io_error(const std::string& name, F load, const std::vector<std::string>& expect) {
  try {
    load();
    ADD_FAILURE() << name << ": loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.category(), ErrorCategory::io_error) << name << ": " << what;
    EXPECT_TRUE(utf8(what)) << name << ": the message is not UTF-8";
    for (const std::string& x : expect) EXPECT_NE(what.find(x), std::string::npos) << name << ": " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << ": threw a " << typeid(e).name() << ", not fp8route::Error: " << e.what();
  }
}

// ---- routing tables ------------------------------------------------------------------------------

const char* kTable = R"({"format": "fp8route-routing-table", "version": 1,
"stamp": {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.1.0", "date": "2026-11-30"},
"entries": [{"scale": "row", "out": "bf16", "n": 4096, "k": 4096,
  "breakpoints": [[16, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab"], [4096, "cublaslt", "heuristic"]],
  "measured": [[16, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab", 10.5], [16, "cublaslt", "heuristic", 12.0],
               [4096, "cublaslt", "heuristic", 100.0], [4096, "cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab", 180.0]]}]})";

// (name, file text, what the message must name besides the file)
using Case = std::tuple<std::string, std::string, std::vector<std::string>>;

void check_table_cases(const std::vector<Case>& cases) {
  for (const auto& [name, text, expect] : cases) {
    const std::string path = temp_file(name + ".json", text);
    std::vector<std::string> all = expect;
    all.push_back(path);
    expect_io_error(name, [&] { load_routing_table(path); }, all);
    // The documented fallback: the error kept, routing by gemm_select().
    try {
      const Router r = Router::from_file(path);
      EXPECT_NE(r.load_error().find(path), std::string::npos) << name << ": " << r.load_error();
      EXPECT_TRUE(utf8(r.load_error())) << name;
      EXPECT_EQ(r.select(make_problem(16, 4096, 4096, ScaleKind::row)).source, Route::Source::heuristic) << name;
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": Router::from_file threw " << e.what();
    }
    fs::remove(path);
  }
}

TEST(TableLoad, DeepNestingIsAnErrorNotACrash) {
  const std::string table(kTable);
  check_table_cases({
      {"deep_n", replaced(table, "\"n\": 4096", "\"n\": " + nested(100000)), {"entries[0].n", "nested"}},
      {"deep_measured", replaced(table, "[4096, \"cublaslt\", \"heuristic\", 100.0]", nested(100000)),
       {"entries[0].measured[2]", "nested"}},
      {"deep_stamp", replaced(table, "\"NVIDIA H200\"", nested(100000)), {"stamp.gpu", "nested"}},
      {"deep_objects", replaced(table, "\"date\": \"2026-11-30\"", "\"date\": " + [] {
                                  std::string s;
                                  for (int i = 0; i < 100000; ++i) s += "{\"a\":";
                                  return s + "1" + std::string(100000, '}');
                                }()),
       {"stamp.date", "nested"}},
      {"deep_file", nested(1000000), {"nested"}},
      {"deep_open", std::string(1000000, '['), {"nested"}},
  });
}

TEST(TableLoad, NumberOutOfRangeNamesTheFileAndField) {
  const std::string table(kTable);
  check_table_cases({
      {"huge_us", replaced(table, "10.5", "1e400"), {"entries[0].measured[0][3]", "out of range"}},
      {"huge_n", replaced(table, "\"n\": 4096", "\"n\": -1e400"), {"entries[0].n", "out of range"}},
      {"huge_version", replaced(table, "\"version\": 1", "\"version\": 1e999"), {"version", "out of range"}},
  });
}

TEST(TableLoad, InvalidUtf8IsQuotedPrintably) {
  const std::string table(kTable);
  check_table_cases({
      {"utf8_format", "{\"format\": \"\xff\xfe\"}", {"not JSON", "\\xFF"}},
      {"utf8_gpu", replaced(table, "NVIDIA H200", "NVIDIA \xc3\x28"), {"stamp.gpu"}},
      {"utf8_token", replaced(table, "\"version\": 1", "\"version\": \xe2\x82"), {"version"}},
  });
}

TEST(TableLoad, ValuesOutOfRangeAreErrors) {
  const std::string table(kTable);
  check_table_cases({
      {"version_wraps", replaced(table, "\"version\": 1", "\"version\": 4294967297"), {"version"}},
      {"version_negative", replaced(table, "\"version\": 1", "\"version\": -1"), {"version"}},
      {"sm_count_wraps", replaced(table, "\"sm_count\": 132", "\"sm_count\": 4294967428"), {"stamp.sm_count"}},
      {"out_f32", replaced(table, "\"out\": \"bf16\"", "\"out\": \"f32\""), {"entries[0].out", "bf16 or f16"}},
      {"out_e4m3", replaced(table, "\"out\": \"bf16\"", "\"out\": \"e4m3\""), {"entries[0].out", "bf16 or f16"}},
      {"measured_empty", table.substr(0, table.find("\"measured\"")) + "\"measured\": []}]}",
       {"entries[0].measured", "non-empty"}},
      {"n_zero", replaced(table, "\"n\": 4096", "\"n\": 0"), {"entries[0].n"}},
      {"k_negative", replaced(table, "\"k\": 4096", "\"k\": -4096"), {"entries[0].k"}},
      {"n_fraction", replaced(table, "\"n\": 4096", "\"n\": 4096.5"), {"entries[0].n"}},
      {"n_over_int32", replaced(table, "\"n\": 4096", "\"n\": 2147483648"), {"entries[0].n"}},
      {"max_m_int64_max", replaced(table, "[4096, \"cublaslt\", \"heuristic\"]", "[9223372036854775807, \"cublaslt\", \"heuristic\"]"),
       {"entries[0].breakpoints[1][0]"}},
      {"m_zero", replaced(table, "[16, \"cublaslt\", \"heuristic\", 12.0]", "[0, \"cublaslt\", \"heuristic\", 12.0]"),
       {"entries[0].measured[1][0]"}},
      {"us_negative", replaced(table, "12.0", "-12.0"), {"entries[0].measured[1][3]"}},
      {"us_zero", replaced(table, "12.0", "0"), {"entries[0].measured[1][3]"}},
      {"breakpoints_unsorted", replaced(table, "[[16, ", "[[8192, "), {"entries[0].breakpoints[1]", "increase"}},
      {"breakpoints_empty",
       replaced(table, "[[16, \"cutlass_sm90\", \"row_64x16x128_1x1x1_pingpong_swapab\"], [4096, \"cublaslt\", \"heuristic\"]]", "[]"),
       {"entries[0].breakpoints"}},
      {"scale_unknown", replaced(table, "\"scale\": \"row\"", "\"scale\": \"col\""), {"entries[0].scale"}},
      {"backend_unknown", replaced(table, "[4096, \"cublaslt\", \"heuristic\"]", "[4096, \"cublas\", \"heuristic\"]"),
       {"entries[0].breakpoints[1][1]", "cublas"}},
      {"config_empty", replaced(table, "[4096, \"cublaslt\", \"heuristic\"]", "[4096, \"cublaslt\", \"\"]"),
       {"entries[0].breakpoints[1][2]"}},
      {"measured_twice",
       replaced(table, "[16, \"cublaslt\", \"heuristic\", 12.0]",
                "[16, \"cublaslt\", \"heuristic\", 12.0], [16, \"cublaslt\", \"heuristic\", 13.0]"),
       {"entries[0].measured[2]", "measured[1]"}},
      {"duplicate_key", replaced(table, "\"n\": 4096", "\"n\": 4096, \"n\": 8192"), {"entries[0].n", "twice"}},
      {"entries_not_array", table.substr(0, table.find("\"entries\"")) + "\"entries\": {}}", {"entries"}},
      {"top_level_array", "[1, 2]", {"top level", "object"}},
  });
  EXPECT_NO_THROW(load_routing_table(temp_file("good.json", table)));
}

// What loads must route: odd but valid tables (a breakpoint's choice never measured, one measured
// row, M, N and K at the 2^31 - 1 limit, times near double's limits) through select(), explain()
// and slice().
TEST(TableLoad, OddButValidTablesRoute) {
  const std::string lim = std::to_string((int64_t{1} << 31) - 1);
  const std::string stamp = R"({"format": "fp8route-routing-table", "version": 1,
"stamp": {"gpu": "NVIDIA H200", "sm_count": 132, "cuda": "13.0", "cublaslt": "13.1", "fp8route": "0.1.0", "date": "2026-11-30"},
"entries": [)";
  const std::vector<std::string> tables = {
      stamp + R"({"scale": "row", "out": "bf16", "n": 4096, "k": 4096, "breakpoints": [[16, "cublaslt", "heuristic"]],
                 "measured": [[1, "skinny", "m8_n32_k128x4_splitk", 5e-324]]}]})",
      stamp + R"({"scale": "row", "out": "bf16", "n": )" + lim + R"(, "k": 1, "breakpoints": [[)" + lim +
          R"(, "cublaslt", "heuristic"]], "measured": [[)" + lim + R"(, "cublaslt", "heuristic", 1e300]]},
                {"scale": "row", "out": "f16", "n": 1, "k": )" + lim + R"(, "breakpoints": [[1, "cublaslt", "x"], [)" +
          lim + R"(, "skinny", "y"]], "measured": [[1, "cublaslt", "x", 1], [1, "skinny", "y", 1], [)" + lim +
          R"(, "skinny", "y", 2], [)" + lim + R"(, "cublaslt", "x", 1e-300]]}]})",
  };
  const SupportsFn as_measured = [](std::string_view, std::string_view, const GemmProblem&) { return std::string(); };
  for (size_t i = 0; i < tables.size(); ++i) {
    const Router r(load_routing_table(temp_file("odd" + std::to_string(i) + ".json", tables[i])), as_measured);
    // Problems some backend can run (gemm_select() throws unsupported for the others, by contract).
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{4096}, int64_t{1} << 20})
      for (int64_t n : {int64_t{8}, int64_t{4096}, int64_t{1} << 30})
        for (DType out : {DType::bf16, DType::f16}) {
          const GemmProblem p = make_problem(m, n, 4096, ScaleKind::row, out);
          const Route route = r.select(p);
          EXPECT_FALSE(route.backend.empty()) << to_string(p);
          EXPECT_NE(r.explain(p).find("choice: "), std::string::npos) << to_string(p);
          EXPECT_FALSE(r.slice(ScaleKind::row, out, n, 4096).entries.empty() && route.source != Route::Source::heuristic);
        }
  }
}

// default_router() on a table that does not load: the heuristic, the error kept, no exception, and
// later calls get the same router (Python's routed calls go through it on every call).
TEST(TableLoad, DefaultRouterFallsBackOnABadTable) {
  const std::string path = temp_file("default_bad.json", replaced(kTable, "10.5", "1e400"));
  ::setenv("FP8ROUTE_TABLE", path.c_str(), 1);
  std::shared_ptr<const Router> r;
  try {
    r = default_router();
  } catch (const std::exception& e) {
    FAIL() << "default_router() threw " << e.what();
  }
  ::unsetenv("FP8ROUTE_TABLE");
  EXPECT_NE(r->load_error().find(path), std::string::npos) << r->load_error();
  EXPECT_EQ(r->select(make_problem(16, 4096, 4096, ScaleKind::row)).source, Route::Source::heuristic);
  EXPECT_EQ(default_router(), r);
}

// ---- tune's raw file -----------------------------------------------------------------------------

const std::string kStamp =
    R"({"stamp":{"gpu":"NVIDIA H200","sm_count":132,"cuda":"13.0","cublaslt":"13.1","fp8route":"0.1.0","date":"2026-11-30"}})";
const std::string kRecord =
    R"({"scale":"row","out":"bf16","n":4096,"k":4096,"m":16,"backend":"cublaslt","config":"heuristic","us":10.5})";
const std::string kDone =
    R"({"done":true,"scale":"row","out":"bf16","n":4096,"k":4096,"m":16,"screen_pct":25,"screened_out":[["skinny","m8_n32_k128x4_splitk",31.5]],"final_pct":5,"final":[["cublaslt","heuristic"]]})";

TEST(TuneRawLoad, BadValuesNameTheLineAndField) {
  // Each damaged record as line 2 of 3 (a damaged last line reads as torn instead).
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"n_negative", replaced(kRecord, "\"n\":4096", "\"n\":-5"), "n"},
      {"m_zero", replaced(kRecord, "\"m\":16", "\"m\":0"), "m"},
      {"k_fraction", replaced(kRecord, "\"k\":4096", "\"k\":4096.5"), "k"},
      {"n_huge_float", replaced(kRecord, "\"n\":4096", "\"n\":1e300"), "n"},
      {"n_over_int32", replaced(kRecord, "\"n\":4096", "\"n\":4294967296"), "n"},
      {"us_negative", replaced(kRecord, "10.5", "-10.5"), "us"},
      {"us_zero", replaced(kRecord, "10.5", "0"), "us"},
      {"us_string", replaced(kRecord, "10.5", "\"fast\""), "us"},
      {"us_overflow", replaced(kRecord, "10.5", "1e400"), "us"},
      {"backend_unknown", replaced(kRecord, "\"cublaslt\"", "\"cublas\""), "backend"},
      {"config_empty", replaced(kRecord, "\"heuristic\"", "\"\""), "config"},
      {"out_f32", replaced(kRecord, "\"bf16\"", "\"f32\""), "out"},
      {"scale_unknown", replaced(kRecord, "\"row\"", "\"rows\""), "scale"},
      {"deep", replaced(kRecord, "10.5", nested(100000)), "us"},
      {"deep_line", nested(1000000), "nested"},
      {"utf8", "{\"scale\":\"\xff\"}", "not JSON"},
      {"done_not_bool", replaced(kDone, "\"done\":true", "\"done\":1"), "done"},
      {"screened_us_negative", replaced(kDone, "31.5", "-31.5"), "screened_out[0][2]"},
      {"screened_backend_unknown", replaced(kDone, "\"skinny\"", "\"skinnier\""), "screened_out[0][0]"},
      {"screened_not_array", replaced(kDone, "[[\"skinny\",\"m8_n32_k128x4_splitk\",31.5]]", "[7]"),
       "screened_out[0]"},
      {"final_pct_negative", replaced(kDone, "\"final_pct\":5", "\"final_pct\":-5"), "final_pct"},
      {"final_pct_missing", replaced(kDone, "\"final_pct\":5,", ""), "final_pct"},
      {"final_not_pairs", replaced(kDone, "[[\"cublaslt\",\"heuristic\"]]", "[[\"cublaslt\"]]"), "final[0]"},
      {"stamp_sm_count_wraps", replaced(kStamp, "132", "4294967428"), "stamp.sm_count"},
      {"stamp_gpu_number", replaced(kStamp, "\"NVIDIA H200\"", "7"), "stamp.gpu"},
  };
  for (const auto& [name, line, field] : cases) {
    const std::string path = temp_file(name + ".raw.jsonl", kStamp + "\n" + line + "\n" + kRecord + "\n");
    expect_io_error(name, [&] { read_tune_raw(path); }, {path + ":2", field});
    fs::remove(path);
  }
  // The same lines last, complete or cut short: torn (dropped and measured again), never an error.
  for (const auto& [name, line, field] : cases) {
    for (const std::string& end : {std::string("\n"), std::string()}) {
      const std::string good = kStamp + "\n" + kRecord + "\n";
      const std::string path = temp_file(name + ".last.raw.jsonl", good + line + end);
      try {
        const TuneRawFile raw = read_tune_raw(path);
        EXPECT_TRUE(raw.torn) << name;
        EXPECT_EQ(raw.good_bytes, static_cast<int64_t>(good.size())) << name;
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " (last line): threw " << e.what();
      }
      fs::remove(path);
    }
  }
  const TuneRawFile ok = read_tune_raw(temp_file("ok.raw.jsonl", kStamp + "\n" + kRecord + "\n" + kDone + "\n"));
  EXPECT_FALSE(ok.torn);
  EXPECT_EQ(ok.records.size(), 2u);
  EXPECT_EQ(ok.finished.size(), 1u);
}

// A time near double's limit with a final round 1000% behind: settle_final_round made it inf, and
// the table tune --build-only wrote from it did not load (found by fuzz_tune_raw; the input is
// fuzz/corpus/tune_raw/final_round_inf.jsonl). Times are bounded (1e12 us), so the largest
// accepted ones still build a table that loads.
TEST(TuneRawLoad, RecordsBuildATableThatLoads) {
  const auto raw_file = [](const std::string& name, const std::string& us) {
    const std::string key = R"("scale":"row","out":"bf16","n":4096,"k":4096,"m":1)";
    return temp_file(name, kStamp + "\n{" + key + R"(,"backend":"cublaslt","config":"heuristic","us":)" + us +
                               "}\n{" + key + R"(,"backend":"skinny","config":"m8_n32_k128x4_splitk","us":1})" +
                               "\n{\"done\":true," + key + R"(,"final_pct":1000,"final":[["cublaslt","heuristic"]]})" +
                               "\n" + kRecord + "\n");
  };
  const auto builds_a_table_that_loads = [](const std::string& path) {
    const TuneRawFile raw = read_tune_raw(path);
    EXPECT_EQ(raw.records.size(), 2u);
    const std::string table = path + ".table.json";
    save_routing_table(build_routing_table(raw.records, *raw.stamp), table);
    EXPECT_NO_THROW(load_routing_table(table));
  };
  expect_io_error("us 1e308", [&] { builds_a_table_that_loads(raw_file("huge_us.raw.jsonl", "1e308")); },
                  {"huge_us.raw.jsonl:2", "us"});
  builds_a_table_that_loads(raw_file("largest_us.raw.jsonl", "1e12"));
}

// ---- the shape catalog ---------------------------------------------------------------------------

const char* kCatalog = R"({"m_grid": [1, 16, 128], "tp": [1, 8],
"models": {"toy": [{"name": "qkv_proj", "n": 6144, "k": 4096, "parallel": "column"},
                   {"name": "down_proj", "n": 4096, "k": 14336, "parallel": "row"}]}})";

TEST(CatalogLoad, BadValuesNameTheFileAndField) {
  const std::string cat(kCatalog);
  const std::vector<Case> cases = {
      {"tp_zero", replaced(cat, "[1, 8]", "[1, 0]"), {"tp[1]"}},
      {"tp_negative", replaced(cat, "[1, 8]", "[-8]"), {"tp[0]"}},
      {"tp_wraps", replaced(cat, "[1, 8]", "[4294967297]"), {"tp[0]"}},
      {"tp_empty", replaced(cat, "[1, 8]", "[]"), {"tp"}},
      {"m_zero", replaced(cat, "[1, 16, 128]", "[0, 16]"), {"m_grid[0]"}},
      {"m_fraction", replaced(cat, "[1, 16, 128]", "[1, 16.5]"), {"m_grid[1]"}},
      {"m_huge_float", replaced(cat, "[1, 16, 128]", "[1e300]"), {"m_grid[0]"}},
      {"m_overflow", replaced(cat, "[1, 16, 128]", "[1e400]"), {"m_grid[0]", "out of range"}},
      {"m_empty", replaced(cat, "[1, 16, 128]", "[]"), {"m_grid"}},
      {"n_zero", replaced(cat, "\"n\": 6144", "\"n\": 0"), {"models.toy[0].n"}},
      {"k_over_int32", replaced(cat, "\"k\": 14336", "\"k\": 2147483648"), {"models.toy[1].k"}},
      {"n_huge_float", replaced(cat, "\"n\": 6144", "\"n\": 1e300"), {"models.toy[0].n"}},
      {"parallel_unknown", replaced(cat, "\"column\"", "\"columns\""), {"models.toy[0].parallel"}},
      {"models_array", cat.substr(0, cat.find("\"models\"")) + "\"models\": [[]]}", {"models"}},
      {"layers_object", cat.substr(0, cat.find("\"models\"")) + "\"models\": {\"toy\": {\"a\": 1}}}", {"models.toy"}},
      {"layer_name_twice", replaced(cat, "\"down_proj\"", "\"qkv_proj\""), {"models.toy[1].name", "qkv_proj"}},
      {"deep", replaced(cat, "\"n\": 6144", "\"n\": " + nested(100000)), {"models.toy[0].n", "nested"}},
      {"deep_file", nested(1000000), {"nested"}},
      {"utf8", "{\"m_grid\": \"\xff\"}", {"not JSON"}},
      {"duplicate_key", replaced(cat, "\"tp\": [1, 8]", "\"tp\": [1, 8], \"tp\": [2]"), {"tp", "twice"}},
  };
  for (const auto& [name, text, expect] : cases) {
    const std::string path = temp_file(name + ".catalog.json", text);
    std::vector<std::string> all = expect;
    all.push_back(path);
    expect_io_error(name, [&] { tools::load_catalog(path); }, all);
    fs::remove(path);
  }
  const tools::ShapeCatalog ok = tools::load_catalog(temp_file("ok.catalog.json", cat));
  EXPECT_EQ(ok.layers.size(), 2u);
  EXPECT_EQ(ok.tp, (std::vector<int>{1, 8}));
}

// ---- the --shapes files of the command-line tool ----------------------------------------------------

TEST(ShapeFileLoad, WholeDimensionsInRangeAndUtf8Labels) {
  const std::vector<std::tuple<std::string, std::string>> cases = {
      {"fraction", "4096 4096.5"},  // read as 4096 4096 with the label ".5"
      {"exponent", "1e3 4096"},
      {"over_int32", "4096 2147483648"},
      {"hex", "0x10 16"},
      {"negative", "-4096 4096"},
      {"one_number", "4096"},
      {"label_not_utf8", "4096 4096 down\xff"},
  };
  for (const auto& [name, line] : cases) {
    const std::string path = temp_file(name + ".shapes", "# N K [label]\n6144 4096 qkv\n" + line + "\n");
    expect_io_error(name, [&] { tools::load_shape_file(path); }, {path + ":3"});
  }
  expect_io_error("empty", [&] { tools::load_shape_file(temp_file("empty.shapes", "# nothing\n\n")); },
                  {"no shapes"});
  const std::vector<tools::LayerShape> ok =
      tools::load_shape_file(temp_file("ok.shapes", "# c\n4096 14336 down_proj\n  6144,4096 # qkv\n"));
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].layer, "down_proj");
  EXPECT_EQ(ok[0].k, 14336);
  EXPECT_EQ(ok[1].layer, "6144x4096");
  EXPECT_THROW(tools::at_tp(ok, 0), Error);  // a divisor
}

// ---- where the shipped table is looked for -------------------------------------------------------

TEST(TableLookup, EnvironmentThenBesideTheBinaryThenTheSourceTree) {
  const fs::path tree = temp_dir() / "tree";
  fs::create_directories(tree / "routes");
  std::ofstream(tree / "routes" / "h200.json") << kTable;
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  const std::optional<std::string> source_dir_env = env ? std::optional<std::string>(env) : std::nullopt;
  ::setenv("FP8ROUTE_SOURCE_DIR", tree.c_str(), 1);
  const std::vector<std::string> c = data_file_candidates("routes/h200.json");
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe").parent_path();
  const auto at = [&](const fs::path& p) {
    return std::find(c.begin(), c.end(), p.lexically_normal().string()) - c.begin();
  };
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], (tree / "routes" / "h200.json").string());
  EXPECT_LT(at(exe_dir / "routes" / "h200.json"), at(exe_dir.parent_path() / "share" / "fp8route" / "routes" / "h200.json"));
  EXPECT_LT(at(exe_dir.parent_path() / "share" / "fp8route" / "routes" / "h200.json"),
            at(fs::path(FP8ROUTE_SOURCE_DIR) / "routes" / "h200.json"));
  EXPECT_LT(at(fs::path(FP8ROUTE_SOURCE_DIR) / "routes" / "h200.json"), static_cast<std::ptrdiff_t>(c.size()));
  EXPECT_EQ(default_table_path(), (tree / "routes" / "h200.json").string());
  // FP8ROUTE_TABLE wins, even when it names nothing (the load error then names it).
  ::setenv("FP8ROUTE_TABLE", "/nonexistent/table.json", 1);
  EXPECT_EQ(default_table_path(), "/nonexistent/table.json");
  ::unsetenv("FP8ROUTE_TABLE");
  if (source_dir_env) ::setenv("FP8ROUTE_SOURCE_DIR", source_dir_env->c_str(), 1);
  else ::unsetenv("FP8ROUTE_SOURCE_DIR");
  // No table anywhere: the error lists every place looked in.
  expect_io_error("none found", [] { load_routing_table(""); },
                  {"no routes/h200.json found", (exe_dir / "routes" / "h200.json").string(), "FP8ROUTE_TABLE"});
}

// FP8ROUTE_DATA_DIR (an installed tree moved elsewhere, the wheel's console script) comes first;
// the install prefix configured at build time serves the static library inside an executable that
// lives outside the prefix.
TEST(TableLookup, DataDirFirstInstallPrefixBeforeTheSourceTree) {
  struct Env {  // sets a variable for this scope, then restores it
    std::string name;
    std::optional<std::string> old;
    Env(std::string n, const std::string& value) : name(std::move(n)) {
      if (const char* v = std::getenv(name.c_str())) old = v;
      ::setenv(name.c_str(), value.c_str(), 1);
    }
    ~Env() { old ? ::setenv(name.c_str(), old->c_str(), 1) : ::unsetenv(name.c_str()); }
  };
  const fs::path data = temp_dir() / "data", tree = temp_dir() / "tree2";
  for (const fs::path& d : {data, tree}) {
    fs::create_directories(d / "routes");
    std::ofstream(d / "routes" / "h200.json") << kTable;
  }
  const Env no_table("FP8ROUTE_TABLE", ""), source("FP8ROUTE_SOURCE_DIR", tree.string());
  {
    const Env data_dir("FP8ROUTE_DATA_DIR", data.string());
    const std::vector<std::string> c = data_file_candidates("routes/h200.json");
    ASSERT_GE(c.size(), 2u);
    EXPECT_EQ(c[0], (data / "routes" / "h200.json").string());
    EXPECT_EQ(c[1], (tree / "routes" / "h200.json").string());
    EXPECT_EQ(default_table_path(), (data / "routes" / "h200.json").string());
  }
  {
    // A data folder without the file: the next place that has it.
    const Env data_dir("FP8ROUTE_DATA_DIR", (temp_dir() / "empty").string());
    EXPECT_EQ(default_table_path(), (tree / "routes" / "h200.json").string());
  }
#ifdef FP8ROUTE_INSTALL_DATA_DIR
  const std::vector<std::string> c = data_file_candidates("routes/h200.json");
  const auto at = [&](const fs::path& p) {
    return std::find(c.begin(), c.end(), p.lexically_normal().string()) - c.begin();
  };
  const fs::path installed = fs::path(FP8ROUTE_INSTALL_DATA_DIR) / "routes" / "h200.json";
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe").parent_path();
  EXPECT_LT(at(installed), static_cast<std::ptrdiff_t>(c.size())) << FP8ROUTE_INSTALL_DATA_DIR;
  if (installed.lexically_normal() != (exe_dir.parent_path() / "share" / "fp8route" / "routes" / "h200.json").lexically_normal())
    EXPECT_LT(at(exe_dir.parent_path() / "share" / "fp8route" / "routes" / "h200.json"), at(installed));
  if (installed.lexically_normal() != (fs::path(FP8ROUTE_SOURCE_DIR) / "routes" / "h200.json").lexically_normal())
    EXPECT_LT(at(installed), at(fs::path(FP8ROUTE_SOURCE_DIR) / "routes" / "h200.json"));
#endif
}

// ---- the fuzz corpus -----------------------------------------------------------------------------

// Every seed and every input a fuzz target once crashed on, through the same checks the targets
// make (fuzz/fuzz_readers.h).
TEST(FuzzCorpus, EveryInputReadsOrFailsCleanly) {
  const std::vector<std::pair<std::string, void (*)(const std::string&)>> targets = {
      {"table", fuzz::table},     {"grouped_table", fuzz::grouped_table}, {"tune_raw", fuzz::tune_raw},
      {"catalog", fuzz::catalog}, {"shape_file", fuzz::shape_file}};
  for (const auto& [name, check] : targets) {
    size_t n = 0;
    for (const auto& f : fs::directory_iterator(fs::path(source_dir()) / "fuzz" / "corpus" / name)) {
      std::ifstream in(f.path(), std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::string path = temp_file("corpus_" + name + "_" + f.path().filename().string(), text);
      try {
        check(path);
      } catch (const std::exception& e) {
        ADD_FAILURE() << f.path() << ": " << e.what();
      }
      ++n;
    }
    EXPECT_GT(n, 0u) << name;
  }
}

}  // namespace
}  // namespace fp8route
