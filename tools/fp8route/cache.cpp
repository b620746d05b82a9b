// fp8route cache show|clear: the probe cache that automatic probing (route.h, "Automatic probing")
// keeps, in the folder the environment names (FP8ROUTE_CACHE_DIR, else $XDG_CACHE_HOME/fp8route, else
// ~/.cache/fp8route). show: every file, its shape, the machine it was probed on (and whether that is
// this one), when, what it cost and how many timings it holds. clear: removes them all. No GPU needed.

#include <cstdio>
#include <optional>
#include <set>
#include <string>

#include "commands.h"
#include "fp8route/error.h"
#include "fp8route/route.h"
#include "fp8route/tuning/probe_cache.h"

namespace fp8route::cli {

int run_cache(const CacheOptions& opt) {
  const AutoProbeConfig env = autoprobe_config();
  if (opt.clear) {
    const size_t n = probe_cache::clear(env.cache_dir);
    std::printf("removed %zu files from %s/probes\n", n, env.cache_dir.c_str());
    return 0;
  }
  std::printf("automatic probing: %s (FP8ROUTE_AUTOPROBE), budget %.0f s per process (FP8ROUTE_AUTOPROBE_BUDGET)\n",
              env.enabled ? "on" : "off", env.budget_s);
  if (env.cache_dir.empty()) {
    std::printf("probe cache: none (FP8ROUTE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset)\n");
    return 0;
  }
  std::printf("probe cache: %s\n", env.cache_dir.c_str());
  const std::optional<TableStamp> here = probe_cache::machine_here();
  const std::vector<probe_cache::Listed> files = probe_cache::list(env.cache_dir);
  double seconds = 0;
  size_t mine = 0;
  for (const probe_cache::Listed& l : files) {
    std::printf("%s\n", l.path.c_str());
    if (!l.file) {
      std::printf("  ignored: %s\n", l.error.c_str());
      continue;
    }
    const probe_cache::File& f = *l.file;
    std::set<int64_t> ms;
    for (const Measured& m : f.measured) ms.insert(m.m);
    const bool this_one = here && probe_cache::same_machine(f.machine, *here);
    mine += this_one;
    seconds += f.seconds;
    std::printf("  %s: %zu timings at %zu M, probed by %s on %s in %.2f s\n", probe_cache::to_string(f.key).c_str(),
                f.measured.size(), ms.size(), f.caller.c_str(), f.machine.date.c_str(), f.seconds);
    std::printf("  machine: %s, %d SMs, CUDA %s, cuBLASLt %s, fp8route %s (%s)\n", f.machine.gpu.c_str(),
                f.machine.sm_count, f.machine.cuda.c_str(), f.machine.cublaslt.c_str(), f.machine.fp8route.c_str(),
                !here ? "no GPU here to compare" : this_one ? "this machine" : "not this machine: ignored here");
  }
  std::printf("%zu files (%zu of this machine), %.2f s of probing\n", files.size(), mine, seconds);
  return 0;
}

}  // namespace fp8route::cli
