// Diagnostic, not built by CMake: does one config time the same in every CUDA-graph instance?
// Every config of a few problems is captured into 4 separate graphs (the same operands, stream and
// workspace) and all are replayed interleaved by measure_gemms (shuffled rounds, L2 flush), twice.
// Found on the H200 (bench/results/2026-11-30-routed-h200/streamk_instances.txt): stream-K configs
// land in one of two speeds per instance (5-10% apart); configs without a workspace do not.
//
// Build (after scripts/build.sh), from build/release:
//   g++ -O2 -std=gnu++20 -I../../src -I../../include -Igenerated -isystem /usr/local/cuda/include \
//       ../../bench/results/2026-11-30-routed-h200/graph_instances.cpp -o graph_instances libfp8route.a \
//       /usr/local/cuda/lib/libcublasLt.so /usr/local/cuda/lib/libcudart_static.a -ldl -lrt -lpthread \
//       -Wl,-rpath,/usr/local/cuda/lib
// Run on the GPU machine with FP8ROUTE_SOURCE_DIR set (the router reads routes/h200.json).
#include <cstdio>
#include "timing/gemm_operands.h"
#include "fp8route/gemm.h"
#include "fp8route/route.h"
using namespace fp8route;
int main() {
  struct S { int64_t m, n, k; ScaleKind s; };
  for (S s : {S{16, 13312, 16384, ScaleKind::block}, S{16, 13312, 16384, ScaleKind::row}}) {
    const GemmProblem p = make_problem(s.m, s.n, s.k, s.s);
    timing::MeasureOptions mo;
    const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), mo);
    const auto ops = timing::make_gemm_operands(p, sets, 42);
    std::printf("%s sets=%d\n", to_string(p).c_str(), sets);
    std::vector<std::pair<std::string, std::string>> all;
    for (const std::string& b : gemm_backends())
      for (const std::string& c : gemm_configs(b))
        if (b != "reference" && b != "skinny" && gemm_supports(b, c, p).empty())
          for (int i = 0; i < 4; ++i) all.push_back({b, c});
    for (int rep = 0; rep < 2; ++rep) {
      const auto ms = timing::measure_gemms(ops, all, mo);
      for (size_t i = 0; i < ms.size(); i += 4)
        std::printf("  %-55s %7.2f %7.2f %7.2f %7.2f\n", (all[i].first + "/" + all[i].second).c_str(), ms[i].median_us,
                    ms[i + 1].median_us, ms[i + 2].median_us, ms[i + 3].median_us);
    }
  }
}
