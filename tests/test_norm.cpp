// RMSNorm and its fused quantization against the CPU reference: bit-exact values, residual sums,
// codes and scales; fused equal to the unfused composition on the GPU; graph replay; argument
// errors that name the argument and write nothing.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fp8route/error.h"
#include "fp8route/norm.h"
#include "fp8route/quant.h"
#include "fp8route/reference.h"
#include "gpu_util.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::bytes_equal;
using test::expect_invalid;
using test::download;
using test::poison;
using test::upload;

std::vector<uint8_t> as_bytes(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// 16-bit words with every NaN made 0x7FFF: a NaN's payload is not specified (the GPU's conversion
// writes the canonical NaN, the reference's keeps fp32's quiet bit), only that it is a NaN.
std::vector<uint8_t> nan_canonical(std::vector<uint8_t> b, DType dtype) {
  for (size_t i = 0; i + 1 < b.size(); i += 2) {
    uint16_t w;
    std::memcpy(&w, &b[i], 2);
    const bool nan = dtype == DType::bf16 ? (w & 0x7F80) == 0x7F80 && (w & 0x7F) : (w & 0x7C00) == 0x7C00 && (w & 0x3FF);
    if (nan) w = 0x7FFF;
    std::memcpy(&b[i], &w, 2);
  }
  return b;
}

// Weights near 1 with a spread, as trained norm weights are.
std::vector<uint8_t> random_weight(DType dtype, int64_t h, std::mt19937_64& rng) {
  std::vector<uint8_t> w(static_cast<size_t>(h * 2));
  std::uniform_real_distribution<float> u(0.25f, 2.0f);
  for (int64_t i = 0; i < h; ++i) test::store_value(w, dtype, i, (i % 7 == 0 ? -1.0f : 1.0f) * u(rng));
  return w;
}

// Host operands of one problem and their device copies.
struct Problem {
  DType dtype;
  int64_t T, H;
  bool residual;
  float eps = 1e-6f;
  std::vector<uint8_t> x, r, w;
  DeviceBuffer dx, dr, dw;
  Problem(DType d, int64_t t, int64_t h, bool res, std::mt19937_64& rng)
      : dtype(d), T(t), H(h), residual(res) {
    x = test::random_activations(d, T * H, rng, H, -4, 3);
    r = test::random_activations(d, T * H, rng, 64, -6, 2);
    w = random_weight(d, H, rng);
    dx = upload(x);
    dr = upload(r);
    dw = upload(w);
  }
  TensorView xv() const { return TensorView::contiguous(dx.data(), dtype, {T, H}); }
  RmsNormInput input(const DeviceBuffer& h_out) const {
    RmsNormInput in{xv(), TensorView::contiguous(dw.data(), dtype, {H}), eps, {}, {}};
    if (residual) {
      in.residual = TensorView::contiguous(dr.data(), dtype, {T, H});
      in.residual_out = TensorView::contiguous(h_out.data(), dtype, {T, H});
    }
    return in;
  }
  ref::RmsNormOutput want() const {
    return ref::rms_norm(x.data(), residual ? r.data() : nullptr, H, w.data(), dtype, T, H, eps);
  }
  std::string repro() const {
    return std::string(dtype_name(dtype)) + "[" + std::to_string(T) + "," + std::to_string(H) + "]" +
           (residual ? " +residual" : "") + " seed=" + std::to_string(test::test_seed());
  }
};

// The widths of models.json's layers' inputs, and ones that take 2, 4 and 8 vectors per thread.
constexpr int64_t kWidths[] = {4096, 7168, 5376, 8192, 1536, 512, 16384, 18432, 24, 32768};

TEST(RmsNormGpu, ValuesAndResidualBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(300);
  int w = 0;
  for (DType d : {DType::bf16, DType::f16})
    for (bool res : {false, true})
      for (int64_t T : {1, 3, 65}) {
        Problem p(d, T, kWidths[w++ % std::size(kWidths)], res, rng);
        DeviceBuffer dy(T * p.H * 2), dh(T * p.H * 2);
        poison(dy, 0xAB);
        poison(dh, 0xAB);
        rms_norm(p.input(dh), TensorView::contiguous(dy.data(), d, {T, p.H}), nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto want = p.want();
        ASSERT_TRUE(bytes_equal(download(dy.data(), T * p.H * 2), as_bytes(want.y), "y", p.H * 2)) << p.repro();
        if (res)
          ASSERT_TRUE(bytes_equal(download(dh.data(), T * p.H * 2), as_bytes(want.h), "residual_out", p.H * 2))
              << p.repro();
      }
}

TEST(RmsNormGpu, InPlaceForms) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(301);
  Problem p(DType::bf16, 17, 4096, true, rng);
  const auto want = p.want();
  // out = x and residual_out = residual, as engines call fused_add_rms_norm.
  RmsNormInput in = p.input(p.dr);
  rms_norm(in, p.xv(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(bytes_equal(download(p.dx.data(), p.T * p.H * 2), as_bytes(want.y), "y in x", p.H * 2));
  ASSERT_TRUE(bytes_equal(download(p.dr.data(), p.T * p.H * 2), as_bytes(want.h), "h in residual", p.H * 2));
}

std::vector<GroupQuantSpec> some_specs() {
  std::vector<GroupQuantSpec> v;
  int i = 0;
  for (int g : kGroupSizes)
    for (DType c : {DType::e4m3, DType::i8})
      for (int f = 0; f < 3; ++f) {
        const auto layout = static_cast<ScaleLayout>(i++ % 3);
        v.push_back({g, c, f == 0 ? ScaleRounding::none : ScaleRounding::pow2,
                     f == 2 ? ScaleStorage::ue8m0_packed : ScaleStorage::f32, layout});
      }
  return v;
}

TEST(RmsNormGpu, GroupQuantBitExactAndEqualToUnfused) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(302);
  int w = 0;
  for (DType d : {DType::bf16, DType::f16})
    for (const GroupQuantSpec& s : some_specs()) {
      const int64_t T = (w % 3 == 0) ? 1 : (w % 3 == 1 ? 5 : 130);
      int64_t H = kWidths[w++ % std::size(kWidths)];
      if (H % s.group_size) H = 4096;
      Problem p(d, T, H, w % 2 == 0, rng);
      // Special values in the input: a NaN, an infinity and an all-zero row reach the quant step.
      if (T >= 5) {
        test::store_value(p.x, d, 2 * H + 7, NAN);
        test::store_value(p.x, d, 3 * H + 100, INFINITY);
        for (int64_t i = 0; i < H; ++i) test::store_value(p.x, d, 4 * H + i, 0.0f);
        if (p.residual)
          for (int64_t i = 0; i < H; ++i) test::store_value(p.r, d, 4 * H + i, 0.0f);
        p.dx = upload(p.x);
        p.dr = upload(p.r);
      }
      DeviceBuffer dh(T * H * 2), dy(T * H * 2);
      GroupQuantOutputs fused = allocate_group_quant_outputs(s, T, H);
      GroupQuantOutputs unfused = allocate_group_quant_outputs(s, T, H);
      poison(fused.code_buffer, 0xAB);
      poison(fused.scale_buffer, 0xFF);
      poison(unfused.code_buffer, 0xCD);
      poison(unfused.scale_buffer, 0xEE);
      rms_norm_per_token_group_quant(p.input(dh), s, fused.q, fused.s, nullptr);
      DeviceBuffer dh2(T * H * 2);
      rms_norm(p.input(dh2), TensorView::contiguous(dy.data(), d, {T, H}), nullptr);
      per_token_group_quant(TensorView::contiguous(dy.data(), d, {T, H}), s, unfused.q, unfused.s, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto y = p.want();
      const auto want = ref::per_token_group_quant(y.y.data(), d, T, H, H, s);
      const auto codes = download(fused.code_buffer.data(), fused.layout.code_bytes);
      const auto scales = download(fused.scale_buffer.data(), fused.layout.scale_bytes);
      const std::string why = to_string(s) + " " + p.repro();
      ASSERT_TRUE(bytes_equal(codes, want.codes, "codes", H)) << why;
      ASSERT_TRUE(bytes_equal(scales, want.scales, "scales")) << why;
      ASSERT_TRUE(bytes_equal(codes, download(unfused.code_buffer.data(), unfused.layout.code_bytes), "codes vs unfused", H))
          << why;
      ASSERT_TRUE(bytes_equal(scales, download(unfused.scale_buffer.data(), unfused.layout.scale_bytes), "scales vs unfused"))
          << why;
      if (p.residual)
        ASSERT_TRUE(bytes_equal(nan_canonical(download(dh.data(), T * H * 2), d), nan_canonical(as_bytes(y.h), d),
                                "residual_out", H * 2))
            << why;
    }
}

TEST(RmsNormGpu, PerTokenAndStaticPerTensorBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(303);
  int w = 0;
  for (DType d : {DType::bf16, DType::f16})
    for (DType code : {DType::e4m3, DType::i8})
      for (auto rounding : {ScaleRounding::none, ScaleRounding::pow2}) {
        const int64_t T = 1 + 31 * (w % 3), H = kWidths[(w * 3 + 1) % std::size(kWidths)];
        ++w;
        Problem p(d, T, H, w % 2 == 1, rng);
        const auto y = p.want();
        DeviceBuffer dh(T * H * 2), dq(T * H), ds(T * 4);
        poison(dq, 0xAB);
        rms_norm_per_token_quant(p.input(dh), TensorView::contiguous(dq.data(), code, {T, H}),
                                 TensorView::contiguous(ds.data(), DType::f32, {T}), rounding, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto want = ref::per_token_quant(y.y.data(), d, T, H, H, code, rounding);
        ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want.codes, "codes", H)) << p.repro();
        std::vector<uint8_t> ws(T * 4);
        std::memcpy(ws.data(), want.scales.data(), T * 4);
        ASSERT_TRUE(bytes_equal(download(ds.data(), T * 4), ws, "scales")) << p.repro();

        const float scale = 0.0078125f * static_cast<float>(w);
        DeviceBuffer dscale = upload(std::vector<float>{scale});
        poison(dq, 0xAB);
        rms_norm_per_tensor_quant_static(p.input(dh), TensorView::contiguous(dscale.data(), DType::f32, {1}),
                                         TensorView::contiguous(dq.data(), code, {T, H}), nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto want_static = ref::per_tensor_quant_static(y.y.data(), d, T, H, H, scale, code);
        ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want_static, "static codes", H)) << p.repro();
      }
}

TEST(RmsNormGpu, DeterministicUnderGraphReplayWithAndWithoutPdl) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(304);
  Problem p(DType::bf16, 8, 8192, true, rng);
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  const auto y = p.want();
  const auto want = ref::per_token_group_quant(y.y.data(), DType::bf16, p.T, p.H, p.H, s);
  for (bool pdl : {true, false}) {
    set_programmatic_dependent_launch(pdl);
    DeviceBuffer dh(p.T * p.H * 2);
    GroupQuantOutputs out = allocate_group_quant_outputs(s, p.T, p.H);
    cudaStream_t st;
    FP8ROUTE_TEST_CUDA(cudaStreamCreate(&st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    FP8ROUTE_TEST_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    // Two launches in a row: the second depends on nothing the first writes, but under PDL it
    // must still see a finished predecessor's writes when it reads them.
    rms_norm_per_token_group_quant(p.input(dh), s, out.q, out.s, st);
    rms_norm_per_token_group_quant(p.input(dh), s, out.q, out.s, st);
    FP8ROUTE_TEST_CUDA(cudaStreamEndCapture(st, &graph));
    FP8ROUTE_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 20; ++i) {
      poison(out.code_buffer, static_cast<uint8_t>(i));
      FP8ROUTE_TEST_CUDA(cudaGraphLaunch(exec, st));
      FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(st));
      ASSERT_TRUE(bytes_equal(download(out.code_buffer.data(), out.layout.code_bytes), want.codes, "codes", p.H))
          << "replay " << i << " pdl=" << pdl;
      ASSERT_TRUE(bytes_equal(download(out.scale_buffer.data(), out.layout.scale_bytes), want.scales, "scales"))
          << "replay " << i << " pdl=" << pdl;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(st);
  }
  set_programmatic_dependent_launch(true);
}

// static_weight: the weight is loaded before griddepcontrol.wait. Right after a kernel that writes x
// and lets its dependents launch at once (an RMSNorm of a staging row, over x poisoned with NaN
// first), the values and the per-token codes and scales must still be the reference's for the x
// that kernel wrote, bit for bit, on every run and at 1, 2, 4 and 8 vectors per thread.
TEST(RmsNormGpu, StaticWeightAfterAProducerOfXIsBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(305);
  cudaStream_t st;
  FP8ROUTE_TEST_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int64_t H : {4096, 8192, 16384, 32768})
    for (bool res : {false, true}) {
      const int64_t T = res ? 3 : 1;
      Problem p(DType::bf16, T, H, res, rng);
      const DeviceBuffer stage = upload(test::random_activations(DType::bf16, T * H, rng, H, -4, 3));
      const DeviceBuffer ones = upload(std::vector<uint16_t>(static_cast<size_t>(H), 0x3F80));
      RmsNormInput producer{TensorView::contiguous(stage.data(), DType::bf16, {T, H}),
                            TensorView::contiguous(ones.data(), DType::bf16, {H}), 1e-6f, {}, {}};
      DeviceBuffer dy(T * H * 2), dh(T * H * 2), dq(T * H), ds(T * 4);
      auto run = [&](bool values) {
        FP8ROUTE_TEST_CUDA(cudaMemsetAsync(p.dx.data(), 0xFF, static_cast<size_t>(T * H * 2), st));
        rms_norm(producer, p.xv(), st);
        RmsNormInput in = p.input(dh);
        in.static_weight = true;
        if (values)
          rms_norm(in, TensorView::contiguous(dy.data(), DType::bf16, {T, H}), st);
        else
          rms_norm_per_token_quant(in, TensorView::contiguous(dq.data(), DType::e4m3, {T, H}),
                                   TensorView::contiguous(ds.data(), DType::f32, {T}), ScaleRounding::none, st);
        FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(st));
      };
      run(true);
      p.x = download(p.dx.data(), T * H * 2);  // what the producer wrote: the reference's input
      const auto want = p.want();
      const auto want_q = ref::per_token_quant(want.y.data(), DType::bf16, T, H, H, DType::e4m3, ScaleRounding::none);
      std::vector<uint8_t> want_s(T * 4);
      std::memcpy(want_s.data(), want_q.scales.data(), T * 4);
      for (int i = 0; i < 10; ++i) {
        poison(dy, static_cast<uint8_t>(i));
        run(true);
        ASSERT_TRUE(bytes_equal(download(dy.data(), T * H * 2), as_bytes(want.y), "y", H * 2))
            << p.repro() << " run " << i;
        poison(dq, static_cast<uint8_t>(i));
        run(false);
        ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want_q.codes, "codes", H))
            << p.repro() << " run " << i;
        ASSERT_TRUE(bytes_equal(download(ds.data(), T * 4), want_s, "scales")) << p.repro() << " run " << i;
      }
    }
  cudaStreamDestroy(st);
}

// ---- arguments (no GPU needed: every check runs before anything touches the device) -------------

void* fake(uintptr_t at) { return reinterpret_cast<void*>(at); }

TEST(RmsNormArgs, ErrorsNameTheArgument) {
  const int64_t T = 4, H = 256;
  auto x = TensorView::contiguous(fake(0x100000), DType::bf16, {T, H});
  auto w = TensorView::contiguous(fake(0x200000), DType::bf16, {H});
  auto out = TensorView::contiguous(fake(0x300000), DType::bf16, {T, H});
  auto q = TensorView::contiguous(fake(0x400000), DType::e4m3, {T, H});
  auto s = TensorView::contiguous(fake(0x500000), DType::f32, {T});
  const RmsNormInput ok{x, w, 1e-6f, {}, {}};
  auto in = ok;
  in.x.dtype = DType::f32;
  expect_invalid([&] { rms_norm(in, out, nullptr); }, "x: dtype");
  in = ok;
  in.x = TensorView::contiguous(fake(0x100000), DType::bf16, {T, 260});
  expect_invalid([&] { rms_norm(in, out, nullptr); }, "x: H = 260");
  in = ok;
  in.weight = TensorView::contiguous(fake(0x200000), DType::bf16, {H + 8});
  expect_invalid([&] { rms_norm(in, out, nullptr); }, "weight");
  in = ok;
  in.eps = NAN;
  expect_invalid([&] { rms_norm(in, out, nullptr); }, "eps");
  in = ok;
  in.residual = out;
  expect_invalid([&] { rms_norm(in, q, nullptr); }, "residual_out: required");
  in = ok;
  in.residual = TensorView::contiguous(fake(0x600000), DType::bf16, {T, H});
  in.residual_out = TensorView::contiguous(fake(0x100000 + 256), DType::bf16, {T, H});  // inside x
  expect_invalid([&] { rms_norm(in, out, nullptr); }, "residual_out and x overlap");
  expect_invalid([&] { rms_norm(ok, TensorView::contiguous(fake(0x100000 + 512), DType::bf16, {T, H}), nullptr); },
                 "out and x overlap");
  expect_invalid([&] { rms_norm(ok, TensorView::contiguous(fake(0x300000), DType::f16, {T, H}), nullptr); }, "out: dtype");
  expect_invalid([&] { rms_norm_per_token_quant(ok, q, TensorView::contiguous(fake(0x500000), DType::f32, {T + 1}),
                                                ScaleRounding::none, nullptr); },
                 "s: expected shape");
  expect_invalid([&] { rms_norm_per_token_quant(ok, TensorView::contiguous(fake(0x400000), DType::bf16, {T, H}), s,
                                                ScaleRounding::none, nullptr); },
                 "q: dtype");
  const GroupQuantSpec g{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  expect_invalid([&] { rms_norm_per_token_group_quant(ok, g, q, TensorView::contiguous(fake(0x500000), DType::f32, {T, 1}),
                                                      nullptr); },
                 "s: expected shape");
  expect_invalid([&] { rms_norm_per_token_group_quant(ok, g, q, TensorView::contiguous(fake(0x400000 + 16), DType::f32, {T, 2}),
                                                      nullptr); },
                 "q and s overlap");
  expect_invalid([&] { rms_norm_per_tensor_quant_static(ok, TensorView::contiguous(fake(0x500000), DType::f32, {2}), q,
                                                        nullptr); },
                 "scale: expected shape");
}

TEST(RmsNormArgs, EmptyBatchLaunchesNothing) {
  // T = 0 with null pointers everywhere (what torch passes for empty tensors): no error, no launch.
  const int64_t H = 4096;
  RmsNormInput in{TensorView::contiguous(nullptr, DType::bf16, {0, H}),
                  TensorView::contiguous(fake(0x200000), DType::bf16, {H}), 1e-6f,
                  TensorView::contiguous(nullptr, DType::bf16, {0, H}), TensorView::contiguous(nullptr, DType::bf16, {0, H})};
  rms_norm(in, TensorView::contiguous(nullptr, DType::bf16, {0, H}), nullptr);
  rms_norm_per_token_quant(in, TensorView::contiguous(nullptr, DType::e4m3, {0, H}),
                           TensorView::contiguous(nullptr, DType::f32, {0}), ScaleRounding::none, nullptr);
  const GroupQuantSpec g{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  rms_norm_per_token_group_quant(in, g, TensorView::contiguous(nullptr, DType::e4m3, {0, H}),
                                 TensorView::contiguous(nullptr, DType::f32, {H / 128, 0}), nullptr);
}

TEST(RmsNormReference, CloseToTheExactFormula) {
  // The reference against the formula in long double: y within one rounding of the dtype (plus the
  // two fp32 products), h exactly x + r rounded once.
  auto rng = test::make_rng(305);
  for (DType d : {DType::bf16, DType::f16}) {
    const int64_t T = 3, H = 1024;
    auto x = test::random_activations(d, T * H, rng, H, -4, 3);
    auto r = test::random_activations(d, T * H, rng, 64, -6, 2);
    auto w = random_weight(d, H, rng);
    const auto got = ref::rms_norm(x.data(), r.data(), H, w.data(), d, T, H, 1e-5f);
    const double ulp = d == DType::bf16 ? 0x1p-8 : 0x1p-11;
    for (int64_t t = 0; t < T; ++t) {
      long double ss = 0;
      std::vector<long double> h(H);
      for (int64_t i = 0; i < H; ++i) {
        const float exact = ref::load_as_f32(x.data(), d, t * H + i) + ref::load_as_f32(r.data(), d, t * H + i);
        const uint16_t hb = d == DType::bf16 ? ref::f32_to_bf16(exact) : ref::f32_to_f16(exact);
        ASSERT_EQ(got.h[t * H + i], hb);
        h[i] = d == DType::bf16 ? ref::bf16_to_f32(hb) : ref::f16_to_f32(hb);
        ss += h[i] * h[i];
      }
      const long double inv = 1.0L / std::sqrt(ss / H + 1e-5L);
      for (int64_t i = 0; i < H; ++i) {
        const long double want = h[i] * inv * ref::load_as_f32(w.data(), d, i);
        const uint16_t yb = got.y[t * H + i];
        const double y = d == DType::bf16 ? ref::bf16_to_f32(yb) : ref::f16_to_f32(yb);
        ASSERT_LE(std::fabs(y - static_cast<double>(want)), 1.01 * ulp * std::fabs(static_cast<double>(want)) + 0x1p-24)
            << "row " << t << " col " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fp8route
