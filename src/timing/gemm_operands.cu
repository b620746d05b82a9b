// Device operands and timing helpers for scaled GEMMs (gemm_operands.h).

#include "fp8route/tuning/gemm_operands.h"

#include "timing/fill.cuh"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/device.h"
#include "fp8route/error.h"

namespace fp8route::timing {

namespace {

// Reads n16 16-byte units (L1 bypassed, 4 loads in flight per thread) and folds them into one
// word. The word is stored only if it equals a value no data makes likely, so the loads stay
// (their result is used) without 8000 warps queueing atomics on one address at the end, which
// would add microseconds to the floor it measures.
__global__ void read_floor_kernel(const uint4* p, int64_t n16, unsigned* sink) {
  auto load = [](const uint4* q) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(q));
    return v.x ^ v.y ^ v.z ^ v.w;
  };
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  unsigned x = 0;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    unsigned v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = load(p + i + u * stride);
    x ^= v[0] ^ v[1] ^ v[2] ^ v[3];
  }
  for (; i < n16; i += stride) x ^= load(p + i);
  if (x == 0x9E3779B9u) *sink = x;
}

}  // namespace

int64_t gemm_call_bytes(const GemmProblem& p) { return p.m * p.k + p.n * p.k + p.m * p.n * 2; }

GemmOperandSets make_gemm_operands(const GemmProblem& p, int sets, uint64_t seed, bool exact, int64_t scale_offset) {
  FP8ROUTE_CHECK(scale_offset >= 0 && scale_offset <= 1024, "scale_offset: expected 0..1024, got " << scale_offset);
  GemmOperandSets o;
  const int64_t kb = (p.k + 127) / 128, ma = (p.m + 3) / 4 * 4, nb128 = (p.n + 127) / 128;
  const int64_t sb_ld = p.sb_padded ? (kb + 3) / 4 * 4 : kb;
  int64_t na = 1, nb = 1;
  if (p.scale == ScaleKind::row) na = p.sa_vector ? p.m : 1, nb = p.sb_vector ? p.n : 1;
  if (p.scale == ScaleKind::block) na = kb * ma, nb = nb128 * sb_ld;
  const int64_t off = scale_offset;
  o.sa = DeviceBuffer((na + off) * 4);
  o.sb = DeviceBuffer((nb + off) * 4);
  fill_scales<<<kFillGrid, kFillBlock>>>(o.sa.as<float>(), na + off, seed ^ 3, exact);
  fill_scales<<<kFillGrid, kFillBlock>>>(o.sb.as<float>(), nb + off, seed ^ 4, exact);
  float* sa = o.sa.as<float>() + off;
  float* sb = o.sb.as<float>() + off;
  void* bias = nullptr;
  if (p.bias) {
    o.bias = DeviceBuffer((p.n + off) * 2);
    if (p.out == DType::bf16)
      fill_bias<<<kFillGrid, kFillBlock>>>(o.bias.as<__nv_bfloat16>(), p.n + off, seed ^ 5, exact);
    else
      fill_bias<<<kFillGrid, kFillBlock>>>(o.bias.as<__half>(), p.n + off, seed ^ 5, exact);
    bias = static_cast<uint8_t*>(o.bias.data()) + 2 * off;
  }
  for (int s = 0; s < sets; ++s) {
    o.a.emplace_back(std::max<int64_t>(p.m * p.k, 1));
    o.b.emplace_back(p.n * p.k);
    o.out.emplace_back(std::max<int64_t>(p.m * p.n * 2, 1));
    if (p.m > 0)
      fill_codes<<<kFillGrid, kFillBlock>>>(o.a.back().as<uint8_t>(), p.m, p.k, p.k, seed ^ (s * 16 + 1), exact);
    fill_codes<<<kFillGrid, kFillBlock>>>(o.b.back().as<uint8_t>(), p.n, p.k, p.k, seed ^ (s * 16 + 2), exact);
    ScaledMmArgs x;
    x.scale = p.scale;
    x.a = TensorView::contiguous(o.a.back().data(), DType::e4m3, {p.m, p.k});
    x.b = TensorView::contiguous(o.b.back().data(), DType::e4m3, {p.n, p.k});
    x.out = TensorView::contiguous(o.out.back().data(), p.out, {p.m, p.n});
    if (p.scale == ScaleKind::block) {
      x.scale_a = TensorView::contiguous(sa, DType::f32, {kb, ma});
      x.scale_b = TensorView::strided(sb, DType::f32, {nb128, kb}, {sb_ld, 1});
    } else {
      x.scale_a = TensorView::contiguous(sa, DType::f32, {na});
      x.scale_b = TensorView::contiguous(sb, DType::f32, {nb});
    }
    if (p.bias) x.bias = TensorView::contiguous(bias, p.out, {p.n});
    o.args.push_back(x);
  }
  FP8ROUTE_CHECK_LAUNCH();
  FP8ROUTE_CUDA_CHECK(cudaDeviceSynchronize());
  return o;
}

Measurement measure_gemm(const GemmOperandSets& o, const std::string& backend, const std::string& config,
                         const MeasureOptions& opt) {
  Measurement m = measure_gemms(o, {{backend, config}}, opt)[0];
  FP8ROUTE_CHECK_CAT(m.error.empty(), ErrorCategory::cuda_error, m.error);  // as measure() reports it
  return m;
}

std::vector<Measurement> measure_gemms(const GemmOperandSets& o,
                                       const std::vector<std::pair<std::string, std::string>>& choices,
                                       const MeasureOptions& opt) {
  std::vector<Enqueue> ops;
  for (const auto& [backend, config] : choices) {
    if (backend.empty())
      ops.push_back([&o](int set, cudaStream_t s) { scaled_mm(o.args[set], s); });
    else
      ops.push_back([&o, b = backend, c = config](int set, cudaStream_t s) { scaled_mm(o.args[set], b, c, s); });
  }
  return measure_interleaved(ops, static_cast<int>(o.args.size()), opt);
}

Screen screen_gemms(const GemmOperandSets& o, const std::vector<std::pair<std::string, std::string>>& choices,
                    const MeasureOptions& opt, double pct) {
  MeasureOptions quick = opt;
  quick.instances = 1, quick.reps = 5, quick.warmup = 2;
  const std::vector<Measurement> pre = measure_gemms(o, choices, quick);
  const std::vector<bool> keep = screen_keep(choices, pre, pct);
  Screen s;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (keep[i]) {
      s.kept.push_back(choices[i]);
    } else {
      s.dropped.push_back(choices[i]);
      s.dropped_us.push_back(pre[i].median_us);
    }
  }
  return s;
}

std::vector<bool> screen_keep(const std::vector<std::pair<std::string, std::string>>& choices,
                              const std::vector<Measurement>& ms, double pct) {
  FP8ROUTE_CHECK(ms.size() == choices.size(), "screen_keep: " << choices.size() << " choices, " << ms.size()
                                                              << " measurements");
  std::vector<std::string> backends;
  std::vector<double> us;
  std::vector<bool> failed;
  for (size_t i = 0; i < choices.size(); ++i)
    backends.push_back(choices[i].first), us.push_back(ms[i].median_us), failed.push_back(!ms[i].error.empty());
  return screen_keep(backends, us, failed, pct);
}

void enqueue_read_floor(const void* p, int64_t bytes, cudaStream_t stream) {
  static DeviceBuffer sink(sizeof(unsigned));
  read_floor_kernel<<<4 * device_info(-1).sm_count, 512, 0, stream>>>(static_cast<const uint4*>(p), bytes / 16,
                                                                     sink.as<unsigned>());
  FP8ROUTE_CHECK_LAUNCH();
}

// One thread per 16 bytes read: it reads them and writes 8 bytes (the first half xor the second),
// so `out` takes half of `in` -- a 16-bit activation in, one-byte codes out, with no arithmetic.
__global__ void pass_floor_kernel(const uint4* in, int64_t n16, uint2* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n16) return;
  const uint4 v = in[i];
  out[i] = make_uint2(v.x ^ v.z, v.y ^ v.w);
}

void enqueue_pass_floor(const void* in, int64_t in_bytes, void* out, cudaStream_t stream) {
  const int64_t n16 = in_bytes / 16;
  constexpr int kThreads = 256;
  pass_floor_kernel<<<static_cast<unsigned>((n16 + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      static_cast<const uint4*>(in), n16, static_cast<uint2*>(out));
  FP8ROUTE_CHECK_LAUNCH();
}

Measurement measure_read_floor(const GemmOperandSets& o, const MeasureOptions& opt) {
  const int64_t bytes = o.args.at(0).b.shape[0] * o.args.at(0).b.shape[1];
  return measure([&](int set, cudaStream_t s) { enqueue_read_floor(o.b[set].data(), bytes, s); },
                 static_cast<int>(o.b.size()), opt);
}

}  // namespace fp8route::timing
