// The fused decode attention against the CPU reference: outputs within the output dtype's rounding,
// the cache rows written bit for bit (and nothing else written), grouped-query and multi-head,
// windows, per-head norms, strided caches, positions at the ends of the cache and outside it, graph
// replay at new positions, repeat runs bit-identical; argument errors that name the argument.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fp8route/attention.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/norm.h"
#include "fp8route/reference.h"
#include "gpu_util.h"
#include "test_util.h"

namespace fp8route {
namespace {

using test::download;
using test::expect_invalid;
using test::upload;

std::vector<uint16_t> words(const std::vector<uint8_t>& b) {
  std::vector<uint16_t> w(b.size() / 2);
  std::memcpy(w.data(), b.data(), b.size());
  return w;
}
std::vector<uint8_t> bytes(const std::vector<uint16_t>& w) {
  std::vector<uint8_t> b(w.size() * 2);
  std::memcpy(b.data(), w.data(), b.size());
  return b;
}
float value(uint16_t w, DType dtype) { return dtype == DType::bf16 ? ref::bf16_to_f32(w) : ref::f16_to_f32(w); }
uint16_t word(float v, DType dtype) { return dtype == DType::bf16 ? ref::f32_to_bf16(v) : ref::f32_to_f16(v); }

struct Shape {
  DType dtype;
  int64_t batch, hq, hk, d, seq;
  int window = 0;
  bool qk_norm = false;
  int64_t batch_pad = 0;  // the caches are [B + batch_pad, Hk, S, D] of which the first B are passed
};

std::string name_of(const Shape& s) {
  return std::string(dtype_name(s.dtype)) + "_b" + std::to_string(s.batch) + "_q" + std::to_string(s.hq) + "_kv" +
         std::to_string(s.hk) + "_d" + std::to_string(s.d) + "_s" + std::to_string(s.seq) +
         (s.window ? "_w" + std::to_string(s.window) : "") + (s.qk_norm ? "_qknorm" : "") +
         (s.batch_pad ? "_strided" : "");
}

// Host operands of one problem (rope tables of a real rotary embedding, theta 10000) and the
// reference's answer.
struct Problem {
  Shape sh;
  std::vector<uint16_t> qkv, kc, vc, cos, sin, qn, kn;
  std::vector<int32_t> pos;
  Problem(const Shape& s, std::vector<int32_t> positions, std::mt19937_64& rng) : sh(s), pos(std::move(positions)) {
    const int64_t cols = (s.hq + 2 * s.hk) * s.d, cache = (s.batch + s.batch_pad) * s.hk * s.seq * s.d;
    qkv = words(test::random_activations(s.dtype, s.batch * cols, rng, s.d, -1, 1));
    kc = words(test::random_activations(s.dtype, cache, rng, s.d, -1, 1));
    vc = words(test::random_activations(s.dtype, cache, rng, s.d, -2, 2));
    cos.resize(static_cast<size_t>(s.seq * s.d));
    sin.resize(cos.size());
    for (int64_t p = 0; p < s.seq; ++p)
      for (int64_t i = 0; i < s.d / 2; ++i) {
        const double a = static_cast<double>(p) * std::pow(10000.0, -2.0 * i / s.d);
        for (int64_t h : {i, i + s.d / 2}) {
          cos[p * s.d + h] = word(static_cast<float>(std::cos(a)), s.dtype);
          sin[p * s.d + h] = word(static_cast<float>(std::sin(a)), s.dtype);
        }
      }
    if (s.qk_norm) {
      std::uniform_real_distribution<float> u(0.5f, 1.5f);
      for (auto* w : {&qn, &kn})
        for (int64_t i = 0; i < s.d; ++i) w->push_back(word(u(rng), s.dtype));
    }
  }
  // The reference on copies of the caches; returns the output, leaves the updated caches in *k, *v.
  std::vector<double> reference(std::vector<uint16_t>* k, std::vector<uint16_t>* v) const {
    *k = kc;
    *v = vc;
    ref::DecodeAttentionProblem p;
    p.dtype = sh.dtype;
    p.batch = sh.batch, p.hq = sh.hq, p.hk = sh.hk, p.head_dim = sh.d, p.seq = sh.seq;
    p.qkv = qkv.data(), p.k_cache = k->data(), p.v_cache = v->data();
    p.cos = cos.data(), p.sin = sin.data(), p.positions = pos.data();
    p.q_norm = sh.qk_norm ? qn.data() : nullptr;
    p.k_norm = sh.qk_norm ? kn.data() : nullptr;
    p.window = sh.window;
    return ref::decode_attention(p);
  }
};

// Device copies and the op's arguments.
struct Device {
  DeviceBuffer qkv, kc, vc, cos, sin, pos, qn, kn, out;
  DecodeAttentionArgs args;
  TensorView out_view;
  explicit Device(const Problem& p) {
    const Shape& s = p.sh;
    qkv = upload(p.qkv), kc = upload(p.kc), vc = upload(p.vc), cos = upload(p.cos), sin = upload(p.sin);
    pos = upload(p.pos);
    out = DeviceBuffer(static_cast<size_t>(s.batch * s.hq * s.d * 2) + 16);
    if (s.qk_norm) qn = upload(p.qn), kn = upload(p.kn);
    const int64_t cols = (s.hq + 2 * s.hk) * s.d;
    args.qkv = TensorView::contiguous(qkv.data(), s.dtype, {s.batch, cols});
    args.k_cache = TensorView::contiguous(kc.data(), s.dtype, {s.batch, s.hk, s.seq, s.d});
    args.v_cache = TensorView::contiguous(vc.data(), s.dtype, {s.batch, s.hk, s.seq, s.d});
    args.cos = TensorView::contiguous(cos.data(), s.dtype, {s.seq, s.d});
    args.sin = TensorView::contiguous(sin.data(), s.dtype, {s.seq, s.d});
    args.positions = TensorView::contiguous(pos.data(), DType::i32, {s.batch});
    if (s.qk_norm) {
      args.q_norm = TensorView::contiguous(qn.data(), s.dtype, {s.d});
      args.k_norm = TensorView::contiguous(kn.data(), s.dtype, {s.d});
    }
    args.num_q_heads = static_cast<int>(s.hq);
    args.num_kv_heads = static_cast<int>(s.hk);
    args.window = s.window;
    out_view = TensorView::contiguous(out.data(), s.dtype, {s.batch, s.hq * s.d});
  }
  std::vector<uint16_t> output(const Shape& s) const {
    return words(download(out.data(), static_cast<size_t>(s.batch * s.hq * s.d * 2)));
  }
};

// Every output within the dtype's rounding of the reference (plus fp32 accumulation slack relative
// to the largest value); NaN exactly where the reference has NaN.
testing::AssertionResult outputs_close(const std::vector<uint16_t>& got, const std::vector<double>& want, DType dtype,
                                       double vmax) {
  const double rel = dtype == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = value(got[i], dtype), w = want[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : std::abs(g - w) <= rel * std::abs(w) + 1e-4 * vmax;
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (!bad) return testing::AssertionSuccess();
  return testing::AssertionFailure() << bad << " of " << got.size() << " outputs off; first at " << first << ": got "
                                     << value(got[first], dtype) << ", want " << want[first];
}

double max_abs(const std::vector<uint16_t>& v, DType dtype) {
  double m = 0;
  for (uint16_t w : v) m = std::max(m, static_cast<double>(std::abs(value(w, dtype))));
  return m;
}

// Positions for each sequence: the ends of the cache and random ones in between.
std::vector<int32_t> positions_for(const Shape& s, std::mt19937_64& rng) {
  std::vector<int32_t> pos(static_cast<size_t>(s.batch));
  std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(s.seq - 1));
  for (int64_t b = 0; b < s.batch; ++b)
    pos[b] = b == 0 ? static_cast<int32_t>(s.seq - 1) : b == 1 ? 0 : u(rng);
  return pos;
}

class DecodeAttentionGpu : public testing::TestWithParam<Shape> {};

TEST_P(DecodeAttentionGpu, MatchesReferenceAndWritesOnlyTheNewRows) {
  FP8ROUTE_REQUIRE_SM90();
  const Shape s = GetParam();
  std::mt19937_64 rng(test::test_seed() ^ std::hash<std::string>{}(name_of(s)));
  const Problem p(s, positions_for(s, rng), rng);
  Device dev(p);
  if (s.batch_pad) {  // pass every other sequence of a larger cache: strided batch dim
    const int64_t per = s.hk * s.seq * s.d;
    dev.args.k_cache = TensorView::strided(dev.kc.data(), s.dtype, {s.batch, s.hk, s.seq, s.d},
                                           {per * 2, s.seq * s.d, s.d, 1});
    dev.args.v_cache = TensorView::strided(dev.vc.data(), s.dtype, {s.batch, s.hk, s.seq, s.d},
                                           {per * 2, s.seq * s.d, s.d, 1});
  }
  decode_attention(dev.args, dev.out_view, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // The reference sees the caches the kernel sees (every other sequence when strided).
  Problem rp = p;
  if (s.batch_pad) {
    const int64_t per = s.hk * s.seq * s.d;
    rp.kc.assign(static_cast<size_t>(s.batch * per), 0);
    rp.vc.assign(rp.kc.size(), 0);
    for (int64_t b = 0; b < s.batch; ++b) {
      std::copy_n(p.kc.begin() + 2 * b * per, per, rp.kc.begin() + b * per);
      std::copy_n(p.vc.begin() + 2 * b * per, per, rp.vc.begin() + b * per);
    }
  }
  std::vector<uint16_t> kwant, vwant;
  const std::vector<double> want = rp.reference(&kwant, &vwant);
  EXPECT_TRUE(outputs_close(dev.output(s), want, s.dtype, max_abs(p.vc, s.dtype)));
  std::vector<uint16_t> kgot = words(download(dev.kc.data(), p.kc.size() * 2));
  std::vector<uint16_t> vgot = words(download(dev.vc.data(), p.vc.size() * 2));
  if (s.batch_pad) {  // the skipped sequences untouched, the passed ones compared below
    const int64_t per = s.hk * s.seq * s.d;
    for (int64_t b = 0; b < s.batch + s.batch_pad; ++b) {
      if (b % 2 == 1 || b / 2 >= s.batch) {
        EXPECT_TRUE(std::equal(kgot.begin() + b * per, kgot.begin() + (b + 1) * per, p.kc.begin() + b * per))
            << "k_cache sequence " << b << " was not passed but changed";
      }
    }
    std::vector<uint16_t> kk(kwant.size()), vv(vwant.size());
    for (int64_t b = 0; b < s.batch; ++b) {
      std::copy_n(kgot.begin() + 2 * b * per, per, kk.begin() + b * per);
      std::copy_n(vgot.begin() + 2 * b * per, per, vv.begin() + b * per);
    }
    kgot = kk, vgot = vv;
  }
  EXPECT_TRUE(test::bytes_equal(bytes(kgot), bytes(kwant), "k_cache", s.d * 2));
  EXPECT_TRUE(test::bytes_equal(bytes(vgot), bytes(vwant), "v_cache", s.d * 2));
}

TEST_P(DecodeAttentionGpu, RepeatRunsAreBitIdentical) {
  FP8ROUTE_REQUIRE_SM90();
  const Shape s = GetParam();
  std::mt19937_64 rng(test::test_seed() + 1);
  const Problem p(s, positions_for(s, rng), rng);
  Device dev(p);
  decode_attention(dev.args, dev.out_view, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> first = dev.output(s);
  for (int i = 0; i < 20; ++i) {
    decode_attention(dev.args, dev.out_view, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(test::bytes_equal(bytes(dev.output(s)), bytes(first), "out"));
  }
}

// cache_ready after a kernel that writes qkv and lets its dependents launch at once (an RMSNorm of a
// staging copy, over qkv poisoned with NaN first): the attention loads the cache early (the first
// rows into registers, the next into L2) and must still read the fresh qkv. Output and caches equal,
// bit for bit and every time, those of the same chain without programmatic dependent launch (no
// early trigger, no early load), with and without cache_ready.
TEST_P(DecodeAttentionGpu, CacheReadyAfterAProducerOfQkvGivesTheSameBits) {
  FP8ROUTE_REQUIRE_SM90();
  const Shape s = GetParam();
  std::mt19937_64 rng(test::test_seed() + 4);
  const Problem p(s, positions_for(s, rng), rng);
  Device dev(p);
  const int64_t cols = (s.hq + 2 * s.hk) * s.d;
  ASSERT_LE(cols, kRmsNormMaxHidden);
  const DeviceBuffer stage = upload(p.qkv);
  const DeviceBuffer gamma = upload(std::vector<uint16_t>(cols, s.dtype == DType::bf16 ? 0x3F80 : 0x3C00));  // 1.0
  RmsNormInput norm;
  norm.x = TensorView::contiguous(stage.data(), s.dtype, {s.batch, cols});
  norm.weight = TensorView::contiguous(gamma.data(), s.dtype, {cols});
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto run = [&](bool ready) {
    EXPECT_EQ(cudaMemcpyAsync(dev.kc.data(), p.kc.data(), p.kc.size() * 2, cudaMemcpyHostToDevice, stream), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(dev.vc.data(), p.vc.data(), p.vc.size() * 2, cudaMemcpyHostToDevice, stream), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(dev.qkv.data(), 0xFF, static_cast<size_t>(s.batch * cols * 2), stream), cudaSuccess);
    rms_norm(norm, dev.args.qkv, stream);
    DecodeAttentionArgs a = dev.args;
    a.cache_ready = ready;
    decode_attention(a, dev.out_view, stream);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<uint8_t> all = bytes(dev.output(s));
    for (const DeviceBuffer* c : {&dev.kc, &dev.vc}) {
      const std::vector<uint8_t> b = download(c->data(), p.kc.size() * 2);
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  };
  const bool pdl = programmatic_dependent_launch();
  set_programmatic_dependent_launch(false);
  const std::vector<uint8_t> want = run(false);
  set_programmatic_dependent_launch(pdl);
  for (int i = 0; i < 10; ++i)
    for (bool ready : {true, false})
      ASSERT_TRUE(test::bytes_equal(run(ready), want, "out, k_cache, v_cache")) << "run " << i << " ready=" << ready;
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeAttentionGpu,
    testing::Values(Shape{DType::bf16, 1, 32, 8, 128, 1100},             // Llama-3.1-8B, bs 1
                    Shape{DType::bf16, 1, 8, 1, 128, 1025},              // a Llama-3.1-70B TP-8 rank
                    Shape{DType::bf16, 3, 16, 2, 128, 300},              // a Qwen2.5-72B TP-4 rank
                    Shape{DType::bf16, 2, 28, 4, 128, 257},              // group of 7 (Qwen2.5-7B)
                    Shape{DType::f16, 4, 8, 8, 64, 200},                 // multi-head, D 64
                    Shape{DType::bf16, 2, 16, 1, 256, 90},               // D 256, group 16
                    Shape{DType::bf16, 5, 32, 8, 128, 700, 64},          // sliding window
                    Shape{DType::bf16, 2, 64, 8, 128, 129, 0, true},     // Qwen3 per-head norms
                    Shape{DType::f16, 2, 32, 8, 128, 96, 0, false, 3},   // strided cache batch dim
                    Shape{DType::bf16, 64, 32, 8, 128, 40}),             // many sequences, short
    [](const testing::TestParamInfo<Shape>& info) { return name_of(info.param); });

TEST(DecodeAttentionGpuEdge, PositionOutsideTheCacheGivesNanAndWritesNothing) {
  FP8ROUTE_REQUIRE_SM90();
  const Shape s{DType::bf16, 3, 8, 2, 128, 64};
  std::mt19937_64 rng(test::test_seed() + 2);
  const Problem p(s, {5, -1, 64}, rng);
  Device dev(p);
  decode_attention(dev.args, dev.out_view, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> kwant, vwant;
  const std::vector<double> want = p.reference(&kwant, &vwant);
  EXPECT_TRUE(outputs_close(dev.output(s), want, s.dtype, max_abs(p.vc, s.dtype)));
  EXPECT_TRUE(test::bytes_equal(download(dev.kc.data(), p.kc.size() * 2), bytes(kwant), "k_cache"));
  EXPECT_TRUE(test::bytes_equal(download(dev.vc.data(), p.vc.size() * 2), bytes(vwant), "v_cache"));
}

// One captured launch serves every position: replayed at new positions it matches the reference
// run step by step on the same caches.
TEST(DecodeAttentionGpuEdge, GraphReplayFollowsThePositions) {
  FP8ROUTE_REQUIRE_SM90();
  const Shape s{DType::bf16, 2, 32, 8, 128, 80};
  std::mt19937_64 rng(test::test_seed() + 3);
  Problem p(s, {0, 10}, rng);
  Device dev(p);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  decode_attention(dev.args, dev.out_view, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int step = 0; step < 4; ++step) {
    p.pos = {step, 10 + 7 * step};
    ASSERT_EQ(cudaMemcpy(dev.pos.data(), p.pos.data(), 8, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<uint16_t> k, v;
    const std::vector<double> want = p.reference(&k, &v);
    EXPECT_TRUE(outputs_close(dev.output(s), want, s.dtype, max_abs(p.vc, s.dtype))) << "step " << step;
    EXPECT_TRUE(test::bytes_equal(download(dev.kc.data(), k.size() * 2), bytes(k), "k_cache")) << "step " << step;
    p.kc = k, p.vc = v;  // the next step attends over what this one appended
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- the reference itself (CPU) --------------------------------------------------------------------

// With a window of 1 a head attends to its own new position only: the output is that value.
TEST(DecodeAttentionReference, WindowOfOneReturnsTheNewValue) {
  const Shape s{DType::bf16, 2, 4, 2, 64, 16, 1};
  std::mt19937_64 rng(test::test_seed() + 4);
  const Problem p(s, {3, 15}, rng);
  std::vector<uint16_t> k, v;
  const std::vector<double> out = p.reference(&k, &v);
  const int64_t cols = (s.hq + 2 * s.hk) * s.d;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hq; ++h)
      for (int64_t i = 0; i < s.d; ++i)
        ASSERT_EQ(out[(b * s.hq + h) * s.d + i], value(p.qkv[b * cols + (s.hq + s.hk + h / 2) * s.d + i], s.dtype));
}

// Keys all equal: every score is the same, and the output is the mean of the attended values.
TEST(DecodeAttentionReference, EqualKeysAverageTheValues) {
  const Shape s{DType::bf16, 1, 2, 1, 64, 8};
  std::mt19937_64 rng(test::test_seed() + 5);
  Problem p(s, {5}, rng);
  for (int64_t i = 0; i < s.d; ++i) {  // position 0 (cos 1, sin 0): the new key is stored unrotated
    p.qkv[(s.hq) * s.d + i] = word(0.5f, s.dtype);
    for (int64_t t = 0; t < s.seq; ++t) p.kc[t * s.d + i] = word(0.5f, s.dtype);
  }
  p.pos = {0};
  std::vector<uint16_t> k, v;
  std::vector<double> out = p.reference(&k, &v);
  for (int64_t i = 0; i < s.d; ++i) ASSERT_EQ(out[i], value(p.qkv[(s.hq + s.hk) * s.d + i], s.dtype));
  p.pos = {5};  // positions 0..5; the new key at 5 is rotated, so set the stored ones to match it
  p.reference(&k, &v);
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t i = 0; i < s.d; ++i) p.kc[t * s.d + i] = k[5 * s.d + i];
  out = p.reference(&k, &v);
  for (int64_t i = 0; i < s.d; ++i) {
    double mean = value(p.qkv[(s.hq + s.hk) * s.d + i], s.dtype);
    for (int64_t t = 0; t < 5; ++t) mean += value(p.vc[t * s.d + i], s.dtype);
    EXPECT_NEAR(out[i], mean / 6, 1e-12 * (1 + std::abs(mean)));
  }
}

// ---- argument errors (no GPU needed: checked before anything runs) ---------------------------------

struct FakeArgs {
  DecodeAttentionArgs a;
  TensorView out;
  // Distinct, aligned fake device addresses far apart.
  static void* at(uintptr_t i) { return reinterpret_cast<void*>(uintptr_t{1} << 40 | i << 32); }
  FakeArgs() {
    a.qkv = TensorView::contiguous(at(1), DType::bf16, {2, 48 * 128});
    a.k_cache = TensorView::contiguous(at(2), DType::bf16, {2, 8, 64, 128});
    a.v_cache = TensorView::contiguous(at(3), DType::bf16, {2, 8, 64, 128});
    a.cos = TensorView::contiguous(at(4), DType::bf16, {64, 128});
    a.sin = TensorView::contiguous(at(5), DType::bf16, {64, 128});
    a.positions = TensorView::contiguous(at(6), DType::i32, {2});
    a.num_q_heads = 32;
    a.num_kv_heads = 8;
    out = TensorView::contiguous(at(7), DType::bf16, {2, 32 * 128});
  }
};

TEST(DecodeAttentionArgs, BadArgumentsNameTheArgument) {
  auto check = [](auto mutate, const std::string& word) {
    FakeArgs f;
    mutate(f);
    expect_invalid([&] { decode_attention(f.a, f.out, nullptr); }, word);
  };
  check([](FakeArgs& f) { f.a.num_kv_heads = 0; }, "num_kv_heads");
  check([](FakeArgs& f) { f.a.num_q_heads = 12; }, "num_q_heads");
  check([](FakeArgs& f) { f.a.qkv.dtype = DType::f32; }, "qkv");
  check([](FakeArgs& f) { f.a.num_q_heads = 40; }, "qkv");  // 48 heads: not 40 + 16
  check([](FakeArgs& f) { f.a.qkv = TensorView::contiguous(f.a.qkv.data, DType::bf16, {2, 48 * 96}); }, "head dim");
  check([](FakeArgs& f) { f.a.k_cache.shape[1] = 4; }, "k_cache");
  check([](FakeArgs& f) { f.a.v_cache.dtype = DType::f16; }, "v_cache");
  check([](FakeArgs& f) { f.a.v_cache.shape[2] = 32; f.a.v_cache.strides = {32 * 8 * 128, 32 * 128, 128, 1}; },
        "v_cache");
  check([](FakeArgs& f) { f.a.k_cache.strides[0] = 0; }, "k_cache");
  check([](FakeArgs& f) { f.a.k_cache.strides[1] = 64; }, "k_cache");  // rows of heads overlap
  check([](FakeArgs& f) { f.a.cos.shape[0] = 63; }, "cos");
  check([](FakeArgs& f) { f.a.sin.dtype = DType::f16; }, "sin");
  check([](FakeArgs& f) { f.a.positions.dtype = DType::f32; }, "positions");
  check([](FakeArgs& f) { f.a.positions.shape[0] = 3; }, "positions");
  check([](FakeArgs& f) { f.a.q_norm = TensorView::contiguous(FakeArgs::at(8), DType::bf16, {128}); }, "k_norm");
  check([](FakeArgs& f) {
    f.a.q_norm = TensorView::contiguous(FakeArgs::at(8), DType::bf16, {64});
    f.a.k_norm = TensorView::contiguous(FakeArgs::at(9), DType::bf16, {128});
  }, "q_norm");
  check([](FakeArgs& f) { f.a.eps = -1.0f; }, "eps");
  check([](FakeArgs& f) { f.a.scale = NAN; }, "scale");
  check([](FakeArgs& f) { f.a.window = -2; }, "window");
  check([](FakeArgs& f) { f.out.shape[1] = 16 * 128; }, "out");
  check([](FakeArgs& f) { f.out.data = f.a.qkv.data; }, "out");  // overlaps qkv
  check([](FakeArgs& f) { f.a.v_cache.data = f.a.k_cache.data; }, "v_cache");
  check([](FakeArgs& f) { f.a.k_cache.data = f.a.cos.data; }, "k_cache");
  check([](FakeArgs& f) { f.a.qkv.data = static_cast<char*>(f.a.qkv.data) + 2; }, "qkv");  // misaligned
}

}  // namespace
}  // namespace fp8route
