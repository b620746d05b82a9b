// LinearPlan::run takes block activation scales in every form scaled_mm takes (gemm.h): the
// physical [ceil(K/128), align(M, 4)] buffer, its [M, ceil(K/128)] transpose view (read in place),
// and the other [M, ceil(K/128)] views engines pass (K-major, M-major with another row stride),
// gathered on the call's stream. On the GPU every form gives the physical form's output bit for bit,
// eagerly and replayed from a CUDA graph; on the CPU, the forms it refuses name the scale, and the
// ones it takes describe the problem the plan routed.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "fp8route/reference.h"
#include "gpu_util.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::expect_invalid;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align4(int64_t v) { return (v + 3) / 4 * 4; }

// One [M, kb] matrix of activation scales s[r * kb + j] in one of the forms, in memory of its own.
struct Form {
  std::string name;
  std::vector<float> host;  // the buffer the view reads
  int64_t rows, cols, stride0, stride1;

  TensorView view(void* data) const {
    return TensorView::strided(data, DType::f32, {rows, cols}, {stride0, stride1});
  }
};

std::vector<Form> forms_of(const std::vector<float>& s, int64_t m, int64_t kb) {
  const int64_t ld = align4(m), wide = ld + 4;
  const float gap = std::numeric_limits<float>::quiet_NaN();  // never read: a NaN would show in out
  std::vector<float> physical(kb * ld, 0.0f), by_m(kb * m), padded(kb * wide, gap);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < kb; ++j) {
      physical[j * ld + r] = s[r * kb + j];
      by_m[j * m + r] = s[r * kb + j];
      padded[j * wide + r] = s[r * kb + j];
    }
  std::vector<Form> forms{{"physical [kb, align(M, 4)]", physical, kb, ld, ld, 1},
                          {"transpose view (strides [1, align(M, 4)])", physical, m, kb, 1, ld},
                          {"K-major [M, kb]", s, m, kb, kb, 1},
                          {"M-major, row stride M", by_m, m, kb, 1, m},
                          {"M-major, row stride align(M, 4) + 4", padded, m, kb, 1, wide}};
  // A contiguous [M, kb] with M == kb and M % 4 == 0 has the physical form's shape and strides, and
  // is read as that form (gemm.h): the K-major form cannot be told apart then.
  if (m == kb && m % 4 == 0) forms.erase(forms.begin() + 2);
  return forms;
}

// ---- CPU: what run() refuses, and the problem of what it takes --------------------------------

// Fake device addresses, 16-byte aligned and apart: the plan and run() check them without a GPU.
void* at(uintptr_t slot) { return reinterpret_cast<void*>((uintptr_t{1} << 36) + (slot << 32)); }

TEST(LinearPlanScales, RefusedFormsNameTheScaleAndTakenOnesRouteAsPhysical) {
  // ceil(K/128) = 4: no padded weight scale, so the plan touches no device memory.
  const int64_t n = 256, k = 512, kb = 4, m = 10, ld = align4(m);
  const TensorView w = TensorView::contiguous(at(0), DType::e4m3, {n, k});
  const LinearPlan plan(w, TensorView::contiguous(at(1), DType::f32, {cdiv(n, 128), kb}), ScaleKind::block,
                        DType::bf16);
  const TensorView a = TensorView::contiguous(at(2), DType::e4m3, {m, k});
  const TensorView out = TensorView::contiguous(at(3), DType::bf16, {m, n});
  auto run = [&](TensorView s) { plan.run(a, s, out, nullptr); };
  auto f32 = [](std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) {
    return TensorView::strided(at(4), DType::f32, shape, strides);
  };
  expect_invalid([&] { run(f32({kb, m}, {m, 1})); }, "scale_a (block");        // [kb, M]: M not padded to 4
  expect_invalid([&] { run(f32({m, kb + 1}, {kb + 1, 1})); }, "scale_a (block");  // K blocks of another K
  expect_invalid([&] { run(f32({m}, {1})); }, "scale_a (block");                // a per-token vector
  expect_invalid([&] { run(f32({kb, ld}, {2 * ld, 1})); }, "must be contiguous"); // physical shape, gaps
  expect_invalid([&] { run(TensorView::contiguous(at(4), DType::f16, {kb, ld})); }, "scale_a: dtype f16");
  expect_invalid([&] { run(TensorView::contiguous(static_cast<char*>(at(4)) + 2, DType::f32, {kb, ld})); },
                 "scale_a: pointer");
  // Another activation kind's plan refuses block scales, naming a_scale.
  const LinearPlan row(w, TensorView::contiguous(at(1), DType::f32, {n}), ScaleKind::row, DType::bf16);
  expect_invalid([&] { row.run(a, f32({kb, ld}, {ld, 1}), out, nullptr); }, "a_scale: per-token activations");
  const LinearPlan tensor(w, TensorView::contiguous(at(1), DType::f32, {n}), ScaleKind::tensor, DType::bf16);
  expect_invalid([&] { tensor.run(a, f32({m}, {1}), out, nullptr); }, "a_scale: per-tensor activations");

  // Every form run() takes is the problem the plan routes for M: run() checks exactly this before
  // it hands the operands (gathered where needed) to the routed backend.
  const std::vector<Form> forms = forms_of(std::vector<float>(m * kb, 1.0f), m, kb);
  for (const Form& f : forms) {
    const ScaledMmArgs args{a, w, f.view(at(4)), TensorView::contiguous(at(1), DType::f32, {cdiv(n, 128), kb}),
                            {}, out, ScaleKind::block};
    EXPECT_EQ(check_scaled_mm(args), plan.layout().problem(m, 16, plan.route(m).backend)) << f.name;
  }
}

// ---- GPU: every form, bit for bit ------------------------------------------------------------

struct Layer {
  int64_t n, k;
  std::vector<uint8_t> w;
  std::vector<float> ws;
  DeviceBuffer w_dev, ws_dev;
  std::unique_ptr<LinearPlan> plan;

  Layer(int64_t n_, int64_t k_, std::mt19937_64& rng) : n(n_), k(k_) {
    w = test::random_codes(n * k, rng);
    ws = test::random_scales(cdiv(n, 128) * cdiv(k, 128), rng);
    w_dev = test::upload(w);
    ws_dev = test::upload(ws);
    plan = std::make_unique<LinearPlan>(TensorView::contiguous(w_dev.data(), DType::e4m3, {n, k}),
                                        TensorView::contiguous(ws_dev.data(), DType::f32, {cdiv(n, 128), cdiv(k, 128)}),
                                        ScaleKind::block, DType::bf16);
  }
};

// out of plan.run for activations a_dev [M, K] and the scales of `f` uploaded to `s_dev`.
std::vector<uint8_t> run_form(const Layer& l, const DeviceBuffer& a_dev, int64_t m, const Form& f,
                              DeviceBuffer& s_dev, cudaStream_t stream) {
  s_dev = test::upload(f.host);
  DeviceBuffer out(m * l.n * 2);
  test::poison(out, 0xFF);
  l.plan->run(TensorView::contiguous(a_dev.data(), DType::e4m3, {m, l.k}), f.view(s_dev.data()),
              TensorView::contiguous(out.data(), DType::bf16, {m, l.n}), stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return test::download(out.data(), out.bytes());
}

TEST(LinearPlanScalesGpu, EveryBlockScaleFormGivesThePhysicalFormsBits) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  std::mt19937_64 rng = test::make_rng(11);
  // ceil(K/128) % 4 != 0 with N > 128 (K = 640, 1664): cuBLASLt is given its padded weight scale.
  const int64_t shapes[][2] = {{256, 512}, {384, 640}, {1024, 1664}, {2048, 1024}};
  for (const auto& [n, k] : shapes) {
    Layer l(n, k, rng);
    const int64_t kb = cdiv(k, 128);
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t(5 + rng() % 60), int64_t(64 + rng() % 300)}) {
      const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m) +
                               " routed " + l.plan->route(m).backend + "/" + l.plan->route(m).config;
      const std::vector<uint8_t> a = test::random_codes(m * k, rng);
      const std::vector<float> s = test::random_scales(m * kb, rng);
      const DeviceBuffer a_dev = test::upload(a);
      const std::vector<Form> forms = forms_of(s, m, kb);
      DeviceBuffer s_dev;
      const std::vector<uint8_t> want = run_form(l, a_dev, m, forms[0], s_dev, nullptr);
      // The physical form against an independent reference, so that agreeing forms are right too.
      const std::vector<float> ref =
          ref::scaled_mm(a, l.w, m, n, k, ScaleKind::block, forms[0].host, l.ws, {}, DType::bf16);
      float peak = 0;
      for (float v : ref) peak = std::max(peak, std::fabs(v));
      for (int64_t i = 0; i < m * n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, &want[i * 2], 2);
        const float got = ref::bf16_to_f32(bits);
        ASSERT_LE(std::fabs(got - ref[i]), 0.02f * std::fabs(ref[i]) + 1e-2f * peak)
            << what << " element " << i << ": " << got << " vs reference " << ref[i];
      }
      for (size_t f = 1; f < forms.size(); ++f)
        EXPECT_TRUE(test::bytes_equal(run_form(l, a_dev, m, forms[f], s_dev, nullptr), want,
                                      (what + ", " + forms[f].name).c_str()));
    }
  }
}

// A gathered form under graph capture: the gather is part of the graph, so a replay reads the scales
// the buffer holds then, and gives what an eager call on the physical form gives for them.
TEST(LinearPlanScalesGpu, GatheredScalesReplayFromAGraph) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();
  std::mt19937_64 rng = test::make_rng(12);
  const int64_t n = 512, k = 1024, kb = 8, m = 37;
  Layer l(n, k, rng);
  const std::vector<uint8_t> a = test::random_codes(m * k, rng);
  const DeviceBuffer a_dev = test::upload(a);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<float> s1 = test::random_scales(m * kb, rng), s2 = test::random_scales(m * kb, rng);
  const Form kmajor1 = forms_of(s1, m, kb)[2], kmajor2 = forms_of(s2, m, kb)[2];
  DeviceBuffer s_dev;
  // First call of this M outside capture (the route is decided then), then the capture.
  const std::vector<uint8_t> eager1 = run_form(l, a_dev, m, kmajor1, s_dev, stream);
  DeviceBuffer out(m * n * 2);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::string error;
  try {
    l.plan->run(TensorView::contiguous(a_dev.data(), DType::e4m3, {m, k}), kmajor1.view(s_dev.data()),
                TensorView::contiguous(out.data(), DType::bf16, {m, n}), stream);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(error, "");
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  test::poison(out, 0xFF);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(test::bytes_equal(test::download(out.data(), out.bytes()), eager1, "graph, first scales"));
  // New scales in the same buffer: the replay gathers them.
  ASSERT_EQ(cudaMemcpy(s_dev.data(), kmajor2.host.data(), kmajor2.host.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  DeviceBuffer s_phys;
  const std::vector<uint8_t> want2 = run_form(l, a_dev, m, forms_of(s2, m, kb)[0], s_phys, stream);
  EXPECT_NE(want2, eager1) << "the two scale sets give one output: the replay check would prove nothing";
  EXPECT_TRUE(test::bytes_equal(test::download(out.data(), out.bytes()), want2, "graph, new scales"));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fp8route
