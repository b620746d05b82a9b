// fp8route check: a quick correctness self-test of every GEMM backend and config on this GPU.
// The GPU reference kernel is first checked against the CPU fp64 reference (reference.h) on small
// problems; then every (backend, config) that supports a problem, the routed scaled_mm() and a
// LinearPlan are checked against the GPU reference, normwise, on random E4M3 operands spread over
// the whole range. Exit code 1 when anything fails.

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "fp8route/tuning/gemm_operands.h"
#include "commands.h"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "fp8route/reference.h"
#include "fp8route/tuning/backends.h"

namespace fp8route::cli {

namespace {

constexpr double kTolerance = 1e-2;  // normwise relative error; FP8 fast accumulation stays ~1e-3

template <class T>
std::vector<T> to_host(const void* p, int64_t count) {
  std::vector<T> v(static_cast<size_t>(count));
  FP8ROUTE_CUDA_CHECK(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

std::vector<float> output(const ScaledMmArgs& a) {
  const int64_t count = a.out.shape[0] * a.out.shape[1];
  std::vector<uint16_t> bits = to_host<uint16_t>(a.out.data, count);
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = a.out.dtype == DType::bf16 ? ref::bf16_to_f32(bits[i]) : ref::f16_to_f32(bits[i]);
  return v;
}

// ||y - want|| / ||want||; NaN or inf anywhere in y is an error of infinity.
double normwise(const std::vector<float>& y, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) return INFINITY;
    num += (double(y[i]) - want[i]) * (double(y[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void poison(const ScaledMmArgs& a) {
  FP8ROUTE_CUDA_CHECK(cudaMemset(a.out.data, 0xFF, a.out.shape[0] * a.out.shape[1] * 2));  // NaN in bf16 and f16
}

// The CPU fp64 reference of the operands of `a`.
std::vector<float> cpu_reference(const GemmProblem& p, const ScaledMmArgs& a) {
  const std::vector<uint8_t> ha = to_host<uint8_t>(a.a.data, p.m * p.k), hb = to_host<uint8_t>(a.b.data, p.n * p.k);
  const std::vector<float> sa = to_host<float>(a.scale_a.data, a.scale_a.numel());
  const std::vector<float> sb = to_host<float>(a.scale_b.data, a.scale_b.numel());
  std::vector<float> bias;
  if (p.bias) {
    const std::vector<uint16_t> bits = to_host<uint16_t>(a.bias.data, p.n);
    for (uint16_t b : bits) bias.push_back(p.out == DType::bf16 ? ref::bf16_to_f32(b) : ref::f16_to_f32(b));
  }
  return ref::scaled_mm(ha, hb, p.m, p.n, p.k, p.scale, sa, sb, bias, p.out);
}

struct Tally {
  int runs = 0, failed = 0;
  double worst = 0;
};

}  // namespace

int run_check(const CheckOptions& opt) {
  FP8ROUTE_CHECK_CAT(cuda_device_count() > 0, ErrorCategory::unsupported, "check needs a GPU: " << cuda_unavailable_reason());
  const DeviceInfo& dev = device_info(0);
  std::printf("fp8route check on %s: every backend/config vs the GPU reference (itself vs the CPU fp64 "
              "reference on the small shapes), normwise error <= %.0e\n", dev.name.c_str(), kTolerance);
  // (N, K): small with ceil(K/128) = 5 (cuBLASLt's padded block scale_b form), a real layer, and
  // an odd shape only the reference runs. M: decode, odd, middle, prefill.
  std::vector<std::pair<int64_t, int64_t>> shapes = {{512, 640}, {2112, 7168}, {1000, 1000}};
  std::vector<int64_t> ms = {1, 7, 64, 300};
  if (opt.quick) shapes.pop_back(), ms = {1, 64};
  std::map<std::string, Tally> tally;
  int problems = 0, failures = 0;
  tuning::BackendInfo reference;  // the GPU reference kernel: the backend that runs every problem
  for (const tuning::BackendInfo& b : tuning::backends())
    if (b.slow_fallback) reference = b;
  auto report = [&](const std::string& who, const GemmProblem& p, double err) {
    Tally& t = tally[who];
    ++t.runs;
    t.worst = std::max(t.worst, err);
    if (!(err <= kTolerance)) {
      ++t.failed, ++failures;
      std::printf("  FAIL %-60s %s: normwise error %.3g\n", who.c_str(), to_string(p).c_str(), err);
    }
  };
  for (const auto& [n, k] : shapes)
    for (int64_t m : ms)
      for (ScaleKind sk : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block}) {
        const DType out = problems % 2 ? DType::f16 : DType::bf16;
        const GemmProblem p = make_problem(m, n, k, sk, out, /*bias=*/problems % 3 == 1);
        ++problems;
        const timing::GemmOperandSets ops = timing::make_gemm_operands(p, 1, 0xC4ECull + problems);
        const ScaledMmArgs& args = ops.args[0];
        poison(args);
        scaled_mm(args, reference.name, reference.configs.front(), nullptr);
        const std::vector<float> want = output(args);
        if (n * k <= 512 * 1024) report("reference vs CPU fp64", p, normwise(want, cpu_reference(p, args)));
        for (const std::string& b : gemm_backends()) {
          if (b == reference.name) continue;
          for (const std::string& c : gemm_configs(b)) {
            if (!gemm_supports(b, c, p).empty()) continue;
            poison(args);
            scaled_mm(args, b, c, nullptr);
            report(b + "/" + c, p, normwise(output(args), want));
          }
        }
        poison(args);
        scaled_mm(args, nullptr);
        report("routed scaled_mm", p, normwise(output(args), want));
        // A LinearPlan of the same weight (block: with the cuBLASLt form prepared when it needs one).
        const LinearPlan plan(args.b, args.scale_b, sk, out, args.bias);
        poison(args);
        plan.run(args.a, args.scale_a, args.out, nullptr);
        report("LinearPlan (" + plan.route(m).backend + ")", p, normwise(output(args), want));
      }
  FP8ROUTE_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("\n%-62s %5s %6s %12s\n", "backend/config", "runs", "failed", "worst error");
  for (const auto& [who, t] : tally) std::printf("%-62s %5d %6d %12.3g\n", who.c_str(), t.runs, t.failed, t.worst);
  std::printf("\n%d problems; %s\n", problems, failures ? (std::to_string(failures) + " FAILED").c_str() : "all passed");
  return failures ? 1 : 0;
}

}  // namespace fp8route::cli
