// Reading fp8route tune's raw measurement file (route.h, TuneRawFile).

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "fp8route/error.h"
#include "fp8route/route.h"
#include "route/stamp_json.h"

namespace fp8route {

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
  TuneRawFile raw;
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) return raw;
  std::map<TuneRawFile::Problem, std::vector<MeasurementRecord>> pending;
  std::string line;
  int64_t offset = 0;
  for (int no = 1; std::getline(f, line); ++no) {
    const bool complete = !f.eof();  // a line ends with '\n' unless it is the last, cut short
    const int64_t next = offset + static_cast<int64_t>(line.size()) + (complete ? 1 : 0);
    try {
      if (!line.empty()) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains("stamp")) {
          raw.stamp = j.at("stamp").get<TableStamp>();
        } else {
          const TuneRawFile::Problem key{parse_scale_kind(j.at("scale").get<std::string>()),
                                         parse_dtype(j.at("out").get<std::string>(), "out"),
                                         j.at("n").get<int64_t>(), j.at("k").get<int64_t>(), j.at("m").get<int64_t>()};
          if (j.value("done", false)) {
            raw.finished.push_back(key);
            std::vector<MeasurementRecord> problem = std::move(pending[key]);
            pending.erase(key);
            // --screen: the configs the quick round dropped, with their quick times (tune.cpp).
            const auto [scale, out, n, k, m] = key;
            if (j.contains("screened_out"))
              for (const nlohmann::json& d : j.at("screened_out"))
                problem.push_back({scale, out, n, k, m, d.at(0).get<std::string>(), d.at(1).get<std::string>(),
                                   d.at(2).get<double>()});
            // --final: the configs timed again (route.h, settle_final_round).
            if (j.contains("final"))
              settle_final_round(problem, j.at("final").get<std::vector<std::pair<std::string, std::string>>>(),
                                 j.at("final_pct").get<double>());
            for (MeasurementRecord& r : problem) raw.records.push_back(std::move(r));
          } else {
            const auto [scale, out, n, k, m] = key;
            pending[key].push_back({scale, out, n, k, m, j.at("backend").get<std::string>(),
                                    j.at("config").get<std::string>(), j.at("us").get<double>()});
          }
        }
      }
      if (!complete) throw std::runtime_error("no end of line");
      raw.good_bytes = next;
    } catch (const std::exception& e) {
      // Only the last line can be torn by an interrupted write; anything else is a damaged file.
      if (complete && f.peek() != EOF)
        FP8ROUTE_FAIL(ErrorCategory::io_error, path << ":" << no << ": not a tune record (" << e.what() << ")");
      raw.torn = true;
    }
    offset = next;
  }
  return raw;
}

}  // namespace fp8route
