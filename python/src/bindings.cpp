// The Python package's native module: the public C++ API (include/fp8route) exported through
// apache-tvm-ffi. Tensors arrive as DLPack views from any framework; work goes on the caller's
// current CUDA stream (TVMFFIEnvGetStream, which tvm-ffi sets from torch's current stream).
// Bindings only convert arguments and call the public API. Lists arrive as tvm-ffi Arrays, results
// with structure leave as Maps and Arrays of plain values, and a LinearPlan is a registered,
// reference-counted object (fp8route.LinearPlan in Python). Errors: fp8route's invalid_argument and
// io_error become ValueError, everything else RuntimeError, with the C++ message.

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/object.h>
#include <tvm/ffi/optional.h>
#include <tvm/ffi/reflection/registry.h>
#include <tvm/ffi/string.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp8route/tuning/chain_trace.h"
#include "fp8route/tuning/gemm_knobs.h"
#include "fp8route/attention.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "fp8route/moe.h"
#include "fp8route/norm.h"
#include "fp8route/quant.h"
#include "fp8route/quant_layout.h"
#include "fp8route/route.h"
#include "fp8route/version.h"
#include "fp8route/tuning/explain_policy.h"
#include "fp8route/tuning/record_check.h"

namespace {

using FfiTensor = tvm::ffi::TensorView;
using tvm::ffi::Any;
using tvm::ffi::Array;
using tvm::ffi::Map;
using tvm::ffi::Optional;
using tvm::ffi::String;
using Dict = Map<String, Any>;  // a Python dict of plain values

// Text from files, paths and messages as valid UTF-8 (invalid bytes become U+FFFD): the Python side
// decodes strings strictly, and what it shows must never be an error of its own.
String utf8(const std::string& s) {
  const std::string quoted = nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return String(nlohmann::json::parse(quoted).get<std::string>());
}

String str(std::string_view v) { return String(std::string(v)); }
Array<int64_t> ints(const int64_t* v, size_t n) {
  Array<int64_t> a;
  for (size_t i = 0; i < n; ++i) a.push_back(v[i]);
  return a;
}
Array<int64_t> ints(const std::vector<int64_t>& v) { return ints(v.data(), v.size()); }

// Runs f, turning fp8route errors into the Python exceptions the package documents.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const fp8route::Error& e) {
    if (e.category() == fp8route::ErrorCategory::invalid_argument || e.category() == fp8route::ErrorCategory::io_error)
      TVM_FFI_THROW(ValueError) << e.what();
    TVM_FFI_THROW(RuntimeError) << e.what();
  } catch (const tvm::ffi::Error&) {
    throw;
  } catch (const std::exception& e) {
    TVM_FFI_THROW(RuntimeError) << "fp8route: " << e.what();
  }
  TVM_FFI_UNREACHABLE();
}

fp8route::DType dtype_of(const DLDataType& t, const char* name) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return fp8route::DType::f32;
    if (t.code == kDLFloat && t.bits == 16) return fp8route::DType::f16;
    if (t.code == kDLBfloat && t.bits == 16) return fp8route::DType::bf16;
    // E4M3 codes: float8_e4m3fn, or their bits as uint8 (what the Python layer passes).
    if ((t.code == kDLFloat8_e4m3fn || t.code == kDLUInt) && t.bits == 8) return fp8route::DType::e4m3;
    if (t.code == kDLInt && t.bits == 8) return fp8route::DType::i8;
    if (t.code == kDLInt && t.bits == 32) return fp8route::DType::i32;
  }
  TVM_FFI_THROW(ValueError) << name << ": dtype (code " << int(t.code) << ", bits " << int(t.bits) << ", lanes "
                            << t.lanes << ") is not one fp8route takes (f32, f16, bf16, float8_e4m3fn or uint8 bits, "
                            << "int8, int32)";
  TVM_FFI_UNREACHABLE();
}

// A DLPack view as fp8route's TensorView (data pointer includes the byte offset).
fp8route::TensorView view(const FfiTensor& t, const char* name) {
  fp8route::TensorView v;
  if (t.ndim() > fp8route::kMaxDims)
    TVM_FFI_THROW(ValueError) << name << ": at most " << fp8route::kMaxDims << " dimensions, got " << t.ndim();
  v.data = static_cast<char*>(t.data_ptr()) + t.byte_offset();
  v.dtype = dtype_of(t.dtype(), name);
  v.ndim = t.ndim();
  // A compact tensor may come without strides (DLPack allows null); its strides are the row-major ones.
  const bool compact = t.IsContiguous();
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = t.shape()[i];
    v.strides[i] = compact ? stride : t.strides()[i];
    stride *= v.shape[i];
  }
  const DLDevice d = t.device();
  v.device = d.device_type == kDLCUDA ? fp8route::Device::cuda(d.device_id) : fp8route::Device::cpu();
  return v;
}

cudaStream_t stream_of(const FfiTensor& t) {
  return static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, t.device().device_id));
}

// The stream a call given `t` runs on, as an integer handle: for the test that each host thread's
// calls run on its own current stream.
int64_t call_stream(FfiTensor t) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(stream_of(t))); }

// The GPU a call runs on is its tensors' (the library launches, allocates workspaces and caches
// per-device state on the current device): made current for the call when it is not already, and
// the caller's restored after. A tensor outside CUDA memory changes nothing (the library rejects it,
// naming it); tensors on different GPUs are the library's error too.
class DeviceGuard {
 public:
  explicit DeviceGuard(const FfiTensor& t) {
    if (t.device().device_type == kDLCUDA) enter(t.device().device_id);
  }
  explicit DeviceGuard(int device) { enter(device); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }

 private:
  void enter(int device) {
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) {  // no usable GPU: the call's own checks say so
      (void)cudaGetLastError();
      return;
    }
    if (current == device) return;
    const cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      FP8ROUTE_FAIL(fp8route::ErrorCategory::invalid_argument,
                    "device: cannot run on cuda:" << device << ": " << cudaGetErrorString(e));
    }
    previous_ = current;
  }
  int previous_ = -1;
};

fp8route::GroupQuantSpec spec_of(int64_t group_size, const String& code, const String& rounding, const String& storage,
                                 const String& layout) {
  // Checked at full width: a narrowing cast would turn 2^32 + 128 into a valid 128.
  FP8ROUTE_CHECK(group_size >= INT32_MIN && group_size <= INT32_MAX,
                 "group_size: " << group_size << " is not one of 16, 32, 64, 128, 256");
  fp8route::GroupQuantSpec s;
  s.group_size = static_cast<int>(group_size);
  s.code = fp8route::parse_dtype(std::string(code), "dtype");
  s.rounding = fp8route::parse_rounding(std::string(rounding));
  s.storage = fp8route::parse_storage(std::string(storage));
  s.layout = fp8route::parse_layout(std::string(layout));
  fp8route::validate(s);
  return s;
}

String version() { return String(FP8ROUTE_VERSION); }

// The shapes of quantized codes and scales: {"q": [...], "s": [...], "s_dtype": "f32" | "i32"}.
Dict quant_layout(int64_t group_size, String code, String rounding, String storage, String layout, int64_t tokens,
                  int64_t hidden, int64_t experts) {
  return guarded([&] {
    const fp8route::QuantLayout l =
        fp8route::quant_layout(spec_of(group_size, code, rounding, storage, layout), tokens, hidden, experts);
    return Dict{{"q", ints(l.code_shape, l.code_ndim)},
                {"s", ints(l.scale_shape, l.scale_ndim)},
                {"s_dtype", str(fp8route::dtype_name(l.scale_dtype))}};
  });
}

void per_token_group_quant(FfiTensor x, FfiTensor q, FfiTensor s, int64_t group_size, String code, String rounding,
                           String storage, String layout, bool fused) {
  guarded([&] {
    const auto spec = spec_of(group_size, code, rounding, storage, layout);
    const DeviceGuard device(x);
    if (fused)
      fp8route::silu_and_mul_per_token_group_quant(view(x, "x"), spec, view(q, "q"), view(s, "s"), stream_of(x));
    else
      fp8route::per_token_group_quant(view(x, "x"), spec, view(q, "q"), view(s, "s"), stream_of(x));
  });
}

void masked_per_token_group_quant(FfiTensor x, FfiTensor masked_m, FfiTensor q, FfiTensor s, int64_t group_size,
                                  String code, String rounding, String storage, String layout, bool fused) {
  guarded([&] {
    const auto spec = spec_of(group_size, code, rounding, storage, layout);
    const DeviceGuard device(x);
    if (fused)
      fp8route::masked_silu_and_mul_per_token_group_quant(view(x, "x"), view(masked_m, "masked_m"), spec, view(q, "q"),
                                                          view(s, "s"), stream_of(x));
    else
      fp8route::masked_per_token_group_quant(view(x, "x"), view(masked_m, "masked_m"), spec, view(q, "q"),
                                             view(s, "s"), stream_of(x));
  });
}

void scatter_per_token_group_quant(FfiTensor x, FfiTensor src2dst, FfiTensor q, FfiTensor s, int64_t group_size,
                                   String code, String rounding, String storage, String layout, bool unique_rows) {
  guarded([&] {
    const auto spec = spec_of(group_size, code, rounding, storage, layout);
    const DeviceGuard device(x);
    fp8route::scatter_per_token_group_quant(view(x, "x"), view(src2dst, "src2dst"), spec, view(q, "q"), view(s, "s"),
                                            stream_of(x), unique_rows);
  });
}

void scatter_per_token_quant(FfiTensor x, FfiTensor src2dst, FfiTensor q, FfiTensor s, String rounding,
                             bool unique_rows) {
  guarded([&] {
    const DeviceGuard device(x);
    fp8route::scatter_per_token_quant(view(x, "x"), view(src2dst, "src2dst"), view(q, "q"), view(s, "s"),
                                      fp8route::parse_rounding(std::string(rounding)), stream_of(x), unique_rows);
  });
}

// fused: x [T, 2H] -> silu_and_mul, then the per-token quant.
void per_token_quant(FfiTensor x, FfiTensor q, FfiTensor s, String rounding, bool fused) {
  guarded([&] {
    const DeviceGuard device(x);
    const auto f = fused ? fp8route::silu_and_mul_per_token_quant : fp8route::per_token_quant;
    f(view(x, "x"), view(q, "q"), view(s, "s"), fp8route::parse_rounding(std::string(rounding)), stream_of(x));
  });
}

void masked_silu_and_mul_per_token_quant(FfiTensor x, FfiTensor masked_m, FfiTensor q, FfiTensor s, String rounding) {
  guarded([&] {
    const DeviceGuard device(x);
    fp8route::masked_silu_and_mul_per_token_quant(view(x, "x"), view(masked_m, "masked_m"), view(q, "q"),
                                                  view(s, "s"), fp8route::parse_rounding(std::string(rounding)),
                                                  stream_of(x));
  });
}

void per_tensor_quant(FfiTensor x, FfiTensor q, FfiTensor scale, bool dynamic) {
  guarded([&] {
    const DeviceGuard device(x);
    if (dynamic)
      fp8route::per_tensor_quant_dynamic(view(x, "x"), view(q, "q"), view(scale, "scale"), stream_of(x));
    else
      fp8route::per_tensor_quant_static(view(x, "x"), view(scale, "scale"), view(q, "q"), stream_of(x));
  });
}

fp8route::RmsNormInput norm_input(const FfiTensor& x, const FfiTensor& weight, double eps, bool has_residual,
                                  const FfiTensor& residual, const FfiTensor& residual_out, bool static_weight) {
  FP8ROUTE_CHECK(std::isfinite(eps) && eps >= 0 && eps <= 3.4e38, "eps: must be finite, >= 0 and fit a float, got " << eps);
  fp8route::RmsNormInput in{view(x, "x"), view(weight, "weight"), static_cast<float>(eps), {}, {}};
  in.static_weight = static_weight;
  if (has_residual) {
    in.residual = view(residual, "residual");
    in.residual_out = view(residual_out, "residual_out");
  }
  return in;
}

// RMSNorm (quant = "none": out = the normalized values) or RMSNorm fused with a quantization:
// "group" (q, s of the spec), "token" (q, s f32 [T]), "tensor_static" (s is the static scale).
// static_weight: RmsNormInput::static_weight.
void rms_norm(FfiTensor x, FfiTensor weight, double eps, bool has_residual, FfiTensor residual,
              FfiTensor residual_out, FfiTensor q, FfiTensor s, String quant, int64_t group_size, String code,
              String rounding, String storage, String layout, bool static_weight) {
  guarded([&] {
    const DeviceGuard device(x);
    const auto in = norm_input(x, weight, eps, has_residual, residual, residual_out, static_weight);
    const std::string kind(quant);
    if (kind == "none")
      fp8route::rms_norm(in, view(q, "out"), stream_of(x));
    else if (kind == "group")
      fp8route::rms_norm_per_token_group_quant(in, spec_of(group_size, code, rounding, storage, layout), view(q, "q"),
                                               view(s, "s"), stream_of(x));
    else if (kind == "token")
      fp8route::rms_norm_per_token_quant(in, view(q, "q"), view(s, "s"), fp8route::parse_rounding(std::string(rounding)),
                                         stream_of(x));
    else if (kind == "tensor_static")
      fp8route::rms_norm_per_tensor_quant_static(in, view(s, "scale"), view(q, "q"), stream_of(x));
    else
      FP8ROUTE_CHECK(false, "quant: expected none, group, token or tensor_static, got '" << kind << "'");
  });
}

// Fused decode attention (include/fp8route/attention.h); q_norm/k_norm are read only with has_norm.
void decode_attention(FfiTensor qkv, FfiTensor k_cache, FfiTensor v_cache, FfiTensor cos, FfiTensor sin,
                      FfiTensor positions, bool has_norm, FfiTensor q_norm, FfiTensor k_norm, double eps,
                      int64_t num_q_heads, int64_t num_kv_heads, double scale, int64_t window, bool cache_ready,
                      FfiTensor out) {
  guarded([&] {
    const DeviceGuard device(qkv);
    FP8ROUTE_CHECK(num_q_heads > 0 && num_q_heads <= 0x7FFFFFFF, "num_q_heads: outside [1, 2^31), got " << num_q_heads);
    FP8ROUTE_CHECK(num_kv_heads > 0 && num_kv_heads <= 0x7FFFFFFF,
                   "num_kv_heads: outside [1, 2^31), got " << num_kv_heads);
    FP8ROUTE_CHECK(window >= 0 && window <= 0x7FFFFFFF, "window: outside [0, 2^31), got " << window);
    fp8route::DecodeAttentionArgs a;
    a.qkv = view(qkv, "qkv");
    a.k_cache = view(k_cache, "k_cache");
    a.v_cache = view(v_cache, "v_cache");
    a.cos = view(cos, "cos");
    a.sin = view(sin, "sin");
    a.positions = view(positions, "positions");
    if (has_norm) {
      a.q_norm = view(q_norm, "q_norm");
      a.k_norm = view(k_norm, "k_norm");
    }
    a.eps = static_cast<float>(eps);
    a.num_q_heads = static_cast<int>(num_q_heads);
    a.num_kv_heads = static_cast<int>(num_kv_heads);
    a.scale = static_cast<float>(scale);
    a.window = static_cast<int>(window);
    a.cache_ready = cache_ready;
    fp8route::decode_attention(a, view(out, "out"), stream_of(qkv));
  });
}

// The chain trace (include/fp8route/tuning/chain_trace.h), for bench/decode_chain.py: a diagnostic, not the
// package's API (python/fp8route/chain_trace.py wraps it).
String chain_trace_info() {
  return String(nlohmann::json{{"compiled_in", fp8route::chain_trace::compiled_in()},
                               {"armed", fp8route::chain_trace::armed()}}.dump());
}
void chain_trace_arm(int64_t capacity) {
  guarded([&] {
    FP8ROUTE_CHECK(capacity >= 1 && capacity <= (1 << 20), "capacity: 1 .. 2^20, got " << capacity);
    fp8route::chain_trace::arm(static_cast<int>(capacity));
  });
}
void chain_trace_disarm() { fp8route::chain_trace::disarm(); }
void chain_trace_reset() { guarded([] { fp8route::chain_trace::reset(); }); }
String chain_trace_read() {
  return guarded([] {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : fp8route::chain_trace::read())
      out.push_back({{"kernel", r.kernel},
                     {"grid", {r.grid[0], r.grid[1], r.grid[2]}},
                     {"block", {r.block[0], r.block[1], r.block[2]}},
                     {"cluster", {r.cluster[0], r.cluster[1], r.cluster[2]}},
                     {"smem", r.smem},
                     {"start_first", r.start_first},
                     {"start_last", r.start_last},
                     {"release_first", r.release_first},
                     {"release_last", r.release_last},
                     {"exit_first", r.exit_first},
                     {"exit_last", r.exit_last},
                     {"blocks", r.blocks}});
    return String(out.dump());
  });
}
int64_t chain_trace_tick_ns() {
  return guarded([] { return fp8route::chain_trace::globaltimer_tick_ns(); });
}
// The decode backend's deep ring (include/fp8route/tuning/gemm_knobs.h), for the chain bench's A/B.
void decode_deep_ring_set(bool enabled) { fp8route::gemm::set_decode_deep_ring(enabled); }
bool decode_deep_ring_get() { return fp8route::gemm::decode_deep_ring(); }
// The grouped decode backend's split count (gemm_knobs.h), for moe_bench's comparison.
void grouped_decode_splits_set(int64_t splits) {
  guarded([&] {
    FP8ROUTE_CHECK(splits >= 0 && splits <= 0x7FFFFFFF, "splits: 0 (the rule) or 1..8, got " << splits);
    fp8route::moe::set_grouped_decode_splits(static_cast<int>(splits));
  });
}
int64_t grouped_decode_splits_get() { return fp8route::moe::grouped_decode_splits(); }
// buf: int32 [n + 1] on the GPU; the chain runs on the current stream (capturable).
void chain_trace_empty_chain(FfiTensor buf, int64_t n, int64_t blocks, bool pdl) {
  guarded([&] {
    const DeviceGuard device(buf);
    const fp8route::TensorView b = view(buf, "buf");
    FP8ROUTE_CHECK(b.device.type == fp8route::DeviceType::cuda && b.dtype == fp8route::DType::i32 && b.ndim == 1 &&
                       b.shape[0] == n + 1,
                   "buf: int32 [n + 1] on a GPU expected");
    FP8ROUTE_CHECK(n >= 1 && n <= 100000 && blocks >= 1 && blocks <= 65535, "n: 1 .. 1e5, blocks: 1 .. 65535");
    fp8route::chain_trace::empty_chain(static_cast<int32_t*>(b.data), static_cast<int>(n), static_cast<int>(blocks),
                                       pdl, stream_of(buf));
  });
}

fp8route::ScaledMmArgs mm_args(const FfiTensor& a, const FfiTensor& b, const FfiTensor& sa, const FfiTensor& sb,
                               const FfiTensor& out, const String& scale, const String& accum) {
  fp8route::ScaledMmArgs args;
  args.a = view(a, "a");
  args.b = view(b, "b");
  args.scale_a = view(sa, "scale_a");
  args.scale_b = view(sb, "scale_b");
  args.out = view(out, "out");
  // "auto": the kind the scale shapes imply (the package's scale=None).
  const std::string kind(scale);
  args.scale = kind == "auto" ? fp8route::infer_scale_kind(args) : fp8route::parse_scale_kind(kind);
  args.accum = fp8route::parse_accum(std::string(accum));
  return args;
}

void scaled_mm(FfiTensor a, FfiTensor b, FfiTensor scale_a, FfiTensor scale_b, FfiTensor out, String scale,
               String accum) {
  guarded([&] {
    const DeviceGuard device(a);
    fp8route::scaled_mm(mm_args(a, b, scale_a, scale_b, out, scale, accum), stream_of(a));
  });
}

void scaled_mm_bias(FfiTensor a, FfiTensor b, FfiTensor scale_a, FfiTensor scale_b, FfiTensor bias, FfiTensor out,
                    String scale, String accum) {
  guarded([&] {
    const DeviceGuard device(a);
    fp8route::ScaledMmArgs args = mm_args(a, b, scale_a, scale_b, out, scale, accum);
    args.bias = view(bias, "bias");
    fp8route::scaled_mm(args, stream_of(a));
  });
}

// Grouped GEMM (moe.h): `groups` is offsets (form "contiguous") or masked_m ("masked"); backend "" is
// the default.
void grouped_scaled_mm(FfiTensor a, FfiTensor b, FfiTensor scale_a, FfiTensor scale_b, FfiTensor groups,
                       FfiTensor out, String form, String scale, String scale_a_layout, String backend) {
  guarded([&] {
    const DeviceGuard device(a);
    fp8route::GroupedMmArgs g;
    g.form = fp8route::parse_grouped_form(std::string(form));
    g.a = view(a, "a");
    g.b = view(b, "b");
    g.scale_a = view(scale_a, "scale_a");
    g.scale_b = view(scale_b, "scale_b");
    const bool masked = g.form == fp8route::GroupedForm::masked;
    (masked ? g.masked_m : g.offsets) = view(groups, masked ? "masked_m" : "offsets");
    g.out = view(out, "out");
    g.scale = fp8route::parse_scale_kind(std::string(scale));
    g.scale_a_layout = fp8route::parse_layout(std::string(scale_a_layout));
    fp8route::grouped_scaled_mm(g, std::string(backend), stream_of(a));
  });
}

// The MoE decode glue (moe.h). expert_map is read only when `mapped` (pass any tensor otherwise).
void moe_softmax_topk(FfiTensor logits, FfiTensor weights, FfiTensor ids, bool renormalize) {
  guarded([&] {
    const DeviceGuard device(logits);
    fp8route::moe_softmax_topk(view(logits, "logits"), renormalize, view(weights, "weights"), view(ids, "ids"),
                               stream_of(logits));
  });
}

void moe_grouped_topk(FfiTensor logits, FfiTensor bias, FfiTensor weights, FfiTensor ids, int64_t n_group,
                      int64_t topk_group, bool renormalize, double scaling_factor) {
  guarded([&] {
    const DeviceGuard device(logits);
    fp8route::moe_grouped_topk(view(logits, "logits"), view(bias, "bias"), n_group, topk_group, renormalize,
                               scaling_factor, view(weights, "weights"), view(ids, "ids"), stream_of(logits));
  });
}

// sigmoid: bias is DeepSeek-V3's correction (moe_grouped_topk); else softmax (bias unused).
void moe_route_masked_dispatch(FfiTensor logits, bool sigmoid, FfiTensor bias, int64_t n_group, int64_t topk_group,
                               bool renormalize, double scaling_factor, bool mapped, FfiTensor expert_map,
                               int64_t m_max, FfiTensor weights, FfiTensor ids, FfiTensor src2dst, FfiTensor masked_m) {
  guarded([&] {
    const DeviceGuard device(logits);
    fp8route::moe_route_masked_dispatch(
        view(logits, "logits"), sigmoid ? view(bias, "bias") : fp8route::TensorView{}, n_group, topk_group,
        renormalize, scaling_factor, mapped ? view(expert_map, "expert_map") : fp8route::TensorView{}, m_max,
        view(weights, "weights"), view(ids, "ids"), view(src2dst, "src2dst"), view(masked_m, "masked_m"),
        stream_of(logits));
  });
}

void moe_masked_dispatch(FfiTensor ids, bool mapped, FfiTensor expert_map, int64_t m_max, FfiTensor src2dst,
                         FfiTensor masked_m) {
  guarded([&] {
    const DeviceGuard device(ids);
    fp8route::moe_masked_dispatch(view(ids, "ids"), mapped ? view(expert_map, "expert_map") : fp8route::TensorView{},
                                  m_max, view(src2dst, "src2dst"), view(masked_m, "masked_m"), stream_of(ids));
  });
}

void moe_contiguous_dispatch(FfiTensor ids, bool mapped, FfiTensor expert_map, FfiTensor src2dst, FfiTensor offsets,
                             FfiTensor workspace) {
  guarded([&] {
    const DeviceGuard device(ids);
    fp8route::moe_contiguous_dispatch(view(ids, "ids"),
                                      mapped ? view(expert_map, "expert_map") : fp8route::TensorView{},
                                      view(src2dst, "src2dst"), view(offsets, "offsets"), view(workspace, "workspace"),
                                      stream_of(ids));
  });
}

int64_t moe_contiguous_dispatch_workspace(int64_t entries, int64_t experts) {
  return guarded([&] { return fp8route::moe_contiguous_dispatch_workspace(entries, experts); });
}

void moe_combine(FfiTensor down_rows, FfiTensor src2dst, FfiTensor weights, FfiTensor out) {
  guarded([&] {
    const DeviceGuard device(down_rows);
    fp8route::moe_combine(view(down_rows, "down_rows"), view(src2dst, "src2dst"), view(weights, "weights"),
                          view(out, "out"), stream_of(down_rows));
  });
}

String explain(int64_t m, int64_t n, int64_t k, String scale, String out, String accum) {
  return guarded([&] {
    FP8ROUTE_CHECK(m >= 1 && n >= 1 && k >= 1, "m, n, k: must be >= 1, got " << m << ", " << n << ", " << k);
    fp8route::GemmProblem p = fp8route::make_problem(m, n, k, fp8route::parse_scale_kind(std::string(scale)),
                                                     fp8route::parse_dtype(std::string(out), "out_dtype"));
    p.accum = fp8route::parse_accum(std::string(accum));
    const auto router = fp8route::default_router();
    const fp8route::ExplainPolicy policy = fp8route::explain_policy();
    if (!policy.as_measured) return String(router->explain(p));
    const fp8route::Router as_measured(router->table(), policy.supports);
    return String("no GPU here (" + policy.no_gpu_reason +
                  "): the table's choice as measured, without checking this machine's backends\n" +
                  as_measured.explain(p));
  });
}

void load_table(String path) {
  guarded([&] { fp8route::load_default_table(std::string(path)); });
}

// A timing record's field: the value, converted to T, or a ValueError naming the record.
template <class T>
T field(const Dict& t, const char* key, size_t i) {
  const std::optional<Any> v = t.Get(key);
  std::optional<T> x;
  if (v) x = v->try_cast<T>();
  FP8ROUTE_CHECK(x.has_value(), "timings[" << i << "]: expected m, n, k, scale, backend, config, us (and out): '"
                                           << key << "' is " << (v ? "of another type" : "missing"));
  return *x;
}

// The table in use with `timings` (Fp8Linear.probe's dicts) merged (Router::with_measurements),
// written to `path`.
void save_table(String path, Array<Any> timings) {
  guarded([&] {
    std::vector<fp8route::MeasurementRecord> records;
    for (size_t i = 0; i < timings.size(); ++i) {
      const std::optional<Dict> t = timings[i].try_cast<Dict>();
      FP8ROUTE_CHECK(t.has_value(), "timings[" << i << "]: a dict expected");
      const std::string scale(field<String>(*t, "scale", i));
      const std::string out = t->count("out") ? std::string(field<String>(*t, "out", i)) : "bf16";
      const int64_t n = field<int64_t>(*t, "n", i), k = field<int64_t>(*t, "k", i), m = field<int64_t>(*t, "m", i);
      std::string backend(field<String>(*t, "backend", i));
      std::string config(field<String>(*t, "config", i));
      const double us = field<double>(*t, "us", i);
      records.push_back(fp8route::checked_measurement_record("timings[" + std::to_string(i) + "]", m, n, k, scale, out,
                                                             std::move(backend), std::move(config), us));
    }
    fp8route::save_routing_table(fp8route::default_router()->with_measurements(records).table(), std::string(path));
  });
}

Dict stamp_dict(const fp8route::TableStamp& st) {
  return Dict{{"gpu", utf8(st.gpu)},           {"sm_count", int64_t(st.sm_count)},
              {"cuda", utf8(st.cuda)},         {"cublaslt", utf8(st.cublaslt)},
              {"fp8route", utf8(st.fp8route)}, {"date", utf8(st.date)}};
}

// {"default_path", "entries", "stamp": {...}, "load_error"} of the table scaled_mm routes by.
Dict table_info() {
  return guarded([&] {
    const auto r = fp8route::default_router();
    return Dict{{"default_path", utf8(fp8route::default_table_path())},
                {"entries", int64_t(r->table().entries.size())},
                {"load_error", utf8(r->load_error())},
                {"stamp", stamp_dict(r->table().stamp)}};
  });
}

// The grouped routing table (docs/moe.md, Routing): {"path", "entries", "stamp", "load_error"}.
Dict grouped_table_info() {
  return guarded([&] {
    const fp8route::GroupedTableInfo i = fp8route::grouped_table_info();
    return Dict{{"path", utf8(i.path)},
                {"entries", int64_t(i.entries)},
                {"load_error", utf8(i.load_error)},
                {"stamp", stamp_dict(i.stamp)}};
  });
}

// This machine's stamp (device 0, today), for a table measured here.
Dict machine_stamp() {
  return guarded([&] { return stamp_dict(fp8route::stamp_this_machine()); });
}

Array<String> grouped_backends() {
  return guarded([&] {
    Array<String> out;
    for (const std::string& b : fp8route::grouped_backends()) out.push_back(String(b));
    return out;
  });
}

void load_grouped_table(String path) {
  guarded([&] { fp8route::load_default_grouped_table(std::string(path)); });
}

// A grouped problem as the host sees it (16-byte aligned operands, block scales in the default
// layout, f32), routed by the default: which backend and why.
String explain_grouped(String form, String scale, int64_t experts, int64_t rows, int64_t n, int64_t k, String out) {
  return guarded([&] {
    FP8ROUTE_CHECK(experts >= 1 && rows >= 1 && n >= 1 && k >= 1,
                   "experts, rows, n, k: must be >= 1, got " << experts << ", " << rows << ", " << n << ", " << k);
    fp8route::GroupedProblem p;
    p.form = fp8route::parse_grouped_form(std::string(form));
    p.scale = fp8route::parse_scale_kind(std::string(scale));
    p.out = fp8route::parse_dtype(std::string(out), "out_dtype");
    p.experts = experts, p.rows = rows, p.n = n, p.k = k;
    p.sa_per_expert = p.scale != fp8route::ScaleKind::tensor;
    return String(fp8route::explain_grouped(p));
  });
}

// A LinearPlan as a tvm-ffi object: reference counted, so it lives while anything holds it (the
// Python LinearPlan, an Fp8Linear) and the last release frees it on its GPU. It holds owning
// references to the weight, its scale and the bias, whose device memory the plan reads on every
// call: a plan that outlives its module still reads live memory.
class LinearPlanObj : public tvm::ffi::Object {
 public:
  LinearPlanObj(tvm::ffi::Tensor w, tvm::ffi::Tensor w_scale, Optional<tvm::ffi::Tensor> b, String act_kind,
                String out)
      : weight(std::move(w)), weight_scale(std::move(w_scale)), bias(std::move(b)), act(std::move(act_kind)),
        out_dtype(std::move(out)) {}
  LinearPlanObj(const LinearPlanObj&) = delete;
  LinearPlanObj& operator=(const LinearPlanObj&) = delete;
  ~LinearPlanObj() {
    if (!plan) return;  // creation failed: nothing on a GPU
    try {
      const DeviceGuard guard(static_cast<int>(device));  // its buffers are freed on their GPU
      plan.reset();
    } catch (...) {  // a destructor cannot report; the GPU is gone or unusable
    }
  }

  tvm::ffi::Tensor weight, weight_scale;
  Optional<tvm::ffi::Tensor> bias;
  String act, out_dtype;
  String accum = String("fast");  // the accumulation class its calls ask for
  int64_t n = 0, k = 0, device = 0;  // the weight's [N, K] and GPU
  std::unique_ptr<fp8route::LinearPlan> plan;

  TVM_FFI_DECLARE_OBJECT_INFO_FINAL("fp8route.LinearPlan", LinearPlanObj, tvm::ffi::Object);
};

class LinearPlanRef : public tvm::ffi::ObjectRef {
 public:
  explicit LinearPlanRef(tvm::ffi::ObjectPtr<LinearPlanObj> p) : tvm::ffi::ObjectRef(std::move(p)) {}
  TVM_FFI_DEFINE_OBJECT_REF_METHODS_NOTNULLABLE(LinearPlanRef, tvm::ffi::ObjectRef, LinearPlanObj);
};

LinearPlanRef linear_plan_create(tvm::ffi::Tensor weight, tvm::ffi::Tensor weight_scale, String act, String out,
                                 Optional<tvm::ffi::Tensor> bias, String accum) {
  return guarded([&] {
    const DeviceGuard device(weight);  // the plan's copies of scales live on the weight's GPU
    const fp8route::TensorView w = view(weight, "weight");
    const fp8route::ScaleKind kind = fp8route::parse_scale_kind(std::string(act));
    const fp8route::DType out_dtype = fp8route::parse_dtype(std::string(out), "out_dtype");
    const fp8route::Accum acc = fp8route::parse_accum(std::string(accum));
    fp8route::TensorView b;
    if (bias) {
      const tvm::ffi::Tensor t = *bias;
      b = view(t, "bias");
    }
    auto obj = tvm::ffi::make_object<LinearPlanObj>(weight, weight_scale, bias, act, out);
    obj->plan = std::make_unique<fp8route::LinearPlan>(w, view(weight_scale, "weight_scale"), kind, out_dtype, b,
                                                       nullptr, stream_of(weight), acc);
    obj->n = obj->plan->layout().n, obj->k = obj->plan->layout().k, obj->device = w.device.index;
    obj->accum = String(std::string(fp8route::name(acc)));
    return LinearPlanRef(std::move(obj));
  });
}

void linear_plan_run(const LinearPlanRef& p, FfiTensor a, FfiTensor a_scale, FfiTensor out) {
  guarded([&] {
    const DeviceGuard device(a);
    p->plan->run(view(a, "a"), view(a_scale, "a_scale"), view(out, "out"), stream_of(a));
  });
}

String linear_plan_route(const LinearPlanRef& p, int64_t m) {
  return guarded([&] {
    FP8ROUTE_CHECK(m >= 1, "m: must be >= 1, got " << m);
    const DeviceGuard device(static_cast<int>(p->device));  // backends answer for the plan's GPU
    const fp8route::Route r = p->plan->route(m);
    return String(r.backend + "/" + r.config);
  });
}

String linear_plan_explain(const LinearPlanRef& p, int64_t m) {
  return guarded([&] {
    FP8ROUTE_CHECK(m >= 1, "m: must be >= 1, got " << m);
    const DeviceGuard device(static_cast<int>(p->device));
    return String(p->plan->explain(m));
  });
}

// ProbeOptions from the Python arguments (m_grid None: ProbeOptions' default grid).
fp8route::ProbeOptions probe_options(const Optional<Array<int64_t>>& m_grid, int64_t top, bool always) {
  fp8route::ProbeOptions opt;
  if (m_grid) {
    opt.m_grid.clear();
    for (size_t i = 0; i < m_grid->size(); ++i) opt.m_grid.push_back((*m_grid)[i]);
  }
  FP8ROUTE_CHECK(top >= 1, "top: at least 1, got " << top);
  opt.top = static_cast<size_t>(top), opt.always = always;
  return opt;
}

// Probe records as dicts (what save_table() reads back).
Array<Dict> records_of(const std::vector<fp8route::MeasurementRecord>& records) {
  Array<Dict> out;
  for (const fp8route::MeasurementRecord& r : records)
    out.push_back(Dict{{"m", r.m}, {"n", r.n}, {"k", r.k}, {"scale", str(fp8route::name(r.scale))},
                       {"out", str(fp8route::dtype_name(r.out))}, {"backend", String(r.backend)},
                       {"config", String(r.config)}, {"us", r.us}});
  return out;
}

// LinearPlan::probe: the records.
Array<Dict> linear_plan_probe(const LinearPlanRef& p, Optional<Array<int64_t>> m_grid, int64_t top, bool always) {
  return guarded([&] {
    const fp8route::ProbeOptions opt = probe_options(m_grid, top, always);
    const DeviceGuard device(static_cast<int>(p->device));
    return records_of(p->plan->probe(opt));
  });
}

// probe_shapes' and warmup's arguments: the scale kinds named (at least one), and (N, K) pairs of
// integers >= 1; Error(invalid_argument) naming the bad one.
std::vector<fp8route::ScaleKind> scale_kinds_of(const Array<String>& scales) {
  std::vector<fp8route::ScaleKind> kinds;
  for (const String& s : scales) kinds.push_back(fp8route::parse_scale_kind(std::string(s)));
  FP8ROUTE_CHECK(!kinds.empty(), "scales: at least one of tensor, row, block");
  return kinds;
}

std::vector<std::pair<int64_t, int64_t>> nk_pairs_of(const Array<Array<int64_t>>& shapes) {
  std::vector<std::pair<int64_t, int64_t>> nk;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Array<int64_t> shape = shapes[i];
    FP8ROUTE_CHECK(shape.size() == 2 && shape[0] >= 1 && shape[1] >= 1,
                   "shapes[" << i << "]: an (N, K) pair of integers >= 1 expected");
    nk.emplace_back(shape[0], shape[1]);
  }
  return nk;
}

// fp8route.probe(): probe_shape of every (N, K) of `shapes` at every scale kind of `scales` with the
// process-wide router, which then routes by the timings (set_default_router: scaled_mm's cached
// routes are dropped). The records.
Array<Dict> probe_shapes(Array<Array<int64_t>> shapes, Array<String> scales, String out,
                         Optional<Array<int64_t>> m_grid, int64_t top, bool always) {
  return guarded([&] {
    const fp8route::ProbeOptions opt = probe_options(m_grid, top, always);
    const fp8route::DType out_dtype = fp8route::parse_dtype(std::string(out), "out_dtype");
    const std::vector<fp8route::ScaleKind> kinds = scale_kinds_of(scales);
    const std::vector<std::pair<int64_t, int64_t>> nk = nk_pairs_of(shapes);
    FP8ROUTE_CHECK(!nk.empty(), "shapes: at least one (N, K)");
    const auto router = fp8route::default_router();
    const std::vector<fp8route::MeasurementRecord> all = fp8route::probe_shapes(*router, nk, kinds, out_dtype, opt);
    if (!all.empty())
      fp8route::set_default_router(std::make_shared<const fp8route::Router>(router->with_measurements(all)));
    return records_of(all);
  });
}

// Automatic probing (route.h): set_autoprobe_config with `enabled`, and the cache folder and budgets
// when given (cache_dir not None; budget_s, call_budget_s >= 0).
void set_autoprobe(bool enabled, Optional<String> cache_dir, double budget_s, double call_budget_s) {
  guarded([&] {
    fp8route::AutoProbeConfig c = fp8route::autoprobe_config();
    c.enabled = enabled;
    if (cache_dir) c.cache_dir = std::string(*cache_dir);
    if (budget_s >= 0) c.budget_s = budget_s;
    if (call_budget_s >= 0) c.call_budget_s = call_budget_s;
    fp8route::set_autoprobe_config(c);
  });
}

Array<Dict> autoprobe_records_of(const std::vector<fp8route::AutoProbeRecord>& recs) {
  Array<Dict> records;
  for (const fp8route::AutoProbeRecord& r : recs)
    records.push_back(Dict{{"scale", str(fp8route::name(r.scale))}, {"out", str(fp8route::dtype_name(r.out))},
                           {"n", r.n}, {"k", r.k}, {"caller", utf8(r.caller)},
                           {"outcome", str(fp8route::name(r.outcome))}, {"seconds", r.seconds},
                           {"m", ints(r.m)}, {"timings", int64_t(r.timings)}, {"file", utf8(r.file)},
                           {"note", utf8(r.note)}});
  return records;
}

// {"enabled", "cache_dir", "budget_s", "call_budget_s", "m_grid", "records": [...]} (autoprobe_config,
// autoprobe_records).
Dict autoprobe_info() {
  return guarded([&] {
    const fp8route::AutoProbeConfig c = fp8route::autoprobe_config();
    return Dict{{"enabled", c.enabled},           {"cache_dir", utf8(c.cache_dir)},
                {"budget_s", c.budget_s},         {"call_budget_s", c.call_budget_s},
                {"m_grid", ints(c.probe.m_grid)}, {"records", autoprobe_records_of(fp8route::autoprobe_records())}};
  });
}

// fp8route::warmup for every (N, K) of `shapes` at every scale kind of `scales`: the records of what
// it did.
Array<Dict> warmup(Array<Array<int64_t>> shapes, Array<String> scales, String out, bool bias) {
  return guarded([&] {
    const fp8route::DType out_dtype = fp8route::parse_dtype(std::string(out), "out_dtype");
    const std::vector<fp8route::ScaleKind> kinds = scale_kinds_of(scales);
    std::vector<fp8route::AutoProbeRecord> all;
    for (const auto& [n, k] : nk_pairs_of(shapes))
      for (fp8route::ScaleKind sk : kinds) {
        const auto recs = fp8route::warmup(sk, out_dtype, n, k, bias);
        all.insert(all.end(), recs.begin(), recs.end());
      }
    return autoprobe_records_of(all);
  });
}

}  // namespace

// The plan's type, its read-only description and its methods (Python: fp8route.LinearPlan).
TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  refl::ObjectDef<LinearPlanObj>(refl::init(false))
      .def_ro("n", &LinearPlanObj::n)
      .def_ro("k", &LinearPlanObj::k)
      .def_ro("device", &LinearPlanObj::device)
      .def_ro("act", &LinearPlanObj::act)
      .def_ro("out_dtype", &LinearPlanObj::out_dtype)
      .def_ro("accum", &LinearPlanObj::accum)
      .def("run", linear_plan_run)
      .def("route", linear_plan_route)
      .def("explain", linear_plan_explain)
      .def("probe", linear_plan_probe);
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(version, version);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(quant_layout, quant_layout);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(per_token_group_quant, per_token_group_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(masked_per_token_group_quant, masked_per_token_group_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scatter_per_token_group_quant, scatter_per_token_group_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scatter_per_token_quant, scatter_per_token_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(per_token_quant, per_token_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(masked_silu_and_mul_per_token_quant, masked_silu_and_mul_per_token_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(per_tensor_quant, per_tensor_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rms_norm, rms_norm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(decode_attention, decode_attention);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scaled_mm, scaled_mm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scaled_mm_bias, scaled_mm_bias);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_scaled_mm, grouped_scaled_mm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_softmax_topk, moe_softmax_topk);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_grouped_topk, moe_grouped_topk);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_masked_dispatch, moe_masked_dispatch);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_route_masked_dispatch, moe_route_masked_dispatch);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_contiguous_dispatch, moe_contiguous_dispatch);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_contiguous_dispatch_workspace, moe_contiguous_dispatch_workspace);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(moe_combine, moe_combine);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(explain, explain);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(load_table, load_table);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(table_info, table_info);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_table_info, grouped_table_info);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(load_grouped_table, load_grouped_table);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(machine_stamp, machine_stamp);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_backends, grouped_backends);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(explain_grouped, explain_grouped);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(save_table, save_table);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(linear_plan_create, linear_plan_create);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(probe_shapes, probe_shapes);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(set_autoprobe, set_autoprobe);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(autoprobe_info, autoprobe_info);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(warmup, warmup);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(call_stream, call_stream);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chain_trace_info, chain_trace_info);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chain_trace_arm, chain_trace_arm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chain_trace_disarm, chain_trace_disarm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chain_trace_reset, chain_trace_reset);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chain_trace_read, chain_trace_read);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chain_trace_tick_ns, chain_trace_tick_ns);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(chain_trace_empty_chain, chain_trace_empty_chain);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(decode_deep_ring_set, decode_deep_ring_set);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(decode_deep_ring_get, decode_deep_ring_get);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_decode_splits_set, grouped_decode_splits_set);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(grouped_decode_splits_get, grouped_decode_splits_get);
