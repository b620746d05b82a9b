// Launcher of the fused decode attention: argument checks, launch shape, dispatch. Device code:
// src/attention/kernel.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "attention/kernel.cuh"
#include "fp8route/tuning/chain_trace.h"
#include "core/checks.h"
#include "fp8route/tuning/cuda_check.h"
#include "core/launch.h"
#include "fp8route/attention.h"
#include "fp8route/device.h"

namespace fp8route {

using detail::check_aligned;
using detail::check_contiguous_shape;
using detail::check_device_tensor;
using detail::check_dtype;
using detail::check_ndim;
using detail::check_no_overlap;
using detail::check_same_device;
using detail::given;
using kernels::DecodeAttnParams;

namespace {

// A tensor of qkv's dtype on qkv's device.
void check_like_qkv(const TensorView& t, const char* name, const TensorView& qkv) {
  check_device_tensor(t, name);
  check_same_device(t, name, qkv, "qkv");
  FP8ROUTE_CHECK(t.dtype == qkv.dtype, name << ": dtype " << dtype_name(t.dtype) << " must be qkv's ("
                                            << dtype_name(qkv.dtype) << ")");
}

// k_cache / v_cache: [B, Hk, S, D], rows of D contiguous and 16-byte aligned, and no two
// (sequence, head, position) rows sharing memory (the kernel writes one per sequence).
void check_cache(const TensorView& c, const char* name, const TensorView& qkv, int64_t batch, int64_t hk,
                 int64_t head_dim) {
  check_like_qkv(c, name, qkv);
  check_ndim(c, name, 4, "[B, Hk, S, D]");
  FP8ROUTE_CHECK(c.size(0) == batch && c.size(1) == hk && c.size(3) == head_dim,
                 name << ": expected [" << batch << ", " << hk << ", S, " << head_dim << "], got " << to_string(c));
  FP8ROUTE_CHECK(c.size(2) > 0 && c.size(2) <= 0x7FFFFFFF, name << ": S = " << c.size(2) << " outside [1, 2^31)");
  FP8ROUTE_CHECK(c.stride(3) == 1, name << ": the head dim must be contiguous (stride 1), got " << to_string(c));
  for (int d = 0; d < 3; ++d)
    FP8ROUTE_CHECK(c.stride(d) > 0 && c.stride(d) % 8 == 0,
                   name << ": strides of dims 0-2 must be positive multiples of 8 elements, got " << to_string(c));
  check_aligned(c.data, 16, name);
  // Rows do not overlap when, taking the dims by increasing stride, each stride is at least the
  // extent of the ones below it.
  int order[3] = {0, 1, 2};
  std::sort(order, order + 3, [&](int a, int b) { return c.stride(a) < c.stride(b); });
  int64_t extent = head_dim;
  for (int i = 0; i < 3; ++i) {
    const int d = order[i];
    if (c.size(d) == 1) continue;
    FP8ROUTE_CHECK(c.stride(d) >= extent,
                   name << ": its [B, Hk, S] rows overlap (stride of dim " << d << " below the extent of the dims "
                        << "inside it): " << to_string(c));
    extent = c.stride(d) * c.size(d);
  }
}

// One instantiation of the kernel: the function and its dynamic shared memory.
struct AttnKernel {
  void (*fn)(DecodeAttnParams);
  int smem;
};

template <class T, int D>
AttnKernel kernel_d(int g, bool deep) {
  if (deep) return {kernels::decode_attention_kernel<T, D, 1, true>, kernels::AttnSmem<D, 1>::kBytes};
  switch (g) {
    case 1: return {kernels::decode_attention_kernel<T, D, 1>, kernels::AttnSmem<D, 1>::kBytes};
    case 2: return {kernels::decode_attention_kernel<T, D, 2>, kernels::AttnSmem<D, 2>::kBytes};
    default: return {kernels::decode_attention_kernel<T, D, 4>, kernels::AttnSmem<D, 4>::kBytes};
  }
}

template <class T>
AttnKernel kernel_t(int head_dim, int g, bool deep) {
  switch (head_dim) {
    case 64: return kernel_d<T, 64>(g, deep);
    case 128: return kernel_d<T, 128>(g, deep);
    default: return kernel_d<T, 256>(g, deep);
  }
}

AttnKernel attention_kernel(DType dtype, int head_dim, int g, bool deep = false) {
  return dtype == DType::bf16 ? kernel_t<__nv_bfloat16>(head_dim, g, deep) : kernel_t<__half>(head_dim, g, deep);
}

void allow_smem(const AttnKernel& k, int device) {
  if (k.smem > 48 * 1024) allow_dynamic_smem(reinterpret_cast<const void*>(k.fn), k.smem, device);
}

// Clusters of `splits` blocks of kernel k resident at once on this GPU (one wave); splits == 1:
// blocks. Queried once per kernel, cluster size and device.
int wave_clusters(const AttnKernel& k, int splits, int device) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, int> cache;
  const auto fn = reinterpret_cast<const void*>(k.fn);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find({fn, splits, device}); it != cache.end()) return it->second;
  allow_smem(k, device);
  int n = 0;
  if (splits == 1) {
    FP8ROUTE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k.fn, kernels::kAttnThreads, k.smem));
    n *= device_info(device).sm_count;
  } else {
    n = resident_cluster_blocks(fn, kernels::kAttnThreads, k.smem, splits) / splits;
  }
  return cache.emplace(std::tuple{fn, splits, device}, n).first->second;
}

// The launch shape: G query heads per block and the splits of each sequence's positions (one
// cluster). G starts at the group's power of two, at most 4 (each lane holds G heads' state: 8
// leaves one block per SM and runs slower than 4 at every batch measured). The splits are the
// most, up to 8 and one per 32 positions, that keep the grid within about one block per SM and
// its clusters within one wave of resident clusters (a second wave of clusters doubles the time).
// While that leaves fewer blocks than half the SMs, G halves (more blocks, each re-reading its kv
// head's cache from L2). Filling every SM twice with splits instead is slower. The rule against every
// G x splits: docs/design.md, "Measurements behind the rules". At G = 1 the deep loop (kernel.cuh)
// is taken where its clusters, at the shape chosen for the plain loop, still fit one wave; where its
// registers leave fewer clusters resident the plain loop keeps the shape.
struct AttnLaunch {
  int g, splits;
  bool deep;
};
AttnLaunch choose_launch(DType dtype, int64_t batch, int hk, int group, int64_t span, int head_dim) {
  const DeviceInfo& dev = device_info(-1);
  const int sms = dev.sm_count;
  auto waves_ok = [&](int g, int splits, int64_t clusters, bool deep = false) {
    return clusters <= wave_clusters(attention_kernel(dtype, head_dim, g, deep), splits, dev.index);
  };
  int g = 1;
  while (g < group && g < 4) g *= 2;
  for (;;) {
    const int64_t clusters = batch * hk * ((group + g - 1) / g);
    int splits = 1;
    for (int s = kernels::kAttnMaxSplits; s >= 2; s /= 2) {
      if (s > span / 32 || clusters * s > sms || !waves_ok(g, s, clusters)) continue;
      splits = s;
      break;
    }
    if (g == 1 || clusters * splits >= sms / 2) return {g, splits, g == 1 && waves_ok(1, splits, clusters, true)};
    g /= 2;
  }
}

}  // namespace

void decode_attention(const DecodeAttentionArgs& a, const TensorView& out, cudaStream_t stream) {
  const TensorView& qkv = a.qkv;
  check_device_tensor(qkv, "qkv");
  check_dtype(qkv, "qkv", {DType::bf16, DType::f16});
  check_ndim(qkv, "qkv", 2, "[B, (Hq + 2 Hk) * D]");
  FP8ROUTE_CHECK(a.num_kv_heads > 0, "num_kv_heads: must be positive, got " << a.num_kv_heads);
  FP8ROUTE_CHECK(a.num_q_heads > 0 && a.num_q_heads % a.num_kv_heads == 0,
                 "num_q_heads: must be a positive multiple of num_kv_heads (" << a.num_kv_heads << "), got "
                                                                              << a.num_q_heads);
  const int64_t hq = a.num_q_heads, hk = a.num_kv_heads, batch = qkv.size(0);
  FP8ROUTE_CHECK(qkv.size(1) % (hq + 2 * hk) == 0,
                 "qkv: " << qkv.size(1) << " columns are not (num_q_heads + 2 num_kv_heads) = " << hq + 2 * hk
                         << " heads of one head dim");
  const int64_t head_dim = qkv.size(1) / (hq + 2 * hk);
  FP8ROUTE_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256,
                 "qkv: head dim " << head_dim << " (columns / (num_q_heads + 2 num_kv_heads)) is not 64, 128 or 256");
  FP8ROUTE_CHECK(qkv.stride(1) == 1, "qkv: last dim must be contiguous (stride 1), got " << to_string(qkv));
  FP8ROUTE_CHECK(batch <= 1 || (qkv.stride(0) >= qkv.size(1) && qkv.stride(0) % 8 == 0),
                 "qkv: row stride must be >= its columns and a multiple of 16 bytes, got " << to_string(qkv));
  check_aligned(qkv.data, 16, "qkv");
  FP8ROUTE_CHECK(batch <= 65535, "qkv: at most 65535 sequences, got " << batch);

  check_cache(a.k_cache, "k_cache", qkv, batch, hk, head_dim);
  check_cache(a.v_cache, "v_cache", qkv, batch, hk, head_dim);
  const int64_t seq = a.k_cache.size(2);
  FP8ROUTE_CHECK(a.v_cache.size(2) == seq, "v_cache: S = " << a.v_cache.size(2) << " must be k_cache's (" << seq
                                                           << ")");
  for (const auto* t : {&a.cos, &a.sin}) {
    const char* name = t == &a.cos ? "cos" : "sin";
    check_like_qkv(*t, name, qkv);
    check_ndim(*t, name, 2, "[R, D]");
    FP8ROUTE_CHECK(t->size(0) >= seq && t->size(1) == head_dim && t->is_contiguous(),
                   name << ": expected contiguous [R >= " << seq << ", " << head_dim << "], got " << to_string(*t));
  }
  check_device_tensor(a.positions, "positions");
  check_same_device(a.positions, "positions", qkv, "qkv");
  check_dtype(a.positions, "positions", {DType::i32});
  const int64_t pshape[1] = {batch};
  check_contiguous_shape(a.positions, "positions", pshape, 1);
  check_aligned(a.positions.data, 4, "positions");
  FP8ROUTE_CHECK(given(a.q_norm) == given(a.k_norm), "k_norm: must be given exactly when q_norm is");
  for (const auto* t : {&a.q_norm, &a.k_norm}) {
    if (!given(*t)) continue;
    const char* name = t == &a.q_norm ? "q_norm" : "k_norm";
    check_like_qkv(*t, name, qkv);
    const int64_t wshape[1] = {head_dim};
    check_contiguous_shape(*t, name, wshape, 1);
  }
  FP8ROUTE_CHECK(std::isfinite(a.eps) && a.eps >= 0.0f, "eps: must be finite and >= 0, got " << a.eps);
  FP8ROUTE_CHECK(std::isfinite(a.scale) && a.scale >= 0.0f, "scale: must be finite and >= 0 (0: 1/sqrt(D)), got "
                                                                << a.scale);
  FP8ROUTE_CHECK(a.window >= 0, "window: must be >= 0 (0: none), got " << a.window);

  check_like_qkv(out, "out", qkv);
  check_ndim(out, "out", 2, "[B, Hq * D]");
  FP8ROUTE_CHECK(out.size(0) == batch && out.size(1) == hq * head_dim,
                 "out: expected [" << batch << ", " << hq * head_dim << "], got " << to_string(out));
  FP8ROUTE_CHECK(out.stride(1) == 1 && (batch <= 1 || (out.stride(0) >= out.size(1) && out.stride(0) % 8 == 0)),
                 "out: rows must be contiguous with a stride >= its columns and a multiple of 16 bytes, got "
                     << to_string(out));
  check_aligned(out.data, 16, "out");

  // Writes: out and the caches; none may overlap another operand.
  const std::pair<const TensorView*, const char*> inputs[] = {
      {&qkv, "qkv"}, {&a.cos, "cos"}, {&a.sin, "sin"}, {&a.positions, "positions"},
      {&a.q_norm, "q_norm"}, {&a.k_norm, "k_norm"}};
  const std::pair<const TensorView*, const char*> written[] = {
      {&out, "out"}, {&a.k_cache, "k_cache"}, {&a.v_cache, "v_cache"}};
  for (size_t i = 0; i < std::size(written); ++i) {
    for (const auto& [r, rname] : inputs)
      if (given(*r)) check_no_overlap(*written[i].first, written[i].second, *r, rname);
    for (size_t j = 0; j < i; ++j)
      check_no_overlap(*written[i].first, written[i].second, *written[j].first, written[j].second);
  }
  if (batch == 0) return;
  detail::check_sm90_device("decode attention");

  const int group = static_cast<int>(hq / hk);
  const int64_t span = a.window > 0 ? std::min<int64_t>(seq, a.window) : seq;
  const AttnLaunch l = choose_launch(qkv.dtype, batch, static_cast<int>(hk), group, span, static_cast<int>(head_dim));
  const int g = l.g;
  DecodeAttnParams p{};
  p.qkv = qkv.data;
  p.qkv_stride = qkv.stride(0);
  p.k_cache = a.k_cache.data;
  p.v_cache = a.v_cache.data;
  p.kc_sb = a.k_cache.stride(0), p.kc_sh = a.k_cache.stride(1), p.kc_sp = a.k_cache.stride(2);
  p.vc_sb = a.v_cache.stride(0), p.vc_sh = a.v_cache.stride(1), p.vc_sp = a.v_cache.stride(2);
  p.cos = a.cos.data;
  p.sin = a.sin.data;
  p.positions = static_cast<const int32_t*>(a.positions.data);
  p.q_norm = given(a.q_norm) ? a.q_norm.data : nullptr;
  p.k_norm = given(a.k_norm) ? a.k_norm.data : nullptr;
  p.out = out.data;
  p.out_stride = out.stride(0);
  p.hq = static_cast<int32_t>(hq);
  p.hk = static_cast<int32_t>(hk);
  p.group = group;
  p.chunks = (group + g - 1) / g;
  p.seq = static_cast<int32_t>(seq);
  p.window = a.window;
  p.cache_ready = a.cache_ready;
  p.eps = a.eps;
  const float scale = a.scale > 0.0f ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  p.scale_log2 = scale * 1.4426950408889634f;
  FP8ROUTE_CHECK(hk * p.chunks <= 65535, "num_kv_heads: " << hk << " kv heads in " << p.chunks
                                                          << " chunks exceed the grid's 65535");
  const int splits = l.splits;
  FP8ROUTE_CHECK(splits >= 1 && splits <= kernels::kAttnMaxSplits, "decode attention: " << splits << " splits");
  const bool deep = l.deep;
  const AttnKernel k = attention_kernel(qkv.dtype, static_cast<int>(head_dim), g, deep);
  allow_smem(k, device_info(-1).index);
  const LaunchShape shape{dim3(static_cast<unsigned>(splits), static_cast<unsigned>(p.hk * p.chunks),
                               static_cast<unsigned>(batch)),
                          dim3(kernels::kAttnThreads), static_cast<size_t>(k.smem),
                          dim3(static_cast<unsigned>(splits), 1, 1), true};
  FP8ROUTE_TRACE(p.trace = chain_trace::next(("attention D" + std::to_string(head_dim) + " G" + std::to_string(g) +
                                              (deep ? " deep" : "")).c_str(),
                                             shape.grid, shape.block, shape.smem, shape.cluster);)
  launch_kernel(k.fn, shape, stream, p);
}

}  // namespace fp8route
