// One FP8 linear layer with the installed fp8route, from a CMake project of its own (CMakeLists.txt
// beside this file): bf16 weight -> E4M3 codes with per-channel scales, a LinearPlan made once,
// then per call the activations' per-token quant and the routed GEMM; checked against the library's
// fp64 reference GEMM on the same codes.
//   linear [M]     exit 0: the result matches; 1: it does not, or a call failed; 2: no SM90 GPU here
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fp8route/device.h>
#include <fp8route/linear.h>
#include <fp8route/quant.h>
#include <fp8route/reference.h>

using namespace fp8route;

namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device buffer holding a copy of `host` (or `bytes` uninitialized bytes).
void* device_copy(const void* host, size_t bytes) {
  void* p = nullptr;
  cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
  if (host) cuda_check(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  return p;
}

template <class T>
std::vector<T> host_copy(const void* dev, size_t count) {
  std::vector<T> v(count);
  cuda_check(cudaMemcpy(v.data(), dev, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return v;
}

std::vector<uint16_t> random_bf16(size_t count, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<uint16_t> v(count);
  for (auto& x : v) x = ref::f32_to_bf16(dist(rng));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda_device_count() == 0 || !device_info().is_sm90()) {
    std::printf("linear: needs an SM90 GPU (%s)\n",
                cuda_device_count() ? device_info().name.c_str() : cuda_unavailable_reason().c_str());
    return 2;
  }
  const int64_t M = argc > 1 ? std::atoll(argv[1]) : 16, N = 4096, K = 14336;
  try {
    std::mt19937 rng(1234);
    const std::vector<uint16_t> w_host = random_bf16(N * K, 1.0f, rng), x_host = random_bf16(M * K, 1.0f, rng);
    void* w = device_copy(w_host.data(), N * K * 2);
    void* x = device_copy(x_host.data(), M * K * 2);
    void *wq = device_copy(nullptr, N * K), *ws = device_copy(nullptr, N * 4);
    void *q = device_copy(nullptr, M * K), *s = device_copy(nullptr, M * 4), *y = device_copy(nullptr, M * N * 2);
    cudaStream_t stream = nullptr;

    // Load time: the weight's per-channel quant (one scale per row of w [N, K]) and the plan.
    const TensorView wv = TensorView::contiguous(wq, DType::e4m3, {N, K}), wsv = TensorView::contiguous(ws, DType::f32, {N});
    per_token_quant(TensorView::contiguous(w, DType::bf16, {N, K}), wv, wsv, ScaleRounding::none, stream);
    LinearPlan plan(wv, wsv, ScaleKind::row, DType::bf16);

    // Per call: x [M, K] -> codes and per-token scales -> y [M, N] = the routed FP8 GEMM.
    const TensorView qv = TensorView::contiguous(q, DType::e4m3, {M, K}), sv = TensorView::contiguous(s, DType::f32, {M});
    per_token_quant(TensorView::contiguous(x, DType::bf16, {M, K}), qv, sv, ScaleRounding::none, stream);
    plan.run(qv, sv, TensorView::contiguous(y, DType::bf16, {M, N}), stream);
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

    // The reference GEMM (fp64 on the same codes and scales, rounded once to bf16).
    const auto a = host_copy<uint8_t>(q, M * K), b = host_copy<uint8_t>(wq, N * K);
    const auto sa = host_copy<float>(s, M), sb = host_copy<float>(ws, N);
    const auto out = host_copy<uint16_t>(y, M * N);
    const std::vector<float> want =
        ref::scaled_mm(a, b, M, N, K, ScaleKind::row, sa, sb, std::span<const float>(), DType::bf16);
    double max_err = 0, max_ref = 0;
    for (int64_t i = 0; i < M * N; ++i) {
      max_err = std::max(max_err, std::fabs(double(ref::bf16_to_f32(out[i])) - want[i]));
      max_ref = std::max(max_ref, std::fabs(double(want[i])));
    }
    const std::string why = plan.explain(M);
    std::printf("%s\n", why.substr(0, why.find('\n')).c_str());
    std::printf("y [%lld, %lld]: max |y - reference| = %.3g of max |reference| %.3g\n", (long long)M, (long long)N,
                max_err, max_ref);
    for (void* p : {w, x, wq, ws, q, s, y}) cudaFree(p);
    // Fast accumulation (the default class) and bf16 rounding: well within 1% of the largest value.
    const bool ok = max_err <= 1e-2 * max_ref;
    std::printf("%s\n", ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linear: %s\n", e.what());
    return 1;
  }
}
