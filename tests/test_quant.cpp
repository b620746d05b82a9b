// The quantization kernels against the CPU reference: bit-exact for every non-fused combination,
// the traps of NUMERICS.md, the masked and scatter forms, the fused path within its tolerance,
// and argument errors that write nothing.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
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
#include "quant/quant_internal.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::bytes_equal;
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
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (const GroupQuantSpec& s : all_specs())
      for (int64_t T : {1, 3, 127}) {
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
// division sequence (kernels/scale_math.h); NUMERICS.md wants both correctly rounded. Proved here
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

TEST(GroupQuantGpu, ScatterToDestinationRows) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(109);
  for (const GroupQuantSpec& s : {GroupQuantSpec{128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::ue8m0_packed, ScaleLayout::col_major_tma},
                                  GroupQuantSpec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major},
                                  GroupQuantSpec{128, DType::e4m3, ScaleRounding::pow2, ScaleStorage::f32, ScaleLayout::col_major_tma}}) {
    const int64_t T = 13, H = 7168, topk = 4, rows = 2 * T * topk + 3;  // rows % 4 != 0: padded
    auto x = test::random_activations(DType::bf16, T * H, rng);
    // Distinct destination rows; some slots -1; one out of range (skipped, never written).
    std::vector<int32_t> perm(rows);
    for (int64_t i = 0; i < rows; ++i) perm[i] = static_cast<int32_t>(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> src2dst(T * topk);
    for (int64_t i = 0; i < T * topk; ++i) src2dst[i] = (i % 5 == 3) ? -1 : perm[i];
    src2dst[7] = static_cast<int32_t>(rows + 100);
    DeviceBuffer dx = upload(x), dmap = upload(src2dst);
    GroupQuantOutputs out = allocate_group_quant_outputs(s, rows, H);
    poison(out.code_buffer, 0xAB);
    poison(out.scale_buffer, 0xFF);
    scatter_per_token_group_quant(TensorView::contiguous(dx.data(), DType::bf16, {T, H}),
                                  TensorView::contiguous(dmap.data(), DType::i32, {T, topk}), s,
                                  out.q, out.s, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto codes = download(out.code_buffer.data(), out.layout.code_bytes);
    auto scales = download(out.scale_buffer.data(), out.layout.scale_bytes);
    auto want = ref::per_token_group_quant(x.data(), DType::bf16, T, H, H, s);
    const QuantLayout& L = out.layout;
    const QuantLayout& WL = want.layout;
    std::vector<int64_t> src_of(rows, -1);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < topk; ++j) {
        const int32_t d = src2dst[t * topk + j];
        if (d >= 0 && d < rows) src_of[d] = t;
      }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = src_of[r];
      for (int64_t i = 0; i < H; ++i)
        ASSERT_EQ(codes[r * H + i], t < 0 ? 0xAB : want.codes[t * H + i]) << "row " << r << " i " << i;
      for (int64_t c = 0; c < L.scale_cols; ++c)
        for (int b = 0; b < 4; ++b) {
          const uint8_t g = scales[(r * L.scale_stride_t + c * L.scale_stride_c) * 4 + b];
          const uint8_t w = t < 0 ? 0xFF : want.scales[(t * WL.scale_stride_t + c * WL.scale_stride_c) * 4 + b];
          ASSERT_EQ(g, w) << to_string(s) << " row " << r << " col " << c << " byte " << b;
        }
    }
    for (int64_t r = rows; r < L.t_pad; ++r)
      for (int64_t c = 0; c < L.scale_cols; ++c)
        for (int b = 0; b < 4; ++b)
          ASSERT_EQ(scales[(r * L.scale_stride_t + c * L.scale_stride_c) * 4 + b], 0) << "padding";
  }
}

// ---- per-token and per-tensor ---------------------------------------------------------------------

TEST(RowQuantGpu, PerTokenBitExact) {
  FP8ROUTE_REQUIRE_SM90();
  auto rng = test::make_rng(110);
  for (DType in : {DType::bf16, DType::f16, DType::f32})
    for (DType code : {DType::e4m3, DType::i8})
      for (auto r : {ScaleRounding::none, ScaleRounding::pow2})
        for (int64_t T : {1, 3, 127}) {
          // Rows up to 8192 wide stay in registers; wider ones take the two-read path.
          const int64_t H = T == 3 ? 18432 : kWidths[(T + static_cast<int>(in)) % std::size(kWidths)];
          auto x = test::random_activations(in, T * H, rng, H);
          test::store_value(x, in, H / 2, T % 2 ? NAN : INFINITY);
          DeviceBuffer dx = upload(x), dq(T * H), ds(T * 4);
          poison(dq, 0xAB);
          per_token_quant(TensorView::contiguous(dx.data(), in, {T, H}),
                          TensorView::contiguous(dq.data(), code, {T, H}),
                          TensorView::contiguous(ds.data(), DType::f32, {T}), r, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          auto want = ref::per_token_quant(x.data(), in, T, H, H, code, r);
          ASSERT_TRUE(bytes_equal(download(dq.data(), T * H), want.codes, "codes", H));
          std::vector<uint8_t> ws(T * 4);
          std::memcpy(ws.data(), want.scales.data(), T * 4);
          ASSERT_TRUE(bytes_equal(download(ds.data(), T * 4), ws, "scales"));
        }
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
template <class F>
void expect_invalid(F&& fn, const std::string& word) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one naming '" << word << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

// These need no GPU: every argument check runs before the device is touched, so fake device
// pointers are never dereferenced.
TEST(QuantArgs, ErrorsNameTheArgument) {
  void* fake = reinterpret_cast<void*>(0x100000);
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  const QuantLayout L = quant_layout(s, 4, 512);
  const TensorView x = TensorView::contiguous(fake, DType::bf16, {4, 512});
  const TensorView q = TensorView::contiguous(fake, DType::e4m3, {4, 512});
  const TensorView sc = TensorView::contiguous(fake, DType::f32, {L.scale_shape[0], L.scale_shape[1]});
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(fake, DType::i8, {4, 512}), s, q, sc, nullptr); }, "x: dtype");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {4, 500}), s, q, sc, nullptr); }, "group_size");
  GroupQuantSpec bad = s;
  bad.storage = ScaleStorage::ue8m0_packed;
  expect_invalid([&] { per_token_group_quant(x, bad, q, sc, nullptr); }, "storage");
  expect_invalid([&] { per_token_group_quant(x, s, q, TensorView::contiguous(fake, DType::f32, {4, 3}), nullptr); }, "s: expected shape");
  expect_invalid([&] { per_token_group_quant(x, s, q, TensorView::contiguous(static_cast<char*>(fake) + 2, DType::f32, {4, 4}), nullptr); }, "s: pointer");
  expect_invalid([&] { per_token_group_quant(x, s, TensorView::contiguous(fake, DType::i8, {4, 512}), sc, nullptr); }, "q: dtype");
  expect_invalid([&] { per_token_group_quant(x, s, TensorView::contiguous(fake, DType::e4m3, {3, 512}), sc, nullptr); }, "q: expected shape");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(nullptr, DType::bf16, {4, 512}), s, q, sc, nullptr); }, "x: null");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(static_cast<char*>(fake) + 2, DType::bf16, {4, 512}), s, q, sc, nullptr); }, "x: pointer");
  expect_invalid([&] { per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {4, 512}, Device::cpu()), s, q, sc, nullptr); }, "x: must be CUDA");
  expect_invalid([&] { silu_and_mul_per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {4, 1000}), s, q, sc, nullptr); }, "x: H");
  expect_invalid([&] { masked_per_token_group_quant(TensorView::contiguous(fake, DType::bf16, {2, 4, 512}), TensorView::contiguous(fake, DType::i32, {3}), s, q, sc, nullptr); }, "masked_m");
  expect_invalid([&] { scatter_per_token_group_quant(x, TensorView::contiguous(fake, DType::f32, {4, 2}), s, q, sc, nullptr); }, "src2dst");
  expect_invalid([&] { per_token_quant(x, q, TensorView::contiguous(fake, DType::f32, {5}), ScaleRounding::none, nullptr); }, "s: expected shape");
  expect_invalid([&] { per_tensor_quant_static(x, TensorView::contiguous(fake, DType::f32, {2}), q, nullptr); }, "scale");
  expect_invalid([&] { per_tensor_quant_dynamic(x, TensorView::contiguous(fake, DType::bf16, {4, 512}), TensorView::contiguous(fake, DType::f32, {1}), nullptr); }, "q: dtype");
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

TEST(QuantArgs, EmptyInputsReturnAtOnce) {
  FP8ROUTE_REQUIRE_SM90();
  const GroupQuantSpec s{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  GroupQuantOutputs out = allocate_group_quant_outputs(s, 0, 512);
  DeviceBuffer dx(16);
  EXPECT_NO_THROW(per_token_group_quant(TensorView::contiguous(dx.data(), DType::bf16, {0, 512}), s, out.q, out.s, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
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

}  // namespace
}  // namespace fp8route
