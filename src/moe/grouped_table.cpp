// Grouped routing tables (include/fp8route/moe.h, docs/moe.md "Routing"): the file format and the
// choice for a problem; and the names of the grouped forms. Host code only (the fuzz targets compile
// it with clang). The process-wide table: grouped_default_table.cpp.

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "fp8route/error.h"
#include "fp8route/moe.h"
#include "fp8route/tuning/record_reader.h"
#include "fp8route/tuning/stamp_json.h"

namespace fp8route {

namespace {

constexpr const char* kFormat = "fp8route-grouped-table";
constexpr int64_t kFormatVersion = 1;

using json_reader::element;
using json_reader::Json;
using json_reader::member;

// An entry of another out dtype counts only after every entry of p's own.
constexpr double kOtherOutDistance = 1e6;

double distance(const GroupedTableEntry& e, const GroupedProblem& p) {
  const auto lr = [](int64_t a, int64_t b) { return std::abs(std::log(double(a) / double(b))); };
  return lr(e.experts, std::max<int64_t>(p.experts, 1)) + lr(e.n, std::max<int64_t>(p.n, 1)) +
         lr(e.k, std::max<int64_t>(p.k, 1)) + (e.out == p.out ? 0.0 : kOtherOutDistance);
}

std::string entry_key(const GroupedTableEntry& e) {
  std::ostringstream os;
  os << name(e.form) << ' ' << name(e.scale) << ' ' << dtype_name(e.out) << " e=" << e.experts << " n=" << e.n
     << " k=" << e.k;
  return os.str();
}

}  // namespace

std::string_view name(GroupedForm f) { return f == GroupedForm::masked ? "masked" : "contiguous"; }

GroupedForm parse_grouped_form(std::string_view s) {
  if (s == "contiguous") return GroupedForm::contiguous;
  if (s == "masked") return GroupedForm::masked;
  FP8ROUTE_FAIL(ErrorCategory::invalid_argument, "form: expected \"contiguous\" or \"masked\", got \"" << s << "\"");
}

GroupedRoutingTable load_grouped_table(const std::string& path) {
  if (path.empty())
    FP8ROUTE_FAIL(ErrorCategory::io_error,
                  "grouped routing table: no file named (FP8ROUTE_GROUPED_TABLE or load_grouped_table names one)");
  const std::vector<std::string> known = grouped_backends();
  const RecordReader rd("grouped routing table " + path, known);
  const Json j = rd.document_file(path, kFormat, kFormatVersion);

  GroupedRoutingTable t;
  t.stamp = rd.stamp(rd.field(j, "stamp", ""));
  const Json& entries = rd.array(rd.field(j, "entries", ""), "entries");
  std::map<std::tuple<GroupedForm, ScaleKind, DType, int64_t, int64_t, int64_t>, size_t> seen;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string w = element("entries", i);
    const Json& je = rd.object(entries[i], w);
    GroupedTableEntry e;
    const std::string form = rd.str(rd.field(je, "form", w), member(w, "form"));
    e.form = rd.parsed([&] { return parse_grouped_form(form); }, member(w, "form"));
    const std::string scale = rd.str(rd.field(je, "scale", w), member(w, "scale"));
    e.scale = rd.parsed([&] { return parse_scale_kind(scale); }, member(w, "scale"));
    e.out = rd.out(rd.field(je, "out", w), member(w, "out"));
    e.experts = rd.integer(rd.field(je, "experts", w), member(w, "experts"), 1, json_reader::kMaxDim);
    e.n = rd.integer(rd.field(je, "n", w), member(w, "n"), 1, json_reader::kMaxDim);
    e.k = rd.integer(rd.field(je, "k", w), member(w, "k"), 1, json_reader::kMaxDim);
    if (const Json* src = rd.optional_field(je, "source", w)) e.source = rd.str(*src, member(w, "source"));
    if (auto [it, fresh] = seen.try_emplace({e.form, e.scale, e.out, e.experts, e.n, e.k}, i); !fresh)
      rd.fail(w, "same (form, scale, out, experts, n, k) as entries[" + std::to_string(it->second) + "]");

    const std::string wms = member(w, "measured");
    const Json& ms = rd.array(rd.field(je, "measured", w), wms, 1);
    std::map<std::pair<int64_t, std::string>, size_t> at;
    for (size_t r = 0; r < ms.size(); ++r) {
      const std::string wr = element(wms, r);
      GroupedMeasured m{rd.integer(rd.at(ms[r], 0, wr), wr + "[0] (rows)", 1, json_reader::kMaxDim),
                        rd.backend(rd.at(ms[r], 1, wr), wr + "[1] (backend)"),
                        rd.positive(rd.at(ms[r], 2, wr), wr + "[2] (us)", "a positive time in microseconds")};
      if (auto [it, fresh] = at.try_emplace({m.rows, m.backend}, r); !fresh)
        rd.fail(wr, "same (rows, backend) as " + element(wms, it->second));
      e.measured.push_back(std::move(m));
    }
    t.entries.push_back(std::move(e));
  }
  return t;
}

void save_grouped_table(const GroupedRoutingTable& t, const std::string& path) {
  // One measurement a line, so that a re-measured table's diff reads; full precision round-trips.
  std::ostringstream os;
  os.precision(17);
  const auto q = [](const std::string& s) { return Json(s).dump(); };
  os << table_head(kFormat, kFormatVersion, t.stamp);
  for (size_t i = 0; i < t.entries.size(); ++i) {
    const GroupedTableEntry& e = t.entries[i];
    os << (i ? ",\n" : "\n") << "{\"form\": " << q(std::string(name(e.form))) << ", \"scale\": "
       << q(std::string(name(e.scale))) << ", \"out\": " << q(std::string(dtype_name(e.out)))
       << ", \"experts\": " << e.experts << ", \"n\": " << e.n << ", \"k\": " << e.k << ", \"source\": " << q(e.source)
       << ",\n \"measured\": [";
    for (size_t r = 0; r < e.measured.size(); ++r)
      os << (r ? ",\n  " : "\n  ") << "[" << e.measured[r].rows << ", " << q(e.measured[r].backend) << ", "
         << e.measured[r].us << "]";
    os << "]}";
  }
  os << "\n]\n}\n";
  write_text_file(path, os.str(), "grouped routing table");
}

std::string grouped_table_choice(const GroupedRoutingTable& table, const GroupedProblem& p,
                                 const std::function<std::string(std::string_view)>& supports, std::string* why) {
  const GroupedTableEntry* best = nullptr;
  double best_d = 0;
  for (const GroupedTableEntry& e : table.entries)  // an exact entry without a logarithm (every call asks)
    if (e.form == p.form && e.scale == p.scale && e.out == p.out && e.experts == p.experts && e.n == p.n &&
        e.k == p.k) {
      best = &e;
      break;
    }
  const bool exact = best != nullptr;
  for (const GroupedTableEntry& e : table.entries) {
    if (exact || e.form != p.form || e.scale != p.scale) continue;
    const double d = distance(e, p);
    if (!best || d < best_d) best = &e, best_d = d;
  }
  if (!best) {
    if (why) *why = "no entry of form " + std::string(name(p.form)) + " and scale " + std::string(name(p.scale));
    return "";
  }
  // At measured rows: their ranking. Between two: every backend measured at both, by its time
  // interpolated linearly in rows, then the others measured at the upper. Below the smallest or
  // above the largest: that one. (Every call without a named backend asks: no copies, and the
  // text only when asked for.)
  std::vector<int64_t> rows;
  for (const GroupedMeasured& m : best->measured)
    if (std::find(rows.begin(), rows.end(), m.rows) == rows.end()) rows.push_back(m.rows);
  std::sort(rows.begin(), rows.end());
  const auto hi_it = std::lower_bound(rows.begin(), rows.end(), p.rows);
  const bool between = hi_it != rows.end() && *hi_it != p.rows && hi_it != rows.begin();
  const int64_t hi = hi_it != rows.end() ? *hi_it : rows.back(), lo = between ? *std::prev(hi_it) : hi;
  using Candidate = std::pair<const std::string*, double>;  // backend, us (interpolated or measured)
  const auto by_time = [](const Candidate& a, const Candidate& b) { return a.second < b.second; };
  std::vector<Candidate> estimated, ranked_hi;
  for (const GroupedMeasured& m : best->measured) {
    if (m.rows != hi) continue;
    const GroupedMeasured* at_lo = nullptr;
    if (between)
      for (const GroupedMeasured& o : best->measured)
        if (o.rows == lo && o.backend == m.backend) at_lo = &o;
    if (at_lo) {
      const double w = double(p.rows - lo) / double(hi - lo);
      estimated.emplace_back(&m.backend, (1 - w) * at_lo->us + w * m.us);
    } else {
      ranked_hi.emplace_back(&m.backend, m.us);
    }
  }
  std::stable_sort(estimated.begin(), estimated.end(), by_time);
  std::stable_sort(ranked_hi.begin(), ranked_hi.end(), by_time);

  std::string chosen;
  std::ostringstream os;
  os.precision(4);
  const auto take = [&](const std::vector<Candidate>& ranked) {
    for (const auto& [backend, us] : ranked) {
      const std::string no = chosen.empty() || why ? supports(*backend) : std::string("-");
      if (why) {
        os << ' ' << *backend << ' ' << us << " us";
        if (!no.empty()) os << " (cannot run: " << no << ")";
        else if (chosen.empty()) os << " (chosen)";
        os << ';';
      }
      if (no.empty() && chosen.empty()) chosen = *backend;
    }
  };
  if (why) {
    os << "entry " << entry_key(*best);
    if (!best->source.empty()) os << " (" << best->source << ")";
    if (best_d == 0) os << ", exact";
    else os << ", nearest (distance " << best_d << ")";
    if (between)
      os << "; estimated at rows " << p.rows << ", interpolated between measured rows " << lo << " and " << hi << ":";
  }
  take(estimated);
  if (why) {
    if (!between) os << "; at measured rows " << hi << (hi >= p.rows ? "" : " (the largest measured)") << ":";
    else if (!ranked_hi.empty()) os << " then at measured rows " << hi << ":";
  }
  take(ranked_hi);
  if (why) {
    if (chosen.empty()) os << " none of them runs the problem";
    *why = os.str();
  }
  return chosen;
}

}  // namespace fp8route
