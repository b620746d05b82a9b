// Reading fp8route tune's raw measurement file (route/tune_raw.h).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <istream>
#include <map>

#include <nlohmann/json.hpp>

#include "fp8route/tuning/json_reader.h"
#include "fp8route/error.h"
#include "fp8route/route.h"
#include "fp8route/tuning/record_reader.h"
#include "fp8route/tuning/tune_raw.h"

namespace fp8route {

namespace {

using Json = nlohmann::json;
using json_reader::element;
using json_reader::kMaxDim;

// No GEMM takes days; 1e12 us x (1 + 1000% final_pct) is still far from overflow.
constexpr double kMaxUs = 1e12;

// One line's fields, checked as load_routing_table checks a table's: a record that would load into
// a table wrong fails here, naming the line and the field.
struct LineReader : RecordReader {
  using RecordReader::RecordReader;

  // Bounded so that settle_final_round's "pct% behind" stays finite: a time of inf would make the
  // table that tune --build-only writes unreadable.
  double us(const Json& v, const std::string& where) const {
    const double t = positive(v, where, "a positive time in microseconds");
    if (t > kMaxUs) fail(where, "expected a time of at most 1e12 microseconds, got " + json_reader::describe(v));
    return t;
  }
  TuneRawFile::Problem problem(const Json& j) const {
    const std::string scale = str(field(j, "scale", ""), "scale");
    const DType o = out(field(j, "out", ""), "out");
    return {parsed([&] { return parse_scale_kind(scale); }, "scale"), o,
            integer(field(j, "n", ""), "n", 1, kMaxDim), integer(field(j, "k", ""), "k", 1, kMaxDim),
            integer(field(j, "m", ""), "m", 1, kMaxDim)};
  }
};

}  // namespace

void settle_final_round(std::vector<MeasurementRecord>& problem,
                        const std::vector<std::pair<std::string, std::string>>& final_round, double pct) {
  const auto timed_again = [&](const MeasurementRecord& r) {
    return std::find(final_round.begin(), final_round.end(), std::pair(r.backend, r.config)) != final_round.end();
  };
  double fastest = INFINITY;
  for (const MeasurementRecord& r : problem)
    if (timed_again(r)) fastest = std::min(fastest, r.us);
  if (!std::isfinite(fastest)) return;
  for (MeasurementRecord& r : problem)
    if (!timed_again(r)) r.us = std::max(r.us, fastest * (1 + pct / 100));
}

TuneRawFile read_tune_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) return {};
  return read_tune_raw(f, path);
}

TuneRawFile read_tune_raw(std::istream& f, const std::string& path) {
  TuneRawFile raw;
  const std::vector<std::string> known = gemm_backends();
  std::map<TuneRawFile::Problem, std::vector<MeasurementRecord>> pending;
  std::string line;
  int64_t offset = 0;
  for (int64_t no = 1; std::getline(f, line); ++no) {
    const bool complete = !f.eof();  // a line ends with '\n' unless it is the last, cut short
    const int64_t next = offset + static_cast<int64_t>(line.size()) + (complete ? 1 : 0);
    const LineReader rd(path + ":" + std::to_string(no), known);
    try {
      if (!complete) rd.fail("", "no end of line");
      if (!line.empty()) {
        const Json j = rd.parse(line);
        rd.object(j, "");
        if (const Json* s = rd.optional_field(j, "stamp", "")) {
          raw.stamp = rd.stamp(*s);
        } else {
          const TuneRawFile::Problem key = rd.problem(j);
          const auto [scale, out, n, k, m] = key;
          const Json* done = rd.optional_field(j, "done", "");
          if (done && rd.boolean(*done, "done")) {
            std::vector<MeasurementRecord> problem = pending[key];
            // --screen: the configs the quick round dropped, with their quick times (tune.cpp).
            if (const Json* so = rd.optional_field(j, "screened_out", "")) {
              rd.array(*so, "screened_out");
              for (size_t i = 0; i < so->size(); ++i) {
                const std::string w = element("screened_out", i);
                const Json& d = rd.array((*so)[i], w, 3);
                problem.push_back({scale, out, n, k, m, rd.backend(d[0], w + "[0]"), rd.str(d[1], w + "[1]", true),
                                   rd.us(d[2], w + "[2]")});
              }
            }
            // --final: the configs timed again (route.h, settle_final_round).
            if (const Json* fr = rd.optional_field(j, "final", "")) {
              rd.array(*fr, "final");
              std::vector<std::pair<std::string, std::string>> final_round;
              for (size_t i = 0; i < fr->size(); ++i) {
                const std::string w = element("final", i);
                const Json& c = rd.array((*fr)[i], w, 2);
                final_round.emplace_back(rd.backend(c[0], w + "[0]"), rd.str(c[1], w + "[1]", true));
              }
              const Json& pct = rd.field(j, "final_pct", "");
              if (!pct.is_number() || !(pct.get<double>() >= 0 && pct.get<double>() <= 1000))
                rd.fail("final_pct", "expected a percentage in [0, 1000], got " + json_reader::describe(pct));
              settle_final_round(problem, final_round, pct.get<double>());
            }
            // Checked before anything is taken: a bad "done" line leaves the file as it was read.
            raw.finished.push_back(key);
            pending.erase(key);
            for (MeasurementRecord& r : problem) raw.records.push_back(std::move(r));
          } else {
            pending[key].push_back({scale, out, n, k, m, rd.backend(rd.field(j, "backend", ""), "backend"),
                                    rd.str(rd.field(j, "config", ""), "config", true),
                                    rd.us(rd.field(j, "us", ""), "us")});
          }
        }
      }
      raw.good_bytes = next;
    } catch (const Error&) {
      // Only the last line can be torn by an interrupted write; anything else is a damaged file
      // (the error names the file, the line and the field).
      if (complete && f.peek() != EOF) throw;
      raw.torn = true;
    }
    offset = next;
  }
  return raw;
}

}  // namespace fp8route
