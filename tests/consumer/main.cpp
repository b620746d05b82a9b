// Uses the installed library without a GPU: its version, the shipped routing table found where the
// library looks for it, and that table's choice for one problem.
//   consumer [expected table path]     exit status 0 when all of that works (and the path matches)

#include <cstdio>
#include <string>

#include "fp8route/device.h"
#include "fp8route/route.h"
#include "fp8route/version.h"

int main(int argc, char** argv) {
  const fp8route::LibraryVersions v = fp8route::library_versions();
  const std::string path = fp8route::default_table_path();
  std::printf("fp8route %s (headers %s), cuBLASLt %s\ntable: %s\n", v.fp8route.c_str(), FP8ROUTE_VERSION,
              fp8route::cublas_version_string(v.cublaslt).c_str(), path.c_str());
  if (v.fp8route != FP8ROUTE_VERSION || (argc > 1 && path != argv[1])) {
    std::fprintf(stderr, "consumer: expected fp8route %s and table %s\n", FP8ROUTE_VERSION, argc > 1 ? argv[1] : path.c_str());
    return 1;
  }
  try {
    // Every choice allowed, as on an H200: the table's own choice, whatever this machine has.
    const fp8route::Router router(fp8route::load_routing_table(path),
                                  [](std::string_view, std::string_view, const fp8route::GemmProblem&) { return std::string(); });
    const fp8route::GemmProblem p = fp8route::make_problem(64, 4096, 14336, fp8route::ScaleKind::block);
    const fp8route::Route r = router.select(p);
    std::printf("%s -> %s %s (%s)\n", fp8route::to_string(p).c_str(), r.backend.c_str(), r.config.c_str(),
                std::string(fp8route::name(r.source)).c_str());
    return r.source == fp8route::Route::Source::heuristic ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
