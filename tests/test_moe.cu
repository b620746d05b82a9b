// The grouped GEMM on the GPU against independent references (docs/moe.md, Arithmetic):
// - exact equality with the CPU reference on small-integer data, every form, scale kind, scale_a
//   layout and storage, both output dtypes;
// - random data: within the GEMM tolerance of the CPU fp64 reference, and each expert bit-identical
//   to the dense reference backend (scaled_mm "reference") run on that expert's rows alone;
// - routings engines produce: empty experts, every row on one expert, masked_m = 0, masked_m above
//   M_max and negative (clamped), rows of no group (never written: poison stays), offsets as ends;
// - real expert shapes (DeepSeek-V3 under EP 8, Qwen3-30B-A3B) at decode sizes, against the dense
//   reference backend;
// - one CUDA graph replayed for several routings, and run-to-run determinism.
// Fresh random data each run (the seed is printed; FP8ROUTE_TEST_SEED repeats one).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/gemm.h"
#include "fp8route/moe.h"
#include "fp8route/reference.h"
#include "fp8route/tuning/gemm_knobs.h"
#include "gemm/decode/plan.cuh"
#include "gpu_util.h"
#include "moe_util.h"
#include "reference/moe.h"

namespace fp8route {
namespace {

using test::download;
using test::every_moe_kind;
using test::make_moe_case;
using test::MoeCase;
using test::MoeSpec;
using test::upload;

uint64_t seed() {
  static const uint64_t s = [] {
    const char* env = std::getenv("FP8ROUTE_TEST_SEED");
    const uint64_t v = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("test_moe seed: FP8ROUTE_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

#define SKIP_WITHOUT_SM90()                                                                        \
  do {                                                                                             \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: " << cuda_unavailable_reason();         \
    if (!device_info(-1).is_sm90()) GTEST_SKIP() << "needs an SM90 GPU, device is sm_" << device_info(-1).sm_version(); \
  } while (0)

// A case's operands on the device, and its output poisoned with 0xFF bytes (NaN in bf16 and f16).
struct DeviceCase {
  DeviceBuffer a, b, groups, sa, sb, out;
  GroupedMmArgs args;
};

DeviceCase to_device(const MoeCase& c) {
  const MoeSpec& s = c.spec;
  DeviceCase d;
  d.a = upload(c.a);
  d.b = upload(c.b);
  d.groups = upload(c.groups);
  d.sa = s.packed ? upload(c.sa_packed) : upload(c.sa_f32);
  d.sb = upload(c.sb);
  const int64_t out_elems = c.a_rows() * s.n;
  d.out = DeviceBuffer(std::max<int64_t>(out_elems * 2, 16));
  test::poison(d.out, 0xFF);
  GroupedMmArgs& g = d.args;
  g.form = s.form;
  g.scale = s.scale;
  g.scale_a_layout = s.layout;
  const bool masked = c.masked();
  const int64_t E = s.experts;
  g.a = masked ? TensorView::contiguous(d.a.data(), DType::e4m3, {E, s.rows, s.k})
               : TensorView::contiguous(d.a.data(), DType::e4m3, {s.rows, s.k});
  g.b = TensorView::contiguous(d.b.data(), DType::e4m3, {E, s.n, s.k});
  g.out = masked ? TensorView::contiguous(d.out.data(), s.out, {E, s.rows, s.n})
                 : TensorView::contiguous(d.out.data(), s.out, {s.rows, s.n});
  const int64_t ng = static_cast<int64_t>(c.groups.size());
  (masked ? g.masked_m : g.offsets) = TensorView::contiguous(d.groups.data(), DType::i32, {ng});
  switch (s.scale) {
    case ScaleKind::tensor:
      g.scale_a = TensorView::contiguous(d.sa.data(), DType::f32, {static_cast<int64_t>(c.sa_f32.size())});
      g.scale_b = TensorView::contiguous(d.sb.data(), DType::f32, {E});
      break;
    case ScaleKind::row:
      g.scale_a = masked ? TensorView::contiguous(d.sa.data(), DType::f32, {E, s.rows})
                         : TensorView::contiguous(d.sa.data(), DType::f32, {s.rows});
      g.scale_b = TensorView::contiguous(d.sb.data(), DType::f32, {E, s.n});
      break;
    case ScaleKind::block: {
      const QuantLayout& L = c.sa_layout;
      g.scale_a.data = d.sa.data();
      g.scale_a.dtype = L.scale_dtype;
      g.scale_a.ndim = L.scale_ndim;
      for (int i = 0; i < L.scale_ndim; ++i) g.scale_a.shape[i] = L.scale_shape[i], g.scale_a.strides[i] = L.scale_strides[i];
      if (masked) g.scale_a.shape[0] = E;
      g.scale_b = TensorView::contiguous(d.sb.data(), DType::f32, {E, (s.n + 127) / 128, s.k / 128});
      break;
    }
  }
  return d;
}

std::vector<float> download_out(const MoeCase& c, const DeviceCase& d) {
  const int64_t n = c.a_rows() * c.spec.n;
  const std::vector<uint8_t> bytes = download(d.out.data(), static_cast<size_t>(n * 2));
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, &bytes[i * 2], 2);
    v[i] = h == 0xFFFF ? NAN : c.spec.out == DType::bf16 ? ref::bf16_to_f32(h) : ref::f16_to_f32(h);
  }
  return v;
}

// Rows of a group against the reference: exactly, or within the GEMM tolerance normwise; rows of no
// group must still hold the poison (NaN here), and group rows must hold no NaN.
testing::AssertionResult matches(const std::vector<float>& got, const std::vector<float>& want, bool exact) {
  double d2 = 0, r2 = 0;
  int64_t unwritten = 0, written_outside = 0, mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      written_outside += !std::isnan(got[i]);
      continue;
    }
    if (std::isnan(got[i])) {
      ++unwritten;
      continue;
    }
    mismatches += got[i] != want[i];
    d2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    r2 += double(want[i]) * want[i];
  }
  const double rel = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
  if (unwritten || written_outside || (exact && mismatches) || rel > 1e-2)
    return testing::AssertionFailure() << unwritten << " group elements not written, " << written_outside
                                       << " elements of no group written, " << mismatches
                                       << " differ from the reference, relative error " << rel;
  return testing::AssertionSuccess();
}

void run_and_check(const MoeSpec& s, std::mt19937_64& rng, const char* backend = "") {
  const MoeCase c = make_moe_case(s, rng);
  DeviceCase d = to_device(c);
  ASSERT_NO_THROW(grouped_scaled_mm(d.args, backend, nullptr)) << test::to_string(s) << " backend '" << backend << "'";
  FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(matches(download_out(c, d), ref::grouped_scaled_mm(c.view()), s.small_integers))
      << test::to_string(s) << " seed " << seed();
}

TEST(MoeGpu, ExactOnSmallIntegers) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed());
  for (const MoeSpec& s : every_moe_kind(true)) run_and_check(s, rng);
}

TEST(MoeGpu, RandomDataWithinTolerance) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed() + 1);
  for (const MoeSpec& s : every_moe_kind(false)) run_and_check(s, rng);
}

TEST(MoeGpu, Routings) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed() + 2);
  MoeSpec s;
  s.experts = 6, s.rows = 70, s.n = 136, s.k = 256, s.small_integers = true;
  for (ScaleKind kind : {ScaleKind::row, ScaleKind::block}) {
    s.scale = kind;
    s.form = GroupedForm::contiguous;
    for (std::vector<int32_t> g : std::vector<std::vector<int32_t>>{
             {0, 70, 70, 70, 70, 70, 70},   // every row on expert 0
             {0, 0, 0, 0, 0, 0, 70},        // every row on the last expert
             {0, 0, 0, 0, 0, 0, 0},         // no rows at all
             {3, 10, 10, 40, 41, 41, 60},   // rows 0-2 and 60-69 of no expert
             {0, 1, 2, 3, 4, 5, 90},        // the last end past M_total: clamped
         }) {
      s.groups = g;
      run_and_check(s, rng);
    }
    s.groups = {5, 5, 64, 64, 65, 70};  // torch's ends form
    run_and_check(s, rng);
    s.form = GroupedForm::masked;
    for (std::vector<int32_t> g : std::vector<std::vector<int32_t>>{
             {0, 0, 0, 0, 0, 0},         // masked_m = 0 everywhere
             {70, 0, 1, 64, 65, 2},      // full, empty, one row, tile edges
             {1000, -5, 71, 3, 0, 69},   // above M_max and negative: clamped
         }) {
      s.groups = g;
      run_and_check(s, rng);
    }
  }
}

TEST(MoeGpu, EmptyProblemsLaunchNothing) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed() + 3);
  for (GroupedForm f : {GroupedForm::contiguous, GroupedForm::masked}) {
    MoeSpec s;
    s.form = f, s.experts = 3, s.rows = 0, s.n = 64, s.k = 128;
    run_and_check(s, rng);
  }
}

// Each expert's rows against the dense reference backend on those rows alone: bit for bit.
void check_against_dense(const MoeCase& c, const DeviceCase& d) {
  const MoeSpec& s = c.spec;
  const bool masked = c.masked();
  const std::vector<ref::GroupRows> rows = ref::grouped_rows(s.form, c.groups, s.experts, s.rows);
  const std::vector<uint8_t> got = download(d.out.data(), static_cast<size_t>(c.a_rows() * s.n * 2));
  const ref::GroupedProblemRef v = c.view();
  const int64_t kb = s.k / 128, nb = (s.n + 127) / 128;
  int64_t checked = 0;
  for (int64_t e = 0; e < s.experts; ++e) {
    const int64_t m = rows[e].count;
    if (m == 0) continue;
    const int64_t row0 = (masked ? e * s.rows : 0) + rows[e].start;
    ScaledMmArgs a;
    a.scale = s.scale;
    a.accum = Accum::precise;
    a.a = TensorView::contiguous(static_cast<uint8_t*>(d.a.data()) + row0 * s.k, DType::e4m3, {m, s.k});
    a.b = TensorView::contiguous(static_cast<uint8_t*>(d.b.data()) + e * s.n * s.k, DType::e4m3, {s.n, s.k});
    DeviceBuffer out(static_cast<size_t>(m * s.n * 2)), sa_buf;
    a.out = TensorView::contiguous(out.data(), s.out, {m, s.n});
    float* sa = static_cast<float*>(d.sa.data());
    float* sb = static_cast<float*>(d.sb.data());
    switch (s.scale) {
      case ScaleKind::tensor:
        a.scale_a = TensorView::contiguous(sa + (c.sa_f32.size() == 1 ? 0 : e), DType::f32, {1});
        a.scale_b = TensorView::contiguous(sb + e, DType::f32, {1});
        break;
      case ScaleKind::row:
        a.scale_a = TensorView::contiguous(sa + row0, DType::f32, {m});
        a.scale_b = TensorView::contiguous(sb + e * s.n, DType::f32, {s.n});
        break;
      case ScaleKind::block: {
        // The expert's activation scales decoded into the dense physical form [kb, align(m, 4)].
        const int64_t m_pad = (m + 3) / 4 * 4;
        std::vector<float> host(static_cast<size_t>(kb * m_pad), 0.0f);
        for (int64_t q = 0; q < kb; ++q)
          for (int64_t i = 0; i < m; ++i)
            host[q * m_pad + i] = ref::grouped_block_scale_a(v, masked ? e : 0, rows[e].start + i, q);
        sa_buf = upload(host);
        a.scale_a = TensorView::contiguous(sa_buf.data(), DType::f32, {kb, m_pad});
        a.scale_b = TensorView::contiguous(sb + e * nb * kb, DType::f32, {nb, kb});
        break;
      }
    }
    ASSERT_NO_THROW(scaled_mm(a, "reference", "simt_64x64", nullptr)) << test::to_string(s) << " expert " << e;
    const std::vector<uint8_t> want = download(out.data(), static_cast<size_t>(m * s.n * 2));
    const std::vector<uint8_t> mine(got.begin() + row0 * s.n * 2, got.begin() + (row0 + m) * s.n * 2);
    EXPECT_TRUE(test::bytes_equal(mine, want, "expert rows vs dense reference", s.n * 2))
        << test::to_string(s) << " expert " << e << " seed " << seed();
    ++checked;
  }
  std::printf("  %s: %lld active experts bit-identical to the dense reference\n", test::to_string(s).c_str(),
              static_cast<long long>(checked));
}

// The simt backend's rows against the dense reference backend (the tensor-core backends sum in
// another order: MoeFast checks them against the CPU reference and against simt).
TEST(MoeGpu, EachExpertBitIdenticalToTheDenseReference) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed() + 4);
  for (const MoeSpec& s : every_moe_kind(false)) {
    const MoeCase c = make_moe_case(s, rng);
    DeviceCase d = to_device(c);
    grouped_scaled_mm(d.args, "simt", nullptr);
    FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
    check_against_dense(c, d);
  }
}

TEST(MoeGpu, RealExpertShapesAtDecode) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed() + 5);
  struct Layer {
    const char* name;
    GroupedForm form;
    int64_t e, rows, n, k;
  };
  // DeepSeek-V3's expert shapes (8 experts of the 32 an EP-8 rank holds, masked, up to 8 tokens
  // each) and Qwen3-30B-A3B (all 128 experts, 8 tokens x top-8 = 64 rows, contiguous).
  for (const Layer& l : {Layer{"deepseek_v3.gate_up", GroupedForm::masked, 8, 8, 4096, 7168},
                         Layer{"deepseek_v3.down", GroupedForm::masked, 8, 8, 7168, 2048},
                         Layer{"qwen3_30b_a3b.gate_up", GroupedForm::contiguous, 128, 64, 1536, 2048},
                         Layer{"qwen3_30b_a3b.down", GroupedForm::contiguous, 128, 64, 2048, 768}})
    for (ScaleKind kind : {ScaleKind::block, ScaleKind::row}) {
      MoeSpec s;
      s.form = l.form, s.scale = kind, s.experts = l.e, s.rows = l.rows, s.n = l.n, s.k = l.k;
      s.packed = kind == ScaleKind::block && l.form == GroupedForm::masked;
      const MoeCase c = make_moe_case(s, rng);
      DeviceCase d = to_device(c);
      grouped_scaled_mm(d.args, "simt", nullptr);
      FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
      std::printf("%s\n", l.name);
      check_against_dense(c, d);
    }
}

TEST(MoeGpu, OneGraphReplaysEveryRouting) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed() + 6);
  MoeSpec s;
  s.form = GroupedForm::masked, s.experts = 8, s.rows = 16, s.n = 256, s.k = 512, s.small_integers = true;
  MoeCase c = make_moe_case(s, rng);
  DeviceCase d = to_device(c);
  cudaStream_t stream;
  FP8ROUTE_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FP8ROUTE_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  grouped_scaled_mm(d.args, stream);
  FP8ROUTE_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  FP8ROUTE_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 4; ++round) {
    std::uniform_int_distribution<int32_t> m(round == 3 ? 0 : -2, round == 3 ? 0 : 20);  // last round: all empty
    for (int32_t& v : c.groups) v = m(rng);
    FP8ROUTE_TEST_CUDA(cudaMemcpyAsync(d.groups.data(), c.groups.data(), c.groups.size() * 4, cudaMemcpyHostToDevice, stream));
    FP8ROUTE_TEST_CUDA(cudaMemsetAsync(d.out.data(), 0xFF, d.out.bytes(), stream));
    FP8ROUTE_TEST_CUDA(cudaGraphLaunch(exec, stream));
    FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(stream));
    EXPECT_TRUE(matches(download_out(c, d), ref::grouped_scaled_mm(c.view()), true)) << "round " << round;
  }
  FP8ROUTE_TEST_CUDA(cudaGraphExecDestroy(exec));
  FP8ROUTE_TEST_CUDA(cudaGraphDestroy(graph));
  FP8ROUTE_TEST_CUDA(cudaStreamDestroy(stream));
}

TEST(MoeGpu, Deterministic) {
  SKIP_WITHOUT_SM90();
  std::mt19937_64 rng(seed() + 7);
  MoeSpec s;
  s.experts = 16, s.rows = 300, s.n = 512, s.k = 1024;
  const MoeCase c = make_moe_case(s, rng);
  DeviceCase d = to_device(c);
  grouped_scaled_mm(d.args, nullptr);
  const std::vector<uint8_t> first = download(d.out.data(), d.out.bytes());
  test::poison(d.out, 0xFF);
  grouped_scaled_mm(d.args, nullptr);
  EXPECT_TRUE(test::bytes_equal(download(d.out.data(), d.out.bytes()), first, "second run"));
}


// ---- the tensor-core backends (decode, wgmma) ----------------------------------------------------

// Rows of a that belong to no group (past masked_m, outside the offsets, the tail of a token tile)
// set to NaN codes and their scales to NaN (packed: 0xFF, infinity): a kernel that lets such a row
// reach a stored output fails the comparison. The CPU reference never reads them.
void poison_rows_of_no_group(MoeCase& c) {
  const MoeSpec& s = c.spec;
  const bool masked = c.masked();
  const std::vector<ref::GroupRows> rows = ref::grouped_rows(s.form, c.groups, s.experts, s.rows);
  std::vector<char> used(static_cast<size_t>(c.a_rows()), 0);
  for (int64_t e = 0; e < s.experts; ++e)
    for (int64_t i = 0; i < rows[e].count; ++i) used[(masked ? e * s.rows : 0) + rows[e].start + i] = 1;
  for (int64_t r = 0; r < c.a_rows(); ++r) {
    if (used[r]) continue;
    std::memset(c.a.data() + r * s.k, 0x7F, static_cast<size_t>(s.k));
    if (s.scale == ScaleKind::row) c.sa_f32[r] = NAN;
    if (s.scale != ScaleKind::block) continue;
    const QuantLayout& L = c.sa_layout;
    const int64_t be = masked ? r / s.rows : 0, t = masked ? r % s.rows : r;
    for (int64_t g = 0; g < s.k / 128; ++g) {
      const int64_t base = be * L.scale_batch_stride + t * L.scale_stride_t;
      if (s.packed)
        reinterpret_cast<uint8_t*>(&c.sa_packed[base + (g / 4) * L.scale_stride_c])[g % 4] = 0xFF;
      else
        c.sa_f32[base + g * L.scale_stride_c] = NAN;
    }
  }
}

// The largest groups a backend runs: decode takes groups of at most 64 rows.
int64_t rows_for(const char* backend, int64_t want) { return std::string(backend) == "decode" ? std::min<int64_t>(want, 64) : want; }

constexpr const char* kFastBackends[] = {"decode", "wgmma"};
// The backends of the graph and determinism tests: the fast ones (with block scales) and cutlass
// (with row scales: its block path runs in CutlassGrouped).
constexpr const char* kGraphBackends[] = {"decode", "wgmma", "cutlass"};
ScaleKind scale_for(const char* backend) {
  return std::string(backend) == "cutlass" ? ScaleKind::row : ScaleKind::block;
}

GroupedProblem problem_of(const MoeSpec& s) {
  GroupedProblem p;
  p.form = s.form, p.scale = s.scale, p.out = s.out, p.experts = s.experts, p.rows = s.rows, p.n = s.n, p.k = s.k;
  p.sa_per_expert = s.scale != ScaleKind::tensor || s.sa_per_expert;
  return p;
}

// Whether `backend` runs s in this build (cutlass needs the CUTLASS headers at build time); says so
// when it does not.
bool runs(const char* backend, const MoeSpec& s) {
  const std::string why = grouped_supports(backend, problem_of(s));
  if (why.empty()) return true;
  if (std::string(backend) != "cutlass") ADD_FAILURE() << backend << " refuses " << test::to_string(s) << ": " << why;
  else std::printf("skipped: %s\n", why.c_str());
  return false;
}

// One case on `backend` against the CPU reference (exact on small integers) and against simt
// (within tolerance, the same rows written), rows of no group poisoned.
void fast_case(const MoeSpec& s, std::mt19937_64& rng, const char* backend, bool with_cpu_reference = true) {
  MoeCase c = make_moe_case(s, rng);
  poison_rows_of_no_group(c);
  DeviceCase d = to_device(c);
  const std::string what = test::to_string(s) + " backend " + backend + " seed " + std::to_string(seed());
  const std::string why = grouped_supports(backend, check_grouped_scaled_mm(d.args));
  ASSERT_TRUE(why.empty()) << what << ": " << why;
  ASSERT_NO_THROW(grouped_scaled_mm(d.args, backend, nullptr)) << what;
  FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = download_out(c, d);
  if (with_cpu_reference) EXPECT_TRUE(matches(got, ref::grouped_scaled_mm(c.view()), s.small_integers)) << what;
  test::poison(d.out, 0xFF);
  ASSERT_NO_THROW(grouped_scaled_mm(d.args, "simt", nullptr)) << what;
  FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(matches(got, download_out(c, d), false)) << what << " (against simt)";
}

// Every form, scale kind, scale_a layout and storage, output dtype, on shapes with partial tiles
// everywhere (N = 200: a partial 128-row weight block; 5 experts of uneven groups, one empty).
TEST(MoeFast, EveryKindAgainstTheReferenceAndSimt) {
  SKIP_WITHOUT_SM90();
  for (const char* backend : kFastBackends)
    for (bool small : {true, false}) {
      std::mt19937_64 rng(seed() + 10 + small);
      for (MoeSpec s : every_moe_kind(small)) {
        s.rows = rows_for(backend, s.rows);
        fast_case(s, rng, backend);
      }
    }
}

TEST(MoeFast, Routings) {
  SKIP_WITHOUT_SM90();
  for (const char* backend : kFastBackends) {
    std::mt19937_64 rng(seed() + 12);
    const int64_t m = rows_for(backend, 300);
    MoeSpec s;
    s.experts = 6, s.rows = m, s.n = 392, s.k = 512, s.small_integers = true;
    const int32_t M = static_cast<int32_t>(m);
    for (ScaleKind kind : {ScaleKind::tensor, ScaleKind::row, ScaleKind::block}) {
      s.scale = kind;
      s.form = GroupedForm::contiguous;
      for (std::vector<int32_t> g : std::vector<std::vector<int32_t>>{
               {0, M, M, M, M, M, M},                      // every row on expert 0
               {0, 0, 0, 0, 0, 0, M},                      // every row on the last expert
               {0, 0, 0, 0, 0, 0, 0},                      // no rows at all
               {3, 10, 10, M / 2, M / 2 + 1, M / 2 + 1, M - 5},  // rows of no expert at both ends
               {0, 1, 2, 3, 4, 5, M + 90},                 // the last end past M_total: clamped
               {0, 1, 9, 17, 18, 50, M},                   // groups straddling 8- and 128-row edges
           }) {
        s.groups = g;
        fast_case(s, rng, backend);
      }
      s.groups = {5, 5, M / 2, M / 2, M / 2 + 1, M};  // torch's ends form
      s.offsets_ends = true;
      fast_case(s, rng, backend);
      s.offsets_ends = false;
      s.form = GroupedForm::masked;
      for (std::vector<int32_t> g : std::vector<std::vector<int32_t>>{
               {0, 0, 0, 0, 0, 0},                  // masked_m = 0 everywhere
               {M, 0, 1, 8, 9, M - 1},              // full, empty, one row, token-tile edges
               {1000, -5, M + 1, 3, 0, M / 2},      // above M_max and negative: clamped
               {0, 0, 0, 0, 0, 1},                  // one row on the last expert only
           }) {
        s.groups = g;
        fast_case(s, rng, backend);
      }
    }
  }
}

// The catalog's expert shapes, 1 to 64 rows per active expert with empty experts, every scale kind,
// both forms, against simt (the CPU reference is too slow at these sizes; simt is bit-identical to
// the dense reference backend).
TEST(MoeFast, RealExpertShapes) {
  SKIP_WITHOUT_SM90();
  struct Layer {
    const char* name;
    int64_t e, n, k;
  };
  std::mt19937_64 rng(seed() + 13);
  for (const Layer& l : {Layer{"deepseek_v3.gate_up (32 local experts)", 32, 4096, 7168},
                         Layer{"deepseek_v3.down (32 local experts)", 32, 7168, 2048},
                         Layer{"qwen3_30b_a3b.gate_up", 128, 1536, 2048},
                         Layer{"qwen3_30b_a3b.down", 128, 2048, 768}})
    for (const char* backend : kFastBackends)
      for (GroupedForm form : {GroupedForm::masked, GroupedForm::contiguous})
        for (ScaleKind kind : {ScaleKind::block, ScaleKind::row, ScaleKind::tensor}) {
          MoeSpec s;
          s.form = form, s.scale = kind, s.experts = l.e, s.n = l.n, s.k = l.k;
          s.packed = kind == ScaleKind::block && form == GroupedForm::masked;
          std::uniform_int_distribution<int32_t> rows(1, 64), coin(0, 3);
          if (form == GroupedForm::masked) {
            s.rows = 64;
            for (int64_t e = 0; e < l.e; ++e) s.groups.push_back(coin(rng) == 0 ? 0 : rows(rng));
          } else {
            // decode: 64 rows in all (a decode step of 8 tokens x top-8); wgmma: 1-64 per expert.
            const bool decode = std::string(backend) == "decode";
            int32_t run = 0;
            s.groups.push_back(0);
            for (int64_t e = 0; e < l.e; ++e) {
              const int32_t r = decode ? (coin(rng) == 0 && run < 64 ? std::min(64 - run, rows(rng) % 9 + 1) : 0)
                                       : (coin(rng) == 0 ? 0 : rows(rng));
              s.groups.push_back(run += r);
            }
            s.rows = std::max<int32_t>(run, 1);
          }
          std::printf("%s %s %s %s\n", l.name, backend, std::string(name(form)).c_str(),
                      std::string(name(kind)).c_str());
          fast_case(s, rng, backend, false);
        }
}

TEST(MoeFast, OneGraphReplaysEveryRouting) {
  SKIP_WITHOUT_SM90();
  for (const char* backend : kGraphBackends)
    for (GroupedForm form : {GroupedForm::masked, GroupedForm::contiguous}) {
      std::mt19937_64 rng(seed() + 14);
      MoeSpec s;
      s.form = form, s.experts = 8, s.rows = form == GroupedForm::masked ? 16 : 64, s.n = 256, s.k = 512;
      s.small_integers = true;
      s.scale = scale_for(backend);
      if (!runs(backend, s)) continue;
      MoeCase c = make_moe_case(s, rng);
      DeviceCase d = to_device(c);
      cudaStream_t stream;
      FP8ROUTE_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      FP8ROUTE_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      grouped_scaled_mm(d.args, backend, stream);
      FP8ROUTE_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
      FP8ROUTE_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (int round = 0; round < 4; ++round) {
        if (form == GroupedForm::masked) {
          std::uniform_int_distribution<int32_t> m(round == 3 ? 0 : -2, round == 3 ? 0 : 20);  // last: all empty
          for (int32_t& v : c.groups) v = m(rng);
        } else {
          const std::vector<int32_t> counts = test::random_counts(s.experts, round == 3 ? 0 : s.rows - round, rng);
          int32_t run = 0;
          c.groups = {0};
          for (int32_t n : counts) c.groups.push_back(run += n);
        }
        FP8ROUTE_TEST_CUDA(
            cudaMemcpyAsync(d.groups.data(), c.groups.data(), c.groups.size() * 4, cudaMemcpyHostToDevice, stream));
        FP8ROUTE_TEST_CUDA(cudaMemsetAsync(d.out.data(), 0xFF, d.out.bytes(), stream));
        FP8ROUTE_TEST_CUDA(cudaGraphLaunch(exec, stream));
        FP8ROUTE_TEST_CUDA(cudaStreamSynchronize(stream));
        EXPECT_TRUE(matches(download_out(c, d), ref::grouped_scaled_mm(c.view()), true))
            << backend << " " << name(form) << " round " << round;
      }
      FP8ROUTE_TEST_CUDA(cudaGraphExecDestroy(exec));
      FP8ROUTE_TEST_CUDA(cudaGraphDestroy(graph));
      FP8ROUTE_TEST_CUDA(cudaStreamDestroy(stream));
    }
}

TEST(MoeFast, Deterministic) {
  SKIP_WITHOUT_SM90();
  for (const char* backend : kGraphBackends) {
    std::mt19937_64 rng(seed() + 15);
    MoeSpec s;
    s.form = GroupedForm::masked, s.experts = 16, s.rows = 64, s.n = 1024, s.k = 4096;
    s.scale = scale_for(backend);
    if (!runs(backend, s)) continue;
    const MoeCase c = make_moe_case(s, rng);
    DeviceCase d = to_device(c);
    grouped_scaled_mm(d.args, backend, nullptr);
    const std::vector<uint8_t> first = download(d.out.data(), d.out.bytes());
    for (int i = 0; i < 3; ++i) {
      test::poison(d.out, 0xFF);
      grouped_scaled_mm(d.args, backend, nullptr);
      EXPECT_TRUE(test::bytes_equal(download(d.out.data(), d.out.bytes()), first, "a later run")) << backend;
    }
  }
}

// The decode backend's divisions of K, each forced by its knob (the rule picks among them by
// shape): one block per item, clusters of 2 and 5 splits. Every kind against the CPU reference
// (exact on small integers) and simt, and the routings' edge cases; then, one split per item, a
// repeat bit for bit and two streams running different problems at once.
TEST(MoeFast, DecodeEveryDivision) {
  SKIP_WITHOUT_SM90();
  struct Knob {
    explicit Knob(int v) { moe::set_grouped_decode_splits(v); }
    ~Knob() { moe::set_grouped_decode_splits(0); }
  };
  for (int division : {1, 2, 5}) {
    Knob knob(division);
    SCOPED_TRACE("decode splits " + std::to_string(division));
    for (bool small : {true, false}) {
      std::mt19937_64 rng(seed() + 30 + small);
      for (MoeSpec s : every_moe_kind(small)) {
        s.rows = rows_for("decode", s.rows);
        fast_case(s, rng, "decode");
      }
    }
    std::mt19937_64 rng(seed() + 32);
    MoeSpec s;
    s.experts = 6, s.rows = 64, s.n = 392, s.k = 1536, s.small_integers = true, s.scale = ScaleKind::block;
    s.form = GroupedForm::masked;
    for (std::vector<int32_t> g : std::vector<std::vector<int32_t>>{
             {0, 0, 0, 0, 0, 0}, {64, 0, 1, 8, 9, 63}, {1000, -5, 65, 3, 0, 32}, {0, 0, 0, 0, 0, 1}}) {
      s.groups = g;
      fast_case(s, rng, "decode");
    }
    s.form = GroupedForm::contiguous, s.scale = ScaleKind::row;
    for (std::vector<int32_t> g : std::vector<std::vector<int32_t>>{
             {0, 64, 64, 64, 64, 64, 64}, {3, 10, 10, 32, 33, 33, 59}, {0, 1, 9, 17, 18, 50, 64}}) {
      s.groups = g;
      fast_case(s, rng, "decode");
    }
  }
  // Qwen3-30B-A3B's gate_up at one token per active expert (96 items of 16 K blocks) and a down-like
  // shape of block scales at 1-4 rows (17 row blocks, the last partial).
  Knob knob(1);
  std::mt19937_64 rng(seed() + 33);
  MoeSpec q;
  q.form = GroupedForm::masked, q.experts = 128, q.rows = 1, q.n = 1536, q.k = 2048, q.scale = ScaleKind::row;
  q.groups.assign(128, 0);
  for (int e = 0; e < 8; ++e) q.groups[static_cast<size_t>(e * 13)] = 1;
  MoeSpec ds;
  ds.form = GroupedForm::masked, ds.experts = 32, ds.rows = 4, ds.n = 2120, ds.k = 2048, ds.scale = ScaleKind::block;
  ds.groups.assign(32, 0);
  for (int e = 0; e < 32; e += 3) ds.groups[static_cast<size_t>(e)] = 1 + e % 4;
  MoeCase cases[2] = {make_moe_case(q, rng), make_moe_case(ds, rng)};
  DeviceCase dev[2] = {to_device(cases[0]), to_device(cases[1])};
  std::vector<uint8_t> alone[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_NO_THROW(grouped_scaled_mm(dev[i].args, "decode", nullptr));
    FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
    alone[i] = download(dev[i].out.data(), dev[i].out.bytes());
    test::poison(dev[i].out, 0xFF);
    ASSERT_NO_THROW(grouped_scaled_mm(dev[i].args, "simt", nullptr));
    FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
    const std::vector<float> simt = download_out(cases[i], dev[i]);
    test::poison(dev[i].out, 0xFF);
    ASSERT_NO_THROW(grouped_scaled_mm(dev[i].args, "decode", nullptr));
    FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
    EXPECT_TRUE(matches(download_out(cases[i], dev[i]), simt, false)) << test::to_string(cases[i].spec) << " against simt";
    EXPECT_TRUE(test::bytes_equal(download(dev[i].out.data(), dev[i].out.bytes()), alone[i], "a repeat"));
  }
  cudaStream_t streams[2];
  for (cudaStream_t& st : streams) FP8ROUTE_TEST_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int rep = 0; rep < 50; ++rep)
    for (int i = 0; i < 2; ++i) ASSERT_NO_THROW(grouped_scaled_mm(dev[i].args, "decode", streams[i]));
  FP8ROUTE_TEST_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(test::bytes_equal(download(dev[i].out.data(), dev[i].out.bytes()), alone[i], "two streams at once"))
        << test::to_string(cases[i].spec);
  for (cudaStream_t st : streams) FP8ROUTE_TEST_CUDA(cudaStreamDestroy(st));
}

// The cutlass backend on what it runs (bf16 out; block scales with K % 128 == 0): every form, scale
// kind, scale_a layout and storage of every_moe_kind against the CPU reference (exact on small
// integers) and simt, with the wide kernel (77 rows), the mid one (50) and the narrow one (3); what
// it does not run, it names.
TEST(MoeFast, CutlassGrouped) {
  SKIP_WITHOUT_SM90();
  for (bool small : {true, false}) {
    std::mt19937_64 rng(seed() + 20 + small);
    for (MoeSpec s : every_moe_kind(small)) {
      if (s.out != DType::bf16) continue;
      for (int64_t rows : {int64_t{77}, int64_t{50}, int64_t{3}}) {
        s.rows = rows;
        if (!runs("cutlass", s)) GTEST_SKIP() << "the cutlass backend does not run in this build (reason above)";
        fast_case(s, rng, "cutlass");
      }
    }
  }
  GroupedProblem p;
  p.form = GroupedForm::masked, p.experts = 4, p.rows = 8, p.n = 256, p.k = 528, p.scale = ScaleKind::block;
  EXPECT_NE(grouped_supports("cutlass", p).find("K % 128"), std::string::npos);
  p.k = 512;
  EXPECT_EQ(grouped_supports("cutlass", p), "");
  p.scale = ScaleKind::row, p.out = DType::f16;
  EXPECT_NE(grouped_supports("cutlass", p).find("bf16"), std::string::npos);
  p.out = DType::bf16, p.n = 250;
  EXPECT_NE(grouped_supports("cutlass", p).find("multiple of 8"), std::string::npos);
}

// The default backend follows the documented rule: masked, decode while M_max <= 8; contiguous,
// decode while M_total <= 16 (<= 8 with block scales); else wgmma; simt for what neither runs.
TEST(MoeFast, DefaultBackendRule) {
  SKIP_WITHOUT_SM90();
  // The rule alone: without the process-wide grouped table (a shipped one would decide), restored
  // after.
  struct NoTable {
    const std::string path = grouped_table_info().path;
    NoTable() { load_default_grouped_table(""); }
    ~NoTable() {
      if (!path.empty()) load_default_grouped_table(path);
    }
  } no_table;
  GroupedProblem p;
  p.form = GroupedForm::masked, p.experts = 32, p.rows = 8, p.n = 4096, p.k = 7168, p.scale = ScaleKind::block;
  EXPECT_EQ(grouped_default_backend(p), "decode");
  p.rows = 64;  // decode runs it; wgmma is the faster past M_max = 8
  EXPECT_EQ(grouped_supports("decode", p), "");
  EXPECT_EQ(grouped_default_backend(p), "wgmma");
  p.rows = 65;
  EXPECT_NE(grouped_supports("decode", p), "");
  EXPECT_EQ(grouped_supports("wgmma", p), "");
  EXPECT_EQ(grouped_default_backend(p), "wgmma");
  p.form = GroupedForm::contiguous, p.scale = ScaleKind::row, p.rows = 16;
  EXPECT_EQ(grouped_default_backend(p), "decode");
  p.scale = ScaleKind::block;
  EXPECT_EQ(grouped_default_backend(p), "wgmma");
  p.rows = 8;
  EXPECT_EQ(grouped_default_backend(p), "decode");
  p.rows = 65, p.align = 8;
  EXPECT_NE(grouped_supports("wgmma", p), "");
  EXPECT_EQ(grouped_supports("simt", p), "");
  EXPECT_EQ(grouped_default_backend(p), "simt");
}

// The decode backends' split-K rule from resident slot counts alone (no GPU): Qwen3-30B-A3B's
// gate_up at one token, 8 active experts x 12 row blocks of 128 = 96 items of 16 K blocks, on 132
// resident slots (128 for clusters of 8): one split per item (one wave on 96 blocks), which the
// split counts measure fastest there (bench/moe_bench.py --decode-splits).
TEST(MoeSplitRule, OneSplitForAFewSmallExperts) {
  decode_plan::Slots slots{};
  for (int c = 1; c < static_cast<int>(slots.size()); ++c) slots[c] = c == 8 ? 128 : 132 / c * c;
  const auto fits = [](int64_t) { return true; };
  const auto waves = [&](int64_t splits) { return (96 + slots[splits] / splits - 1) / (slots[splits] / splits); };
  const decode_plan::Split s = decode_plan::best_split(16, slots, fits, waves);
  EXPECT_EQ(s.splits, 1);
  EXPECT_EQ(s.split_kblocks, 16);
  // 8 items of 64 K blocks leave most slots idle: splits fill them.
  const auto few = [&](int64_t splits) { return (8 + slots[splits] / splits - 1) / (slots[splits] / splits); };
  EXPECT_EQ(decode_plan::best_split(64, slots, fits, few).splits, 8);
  // More splits than K blocks (the split-count knob may ask for them): none runs.
  EXPECT_EQ(decode_plan::split_of(4, 8, slots, fits).splits, 0);
  EXPECT_EQ(decode_plan::split_of(4, 4, slots, fits).split_kblocks, 1);
}

}  // namespace
}  // namespace fp8route
