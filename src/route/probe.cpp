// probe_shape (route.h) and autoprobe::probe_within (autoprobe.h): a shape's routing candidates
// timed on this GPU.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "fp8route/tuning/gemm_operands.h"
#include "fp8route/tuning/measure.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/route.h"
#include "gemm/backend.h"
#include "route/autoprobe.h"
#include "fp8route/tuning/route_log.h"

namespace fp8route {

namespace autoprobe {

ShapeProbe probe_within(const Router& router, const ProblemAtM& problem_at, const ProbeOptions& opt, double budget_s,
                        int64_t near_m) {
  FP8ROUTE_CHECK(opt.top >= 1, "ProbeOptions::top: at least 1, got " << opt.top);
  FP8ROUTE_CHECK(opt.reps >= 1 && opt.warmup >= 0 && opt.instances >= 1,
                 "ProbeOptions: reps >= 1, warmup >= 0, instances >= 1, got reps=" << opt.reps << " warmup="
                                                                                   << opt.warmup << " instances="
                                                                                   << opt.instances);
  for (int64_t m : opt.m_grid) FP8ROUTE_CHECK(m >= 1, "ProbeOptions::m_grid: every M >= 1, got " << m);
  std::vector<int64_t> grid = opt.m_grid;
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  if (!opt.always)
    grid.erase(std::remove_if(grid.begin(), grid.end(),
                              [&](int64_t m) { return router.select(problem_at(m, "")).source == Route::Source::exact; }),
               grid.end());
  ShapeProbe result;
  std::vector<MeasurementRecord>& out = result.records;
  if (grid.empty()) return result;
  FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported,
                     "probe_shape needs a GPU: " << cuda_unavailable_reason());
  if (near_m > 0)  // nearest first on a log scale, where the router interpolates
    std::stable_sort(grid.begin(), grid.end(), [&](int64_t a, int64_t b) {
      return std::abs(std::log(double(a) / double(near_m))) < std::abs(std::log(double(b) / double(near_m)));
    });
  timing::MeasureOptions mo;
  mo.warmup = opt.warmup, mo.reps = opt.reps, mo.instances = opt.instances;
  const auto t0 = std::chrono::steady_clock::now();
  const auto spent = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (int64_t m : grid) {
    if (budget_s > 0 && !result.done.empty() && spent() >= budget_s) {
      result.due.push_back(m);
      continue;
    }
    result.done.push_back(m);
    const GemmProblem routed = problem_at(m, "");
    // Each backend runs the problem in its own scale form (LinearPlan pads a block weight scale for
    // cuBLASLt): the candidates of one form (to_string names it) are timed side by side on one set
    // of operands.
    using Choices = std::vector<std::pair<std::string, std::string>>;
    std::map<std::string, std::pair<GemmProblem, Choices>> by_form;
    for (const auto& c : router.probe_candidates(routed, opt.top)) {
      const GemmProblem p = problem_at(m, c.first);
      by_form.try_emplace(to_string(p), p, Choices{}).first->second.second.push_back(c);
    }
    for (const auto& [key, form] : by_form) {
      const auto& [p, choices] = form;
      const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), mo);
      timing::GemmOperandSets ops = timing::make_gemm_operands(p, sets, 0x9B0Bull + uint64_t(m));
      if (route_log::enabled()) {
        std::string names;
        for (const auto& [b, c] : choices) names += (names.empty() ? "" : ", ") + b + "/" + c;
        route_log::note("fp8route probe: timing " + key + ": " + names);
      }
      const std::vector<timing::Measurement> ms = timing::measure_gemms(ops, choices, mo);
      std::string stalled;
      for (size_t i = 0; i < choices.size(); ++i) {
        if (ms[i].error.empty())
          out.push_back({routed.scale, routed.out, routed.n, routed.k, m, choices[i].first, choices[i].second,
                         ms[i].median_us});
        if (!ms[i].stalled) continue;
        gemm::quarantine(choices[i].first, choices[i].second, p, "timed at m=" + std::to_string(m) + ": " + ms[i].error);
        stalled += (stalled.empty() ? "" : ", ") + choices[i].first + "/" + choices[i].second;
      }
      if (!stalled.empty()) {
        set_default_router(default_router());  // the routed scaled_mm decides its problems again
        // Work that may never finish still reads the operands: freeing them would wait for it.
        for (auto* bufs : {&ops.a, &ops.b, &ops.out})
          for (DeviceBuffer& b : *bufs) b.release();
        ops.sa.release(), ops.sb.release(), ops.bias.release();
        FP8ROUTE_FAIL(ErrorCategory::timeout,
                      "probe_shape: " << stalled << " did not finish within " << mo.timeout_s << " s on " << key
                                      << "; quarantined for this shape in this process (never chosen)");
      }
    }
  }
  std::sort(result.done.begin(), result.done.end());
  std::sort(result.due.begin(), result.due.end());
  return result;
}

}  // namespace autoprobe

std::vector<MeasurementRecord> probe_shape(const Router& router, const ProblemAtM& problem_at, const ProbeOptions& opt) {
  return autoprobe::probe_within(router, problem_at, opt, 0, 0).records;
}

std::vector<MeasurementRecord> probe_shapes(const Router& router, const std::vector<std::pair<int64_t, int64_t>>& shapes,
                                            const std::vector<ScaleKind>& scales, DType out, const ProbeOptions& opt,
                                            const ProbeProgress& progress) {
  std::vector<MeasurementRecord> all;
  ProbedShape step;
  step.total = shapes.size() * scales.size();
  for (size_t i = 0; i < shapes.size(); ++i)
    for (ScaleKind sk : scales) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto [n, k] = shapes[i];
      const std::vector<MeasurementRecord> recs =
          probe_shape(router, [&](int64_t m, const std::string&) { return make_problem(m, n, k, sk, out); }, opt);
      all.insert(all.end(), recs.begin(), recs.end());
      step.shape = i, step.scale = sk, ++step.done, step.records = &recs;
      step.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (progress) progress(step);
    }
  return all;
}

}  // namespace fp8route
