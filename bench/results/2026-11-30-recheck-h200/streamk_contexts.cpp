// Diagnostic, not built by CMake: is a stream-K config's speed a property of the graph instance or of
// the context it runs in (the stream, and with it the per-stream workspace that holds the partial
// tiles and their flags: src/core/workspace.h)? Each trial runs in a thread of its own, so it gets a
// new stream and a new workspace at a new address; within a trial every config is captured into 4
// graph instances, replayed interleaved (measure_gemms), and also timed as plain launches.
// Question raised in the twelfth session (bench/results/2026-11-30-recheck-h200): on one H200 the
// 128x64 stream-K swap-AB config of llama-3.1-70b down_proj row M = 96 timed 72.97 us in a probe
// and 79.73 / 82.27 us in a bench of the same session, while the 128x128 stream-K timed 75.8-77.5.
//
// Build (after scripts/build.sh), from build/release:
//   g++ -O2 -std=gnu++20 -I../../src -I../../include -Igenerated -isystem /usr/local/cuda/include \
//       ../../bench/results/2026-11-30-recheck-h200/streamk_contexts.cpp -o streamk_contexts libfp8route.a \
//       /usr/local/cuda/lib/libcublasLt.so /usr/local/cuda/lib/libcudart_static.a -ldl -lrt -lpthread \
//       -Wl,-rpath,/usr/local/cuda/lib
#include <cstdio>
#include <thread>
#include "timing/gemm_operands.h"
#include "fp8route/gemm.h"
using namespace fp8route;
int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 8;
  struct S { int64_t m, n, k; std::vector<std::pair<std::string, std::string>> configs; };
  const std::vector<S> shapes = {
      {96, 8192, 28672, {{"cutlass_sm90", "row_128x64x128_1x1x1_coop_streamk_swapab"},
                         {"cutlass_sm90", "row_128x128x128_1x1x1_coop_fastacc_streamk"},
                         {"cublaslt", "heuristic"}}},
      {16, 13312, 16384, {{"cutlass_sm90", "row_128x32x128_1x1x1_coop_streamk_swapab"},
                          {"cutlass_sm90", "row_64x16x128_1x1x1_pingpong_swapab"},
                          {"cublaslt", "heuristic"}}}};
  for (const S& s : shapes) {
    const GemmProblem p = make_problem(s.m, s.n, s.k, ScaleKind::row);
    timing::MeasureOptions mo;
    const int sets = timing::rotation_sets(timing::gemm_call_bytes(p), mo);
    const auto ops = timing::make_gemm_operands(p, sets, 42);
    std::printf("%s sets=%d: per config, 4 graph instances' medians | plain launches' median (us)\n",
                to_string(p).c_str(), sets);
    std::vector<std::pair<std::string, std::string>> all;
    for (const auto& c : s.configs)
      for (int i = 0; i < 4; ++i) all.push_back(c);
    for (int t = 0; t < trials; ++t) {
      std::thread([&] {  // a new thread: a new stream (measure.cu) and so new workspaces
        const auto g = timing::measure_gemms(ops, all, mo);
        timing::MeasureOptions plain = mo;
        plain.graph = false;
        const auto q = timing::measure_gemms(ops, s.configs, plain);
        std::printf(" trial %d\n", t);
        for (size_t c = 0; c < s.configs.size(); ++c)
          std::printf("   %-48s %7.2f %7.2f %7.2f %7.2f | %7.2f\n", s.configs[c].second.c_str(), g[4 * c].median_us,
                      g[4 * c + 1].median_us, g[4 * c + 2].median_us, g[4 * c + 3].median_us, q[c].median_us);
        std::fflush(stdout);
      }).join();
    }
  }
}
