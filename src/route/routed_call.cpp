// The routed scaled_mm (gemm.h): the call checked by the GEMM layer (gemm/call.h), its backend and
// config chosen by the process-wide router (with automatic probing for shapes its table lacks) and
// kept per problem, then run.

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "fp8route/gemm.h"
#include "fp8route/route.h"
#include "gemm/backend.h"
#include "gemm/call.h"
#include "route/autoprobe.h"
#include "fp8route/tuning/route_log.h"

namespace fp8route {

namespace {

struct ProblemHash {
  size_t operator()(const GemmProblem& p) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : {uint64_t(p.m), uint64_t(p.n), uint64_t(p.k), uint64_t(p.scale), uint64_t(p.out),
                       uint64_t(p.bias) | uint64_t(p.sa_vector) << 1 | uint64_t(p.sb_vector) << 2 |
                           uint64_t(p.sb_padded) << 3 | uint64_t(p.accum) << 4 | uint64_t(p.align) << 8})
      h = (h ^ v) * 1099511628211ull;
    return h;
  }
};

struct Resolved {
  const gemm::GemmBackend* backend;
  int config;
};

// The default router's choice per problem, so that a shape seen before costs one hash lookup (the
// router's scan, supports() calls and strings run once per distinct problem). Dropped when the
// default router is replaced.
Resolved routed_choice(const GemmProblem& p, cudaStream_t stream) {
  static std::shared_mutex mu;
  static std::unordered_map<GemmProblem, Resolved, ProblemHash> cache;
  static uint64_t generation = 0;
  const uint64_t now = default_router_generation();
  {
    std::shared_lock<std::shared_mutex> lock(mu);
    if (generation == now)
      if (auto it = cache.find(p); it != cache.end()) return it->second;
  }
  // The router checks supports() on its choice (and falls back through gemm_select() to reference).
  // default_router(), with this GPU's timings of p's shape when its table lacks it (route.h,
  // automatic probing); deferred under graph capture: not kept, the next call decides (and probes).
  bool deferred = false;
  const std::shared_ptr<const Router> router = autoprobe::router_for_call(p, stream, deferred);
  const Route r = router->select(p);
  route_log::decided("scaled_mm", *router, p, r);  // FP8ROUTE_LOG, and a table of another GPU
  const gemm::GemmBackend& b = gemm::find_backend(r.backend);
  const Resolved res{&b, gemm::find_config(b, r.config)};
  std::unique_lock<std::shared_mutex> lock(mu);
  // A thread that decided under an older router neither rolls the generation back nor keeps its
  // route for the newer one.
  if (now > generation) cache.clear(), generation = now;
  if (!deferred && now == generation) cache.emplace(p, res);
  return res;
}

}  // namespace

void scaled_mm(const ScaledMmArgs& args, cudaStream_t stream) {
  const gemm::CheckedCall c = gemm::check_call(args);
  if (c.problem.m == 0 || c.problem.n == 0) return;
  const Resolved r = routed_choice(c.problem, stream);
  gemm::run_call(*r.backend, r.config, c, stream);
}

}  // namespace fp8route
