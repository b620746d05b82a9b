// The quantization kernels against the CPU reference: bit-exact for every non-fused combination,
// the traps of docs/numerics.md, the masked and scatter forms, the fused path within its tolerance,
// and argument errors that write nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp8route/error.h"
#include "fp8route/quant.h"
#include "fp8route/reference.h"
#include "gpu_util.h"
#include "fp8route/tuning/quant_knobs.h"
#include "start_gate.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::bytes_equal;
using test::expect_invalid;
using test::download;
using test::poison;
using test::upload;

// Input widths H of the tests: the k of the models.json layers (activation widths of real models).
// ShapesFile.WidthsComeFromModelsJson checks each against the file.
constexpr int64_t kWidths[] = {4096, 7168, 5376, 8192, 1536, 512, 16384, 14336, 18432};

std::vector<GroupQuantSpec> all_specs() {
  std::vector<GroupQuantSpec> v;
  for (int g : kGroupSizes)
    for (DType c : {DType::e4m3, DType::i8})
      for (int f = 0; f < 3; ++f)
        for (auto l : {ScaleLayout::row_major, ScaleLayout::col_major, ScaleLayout::col_major_tma}) {
          GroupQuantSpec s{g, c, f == 0 ? ScaleRounding::none : ScaleRounding::pow2,
                           f == 2 ? ScaleStorage::ue8m0_packed : ScaleStorage::f32, l};
          v.push_back(s);
        }
  return v;
}

std::string repro(const GroupQuantSpec& s, DType in, int64_t T, int64_t H) {
  return to_string(s) + " x=" + std::string(dtype_name(in)) + "[" + std::to_string(T) + "," +
         std::to_string(H) + "] seed=" + std::to_string(test::test_seed());
}

// Runs per_token_group_quant on host bytes x [T, stride] and returns the codes and scale images
// (scale buffer poisoned with 0xFF first, so padding must have been written as zero).
struct GpuQuant {
  std::vector<uint8_t> codes, scales;
};
GpuQuant gpu_group_quant(const std::vector<uint8_t>& x, DType in, int64_t T, int64_t H,
                         int64_t stride, const GroupQuantSpec& spec, bool fused = false) {
  DeviceBuffer dx = upload(x);
  GroupQuantOutputs out = allocate_group_quant_outputs(spec, T, H);
  poison(out.code_buffer, 0xAB);
  poison(out.scale_buffer, 0xFF);
  const TensorView xv = TensorView::strided(dx.data(), in, {T, fused ? 2 * H : H}, {stride, 1});
  if (fused) silu_and_mul_per_token_group_quant(xv, spec, out.q, out.s, nullptr);
  else per_token_group_quant(xv, spec, out.q, out.s, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {download(out.code_buffer.data(), out.layout.code_bytes),
          download(out.scale_buffer.data(), out.layout.scale_bytes)};
}

// ---- bit-exact: every combination ---------------------------------------------------------------

TEST(GroupQuantGpu, EveryCombinationBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(100);
  int cases = 0, w = 0;
  const std::vector<GroupQuantSpec> specs = all_specs();
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (size_t i = 0; i < specs.size(); ++i)
      for (int64_t T : {1, 3, 127}) {
        // FP8ROUTE_TEST_QUICK: T = 3 and, per group size, code and scale format, one layout (rotating).
        if (test::quick() && (T != 3 || i % 3 != (i / 3 + i / 9) % 3)) continue;
        const GroupQuantSpec& s = specs[i];
        const int64_t H = kWidths[w++ % std::size(kWidths)];
        auto x = test::random_activations(in, T * H, rng, s.group_size);
        auto want = ref::per_token_group_quant(x.data(), in, T, H, H, s);
        // Every kernel shape: 1 or 4 items per thread, blocks of at most 64 threads
        // (detail::force_group_threads), 8 or 4 elements per lane (detail::force_group_vec; the
        // narrow lanes serve plain launches with E4M3 codes and f32 or packed UE8M0 scales).
        for (auto [items, threads, vec] : {std::tuple{1, 0, 8}, {4, 0, 0}, {1, 64, 8}, {1, 0, 4}, {1, 64, 4},
                                           {0, 0, 0}}) {
          detail::force_group_items(items);
          detail::force_group_threads(threads);
          detail::force_group_vec(vec);
          auto got = gpu_group_quant(x, in, T, H, H, s);
          detail::force_group_items(0);
          detail::force_group_threads(0);
          detail::force_group_vec(0);
          const std::string how = " items=" + std::to_string(items) + " threads=" + std::to_string(threads) +
                                  " vec=" + std::to_string(vec);
          ASSERT_TRUE(bytes_equal(got.codes, want.codes, "codes", H)) << repro(s, in, T, H) << how;
          ASSERT_TRUE(bytes_equal(got.scales, want.scales, "scales")) << repro(s, in, T, H) << how;
        }
        ++cases;
      }
  std::printf("[fp8route] %d combinations bit-exact\n", cases);
}

TEST(GroupQuantGpu, LargeOddTBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(101);
  const auto specs = all_specs();
  int i = 0;
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (int g : kGroupSizes) {
      GroupQuantSpec s = specs[(i * 7) % specs.size()];  // walk through formats and layouts
      s.group_size = g;
      const int64_t T = 4097, H = kWidths[i++ % 3];
      auto x = test::random_activations(in, T * H, rng, g);
      auto got = gpu_group_quant(x, in, T, H, H, s);
      auto want = ref::per_token_group_quant(x.data(), in, T, H, H, s);
      ASSERT_TRUE(bytes_equal(got.codes, want.codes, "codes", H)) << repro(s, in, T, H);
      ASSERT_TRUE(bytes_equal(got.scales, want.scales, "scales")) << repro(s, in, T, H);
    }
}

TEST(GroupQuantGpu, StridedRowsBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(102);
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed,
                         ScaleLayout::col_major_tma};
  const int64_t T = 33, H = 640, stride = 1024;  // 5 groups: packed words with padding bytes
  auto x = test::random_activations(DType::bf16, T * stride, rng);
  auto got = gpu_group_quant(x, DType::bf16, T, H, stride, s);
  auto want = ref::per_token_group_quant(x.data(), DType::bf16, T, H, stride, s);
  ASSERT_TRUE(bytes_equal(got.codes, want.codes, "codes", H));
  ASSERT_TRUE(bytes_equal(got.scales, want.scales, "scales"));
}

TEST(GroupQuantGpu, DeterministicAndGraphCapturable) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(103);
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  const int64_t T = 7, H = 7168;
  auto x = test::random_activations(DType::bf16, T * H, rng);
  DeviceBuffer dx = upload(x);
  GroupQuantOutputs out = allocate_group_quant_outputs(s, T, H);
  const TensorView xv = TensorView::contiguous(dx.data(), DType::bf16, {T, H});
  cudaStream_t st;
  FP8ROUTE_TEST_CUDA(cudaStreamCreate(&st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FP8ROUTE_TEST_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  per_token_group_quant(xv, s, out.q, out.s, st);
  FP8ROUTE_TEST_CUDA(cudaStreamEndCapture(st, &graph));
  FP8ROUTE_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  auto want = ref::per_token_group_quant(x.data(), DType::bf16, T, H, H, s);
  for (int rep = 0; rep < 3; ++rep) {
    poison(out.code_buffer, 0xAB);
    poison(out.scale_buffer, 0xFF);
    FP8ROUTE_TEST_CUDA(cudaGraphLaunch(exec, st));
    FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(st));
    ASSERT_TRUE(bytes_equal(download(out.code_buffer.data(), out.layout.code_bytes), want.codes, "codes"));
    ASSERT_TRUE(bytes_equal(download(out.scale_buffer.data(), out.layout.scale_bytes), want.scales, "scales"));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// The kernels compute the scale (amax / qmax) and multiplier (qmax / amax) without the IEEE
// division sequence (src/quant/scale_math.h); docs/numerics.md has both correctly rounded. Proved here
// for every float amax can be, against __fdiv_rn on the device itself.
TEST(GroupQuantGpu, ScaleDivisionsExactOverTheWholeRange) {
  FP8ROUTE_REQUIRE_SM90();
  for (float qmax : {448.0f, 127.0f}) EXPECT_EQ(detail::scale_division_mismatches(qmax), 0u) << "qmax " << qmax;
}

// ---- traps from the field -------------------------------------------------------------------------

TEST(GroupQuantGpu, TinyF16GroupsQuantizeLikeBf16) {
  FP8ROUTE_REQUIRE_SM90();
  // Values k * 2^-16, |k| <= 255: exact in both f16 and bf16, amax < 448 / 65504. A multiplier
  // held in f16 would overflow and turn the group into +-448.
  auto rng = test::make_rng(104);
  std::uniform_int_distribution<int> k(-255, 255);
  const int64_t T = 5, H = 4096;
  std::vector<uint8_t> xh(T * H * 2), xb(T * H * 2);
  for (int64_t i = 0; i < T * H; ++i) {
    const float v = std::ldexp(static_cast<float>(k(rng)), -16);
    test::store_value(xh, DType::f16, i, v);
    test::store_value(xb, DType::bf16, i, v);
  }
  for (const GroupQuantSpec& s : all_specs()) {
    auto h = gpu_group_quant(xh, DType::f16, T, H, H, s);
    auto b = gpu_group_quant(xb, DType::bf16, T, H, H, s);
    ASSERT_TRUE(bytes_equal(h.codes, b.codes, "f16 vs bf16 codes", H)) << to_string(s);
    ASSERT_TRUE(bytes_equal(h.scales, b.scales, "f16 vs bf16 scales")) << to_string(s);
    ASSERT_TRUE(bytes_equal(h.codes, ref::per_token_group_quant(xh.data(), DType::f16, T, H, H, s).codes, "codes"));
    if (s.code == DType::e4m3) {
      int64_t saturated = 0;
      for (uint8_t c : h.codes) saturated += (c & 0x7F) == 0x7E;
      EXPECT_LT(saturated, T * H / 8) << to_string(s) << ": most codes saturated";
    }
  }
}

TEST(GroupQuantGpu, AllZeroRowsNaNAndInf) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(105);
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (const GroupQuantSpec& s : all_specs()) {
      const int64_t T = 6, H = 1024;
      auto clean = test::random_activations(in, T * H, rng, s.group_size);
      auto x = clean;
      for (int64_t i = 0; i < H; ++i) test::store_value(x, in, 2 * H + i, 0.0f);  // row 2 all zero
      const int64_t poisoned[] = {5, H + 17, 3 * H + s.group_size + 1, 4 * H + 2 * s.group_size, 5 * H + H - 1};
      const float values[] = {NAN, INFINITY, -INFINITY, NAN, -INFINITY};
      for (int j = 0; j < 5; ++j) test::store_value(x, in, poisoned[j], values[j]);
      auto got = gpu_group_quant(x, in, T, H, H, s);
      auto want = ref::per_token_group_quant(x.data(), in, T, H, H, s);
      ASSERT_TRUE(bytes_equal(got.codes, want.codes, "codes", H)) << repro(s, in, T, H);
      ASSERT_TRUE(bytes_equal(got.scales, want.scales, "scales")) << repro(s, in, T, H);
      for (int64_t i = 0; i < H; ++i) ASSERT_EQ(got.codes[2 * H + i], 0) << "all-zero row";
      // Groups holding no non-finite element are exactly as in the clean input.
      auto base = gpu_group_quant(clean, in, T, H, H, s);
      std::set<int64_t> dirty_groups;
      for (int64_t p : poisoned) dirty_groups.insert(p / s.group_size);
      for (int64_t i = 2 * H; i < 3 * H; ++i) dirty_groups.insert(i / s.group_size);
      for (int64_t i = 0; i < T * H; ++i)
        if (!dirty_groups.count(i / s.group_size))
          ASSERT_EQ(got.codes[i], base.codes[i]) << "neighbouring group changed at " << i << " " << repro(s, in, T, H);
    }
}

// ---- fused silu_and_mul ----------------------------------------------------------------------------

int code_ordinal(uint8_t c, DType code) {
  if (code == DType::i8) return static_cast<int8_t>(c);
  return (c & 0x80) ? -(c & 0x7F) : (c & 0x7F);
}

TEST(GroupQuantGpu, FusedSiluAndMulWithinTolerance) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(106);
  int64_t total = 0, off_by_one = 0;
  double worst_scale = 0;
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (const GroupQuantSpec& s : all_specs()) {
      if (s.layout != ScaleLayout::row_major && s.group_size != 128) continue;  // layouts: covered above
      const int64_t T = 9, H = s.group_size * 12;
      auto x = test::random_activations(in, T * 2 * H, rng, s.group_size, -3, 3);
      const std::vector<float> act = ref::silu_and_mul_rows(x.data(), in, T, H, 2 * H);
      auto want = ref::per_token_group_quant(act.data(), DType::f32, T, H, H, s);
      for (int vec : {0, 8}) {  // the rule's lanes (4 elements at this size), then 8 forced
        detail::force_group_vec(vec);
        auto got = gpu_group_quant(x, in, T, H, 2 * H, s, /*fused=*/true);
        detail::force_group_vec(0);
        ASSERT_EQ(got.scales.size(), want.scales.size());
        if (s.storage == ScaleStorage::f32) {
          for (size_t i = 0; i < got.scales.size(); i += 4) {
            float a, b;
            std::memcpy(&a, &got.scales[i], 4);
            std::memcpy(&b, &want.scales[i], 4);
            const double rel = b == 0 ? std::fabs(a) : std::fabs(a - b) / std::fabs(b);
            worst_scale = std::max(worst_scale, rel);
            ASSERT_LE(rel, 1e-6) << "scale word " << i / 4 << " " << repro(s, in, T, H) << " vec=" << vec;
          }
        } else {
          ASSERT_TRUE(bytes_equal(got.scales, want.scales, "ue8m0 scales")) << repro(s, in, T, H) << " vec=" << vec;
        }
        for (size_t i = 0; i < got.codes.size(); ++i) {
          const int d = std::abs(code_ordinal(got.codes[i], s.code) - code_ordinal(want.codes[i], s.code));
          ASSERT_LE(d, 1) << "code " << i << " " << repro(s, in, T, H) << " vec=" << vec;
          off_by_one += d;
        }
        total += static_cast<int64_t>(got.codes.size());
      }
    }
  const double frac = static_cast<double>(off_by_one) / static_cast<double>(total);
  std::printf("[fp8route] fused silu_and_mul: %lld of %lld codes one step off (%.2e), worst scale rel err %.2e\n",
              static_cast<long long>(off_by_one), static_cast<long long>(total), frac, worst_scale);
  RecordProperty("fused_mismatch_fraction", std::to_string(frac));
  EXPECT_LT(frac, 1e-3) << "one-step differences must be rare";
}

// ---- masked EP-MoE form ---------------------------------------------------------------------------

void run_masked(bool fused) {
  auto rng = test::make_rng(fused ? 108 : 107);
  for (const GroupQuantSpec& s : {GroupQuantSpec{128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::col_major_tma},
                                  GroupQuantSpec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma},
                                  GroupQuantSpec{64, DType::i8, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major},
                                  GroupQuantSpec{32, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::col_major}}) {
    const int64_t E = 5, Tp = 37, H = 640, in_cols = fused ? 2 * H : H;
    const std::vector<int32_t> masked_m{0, Tp, 1, 17, 36};
    auto x = test::random_activations(DType::bf16, E * Tp * in_cols, rng, s.group_size, -3, 3);
    DeviceBuffer dx = upload(x), dm = upload(masked_m);
    GroupQuantOutputs out = allocate_group_quant_outputs(s, Tp, H, E);
    poison(out.code_buffer, 0xAB);
    poison(out.scale_buffer, 0xFF);
    const TensorView xv = TensorView::contiguous(dx.data(), DType::bf16, {E, Tp, in_cols});
    const TensorView mv = TensorView::contiguous(dm.data(), DType::i32, {E});
    if (fused) masked_silu_and_mul_per_token_group_quant(xv, mv, s, out.q, out.s, nullptr);
    else masked_per_token_group_quant(xv, mv, s, out.q, out.s, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto codes = download(out.code_buffer.data(), out.layout.code_bytes);
    auto scales = download(out.scale_buffer.data(), out.layout.scale_bytes);
    const QuantLayout& L = out.layout;
    for (int64_t e = 0; e < E; ++e) {
      // Reference of the whole expert slab; only rows < masked_m[e] may be written.
      const uint8_t* xe = x.data() + e * Tp * in_cols * 2;
      std::vector<float> act;
      ref::QuantOutput want;
      if (fused) {
        act = ref::silu_and_mul_rows(xe, DType::bf16, Tp, H, in_cols);
        want = ref::per_token_group_quant(act.data(), DType::f32, Tp, H, H, s);
      } else {
        want = ref::per_token_group_quant(xe, DType::bf16, Tp, H, H, s);
      }
      for (int64_t t = 0; t < Tp; ++t) {
        const bool valid = t < masked_m[e];
        for (int64_t i = 0; i < H; ++i) {
          const uint8_t got = codes[(e * Tp + t) * H + i];
          if (!valid) ASSERT_EQ(got, 0xAB) << "row past masked_m written: e=" << e << " t=" << t;
          else if (!fused) ASSERT_EQ(got, want.codes[t * H + i]) << "e=" << e << " t=" << t << " i=" << i;
          else ASSERT_LE(std::abs(code_ordinal(got, s.code) - code_ordinal(want.codes[t * H + i], s.code)), 1);
        }
        for (int64_t c = 0; c < L.scale_cols; ++c) {
          const int64_t word = e * L.scale_batch_stride + t * L.scale_stride_t + c * L.scale_stride_c;
          const int64_t wword = t * L.scale_stride_t + c * L.scale_stride_c;
          for (int b = 0; b < 4; ++b) {
            const uint8_t g = scales[word * 4 + b];
            if (!valid) ASSERT_EQ(g, 0xFF) << "scale of a row past masked_m written: e=" << e << " t=" << t;
            else if (!fused || s.storage == ScaleStorage::ue8m0_packed)
              ASSERT_EQ(g, want.scales[wword * 4 + b]) << "e=" << e << " t=" << t << " c=" << c;
          }
        }
      }
      // Layout padding rows [Tp, t_pad) are zero whatever masked_m says.
      for (int64_t t = Tp; t < L.t_pad; ++t)
        for (int64_t c = 0; c < L.scale_cols; ++c)
          for (int b = 0; b < 4; ++b)
            ASSERT_EQ(scales[(e * L.scale_batch_stride + t * L.scale_stride_t + c * L.scale_stride_c) * 4 + b], 0);
    }
  }
}

TEST(GroupQuantGpu, MaskedRowsPastMaskedMUntouched) {
  FP8ROUTE_REQUIRE_SM90();
  run_masked(false);
}

TEST(GroupQuantGpu, MaskedFusedSiluAndMul) {
  FP8ROUTE_REQUIRE_SM90();
  run_masked(true);
}

// ---- scatter MoE form -----------------------------------------------------------------------------

// Runs the scatter form of x [T, H] bf16 into poisoned outputs of `rows` rows (`reps` times, on
// fresh poison) and checks each row against the CPU reference of its owner token: the token of the
// largest entry t * topk + j naming the row (quant.h), its codes and its scales, whole; rows no
// entry names keep the poison, and the scales' layout padding is zero.
void check_scatter(const GroupQuantSpec& s, const std::vector<uint8_t>& x, const std::vector<int32_t>& src2dst,
                   int64_t T, int64_t H, int64_t topk, int64_t rows, int reps = 1) {
  DeviceBuffer dx = upload(x), dmap = upload(src2dst);
  GroupQuantOutputs out = allocate_group_quant_outputs(s, rows, H);
  const auto want = ref::per_token_group_quant(x.data(), DType::bf16, T, H, H, s);
  const QuantLayout& L = out.layout;
  const QuantLayout& WL = want.layout;
  std::vector<int64_t> src_of(rows, -1);  // the owner's token
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t d = src2dst[t * topk + j];
      if (d >= 0 && d < rows) src_of[d] = t;  // entries in increasing order: the last one is the largest
    }
  for (int rep = 0; rep < reps; ++rep) {
    poison(out.code_buffer, 0xAB);
    poison(out.scale_buffer, 0xFF);
    // No tokens: the null pointers DLPack gives empty tensors.
    scatter_per_token_group_quant(TensorView::contiguous(T ? dx.data() : nullptr, DType::bf16, {T, H}),
                                  TensorView::contiguous(T ? dmap.data() : nullptr, DType::i32, {T, topk}), s,
                                  out.q, out.s, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto codes = download(out.code_buffer.data(), out.layout.code_bytes);
    const auto scales = download(out.scale_buffer.data(), out.layout.scale_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = src_of[r];
      for (int64_t i = 0; i < H; ++i)
        ASSERT_EQ(codes[r * H + i], t < 0 ? 0xAB : want.codes[t * H + i])
            << to_string(s) << " row " << r << " (token " << t << ") i " << i << " rep " << rep;
      for (int64_t c = 0; c < L.scale_cols; ++c)
        for (int b = 0; b < 4; ++b) {
          const uint8_t g = scales[(r * L.scale_stride_t + c * L.scale_stride_c) * 4 + b];
          const uint8_t w = t < 0 ? 0xFF : want.scales[(t * WL.scale_stride_t + c * WL.scale_stride_c) * 4 + b];
          ASSERT_EQ(g, w) << to_string(s) << " row " << r << " (token " << t << ") col " << c << " byte " << b
                          << " rep " << rep;
        }
    }
    for (int64_t r = rows; r < L.t_pad; ++r)
      for (int64_t c = 0; c < L.scale_cols; ++c)
        for (int b = 0; b < 4; ++b)
          ASSERT_EQ(scales[(r * L.scale_stride_t + c * L.scale_stride_c) * 4 + b], 0) << "padding";
  }
}

const GroupQuantSpec kScatterSpecs[] = {
    {128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::col_major_tma},
    {128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major},
    {128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::f32, ScaleLayout::col_major_tma}};

TEST(GroupQuantGpu, ScatterToDestinationRows) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(109);
  // topk 11 too: more destinations per token than any catalog model's top_k (8), an odd count.
  for (const int64_t topk : {4, 11}) {
    for (const GroupQuantSpec& s : kScatterSpecs) {
      const int64_t T = 13, H = 7168, rows = 2 * T * topk + 3;  // rows % 4 != 0: padded
      auto x = test::random_activations(DType::bf16, T * H, rng);
      // Distinct destination rows; some slots -1; one out of range (skipped, never written).
      std::vector<int32_t> perm(rows);
      for (int64_t i = 0; i < rows; ++i) perm[i] = static_cast<int32_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      std::vector<int32_t> src2dst(T * topk);
      for (int64_t i = 0; i < T * topk; ++i) src2dst[i] = (i % 5 == 3) ? -1 : perm[i];
      src2dst[7] = static_cast<int32_t>(rows + 100);
      check_scatter(s, x, src2dst, T, H, topk, rows);
    }
  }
}

// Rows that several entries name (a caller's bad map, or two slots of one token): each holds one
// token's codes and scales, whole, and always the same one. The contested rows are named last
// (j = topk - 1) by a small token and first (j = 0) by a large one, whose kernels run at once, so
// that without a rule the small token's late writes, or a mix of the two, would land.
TEST(GroupQuantGpu, ScatterDuplicateDestinationsTakeOneTokenWhole) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(115);
  for (const GroupQuantSpec& s : kScatterSpecs) {
    const int64_t T = 48, H = 7168, topk = 8, rows = T * topk / 2 + 1;
    auto x = test::random_activations(DType::bf16, T * H, rng);
    std::uniform_int_distribution<int32_t> dst(-1, static_cast<int32_t>(rows) - 1);
    std::vector<int32_t> src2dst(T * topk);
    for (int32_t& d : src2dst) d = dst(rng);  // about two entries per row
    for (int64_t t = 0; t < T / 4; ++t) {
      const int32_t r = static_cast<int32_t>(t);
      src2dst[t * topk + topk - 1] = r;
      src2dst[(T - 1 - t) * topk] = r;
    }
    src2dst[5 * topk + 2] = src2dst[5 * topk + 6] = static_cast<int32_t>(rows - 1);  // one token, two slots
    check_scatter(s, x, src2dst, T, H, topk, rows, /*reps=*/3);
  }
}

// A scatter with no tokens (x, src2dst and no entries: null pointers) writes no row, and still
// zeroes the scales' layout padding.
TEST(GroupQuantGpu, ScatterWithNoTokensZeroesOnlyThePadding) {
  FP8ROUTE_REQUIRE_SM90();
  for (const GroupQuantSpec& s : kScatterSpecs)
    check_scatter(s, {}, {}, 0, 512, 4, /*rows=*/5);
}

// ---- per-token and per-tensor ---------------------------------------------------------------------

// One call of a row or tensor op: x [T, H] (the fused form's [T, 2H]) with rows `stride` elements
// apart (0: packed), placed x_offset elements past a 256-byte aligned address and its codes q_offset
// bytes past one, so that neither need be 16-byte aligned.
enum class RowOp { per_token, fused_per_token, tensor_static, tensor_dynamic };

struct RowCase {
  RowOp op;
  DType in, code;
  int64_t T, H;
  int64_t stride = 0;
  int64_t x_offset = 0, q_offset = 0;
  ScaleRounding rounding = ScaleRounding::none;
  float scale = 0.125f;  // tensor_static
  int64_t cols() const { return op == RowOp::fused_per_token ? 2 * H : H; }
  int64_t row_stride() const { return stride ? stride : cols(); }
  int64_t scales() const { return op == RowOp::per_token || op == RowOp::fused_per_token ? T : 1; }
  std::string str() const {
    static const char* const kOps[] = {"per_token", "silu_and_mul_per_token", "per_tensor_static", "per_tensor_dynamic"};
    return std::string(kOps[static_cast<int>(op)]) + " " + std::string(dtype_name(in)) + "[" + std::to_string(T) +
           "," + std::to_string(cols()) + "] stride " + std::to_string(row_stride()) + " x+" +
           std::to_string(x_offset) + " q+" + std::to_string(q_offset) + " -> " + std::string(dtype_name(code)) + " " +
           std::string(name(rounding)) + " seed=" + std::to_string(test::test_seed());
  }
};

// x of a case: T rows of row_stride() elements (past cols() they are never read).
std::vector<uint8_t> row_input(const RowCase& c, std::mt19937_64& rng, float lo = -8, float hi = 6) {
  return test::random_activations(c.in, c.T * c.row_stride(), rng, 128, lo, hi);
}

struct RowResult {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

// A case's device tensors, kept for repeated launches (graph replays).
struct RowRun {
  RowCase c;
  DeviceBuffer dx, dq, ds, dscale;
  RowRun(const RowCase& rc, const std::vector<uint8_t>& x)
      : c(rc),
        dx(c.x_offset * dtype_size(c.in) + x.size()),
        dq(static_cast<size_t>(c.q_offset + c.T * c.H)),
        ds(static_cast<size_t>(4 * c.scales())),
        dscale(upload(std::vector<float>{c.scale})) {
    set_input(x);
  }
  void set_input(const std::vector<uint8_t>& x) {
    EXPECT_EQ(cudaMemcpy(dx.as<char>() + c.x_offset * dtype_size(c.in), x.data(), x.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  void poison_outputs() const {
    poison(dq, 0xAB);
    poison(ds, 0xFF);
  }
  void launch(cudaStream_t stream) const {
    const TensorView x = TensorView::strided(dx.as<char>() + c.x_offset * dtype_size(c.in), c.in, {c.T, c.cols()},
                                             {c.row_stride(), 1});
    const TensorView q = TensorView::contiguous(dq.as<uint8_t>() + c.q_offset, c.code, {c.T, c.H});
    const TensorView s = TensorView::contiguous(ds.data(), DType::f32, {c.scales()});
    switch (c.op) {
      case RowOp::per_token: return per_token_quant(x, q, s, c.rounding, stream);
      case RowOp::fused_per_token: return silu_and_mul_per_token_quant(x, q, s, c.rounding, stream);
      case RowOp::tensor_static:
        return per_tensor_quant_static(x, TensorView::contiguous(dscale.data(), DType::f32, {1}), q, stream);
      case RowOp::tensor_dynamic: return per_tensor_quant_dynamic(x, q, s, stream);
    }
  }
  RowResult result() const {
    RowResult r;
    r.codes = download(dq.as<uint8_t>() + c.q_offset, static_cast<size_t>(c.T * c.H));
    if (c.op != RowOp::tensor_static) {
      const std::vector<uint8_t> b = download(ds.data(), static_cast<size_t>(4 * c.scales()));
      r.scales.resize(static_cast<size_t>(c.scales()));
      std::memcpy(r.scales.data(), b.data(), b.size());
    }
    return r;
  }
};

RowResult gpu_row_quant(const RowCase& c, const std::vector<uint8_t>& x) {
  RowRun run(c, x);
  run.poison_outputs();
  run.launch(nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return run.result();
}

ref::RowQuantOutput ref_row_quant(const RowCase& c, const std::vector<uint8_t>& x) {
  switch (c.op) {
    case RowOp::per_token: return ref::per_token_quant(x.data(), c.in, c.T, c.H, c.row_stride(), c.code, c.rounding);
    case RowOp::fused_per_token: {
      const std::vector<float> act = ref::silu_and_mul_rows(x.data(), c.in, c.T, c.H, c.row_stride());
      return ref::per_token_quant(act.data(), DType::f32, c.T, c.H, c.H, c.code, c.rounding);
    }
    case RowOp::tensor_static:
      return {ref::per_tensor_quant_static(x.data(), c.in, c.T, c.H, c.row_stride(), c.scale, c.code), {}};
    case RowOp::tensor_dynamic: return ref::per_tensor_quant_dynamic(x.data(), c.in, c.T, c.H, c.row_stride(), c.code);
  }
  return {};
}

// A result against the reference: bit for bit; the fused form within its tolerance (numerics.md):
// scales within 1e-6 relative (pow2: equal), every code within one step, the one-step differences
// added to *off_by_one.
testing::AssertionResult matches_reference(const RowCase& c, const RowResult& got, const ref::RowQuantOutput& want,
                                           int64_t* off_by_one = nullptr) {
  if (got.scales.size() != want.scales.size())
    return testing::AssertionFailure() << c.str() << ": " << got.scales.size() << " scales, want " << want.scales.size();
  for (size_t t = 0; t < got.scales.size(); ++t) {
    const float a = got.scales[t], b = want.scales[t];
    const bool ok = c.op == RowOp::fused_per_token && c.rounding == ScaleRounding::none
                        ? std::fabs(a - b) <= 1e-6 * std::fabs(b)
                        : std::memcmp(&a, &b, 4) == 0;
    if (!ok) return testing::AssertionFailure() << c.str() << ": scale " << t << " is " << a << ", want " << b;
  }
  if (c.op != RowOp::fused_per_token) {
    testing::AssertionResult r = bytes_equal(got.codes, want.codes, "codes", c.H);
    if (!r) r << " in " << c.str();
    return r;
  }
  if (got.codes.size() != want.codes.size())
    return testing::AssertionFailure() << c.str() << ": " << got.codes.size() << " codes, want " << want.codes.size();
  for (size_t i = 0; i < got.codes.size(); ++i) {
    const int d = std::abs(code_ordinal(got.codes[i], c.code) - code_ordinal(want.codes[i], c.code));
    if (d > 1) return testing::AssertionFailure() << c.str() << ": code " << i << " is " << d << " steps off";
    if (off_by_one) *off_by_one += d;
  }
  return testing::AssertionSuccess();
}

TEST(RowQuantGpu, PerTokenBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(110);
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8})
      for (auto r : {ScaleRounding::none, ScaleRounding::pow2})
        for (int64_t T : {1, 3, 127}) {
          // Rows up to 8192 wide stay in registers; wider ones take the two-read path.
          const int64_t H = T == 3 ? 18432 : kWidths[(T + static_cast<int>(in)) % std::size(kWidths)];
          RowCase c{RowOp::per_token, in, code, T, H};
          c.rounding = r;
          auto x = test::random_activations(in, T * H, rng, H);
          test::store_value(x, in, H / 2, T % 2 ? NAN : INFINITY);
          ASSERT_TRUE(matches_reference(c, gpu_row_quant(c, x), ref_row_quant(c, x)));
        }
}

// The fused silu_and_mul forms' codes may sit one step from the reference's (device exp), rarely.
void expect_rare_one_step_codes(const char* what, int64_t off_by_one, int64_t total) {
  const double frac = static_cast<double>(off_by_one) / static_cast<double>(total);
  std::printf("[fp8route] %s: %lld of %lld codes one step off (%.2e)\n", what, static_cast<long long>(off_by_one),
              static_cast<long long>(total), frac);
  EXPECT_LT(frac, 1e-3) << "one-step differences must be rare";
}

// silu_and_mul fused with the per-token quant: the tolerance of the fused group form (numerics.md),
// against ref::silu_and_mul_rows then ref::per_token_quant of the fp32 activation; rows in registers
// (H <= 8192) and the two-read path.
TEST(TokenQuantGpu, FusedSiluAndMulWithinTolerance) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(111);
  int64_t total = 0, off_by_one = 0;
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8})
      for (auto r : {ScaleRounding::none, ScaleRounding::pow2})
        for (int64_t T : {1, 5}) {
          RowCase c{RowOp::fused_per_token, in, code, T, T == 1 ? 14336 : 3584};
          c.rounding = r;
          auto x = row_input(c, rng, -3, 3);
          ASSERT_TRUE(matches_reference(c, gpu_row_quant(c, x), ref_row_quant(c, x), &off_by_one));
          total += c.T * c.H;
        }
  expect_rare_one_step_codes("fused silu_and_mul per token", off_by_one, total);
}

// ---- rows of any width ------------------------------------------------------------------------------
// H not a multiple of 8 (or 16), row strides of any number of elements, x and q off 16-byte
// alignment: the kernels' any-width form, bit for bit like the vector form. The widths are the
// public vLLM and SGLang quant tests' (17, 1025, 1026, 5137, 8193; 1368, a multiple of 8 but not of
// 16), 1, and 18433 (past the per-token kernel's rows in registers).
constexpr int64_t kAnyWidths[] = {1, 17, 1025, 1026, 1368, 5137, 8193, 18433};

// The layouts each width runs in: packed rows at aligned addresses (T = 1 and T > 1), then rows an
// odd number of elements apart (stride H + 3, or 2H + 3 fused) with x one element and q one byte
// past alignment.
std::vector<RowCase> any_width_cases(RowOp op, DType in, DType code, int64_t H) {
  const int64_t T = H <= 1368 ? 67 : 5;
  std::vector<RowCase> v;
  for (int64_t t : {int64_t{1}, T}) v.push_back(RowCase{op, in, code, t, H});
  RowCase odd{op, in, code, T, H};
  odd.stride = odd.cols() + 3;
  odd.x_offset = odd.q_offset = 1;
  v.push_back(odd);
  return v;
}

// Non-finite elements where the any-width form splits a row: the row's last element (+inf), the
// first of the last row (NaN) and one inside a middle row (-inf); none of them counts in an amax.
void store_specials(const RowCase& c, std::vector<uint8_t>& x) {
  test::store_value(x, c.in, c.cols() - 1, INFINITY);
  test::store_value(x, c.in, (c.T - 1) * c.row_stride(), NAN);
  if (c.T > 2) test::store_value(x, c.in, (c.T / 2) * c.row_stride() + c.cols() / 2, -INFINITY);
}

TEST(RowQuantGpu, AnyWidthBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(117);
  int cases = 0;
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8})
      for (size_t w = 0; w < std::size(kAnyWidths); ++w)
        for (RowOp op : {RowOp::per_token, RowOp::tensor_static, RowOp::tensor_dynamic})
          for (RowCase c : any_width_cases(op, in, code, kAnyWidths[w])) {
            c.rounding = (w + static_cast<size_t>(code == DType::i8)) % 2 ? ScaleRounding::pow2 : ScaleRounding::none;
            auto x = row_input(c, rng);
            store_specials(c, x);
            const ref::RowQuantOutput want = ref_row_quant(c, x);
            if (op != RowOp::tensor_dynamic) {
              ASSERT_TRUE(matches_reference(c, gpu_row_quant(c, x), want));
              ++cases;
              continue;
            }
            // Dynamic per-tensor: each launch shape the size allows (the library's rule, then never
            // a cluster: two launches unless the one-block path takes it, then the cluster up to its
            // capacity); the same result from each.
            const int64_t saved = detail::tensor_cluster_max_vecs();
            struct Restore {
              int64_t v;
              ~Restore() { detail::set_tensor_cluster_max_vecs(v); }
            } restore{saved};
            for (int64_t max_vecs : {saved, int64_t{0}, int64_t{1} << 30}) {
              detail::set_tensor_cluster_max_vecs(max_vecs);
              ASSERT_TRUE(matches_reference(c, gpu_row_quant(c, x), want)) << "cluster max vecs " << max_vecs;
              ++cases;
            }
          }
  std::printf("[fp8route] %d per-token and per-tensor calls of any width bit-exact\n", cases);
}

TEST(TokenQuantGpu, FusedSiluAndMulAnyWidthWithinTolerance) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(118);
  int64_t total = 0, off_by_one = 0;
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8})
      for (size_t w = 0; w < std::size(kAnyWidths); ++w)
        for (RowCase c : any_width_cases(RowOp::fused_per_token, in, code, kAnyWidths[w])) {
          c.rounding = (w + static_cast<size_t>(code == DType::i8)) % 2 ? ScaleRounding::pow2 : ScaleRounding::none;
          auto x = row_input(c, rng, -3, 3);
          ASSERT_TRUE(matches_reference(c, gpu_row_quant(c, x), ref_row_quant(c, x), &off_by_one));
          total += c.T * c.H;
        }
  expect_rare_one_step_codes("fused silu_and_mul per token, any width", off_by_one, total);
}

// The any-width form captured in one CUDA graph (per-token, fused, static, and dynamic per-tensor
// by its cluster and its two-launch path, whose amax scratch belongs to the graph) and replayed on
// inputs changed between replays: a large amax, then a small one. Each replay gives its own
// input's result, and so do eager calls on the stream afterwards (no amax or block count left behind).
TEST(RowQuantGpu, AnyWidthGraphCapturedAndReplayed) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(119);
  std::vector<RowCase> cases;
  for (RowOp op : {RowOp::per_token, RowOp::fused_per_token, RowOp::tensor_static, RowOp::tensor_dynamic})
    for (auto [T, H] : {std::pair<int64_t, int64_t>{3, 1025}, {67, 5137}}) {  // dynamic: a cluster, two launches
      RowCase c{op, DType::bf16, op == RowOp::per_token ? DType::i8 : DType::e4m3, T, H};
      c.stride = c.cols() + 3;
      c.x_offset = c.q_offset = 1;
      cases.push_back(c);
    }
  std::vector<std::vector<uint8_t>> big, small;
  std::vector<std::unique_ptr<RowRun>> runs;
  for (const RowCase& c : cases) {
    big.push_back(row_input(c, rng, 6, 10));
    small.push_back(row_input(c, rng, -6, -2));
    runs.push_back(std::make_unique<RowRun>(c, big.back()));
  }
  cudaStream_t st;
  FP8ROUTE_TEST_CUDA(cudaStreamCreate(&st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FP8ROUTE_TEST_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  std::string error;
  try {
    for (const auto& r : runs) r->launch(st);
  } catch (const std::exception& e) {
    error = e.what();
  }
  FP8ROUTE_TEST_CUDA(cudaStreamEndCapture(st, &graph));
  ASSERT_EQ(error, "");
  FP8ROUTE_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 4; ++rep) {
    const auto& inputs = rep % 2 ? small : big;
    for (size_t i = 0; i < runs.size(); ++i) {
      runs[i]->set_input(inputs[i]);
      runs[i]->poison_outputs();
    }
    FP8ROUTE_TEST_CUDA(cudaGraphLaunch(exec, st));
    FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(st));
    for (size_t i = 0; i < runs.size(); ++i)
      ASSERT_TRUE(matches_reference(cases[i], runs[i]->result(), ref_row_quant(cases[i], inputs[i])))
          << "graph replay " << rep;
  }
  for (const auto* inputs : {&big, &small})
    for (size_t i = 0; i < runs.size(); ++i) {
      runs[i]->set_input((*inputs)[i]);
      runs[i]->poison_outputs();
      runs[i]->launch(st);
      FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(st));
      ASSERT_TRUE(matches_reference(cases[i], runs[i]->result(), ref_row_quant(cases[i], (*inputs)[i])))
          << "eager call after the replays";
    }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

TEST(RowQuantGpu, PerTensorStaticSaturatesAtTheBoundary) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(111);
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8}) {
      const int64_t T = 5, H = 4096;
      const float scale = 0.03125f;
      auto x = test::random_activations(in, T * H, rng, 128, -6, 4);
      // x / scale exactly at and around the saturation boundaries (464 for E4M3, 127.5 for INT8).
      const float edges[] = {448, 463.9f, 464, 464.1f, 480, 1e6f, -464, -1e6f, 127.5f, 126.5f, -127.5f,
                             INFINITY, -INFINITY, NAN};
      for (size_t j = 0; j < std::size(edges); ++j) test::store_value(x, in, 100 + 37 * j, edges[j] * scale);
      DeviceBuffer dx = upload(x), dq(T * H), ds = upload(std::vector<float>{scale});
      poison(dq, 0xAB);
      per_tensor_quant_static(TensorView::contiguous(dx.data(), in, {T, H}),
                              TensorView::contiguous(ds.data(), DType::f32, {1}),
                              TensorView::contiguous(dq.data(), code, {T, H}), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      auto want = ref::per_tensor_quant_static(x.data(), in, T, H, H, scale, code);
      ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want, "codes", H)) << dtype_name(in) << " " << dtype_name(code);
    }
}

TEST(RowQuantGpu, PerTensorDynamicBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(112);
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8})
      // The library's rule: T 1 x 4096, one block; 3 x 4096, a cluster of 6 blocks; 9, 73 and
      // 4097 x 7168, the two-launch path. Then the cluster path up to its capacity: 9 x 7168 is 8
      // blocks of 4 vectors per thread (f32: past the capacity, two launches).
      for (auto [T, cluster_to_capacity] : {std::pair<int64_t, bool>{1, false}, {3, false}, {9, false},
                                            {73, false}, {4097, false}, {9, true}}) {
        if (test::quick() && T == 4097) continue;  // 73 x 7168 takes the two-launch path too
        const int64_t saved = detail::tensor_cluster_max_vecs();
        if (cluster_to_capacity) detail::set_tensor_cluster_max_vecs(int64_t{1} << 30);
        struct Restore {
          int64_t v;
          ~Restore() { detail::set_tensor_cluster_max_vecs(v); }
        } restore{saved};
        const int64_t H = T <= 3 ? 4096 : 7168;
        auto x = test::random_activations(in, T * H, rng, 128, -6, 4);
        test::store_value(x, in, T * H / 3, INFINITY);  // ignored by the amax
        DeviceBuffer dx = upload(x), dq(T * H), ds(4);
        poison(dq, 0xAB);
        poison(ds, 0xFF);
        per_tensor_quant_dynamic(TensorView::contiguous(dx.data(), in, {T, H}),
                                 TensorView::contiguous(dq.data(), code, {T, H}),
                                 TensorView::contiguous(ds.data(), DType::f32, {1}), nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        auto want = ref::per_tensor_quant_dynamic(x.data(), in, T, H, H, code);
        ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want.codes, "codes", H));
        float s;
        std::memcpy(&s, download(ds.data(), 4).data(), 4);
        ASSERT_EQ(s, want.scales[0]);
      }
}

// Rows with a stride (a view into a wider buffer): the cluster path computes each vector's row
// then, and the two-launch path always does.
TEST(RowQuantGpu, PerTensorDynamicStridedRows) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(114);
  for (int64_t T : {5, 300}) {
    const int64_t H = 4096, stride = H + 64;
    auto x = test::random_activations(DType::bf16, T * stride, rng);
    DeviceBuffer dx = upload(x), dq(T * H), ds(4);
    per_tensor_quant_dynamic(TensorView::strided(dx.data(), DType::bf16, {T, H}, {stride, 1}),
                             TensorView::contiguous(dq.data(), DType::e4m3, {T, H}),
                             TensorView::contiguous(ds.data(), DType::f32, {1}), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto want = ref::per_tensor_quant_dynamic(x.data(), DType::bf16, T, H, stride, DType::e4m3);
    ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want.codes, "codes", H)) << "T=" << T;
    float s;
    std::memcpy(&s, download(ds.data(), 4).data(), 4);
    ASSERT_EQ(s, want.scales[0]) << "T=" << T;
  }
}

// The two-launch path keeps its running amax and block counter in a per-stream workspace that each
// call must leave at zero: a call after one with a far larger amax, and graph replays (first call
// on the stream under capture), must each get their own scale.
TEST(RowQuantGpu, PerTensorDynamicLeavesNoStateBehind) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(113);
  const int64_t T = 256, H = 7168;  // past the cluster path: the two-launch path
  const DType in = DType::bf16, code = DType::e4m3;
  auto big = test::random_activations(in, T * H, rng, 128, 6, 10);
  auto small = test::random_activations(in, T * H, rng, 128, -6, -2);
  DeviceBuffer dbig = upload(big), dsmall = upload(small), dq(T * H), ds(4);
  cudaStream_t st;
  FP8ROUTE_TEST_CUDA(cudaStreamCreate(&st));
  auto run = [&](const DeviceBuffer& dx) {
    per_tensor_quant_dynamic(TensorView::contiguous(dx.data(), in, {T, H}),
                             TensorView::contiguous(dq.data(), code, {T, H}),
                             TensorView::contiguous(ds.data(), DType::f32, {1}), st);
  };
  auto expect = [&](const std::vector<uint8_t>& x, const char* what) {
    FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(st));
    auto want = ref::per_tensor_quant_dynamic(x.data(), in, T, H, H, code);
    ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want.codes, what, H));
    float s;
    std::memcpy(&s, download(ds.data(), 4).data(), 4);
    ASSERT_EQ(s, want.scales[0]) << what;
  };
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FP8ROUTE_TEST_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  run(dsmall);
  FP8ROUTE_TEST_CUDA(cudaStreamEndCapture(st, &graph));
  FP8ROUTE_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  run(dbig);
  expect(big, "direct call, large amax");
  for (int rep = 0; rep < 2; ++rep) {
    poison(ds, 0xFF);
    FP8ROUTE_TEST_CUDA(cudaGraphLaunch(exec, st));
    expect(small, "graph replay after a larger amax");
  }
  run(dbig);
  run(dsmall);
  expect(small, "direct call after a larger amax");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// ---- bad input: errors that name the argument, nothing written ------------------------------------

// Runs fn, expects Error(invalid_argument) whose message contains `word`.
// These need no GPU: every argument check runs before the device is touched, so fake device
// pointers are never dereferenced.
TEST(QuantArgs, ErrorsNameTheArgument) {
  // One fake address per tensor (1 MiB apart: no two overlap, which is an error of its own).
  char* fake = reinterpret_cast<char*>(0x100000);
  char *fq = fake + (1 << 20), *fs = fake + (2 << 20), *fi = fake + (3 << 20);
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  const QuantLayout L = quant_layout(s, 4, 512);
  const TensorView x = TensorView::contiguous(fake, DType::bf16, {4, 512});
  const TensorView q = TensorView::contiguous(fq, DType::e4m3, {4, 512});
  const TensorView sc = TensorView::contiguous(fs, DType::f32, {L.scale_shape[0], L.scale_shape[1]});
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(fake, DType::i8, {4, 512}), s, q, sc, nullptr); }, "x: dtype");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {4, 500}), s, q, sc, nullptr); }, "group_size");
  GroupQuantSpec bad = s;
  bad.storage = ScaleStorage::ue8m0_packed;
  expect_invalid([&] { per_token_group_quant(x, bad, q, sc, nullptr); }, "storage");
  expect_invalid([&] { per_token_group_quant(x, s, q, TensorView::contiguous(fs, DType::f32, {4, 3}), nullptr); }, "s: expected shape");
  expect_invalid([&] { per_token_group_quant(x, s, q, TensorView::contiguous(fs + 2, DType::f32, {4, 4}), nullptr); }, "s: pointer");
  expect_invalid([&] { per_token_group_quant(x, s, TensorView::contiguous(fq, DType::i8, {4, 512}), sc, nullptr); }, "q: dtype");
  expect_invalid([&] { per_token_group_quant(x, s, TensorView::contiguous(fq, DType::e4m3, {3, 512}), sc, nullptr); }, "q: expected shape");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(nullptr, DType::bf16, {4, 512}), s, q, sc, nullptr); }, "x: null");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(fake + 2, DType::bf16, {4, 512}), s, q, sc, nullptr); }, "x: pointer");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {4, 512}, Device::cpu()), s, q, sc, nullptr); }, "x: must be CUDA");
  expect_invalid([&] { silu_and_mul_per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {4, 1000}), s, q, sc, nullptr); }, "x: hidden = 500 (half the last dim 1000");
  expect_invalid([&] { masked_per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {2, 4, 512}), TensorView::contiguous(fi, DType::i32, {3}), s, q, sc, nullptr); }, "masked_m");
  expect_invalid([&] { scatter_per_token_group_quant(x, TensorView::contiguous(fi, DType::f32, {4, 2}), s, q, sc, nullptr); }, "src2dst");
  expect_invalid([&] { per_token_quant(x, q, TensorView::contiguous(fs, DType::f32, {5}), ScaleRounding::none, nullptr); }, "s: expected shape");
  expect_invalid([&] { silu_and_mul_per_token_quant(TensorView::contiguous(fake, DType::bf16, {4, 1041}), TensorView::contiguous(fq, DType::e4m3, {4, 520}), TensorView::contiguous(fs, DType::f32, {4}), ScaleRounding::none, nullptr); }, "x: the fused silu_and_mul form");
  expect_invalid([&] { silu_and_mul_per_token_quant(TensorView::contiguous(fake, DType::bf16, {4, 2048}), q, TensorView::contiguous(fs, DType::f32, {4}), ScaleRounding::none, nullptr); }, "q: expected shape");
  expect_invalid([&] { per_tensor_quant_static(x, TensorView::contiguous(fs, DType::f32, {2}), q, nullptr); }, "scale");
  expect_invalid([&] { per_tensor_quant_dynamic(x, TensorView::contiguous(fq, DType::bf16, {4, 512}), TensorView::contiguous(fs, DType::f32, {1}), nullptr); }, "q: dtype");
}

// The per-token and per-tensor ops take any H >= 1, any row stride >= H and an x aligned to its
// element (RowQuantGpu.AnyWidthBitExact); what remains to refuse still names the argument. No GPU
// needed: fake pointers, every check before the device is touched.
TEST(QuantArgs, RowOpsOfAnyWidthStillRefuseBadArguments) {
  char* fake = reinterpret_cast<char*>(0x100000);
  char *fq = fake + (1 << 20), *fs = fake + (2 << 20);
  const TensorView s = TensorView::contiguous(fs, DType::f32, {4}), scale = TensorView::contiguous(fs, DType::f32, {1});
  auto x = [&](DType d, int64_t h, int64_t stride, int64_t offset = 0) {
    return TensorView::strided(fake + offset, d, {4, h}, {stride, 1});
  };
  auto q = [&](int64_t h) { return TensorView::contiguous(fq, DType::e4m3, {4, h}); };
  auto token = [&](const TensorView& xv, const TensorView& qv) { per_token_quant(xv, qv, s, ScaleRounding::none, nullptr); };
  auto fused = [&](const TensorView& xv, const TensorView& qv) {
    silu_and_mul_per_token_quant(xv, qv, s, ScaleRounding::pow2, nullptr);
  };
  auto stat = [&](const TensorView& xv, const TensorView& qv) { per_tensor_quant_static(xv, scale, qv, nullptr); };
  auto dyn = [&](const TensorView& xv, const TensorView& qv) { per_tensor_quant_dynamic(xv, qv, scale, nullptr); };
  expect_invalid([&] { token(x(DType::bf16, 17, 16), q(17)); }, "x: row stride must be >= H");
  expect_invalid([&] { stat(x(DType::f16, 1025, 1024), q(1025)); }, "x: row stride must be >= H");
  expect_invalid([&] { dyn(x(DType::f32, 5137, 5136), q(5137)); }, "x: row stride must be >= H");
  expect_invalid([&] { fused(x(DType::bf16, 34, 33), q(17)); }, "x: row stride must be >= H");
  expect_invalid([&] { token(x(DType::bf16, 0, 0), q(0)); }, "x: H = 0 must be positive");
  expect_invalid([&] { dyn(x(DType::f32, 17, 17, 2), q(17)); }, "x: pointer");
  expect_invalid([&] { stat(x(DType::bf16, 17, 17, 1), q(17)); }, "x: pointer");
  expect_invalid([&] { fused(x(DType::bf16, 35, 35), q(17)); }, "x: the fused silu_and_mul form takes [T, 2 x hidden]");
  expect_invalid([&] { fused(x(DType::bf16, 34, 35), q(34)); }, "q: expected shape [4,17]");
  expect_invalid([&] { token(x(DType::bf16, 17, 19), TensorView::strided(fq, DType::e4m3, {4, 17}, {19, 1})); },
                 "q: must be contiguous");
  expect_invalid([&] { token(TensorView::strided(fake, DType::bf16, {4, 17}, {40, 2}), q(17)); }, "x: last dim must be contiguous");
  expect_invalid([&] { dyn(x(DType::f16, 17, 17), TensorView::contiguous(fake + 16, DType::e4m3, {4, 17})); },
                 "q and x overlap");
}

TEST(QuantArgs, NothingWrittenOnError) {
  FP8ROUTE_REQUIRE_SM90();
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  GroupQuantOutputs out = allocate_group_quant_outputs(s, 5, 512);
  poison(out.code_buffer, 0xAB);
  poison(out.scale_buffer, 0xCD);
  DeviceBuffer dx(5 * 512 * 2);
  const TensorView x = TensorView::contiguous(dx.data(), DType::bf16, {5, 512});
  GroupQuantSpec wrong_layout = s;
  wrong_layout.layout = ScaleLayout::col_major_tma;  // needs [4, 8] scales, not [5, 4]
  EXPECT_THROW(per_token_group_quant(x, wrong_layout, out.q, out.s, nullptr), Error);
  EXPECT_THROW(per_token_group_quant(TensorView::contiguous(dx.data(), DType::bf16, {5, 500}), s, out.q, out.s, nullptr), Error);
  GroupQuantSpec int8 = s;
  int8.code = DType::i8;  // q holds e4m3
  EXPECT_THROW(per_token_group_quant(x, int8, out.q, out.s, nullptr), Error);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (uint8_t b : download(out.code_buffer.data(), out.layout.code_bytes)) ASSERT_EQ(b, 0xAB);
  for (uint8_t b : download(out.scale_buffer.data(), out.layout.scale_bytes)) ASSERT_EQ(b, 0xCD);
}

// An empty input (T = 0, or E = 0) with the null pointers DLPack and torch give empty tensors is
// checked like any other and launches nothing (no GPU needed), for every op that writes nothing
// then; a null pointer with elements behind it is still refused.
TEST(QuantArgs, EmptyInputsMayHaveNullPointers) {
  void* fake = reinterpret_cast<void*>(0x100000);
  auto empty = [](DType d, std::initializer_list<int64_t> shape) { return TensorView::contiguous(nullptr, d, shape); };
  for (const GroupQuantSpec& s : {GroupQuantSpec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major},
                                  GroupQuantSpec{64, DType::i8, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major},
                                  GroupQuantSpec{128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::col_major_tma}}) {
    const QuantLayout L = quant_layout(s, 0, 512);
    const TensorView q = empty(s.code, {0, 512}), sc = empty(L.scale_dtype, {L.scale_shape[0], L.scale_shape[1]});
    EXPECT_NO_THROW(per_token_group_quant(empty(DType::bf16, {0, 512}), s, q, sc, nullptr)) << to_string(s);
    EXPECT_NO_THROW(silu_and_mul_per_token_group_quant(empty(DType::f32, {0, 1024}), s, q, sc, nullptr)) << to_string(s);
    // Scatter from no tokens into no rows.
    EXPECT_NO_THROW(scatter_per_token_group_quant(empty(DType::f16, {0, 512}), empty(DType::i32, {0, 8}), s, q, sc, nullptr))
        << to_string(s);
    // Masked: experts with T_pad = 0 (masked_m has elements, so a pointer), then no experts.
    const QuantLayout LE = quant_layout(s, 0, 512, 3);
    EXPECT_NO_THROW(masked_per_token_group_quant(
        empty(DType::bf16, {3, 0, 512}), TensorView::contiguous(fake, DType::i32, {3}), s, empty(s.code, {3, 0, 512}),
        empty(LE.scale_dtype, {LE.scale_shape[0], LE.scale_shape[1], LE.scale_shape[2]}), nullptr)) << to_string(s);
    const QuantLayout L0 = quant_layout(s, 4, 512, 1);
    EXPECT_NO_THROW(masked_silu_and_mul_per_token_group_quant(
        empty(DType::bf16, {0, 4, 1024}), empty(DType::i32, {0}), s, empty(s.code, {0, 4, 512}),
        empty(L0.scale_dtype, {0, L0.scale_shape[1], L0.scale_shape[2]}), nullptr)) << to_string(s);
  }
  EXPECT_NO_THROW(per_token_quant(empty(DType::bf16, {0, 4096}), empty(DType::e4m3, {0, 4096}), empty(DType::f32, {0}),
                                  ScaleRounding::pow2, nullptr));
  EXPECT_NO_THROW(per_tensor_quant_static(empty(DType::f16, {0, 4096}), TensorView::contiguous(fake, DType::f32, {1}),
                                          empty(DType::i8, {0, 4096}), nullptr));
  expect_invalid([&] { per_token_quant(empty(DType::bf16, {2, 4096}), empty(DType::e4m3, {0, 4096}), empty(DType::f32, {0}),
                                       ScaleRounding::none, nullptr); }, "x: null pointer");
  expect_invalid([&] { per_tensor_quant_static(empty(DType::f16, {0, 4096}), empty(DType::f32, {1}), empty(DType::i8, {0, 4096}),
                                               nullptr); }, "scale: null pointer");
}

// The dynamic per-tensor quant of an empty x still writes its scale: amax 0, floored, over qmax.
TEST(RowQuantGpu, PerTensorDynamicEmptyWritesTheFloorScale) {
  FP8ROUTE_REQUIRE_SM90();
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8}) {
      DeviceBuffer ds(4);
      poison(ds, 0xFF);
      per_tensor_quant_dynamic(TensorView::contiguous(nullptr, in, {0, 4096}), TensorView::contiguous(nullptr, code, {0, 4096}),
                               TensorView::contiguous(ds.data(), DType::f32, {1}), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      float s;
      std::memcpy(&s, download(ds.data(), 4).data(), 4);
      EXPECT_EQ(s, ref::per_tensor_quant_dynamic(nullptr, in, 0, 4096, 4096, code).scales[0]);
      EXPECT_EQ(s, kAmaxFloor / code_qmax(code)) << dtype_name(in) << " " << dtype_name(code);
    }
}

// ---- the widths above are the models' ------------------------------------------------------------

TEST(ShapesFile, WidthsComeFromModelsJson) {
  // FP8ROUTE_SOURCE_DIR in the environment points at a copy of the tree elsewhere (GPU machine).
  const char* env = std::getenv("FP8ROUTE_SOURCE_DIR");
  std::ifstream f(std::string(env ? env : FP8ROUTE_SOURCE_DIR) + "/shapes/models.json");
  ASSERT_TRUE(f.good()) << "shapes/models.json not found";
  const auto j = nlohmann::json::parse(f);
  std::set<int64_t> ks;
  for (const auto& [model, layers] : j["models"].items())
    for (const auto& l : layers) ks.insert(l["k"].get<int64_t>());
  for (int64_t w : kWidths) EXPECT_TRUE(ks.count(w)) << w << " is not the k of any models.json layer";
}

// ---- graphs replayed at the same time on several streams ----------------------------------------

// Two graphs captured on one stream, each running the two-launch dynamic per-tensor quant on its own
// input, replayed at once on two other streams: each replay must give its own input's scale and
// codes (the amax slot, block counter and multiplier belong to one graph), and eager calls on the
// capture stream and a replay stream afterwards must too (nothing left dirty). With scratch shared
// per capture stream, the replays' amax kernels (896 blocks each, co-resident on an H200) count
// into one block counter and max into one amax: wrong scales, and a counter left off zero that
// makes every later call on the capture stream wrong.
TEST(RowQuantGpu, PerTensorDynamicGraphsReplayedConcurrently) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(116);
  const int64_t T = 256, H = 7168;  // past the cluster path: the two-launch path
  const DType in = DType::bf16, code = DType::e4m3;
  constexpr int kCalls = 4;     // quant calls per graph, each into its own q and scale
  // Per stream, released together; with a copy after each, 2 x 2 x 16 held operations stay within
  // what the driver queues while they wait (start_gate.h).
  constexpr int kReplays = 16;
  const size_t codes = static_cast<size_t>(T * H);
  // Amaxes orders of magnitude apart, so that any mixing shows in the scale.
  const std::vector<uint8_t> x[3] = {test::random_activations(in, T * H, rng, 128, 6, 10),
                                     test::random_activations(in, T * H, rng, 128, -8, -4),
                                     test::random_activations(in, T * H, rng, 128, -2, 2)};
  std::vector<ref::RowQuantOutput> want;
  for (const auto& xi : x) want.push_back(ref::per_tensor_quant_dynamic(xi.data(), in, T, H, H, code));
  cudaStream_t cap, replay[2];
  FP8ROUTE_TEST_CUDA(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
  for (cudaStream_t& r : replay) FP8ROUTE_TEST_CUDA(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking));
  DeviceBuffer dx[3] = {upload(x[0]), upload(x[1]), upload(x[2])};
  DeviceBuffer dq[3] = {DeviceBuffer(kCalls * codes), DeviceBuffer(kCalls * codes), DeviceBuffer(codes)};
  DeviceBuffer ds[3] = {DeviceBuffer(kCalls * 4), DeviceBuffer(kCalls * 4), DeviceBuffer(4)};
  DeviceBuffer history[2] = {DeviceBuffer(kReplays * kCalls * 4), DeviceBuffer(kReplays * kCalls * 4)};
  auto quant = [&](int i, int call, cudaStream_t s) {
    per_tensor_quant_dynamic(TensorView::contiguous(dx[i].data(), in, {T, H}),
                             TensorView::contiguous(dq[i].as<uint8_t>() + call * codes, code, {T, H}),
                             TensorView::contiguous(ds[i].as<float>() + call, DType::f32, {1}), s);
  };
  // The first call on `cap` is eager, as a server's warm-up would be: the stream has its own scratch
  // before the captures.
  quant(2, 0, cap);
  FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(cap));
  cudaGraph_t graph[2];
  cudaGraphExec_t exec[2];
  for (int g = 0; g < 2; ++g) {
    FP8ROUTE_TEST_CUDA(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
    std::string error;
    try {
      // Poison first, in the graph: a replay that writes no scale or no code shows.
      FP8ROUTE_TEST_CUDA(cudaMemsetAsync(ds[g].data(), 0xFF, kCalls * 4, cap));
      FP8ROUTE_TEST_CUDA(cudaMemsetAsync(dq[g].data(), 0xAB, kCalls * codes, cap));
      for (int c = 0; c < kCalls; ++c) quant(g, c, cap);
    } catch (const std::exception& e) {
      error = e.what();
    }
    FP8ROUTE_TEST_CUDA(cudaStreamEndCapture(cap, &graph[g]));
    ASSERT_EQ(error, "");
    FP8ROUTE_TEST_CUDA(cudaGraphInstantiate(&exec[g], graph[g], 0));
  }
  {
    test::StartGate gate;
    ASSERT_TRUE(gate.ok());
    for (cudaStream_t r : replay) ASSERT_TRUE(gate.hold(r));
    for (int i = 0; i < kReplays; ++i)
      for (int g = 0; g < 2; ++g) {
        FP8ROUTE_TEST_CUDA(cudaGraphLaunch(exec[g], replay[g]));
        FP8ROUTE_TEST_CUDA(cudaMemcpyAsync(history[g].as<float>() + i * kCalls, ds[g].data(), kCalls * 4,
                                           cudaMemcpyDeviceToDevice, replay[g]));
      }
    gate.open();
    EXPECT_FALSE(gate.opened_by_watchdog()) << "the host blocked while enqueueing the held replays";
  }
  for (cudaStream_t r : replay) FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(r));
  for (int g = 0; g < 2; ++g) {
    std::vector<float> h(kReplays * kCalls);
    std::memcpy(h.data(), download(history[g].data(), h.size() * 4).data(), h.size() * 4);
    int wrong = 0;
    for (size_t i = 0; i < h.size(); ++i) wrong += h[i] != want[g].scales[0];
    EXPECT_EQ(wrong, 0) << "graph " << g << ": " << wrong << " of " << h.size()
                        << " scales differ from the reference " << want[g].scales[0];
    const std::vector<uint8_t> q = download(dq[g].data(), kCalls * codes);
    for (int c = 0; c < kCalls; ++c)
      EXPECT_TRUE(bytes_equal(std::vector<uint8_t>(q.begin() + c * codes, q.begin() + (c + 1) * codes),
                              want[g].codes, ("graph " + std::to_string(g) + " last replay, call " +
                                              std::to_string(c) + " codes").c_str(), H));
  }
  // Eager calls afterwards: on the capture stream (its own scratch) and on a replay stream.
  for (cudaStream_t s : {cap, replay[0]}) {
    // On `s` itself: a non-blocking stream does not wait for the legacy stream's memset.
    FP8ROUTE_TEST_CUDA(cudaMemsetAsync(ds[2].data(), 0xFF, 4, s));
    FP8ROUTE_TEST_CUDA(cudaMemsetAsync(dq[2].data(), 0xAB, codes, s));
    quant(2, 0, s);
    FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(s));
    const char* what = s == cap ? "eager on the capture stream" : "eager on a replay stream";
    float scale;
    std::memcpy(&scale, download(ds[2].data(), 4).data(), 4);
    EXPECT_EQ(scale, want[2].scales[0]) << what;
    EXPECT_TRUE(bytes_equal(download(dq[2].data(), codes), want[2].codes, what, H));
  }
  for (int g = 0; g < 2; ++g) cudaGraphExecDestroy(exec[g]), cudaGraphDestroy(graph[g]);
  for (cudaStream_t r : replay) cudaStreamDestroy(r);
  cudaStreamDestroy(cap);
}

}  // namespace
}  // namespace fp8route
