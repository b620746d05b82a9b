#pragma once
// fp8route tune's raw measurement file, read back (resume, tune --build-only, table build) and
// checked as a routing table is. The format is the tuner's own (tools/fp8route/tune.cpp), not part
// of the library's promise: the library's side is MeasurementRecord and build_routing_table (route.h).

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fp8route/route.h"

namespace fp8route {

// JSON lines: a stamp line, one line per measurement, a "done" line after each problem's last
// measurement.
struct TuneRawFile {
  using Problem = std::tuple<ScaleKind, DType, int64_t, int64_t, int64_t>;  // scale, out, n, k, m
  std::optional<TableStamp> stamp;           // from the stamp line, when there is one
  std::vector<MeasurementRecord> records;    // of finished problems only, screened-out quick times included
  std::vector<Problem> finished;             // problems with a "done" line
  int64_t good_bytes = 0;                    // bytes of complete, valid lines
  bool torn = false;                         // the last line is incomplete (an interrupted write)
};
// A missing file reads as empty. Measurements of a problem without its "done" line are dropped (it
// is measured again); an invalid last line, or one without its end of line, is reported as torn
// (and not read); an invalid line elsewhere throws Error(io_error) naming the file, the line and the
// field. Lines are checked as load_routing_table checks a table (and times are at most 1e12 us), so
// the finished records build a table that loads.
TuneRawFile read_tune_raw(const std::string& path);
// The same from a stream (a file decompressed in memory); `name` names it in errors.
TuneRawFile read_tune_raw(std::istream& in, const std::string& name);

// tune --final: a problem's near-ties were timed again, only they side by side and with more graph
// instances. That round's times and the full round's are not comparable (the mix of kernels and the
// instance count move the clock, and configs not timed again would win problems with their
// full-round times that they lose in the bench: docs/routing.md, "Tuning"), so a config not timed again ranks at least
// pct% behind the fastest of the final round, as it was behind the best of the full round: its time
// becomes max(us, that fastest x (1 + pct/100)). `problem` holds one problem's records (screened-out
// quick times included); `final_round` names the configs timed again. Nothing changes when none of
// them is among the records.
void settle_final_round(std::vector<MeasurementRecord>& problem,
                        const std::vector<std::pair<std::string, std::string>>& final_round, double pct);

}  // namespace fp8route
