#pragma once
// One input through each of fp8route's file readers, and what must hold for it, shared by the
// libFuzzer targets (fuzz_*.cpp) and test_table_load's replay of fuzz/corpus: the reader returns,
// or throws Error(io_error) whose message is UTF-8 (fp8route info --json and Python's table_info()
// embed it); and what a reader accepts, the code after it takes:
//   table       a table that loads saves and loads back equal;
//   grouped_table  likewise, and it routes problems of every form and scale kind without throwing;
//   tune_raw    the finished records build a table that saves and loads (tune --build-only);
//   catalog     every TP degree it lists splits its layers into positive shapes;
//   shape_file  every shape is in [1, 2^31) with a UTF-8 label.
// A broken rule throws Broken: uncaught in a fuzz target (libFuzzer reports it as a crash, with the
// input), a test failure in the replay.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/shapes.h"
#include "fp8route/error.h"
#include "fp8route/moe.h"
#include "fp8route/route.h"
#include "fp8route/tuning/tune_raw.h"

namespace fp8route::fuzz {

struct Broken : std::logic_error {
  using std::logic_error::logic_error;
};

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw Broken(what);
}

// nlohmann's dump throws on bytes that are not UTF-8 (as info --json would).
inline bool utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

inline void check_error(const Error& e) {
  expect(e.category() == ErrorCategory::io_error, std::string("not an io_error: ") + e.what());
  expect(utf8(e.what()), "the message is not UTF-8");
}

// A file of this process's own in the temp folder (the readers take paths).
inline std::string scratch_path(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fp8route-fuzz";
  std::filesystem::create_directories(dir);
  return (dir / (std::to_string(::getpid()) + "-" + name)).string();
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// What load() reads from path, saved and loaded back equal; nothing when it fails with an io_error
// (checked as check_error does).
template <class Load, class Save>
auto round_trip(const std::string& path, Load load, Save save) -> std::optional<decltype(load(path))> {
  decltype(load(path)) t;
  try {
    t = load(path);
  } catch (const Error& e) {
    check_error(e);
    return std::nullopt;
  }
  const std::string again = path + ".saved.json";
  save(t, again);
  expect(load(again) == t, "a loaded table saved and loaded back differs");
  return t;
}

inline void table(const std::string& path) { round_trip(path, load_routing_table, save_routing_table); }

inline void grouped_table(const std::string& path) {
  const std::optional<GroupedRoutingTable> t = round_trip(path, load_grouped_table, save_grouped_table);
  if (!t) return;
  for (GroupedForm form : {GroupedForm::contiguous, GroupedForm::masked})
    for (ScaleKind scale : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block})
      for (int64_t rows : {int64_t{1}, int64_t{64}, (int64_t{1} << 31) - 1}) {
        GroupedProblem p;
        p.form = form, p.scale = scale, p.rows = rows, p.experts = 256, p.n = 4096, p.k = 7168;
        std::string why;
        const std::string c = grouped_table_choice(*t, p, [](std::string_view) { return std::string(); }, &why);
        expect(utf8(why), "an explanation that is not UTF-8");
        expect(c.empty() || !why.empty(), "a choice without a reason");
      }
}

inline void tune_raw(const std::string& path) {
  TuneRawFile raw;
  try {
    raw = read_tune_raw(path);
  } catch (const Error& e) {
    return check_error(e);
  }
  expect(raw.good_bytes >= 0 && raw.good_bytes <= static_cast<int64_t>(std::filesystem::file_size(path)),
         "good_bytes outside the file");
  if (raw.records.empty()) return;
  const TableStamp stamp = raw.stamp.value_or(TableStamp{"NVIDIA H200", 132, "13.0", "13.1", "0.1.0", "2026-11-30"});
  const RoutingTable t = build_routing_table(raw.records, stamp);
  const std::string table_path = path + ".table.json";
  save_routing_table(t, table_path);
  expect(load_routing_table(table_path) == t, "a table built from the records saved and loaded back differs");
}

inline void catalog(const std::string& path) {
  tools::ShapeCatalog c;
  try {
    c = tools::load_catalog(path);
  } catch (const Error& e) {
    return check_error(e);
  }
  for (int tp : c.tp)
    for (const tools::LayerShape& l : tools::at_tp(c.layers, tp))
      expect(l.n >= 1 && l.k >= 1 && utf8(l.model) && utf8(l.layer), "a layer split into a bad shape");
  for (int64_t m : c.m_grid) expect(m >= 1, "an M below 1");
}

inline void shape_file(const std::string& path) {
  std::vector<tools::LayerShape> shapes;
  try {
    shapes = tools::load_shape_file(path);
  } catch (const Error& e) {
    return check_error(e);
  }
  for (const tools::LayerShape& l : shapes)
    expect(l.n >= 1 && l.k >= 1 && l.n < (int64_t{1} << 31) && l.k < (int64_t{1} << 31) && utf8(l.layer),
           "a shape out of range or a label that is not UTF-8");
}

}  // namespace fp8route::fuzz
