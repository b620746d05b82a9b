// The Python package's native module: the public C++ API (include/fp8route) exported through
// apache-tvm-ffi. Tensors arrive as DLPack views from any framework; work goes on the caller's
// current CUDA stream (TVMFFIEnvGetStream, which tvm-ffi sets from torch's current stream).
// Bindings only convert arguments and call the public API. Errors: fp8route's invalid_argument and
// io_error become ValueError, everything else RuntimeError, with the C++ message.

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "fp8route/attention.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/linear.h"
#include "fp8route/norm.h"
#include "fp8route/quant.h"
#include "fp8route/quant_layout.h"
#include "fp8route/route.h"
#include "fp8route/version.h"
#include "route/stamp_json.h"

namespace {

using FfiTensor = tvm::ffi::TensorView;
using tvm::ffi::String;

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

// The shapes of quantized codes and scales as JSON: {"q": [...], "s": [...], "s_dtype": "f32"|"i32"}.
String quant_layout(int64_t group_size, String code, String rounding, String storage, String layout, int64_t tokens,
                    int64_t hidden, int64_t experts) {
  return guarded([&] {
    const fp8route::QuantLayout l =
        fp8route::quant_layout(spec_of(group_size, code, rounding, storage, layout), tokens, hidden, experts);
    nlohmann::json j;
    j["q"] = std::vector<int64_t>(l.code_shape, l.code_shape + l.code_ndim);
    j["s"] = std::vector<int64_t>(l.scale_shape, l.scale_shape + l.scale_ndim);
    j["s_dtype"] = std::string(fp8route::dtype_name(l.scale_dtype));
    return String(j.dump());
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
                                   String code, String rounding, String storage, String layout) {
  guarded([&] {
    const auto spec = spec_of(group_size, code, rounding, storage, layout);
    const DeviceGuard device(x);
    fp8route::scatter_per_token_group_quant(view(x, "x"), view(src2dst, "src2dst"), spec, view(q, "q"), view(s, "s"),
                                            stream_of(x));
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
                                  const FfiTensor& residual, const FfiTensor& residual_out) {
  FP8ROUTE_CHECK(std::isfinite(eps) && eps >= 0 && eps <= 3.4e38, "eps: must be finite, >= 0 and fit a float, got " << eps);
  fp8route::RmsNormInput in{view(x, "x"), view(weight, "weight"), static_cast<float>(eps), {}, {}};
  if (has_residual) {
    in.residual = view(residual, "residual");
    in.residual_out = view(residual_out, "residual_out");
  }
  return in;
}

// RMSNorm (quant = "none": out = the normalized values) or RMSNorm fused with a quantization:
// "group" (q, s of the spec), "token" (q, s f32 [T]), "tensor_static" (s is the static scale).
void rms_norm(FfiTensor x, FfiTensor weight, double eps, bool has_residual, FfiTensor residual,
              FfiTensor residual_out, FfiTensor q, FfiTensor s, String quant, int64_t group_size, String code,
              String rounding, String storage, String layout) {
  guarded([&] {
    const DeviceGuard device(x);
    const auto in = norm_input(x, weight, eps, has_residual, residual, residual_out);
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
                      int64_t num_q_heads, int64_t num_kv_heads, double scale, int64_t window, FfiTensor out) {
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
    fp8route::decode_attention(a, view(out, "out"), stream_of(qkv));
  });
}

fp8route::ScaledMmArgs mm_args(const FfiTensor& a, const FfiTensor& b, const FfiTensor& sa, const FfiTensor& sb,
                               const FfiTensor& out, const String& scale) {
  fp8route::ScaledMmArgs args;
  args.a = view(a, "a");
  args.b = view(b, "b");
  args.scale_a = view(sa, "scale_a");
  args.scale_b = view(sb, "scale_b");
  args.out = view(out, "out");
  // "auto": the kind the scale shapes imply (the package's scale=None).
  const std::string kind(scale);
  args.scale = kind == "auto" ? fp8route::infer_scale_kind(args) : fp8route::parse_scale_kind(kind);
  return args;
}

void scaled_mm(FfiTensor a, FfiTensor b, FfiTensor scale_a, FfiTensor scale_b, FfiTensor out, String scale) {
  guarded([&] {
    const DeviceGuard device(a);
    fp8route::scaled_mm(mm_args(a, b, scale_a, scale_b, out, scale), stream_of(a));
  });
}

void scaled_mm_bias(FfiTensor a, FfiTensor b, FfiTensor scale_a, FfiTensor scale_b, FfiTensor bias, FfiTensor out,
                    String scale) {
  guarded([&] {
    const DeviceGuard device(a);
    fp8route::ScaledMmArgs args = mm_args(a, b, scale_a, scale_b, out, scale);
    args.bias = view(bias, "bias");
    fp8route::scaled_mm(args, stream_of(a));
  });
}

String explain(int64_t m, int64_t n, int64_t k, String scale, String out) {
  return guarded([&] {
    FP8ROUTE_CHECK(m >= 1 && n >= 1 && k >= 1, "m, n, k: must be >= 1, got " << m << ", " << n << ", " << k);
    const fp8route::GemmProblem p = fp8route::make_problem(m, n, k, fp8route::parse_scale_kind(std::string(scale)),
                                                           fp8route::parse_dtype(std::string(out), "out_dtype"));
    const auto router = fp8route::default_router();
    if (fp8route::cuda_device_count() > 0) return String(router->explain(p));
    // No GPU: the backends cannot answer for this machine; show the table's choice as measured.
    const fp8route::Router as_measured(router->table(), [](std::string_view, std::string_view,
                                                           const fp8route::GemmProblem&) { return std::string(); });
    return String("no GPU here (" + fp8route::cuda_unavailable_reason() +
                  "): the table's choice as measured, without checking this machine's backends\n" +
                  as_measured.explain(p));
  });
}

void load_table(String path) {
  guarded([&] { fp8route::load_default_table(std::string(path)); });
}

// The table in use with `timings` (a JSON list of Fp8Linear.probe's dicts) merged
// (Router::with_measurements), written to `path`.
void save_table(String path, String timings) {
  guarded([&] {
    nlohmann::json list;
    try {
      list = nlohmann::json::parse(std::string(timings));
    } catch (const nlohmann::json::exception& e) {
      FP8ROUTE_FAIL(fp8route::ErrorCategory::invalid_argument, "timings: not JSON: " << e.what());
    }
    FP8ROUTE_CHECK(list.is_array(), "timings: a list of dicts expected");
    std::vector<fp8route::MeasurementRecord> records;
    for (size_t i = 0; i < list.size(); ++i) {
      const nlohmann::json& t = list[i];
      fp8route::MeasurementRecord r;
      try {
        r = {fp8route::parse_scale_kind(t.at("scale").get<std::string>()),
             fp8route::parse_dtype(t.value("out", std::string("bf16")), "out"),
             t.at("n").get<int64_t>(), t.at("k").get<int64_t>(), t.at("m").get<int64_t>(),
             t.at("backend").get<std::string>(), t.at("config").get<std::string>(), t.at("us").get<double>()};
      } catch (const nlohmann::json::exception& e) {
        FP8ROUTE_FAIL(fp8route::ErrorCategory::invalid_argument,
                      "timings[" << i << "]: expected m, n, k, scale, backend, config, us (and out): " << e.what());
      } catch (const fp8route::Error& e) {
        FP8ROUTE_FAIL(fp8route::ErrorCategory::invalid_argument, "timings[" << i << "]: " << e.what());
      }
      FP8ROUTE_CHECK(r.m >= 1 && r.n >= 1 && r.k >= 1 && r.us > 0,
                     "timings[" << i << "]: m, n, k >= 1 and us > 0, got m=" << r.m << " n=" << r.n << " k=" << r.k
                                << " us=" << r.us);
      const std::vector<std::string> configs = fp8route::gemm_configs(r.backend);
      FP8ROUTE_CHECK(std::find(configs.begin(), configs.end(), r.config) != configs.end(),
                     "timings[" << i << "]: backend " << r.backend << " has no config '" << r.config << "'");
      records.push_back(std::move(r));
    }
    fp8route::save_routing_table(fp8route::default_router()->with_measurements(records).table(), std::string(path));
  });
}

// {"path", "entries", "stamp": {...}, "load_error"} of the table scaled_mm routes by.
String table_info() {
  return guarded([&] {
    const auto r = fp8route::default_router();
    nlohmann::json j = {{"default_path", fp8route::default_table_path()},
                        {"entries", r->table().entries.size()},
                        {"load_error", r->load_error()},
                        {"stamp", r->table().stamp}};
    // A path or message that is not UTF-8 is shown with replacement characters, never an error.
    return String(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  });
}

// LinearPlans live here, by handle; Python's Fp8Linear holds the handle and the tensors the plan
// reads (weight, scales, bias), and frees the plan when it goes away.
struct PlanEntry {
  std::unique_ptr<fp8route::LinearPlan> plan;
  int device;  // the GPU of the plan's weight
};
struct Plans {
  std::mutex mu;
  std::unordered_map<int64_t, PlanEntry> by_handle;
  int64_t next = 1;
};
Plans& plans() {
  static Plans p;
  return p;
}
PlanEntry& entry(int64_t h) {
  Plans& p = plans();
  std::lock_guard<std::mutex> lock(p.mu);
  const auto it = p.by_handle.find(h);
  FP8ROUTE_CHECK(it != p.by_handle.end(), "plan: no LinearPlan with handle " << h << " (freed?)");
  return it->second;
}
fp8route::LinearPlan& plan(int64_t h) { return *entry(h).plan; }
int plan_device(int64_t h) { return entry(h).device; }

int64_t linear_plan_create(FfiTensor weight, FfiTensor weight_scale, String act, String out, bool has_bias,
                           FfiTensor bias) {
  return guarded([&] {
    const DeviceGuard device(weight);  // the plan's copies of scales live on the weight's GPU
    const fp8route::TensorView w = view(weight, "weight");
    auto p = std::make_unique<fp8route::LinearPlan>(
        w, view(weight_scale, "weight_scale"), fp8route::parse_scale_kind(std::string(act)),
        fp8route::parse_dtype(std::string(out), "out_dtype"), has_bias ? view(bias, "bias") : fp8route::TensorView{},
        nullptr, stream_of(weight));
    Plans& ps = plans();
    std::lock_guard<std::mutex> lock(ps.mu);
    const int64_t h = ps.next++;
    ps.by_handle.emplace(h, PlanEntry{std::move(p), w.device.index});
    return h;
  });
}

void linear_plan_run(int64_t h, FfiTensor a, FfiTensor a_scale, FfiTensor out) {
  guarded([&] {
    const DeviceGuard device(a);
    plan(h).run(view(a, "a"), view(a_scale, "a_scale"), view(out, "out"), stream_of(a));
  });
}

String linear_plan_route(int64_t h, int64_t m) {
  return guarded([&] {
    FP8ROUTE_CHECK(m >= 1, "m: must be >= 1, got " << m);
    const DeviceGuard device(plan_device(h));  // backends answer for the plan's GPU
    const fp8route::Route r = plan(h).route(m);
    return String(r.backend + "/" + r.config);
  });
}

String linear_plan_explain(int64_t h, int64_t m) {
  return guarded([&] {
    FP8ROUTE_CHECK(m >= 1, "m: must be >= 1, got " << m);
    const DeviceGuard device(plan_device(h));
    return String(plan(h).explain(m));
  });
}

// ProbeOptions from the Python arguments; m_grid "1,16,96" ("" = ProbeOptions' default).
fp8route::ProbeOptions probe_options(const std::string& m_grid, int64_t top, bool always) {
  fp8route::ProbeOptions opt;
  if (!m_grid.empty()) {
    opt.m_grid.clear();
    std::stringstream ss{m_grid};
    for (std::string item; std::getline(ss, item, ',');) {
      try {
        size_t used = 0;
        opt.m_grid.push_back(std::stoll(item, &used));
        FP8ROUTE_CHECK(used == item.size(), "m_grid: integers expected, got '" << item << "'");
      } catch (const std::logic_error&) {
        FP8ROUTE_FAIL(fp8route::ErrorCategory::invalid_argument, "m_grid: integers expected, got '" << item << "'");
      }
    }
  }
  FP8ROUTE_CHECK(top >= 1, "top: at least 1, got " << top);
  opt.top = static_cast<size_t>(top), opt.always = always;
  return opt;
}

// Probe records as a JSON list of dicts (what save_table() reads back).
String records_json(const std::vector<fp8route::MeasurementRecord>& records) {
  nlohmann::json out = nlohmann::json::array();
  for (const fp8route::MeasurementRecord& r : records)
    out.push_back({{"m", r.m}, {"n", r.n}, {"k", r.k}, {"scale", std::string(fp8route::name(r.scale))},
                   {"out", std::string(fp8route::dtype_name(r.out))},
                   {"backend", r.backend}, {"config", r.config}, {"us", r.us}});
  return String(out.dump());
}

// LinearPlan::probe. The records as a JSON list.
String linear_plan_probe(int64_t h, String m_grid, int64_t top, bool always) {
  return guarded([&] {
    const fp8route::ProbeOptions opt = probe_options(std::string(m_grid), top, always);
    const DeviceGuard device(plan_device(h));
    return records_json(plan(h).probe(opt));
  });
}

// fp8route.probe(): probe_shape of every (N, K) of `shapes` ("N,K;N,K") at every scale kind of
// `scales` ("tensor,row") with the process-wide router, which then routes by the timings
// (set_default_router: scaled_mm's cached routes are dropped). The records as a JSON list.
String probe_shapes(String shapes, String scales, String out, String m_grid, int64_t top, bool always) {
  return guarded([&] {
    const fp8route::ProbeOptions opt = probe_options(std::string(m_grid), top, always);
    const fp8route::DType out_dtype = fp8route::parse_dtype(std::string(out), "out_dtype");
    std::vector<fp8route::ScaleKind> kinds;
    std::stringstream ks{std::string(scales)};
    for (std::string item; std::getline(ks, item, ',');) kinds.push_back(fp8route::parse_scale_kind(item));
    FP8ROUTE_CHECK(!kinds.empty(), "scales: at least one of tensor, row, block");
    std::vector<std::pair<int64_t, int64_t>> nk;
    std::stringstream ss{std::string(shapes)};
    for (std::string item; std::getline(ss, item, ';');) {
      long long n = 0, k = 0;
      char extra = 0;
      FP8ROUTE_CHECK(std::sscanf(item.c_str(), "%lld,%lld%c", &n, &k, &extra) == 2 && n >= 1 && k >= 1,
                     "shapes: (N, K) pairs of integers >= 1 expected, got '" << item << "'");
      nk.emplace_back(n, k);
    }
    FP8ROUTE_CHECK(!nk.empty(), "shapes: at least one (N, K)");
    const auto router = fp8route::default_router();
    const std::vector<fp8route::MeasurementRecord> all = fp8route::probe_shapes(*router, nk, kinds, out_dtype, opt);
    if (!all.empty()) fp8route::set_default_router(std::make_shared<const fp8route::Router>(router->with_measurements(all)));
    return records_json(all);
  });
}

// Automatic probing (route.h): set_autoprobe_config with `enabled`, and the cache folder and budget
// when given (has_dir; budget_s >= 0).
void set_autoprobe(bool enabled, bool has_dir, String cache_dir, double budget_s) {
  guarded([&] {
    fp8route::AutoProbeConfig c = fp8route::autoprobe_config();
    c.enabled = enabled;
    if (has_dir) c.cache_dir = std::string(cache_dir);
    if (budget_s >= 0) c.budget_s = budget_s;
    fp8route::set_autoprobe_config(c);
  });
}

// {"enabled", "cache_dir", "budget_s", "m_grid", "records": [...]} (autoprobe_config, autoprobe_records).
String autoprobe_info() {
  return guarded([&] {
    const fp8route::AutoProbeConfig c = fp8route::autoprobe_config();
    nlohmann::json records = nlohmann::json::array();
    for (const fp8route::AutoProbeRecord& r : fp8route::autoprobe_records())
      records.push_back({{"scale", std::string(fp8route::name(r.scale))}, {"out", std::string(fp8route::dtype_name(r.out))},
                         {"n", r.n}, {"k", r.k}, {"caller", r.caller}, {"outcome", std::string(fp8route::name(r.outcome))},
                         {"seconds", r.seconds}, {"m", r.m}, {"timings", r.timings}, {"file", r.file}, {"note", r.note}});
    const nlohmann::json j = {{"enabled", c.enabled}, {"cache_dir", c.cache_dir}, {"budget_s", c.budget_s},
                              {"m_grid", c.probe.m_grid}, {"records", records}};
    return String(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  });
}

void linear_plan_free(int64_t h) {
  Plans& p = plans();
  std::unique_ptr<fp8route::LinearPlan> gone;
  int device = -1;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    const auto it = p.by_handle.find(h);
    if (it == p.by_handle.end()) return;
    gone = std::move(it->second.plan);
    device = it->second.device;
    p.by_handle.erase(it);
  }
  guarded([&] {
    const DeviceGuard guard(device);  // its buffers are freed on their GPU
    gone.reset();
  });
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(version, version);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(quant_layout, quant_layout);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(per_token_group_quant, per_token_group_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(masked_per_token_group_quant, masked_per_token_group_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scatter_per_token_group_quant, scatter_per_token_group_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(per_token_quant, per_token_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(per_tensor_quant, per_tensor_quant);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(rms_norm, rms_norm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(decode_attention, decode_attention);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scaled_mm, scaled_mm);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(scaled_mm_bias, scaled_mm_bias);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(explain, explain);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(load_table, load_table);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(table_info, table_info);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(save_table, save_table);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(linear_plan_create, linear_plan_create);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(linear_plan_run, linear_plan_run);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(linear_plan_route, linear_plan_route);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(linear_plan_explain, linear_plan_explain);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(linear_plan_probe, linear_plan_probe);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(linear_plan_free, linear_plan_free);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(probe_shapes, probe_shapes);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(set_autoprobe, set_autoprobe);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(autoprobe_info, autoprobe_info);
