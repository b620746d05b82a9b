// LinearPlan: the load-time decision for one FP8 linear layer (fp8route/linear.h).

#include "fp8route/linear.h"
#include "route/linear_layout.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "core/checks.h"
#include "fp8route/tuning/cuda_check.h"
#include "fp8route/error.h"
#include "gemm/backend.h"
#include "route/autoprobe.h"
#include "fp8route/tuning/route_log.h"

namespace fp8route {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// M values that probe every M-dependent rule of the backends (M % 4, swap-AB and skinny M limits).
constexpr int64_t kProbeM[] = {1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384};

// GemmBackend::wants_padded_block_scale_b by name; false for "" (the problem routing sees) and for
// a name this build lacks.
bool wants_padded(const std::string& backend) {
  for (const gemm::GemmBackend* b : gemm::all_backends())
    if (b->name() == backend) return b->wants_padded_block_scale_b();
  return false;
}

bool reads_padded(const LinearLayout& l, const std::string& backend) {
  return l.pad_weight_scale && wants_padded(backend);
}

}  // namespace

GemmProblem LinearLayout::problem(int64_t m, int align, const std::string& backend) const {
  GemmProblem p = make_problem(m, n, k, gemm, out, bias);
  if (gemm == ScaleKind::row) p.sb_vector = weight_scale_vector || expand_weight_scale;
  if (gemm == ScaleKind::row) p.sa_vector = act == ScaleKind::row && m != 1;
  p.align = align;
  p.sb_padded = reads_padded(*this, backend);
  p.accum = accum;
  return p;
}

LinearLayout plan_linear_layout(int64_t n, int64_t k, ScaleKind act, int64_t weight_scale_numel,
                                DType out, bool bias, const SupportsFn& supports) {
  FP8ROUTE_CHECK(n >= 1 && k >= 1, "weight: expected [N, K] with N, K >= 1, got n=" << n << " k=" << k);
  // What check_scaled_mm accepts of every call: said at load, not at the layer's first call.
  FP8ROUTE_CHECK(n < (int64_t{1} << 31) && k < (int64_t{1} << 31),
                 "weight: N and K must each be < 2^31 (the kernels index rows and columns in int32), got n="
                     << n << " k=" << k);
  FP8ROUTE_CHECK(out == DType::bf16 || out == DType::f16, "out: bf16 or f16, got " << dtype_name(out));
  LinearLayout l;
  l.n = n, l.k = k, l.act = act, l.out = out, l.bias = bias;
  const int64_t kb = ceil_div(k, kScaleBlock);
  switch (act) {
    case ScaleKind::tensor:
      FP8ROUTE_CHECK(weight_scale_numel == 1 || weight_scale_numel == n,
                     "weight_scale: with per-tensor activation scales expected one element or [N] = ["
                         << n << "], got " << weight_scale_numel << " elements");
      l.weight_scale_vector = weight_scale_numel != 1 || n == 1;
      l.gemm = weight_scale_numel == 1 ? ScaleKind::tensor : ScaleKind::row;
      break;
    case ScaleKind::row:
      FP8ROUTE_CHECK(weight_scale_numel == 1 || weight_scale_numel == n,
                     "weight_scale: with per-token activation scales expected one element or [N] = ["
                         << n << "], got " << weight_scale_numel << " elements");
      l.gemm = ScaleKind::row;
      l.weight_scale_vector = weight_scale_numel == n && n != 1;
      // A per-tensor checkpoint under per-token activations: one [N] copy at load lets every
      // backend (cuBLASLt's OUTER_VEC needs both sides vectors) run the layer.
      l.expand_weight_scale = !l.weight_scale_vector && n != 1;
      break;
    case ScaleKind::block:
      FP8ROUTE_CHECK(weight_scale_numel == ceil_div(n, kScaleBlock) * kb,
                     "weight_scale: with block (1x128) activation scales expected [ceil(N/128), ceil(K/128)] = ["
                         << ceil_div(n, kScaleBlock) << "," << kb << "], got " << weight_scale_numel
                         << " elements");
      l.gemm = ScaleKind::block;
      break;
  }
  // Which backends can run the layer for some M, with the scale forms prepared for them.
  for (const std::string& b : gemm_backends()) {
    // One row of blocks (N <= 128) reads no row stride: the unpadded form serves every backend then.
    const bool pads = wants_padded(b) && l.gemm == ScaleKind::block && kb % 4 != 0 && n > kScaleBlock;
    const bool padded_before = l.pad_weight_scale;
    if (pads) l.pad_weight_scale = true;  // b is asked about the form it would be given
    std::string first_reason;
    bool any = false;
    for (int64_t m : kProbeM) {
      for (const std::string& c : gemm_configs(b)) {
        const std::string why = supports(b, c, l.problem(m, 16, b));
        if (why.empty()) any = true;
        else if (first_reason.empty()) first_reason = why;
        if (any) break;
      }
      if (any) break;
    }
    if (any) l.backends.push_back(b);
    else l.excluded += (l.excluded.empty() ? "" : "; ") + b + ": " + first_reason;
    if (pads && !any) l.pad_weight_scale = padded_before;  // no copy for a backend that never runs
  }
  return l;
}

Router plan_router(const Router& full, const LinearLayout& layout, SupportsFn supports) {
  const SupportsFn restricted = [layout, supports](std::string_view backend, std::string_view config,
                                                   const GemmProblem& p) -> std::string {
    const std::string b(backend);
    if (std::find(layout.backends.begin(), layout.backends.end(), b) == layout.backends.end())
      return "cannot run this layer (decided at load: " + layout.excluded + ")";
    GemmProblem q = p;
    q.sb_padded = reads_padded(layout, b);  // the form this backend will be given
    return supports(backend, config, q);
  };
  if (!full.load_error().empty()) return Router(RoutingTable{}, restricted);  // heuristic only
  return Router(full.slice(layout.gemm, layout.out, layout.n, layout.k), restricted);
}

struct LinearPlan::Decided {
  const gemm::GemmBackend* backend = nullptr;
  int config = 0;
  GemmProblem problem;  // what run() must see
  Route route;
};

struct LinearPlan::Cache {
  std::mutex mu;
  std::map<std::pair<int64_t, int>, Decided> by_m;  // (m, align)
};

LinearPlan::LinearPlan(TensorView weight, TensorView weight_scale, ScaleKind act, DType out, TensorView bias,
                       std::shared_ptr<const Router> router, cudaStream_t stream, Accum accum)
    : weight_(weight), weight_scale_(weight_scale), bias_(bias), cache_(std::make_shared<Cache>()) {
  detail::check_device_tensor(weight, "weight");
  detail::check_dtype(weight, "weight", {DType::e4m3});
  detail::check_ndim(weight, "weight", 2, "[N, K]");
  detail::check_device_tensor(weight_scale, "weight_scale");
  detail::check_dtype(weight_scale, "weight_scale", {DType::f32});
  FP8ROUTE_CHECK(weight_scale.is_contiguous(), "weight_scale: must be contiguous, got " << to_string(weight_scale));
  detail::check_same_device(weight_scale, "weight_scale", weight, "weight");
  if (bias.data) {
    detail::check_device_tensor(bias, "bias");
    detail::check_dtype(bias, "bias", {out});
    detail::check_same_device(bias, "bias", weight, "weight");
  }
  const int64_t n = weight.shape[0], k = weight.shape[1];
  gemm::check_accum(accum);
  layout_ = plan_linear_layout(n, k, act, weight_scale.numel(), out, bias.data != nullptr);
  layout_.accum = accum;
  router_ = std::make_shared<const Router>(plan_router(router ? *router : *default_router(), layout_));

  if (layout_.expand_weight_scale) {
    float s = 0;
    FP8ROUTE_CUDA_CHECK(cudaMemcpyAsync(&s, weight_scale.data, 4, cudaMemcpyDeviceToHost, stream));
    FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> v(static_cast<size_t>(n), s);
    prepared_scale_ = DeviceBuffer(v.size() * 4);
    FP8ROUTE_CUDA_CHECK(cudaMemcpyAsync(prepared_scale_.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream));
    prepared_scale_view_ = TensorView::contiguous(prepared_scale_.data(), DType::f32, {n}, weight.device);
  } else if (layout_.pad_weight_scale) {
    const int64_t nb = ceil_div(n, kScaleBlock), kb = ceil_div(k, kScaleBlock), ld = (kb + 3) / 4 * 4;
    prepared_scale_ = DeviceBuffer(nb * ld * 4);
    FP8ROUTE_CUDA_CHECK(cudaMemsetAsync(prepared_scale_.data(), 0, nb * ld * 4, stream));
    FP8ROUTE_CUDA_CHECK(cudaMemcpy2DAsync(prepared_scale_.data(), ld * 4, weight_scale.data, kb * 4, kb * 4, nb,
                                          cudaMemcpyDeviceToDevice, stream));
    prepared_scale_view_ = TensorView::strided(prepared_scale_.data(), DType::f32, {nb, kb}, {ld, 1}, weight.device);
  }
  // A layer that needs no prepared copy touches no device memory here.
  if (prepared_scale_view_.data) FP8ROUTE_CUDA_CHECK(cudaStreamSynchronize(stream));

  // A shape the process-wide table lacks: this GPU's timings (the probe cache's, or probed now in
  // the forms this layer's backends are given). A router the caller passes is used as given.
  const autoprobe::Key key{layout_.gemm, layout_.out, n, k};
  if (!router && autoprobe_config().enabled &&
      (!autoprobe::has_entry(router_->table(), key) || autoprobe::due_near(key, 0)))
    if (const std::optional<TableStamp> machine = autoprobe::machine_here()) {
      const autoprobe::Timings t = autoprobe::timings(
          key, "LinearPlan", *machine, *router_,
          [this](int64_t m, const std::string& backend) {
            // Every accumulation class: the timings are the shape's, cached for every later caller.
            GemmProblem p = layout_.problem(m, 16, backend);
            p.accum = Accum::fast;
            return p;
          },
          stream);
      if (!t.records.empty()) {
        router_ = std::make_shared<const Router>(router_->with_measurements(t.records));
        for (const MeasurementRecord& r : t.records) probed_m_.insert(r.m);
        autoprobed_ = t.how;
      }
    }
}

const LinearPlan::Decided& LinearPlan::decide(int64_t m, int align) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  auto it = cache_->by_m.find({m, align});
  if (it != cache_->by_m.end()) return it->second;
  Decided d;
  // The router sees the problem without a backend's form; its supports() (plan_router) applies
  // the form of each candidate's backend.
  d.route = router_->select(layout_.problem(m, align, ""));
  d.backend = &gemm::find_backend(d.route.backend);
  d.config = gemm::find_config(*d.backend, d.route.config);
  d.problem = layout_.problem(m, align, d.route.backend);
  route_log::decided("LinearPlan", *router_, d.problem, d.route);  // FP8ROUTE_LOG, and a table of another GPU
  return cache_->by_m.emplace(std::make_pair(m, align), std::move(d)).first->second;
}

Route LinearPlan::route(int64_t m, int align) const { return decide(m, align).route; }

std::vector<MeasurementRecord> LinearPlan::probe(const ProbeOptions& opt) {
  std::vector<MeasurementRecord> records = probe_shape(
      *router_, [this](int64_t m, const std::string& backend) { return layout_.problem(m, 16, backend); }, opt);
  if (records.empty()) return records;
  router_ = std::make_shared<const Router>(router_->with_measurements(records));
  for (const MeasurementRecord& r : records) probed_m_.insert(r.m);
  std::lock_guard<std::mutex> lock(cache_->mu);
  cache_->by_m.clear();
  return records;
}

void LinearPlan::run(TensorView a, TensorView a_scale, TensorView out, cudaStream_t stream) const {
  // The layer's tensors and the call's on one device (check_scaled_mm names the operand in the
  // GEMM's terms; this names it in the plan's), and an empty batch with null pointers is fine.
  for (const auto& [t, name] : {std::pair{&a, "a"}, std::pair{&a_scale, "a_scale"}, std::pair{&out, "out"}}) {
    detail::check_device_tensor(*t, name);
    detail::check_same_device(*t, name, weight_, "weight");
  }
  ScaledMmArgs args{a, weight_, a_scale, weight_scale_, bias_, out, layout_.gemm, layout_.accum};
  if (layout_.expand_weight_scale) args.scale_b = prepared_scale_view_;
  if (layout_.act == ScaleKind::tensor && layout_.gemm == ScaleKind::row)
    FP8ROUTE_CHECK(a_scale.numel() == 1, "a_scale: per-tensor activations take one element, got " << to_string(a_scale));
  if (layout_.act == ScaleKind::row)
    FP8ROUTE_CHECK(a.ndim == 2 && a_scale.numel() == a.shape[0],
                   "a_scale: per-token activations take [M] scales (M = rows of a), got " << to_string(a_scale)
                                                                                       << " for a " << to_string(a));
  GemmProblem p = check_scaled_mm(args);
  if (p.m == 0 || p.n == 0) return;
  const Decided& d = decide(p.m, p.align);
  if (d.problem.sb_padded) {
    args.scale_b = prepared_scale_view_;
    p = check_scaled_mm(args);
  }
  // The decision for M and the operands handed over are one: the problem must be the one routed.
  FP8ROUTE_CHECK_CAT(p == d.problem, ErrorCategory::unsupported,
                     "LinearPlan: internal error: routed " << to_string(d.problem) << " but would run "
                                                           << to_string(p));
  // A block a_scale view that is not the physical form's memory is gathered here, as scaled_mm()
  // does (stream or captured graph scratch). The layer's weight, scale and bias are written at load
  // time: a backend may prefetch them while the previous kernel in the stream (the gather
  // included) finishes; it reads a_scale after it.
  d.backend->run_with(p, gemm::staged_operands_of(args, p, stream, "LinearPlan"), d.config,
                      gemm::RunOptions{.static_weight = true}, stream);
}

std::string LinearPlan::explain(int64_t m) const {
  std::ostringstream os;
  const LinearLayout& l = layout_;
  os << "layer: n=" << l.n << " k=" << l.k << " act=" << name(l.act) << " gemm=" << name(l.gemm)
     << " out=" << dtype_name(l.out) << (l.bias ? " bias" : "") << " accum=" << name(l.accum) << "\n";
  os << "prepared at load: "
     << (l.expand_weight_scale ? "weight scale broadcast to [N]"
         : l.pad_weight_scale  ? "weight scale with rows padded to 4 (cuBLASLt)"
                               : "nothing")
     << "\nbackends: ";
  for (size_t i = 0; i < l.backends.size(); ++i) os << (i ? ", " : "") << l.backends[i];
  if (!l.excluded.empty()) os << "\nexcluded at load: " << l.excluded;
  os << "\ntable slice: " << router_->table().entries.size() << " entries\n";
  if (!probed_m_.empty()) {
    os << "probed on this GPU (its times replace the table's for this shape) at m=";
    for (int64_t m : probed_m_) os << (m == *probed_m_.begin() ? "" : ",") << m;
    os << "\n";
  }
  if (!autoprobed_.empty()) os << "automatic probe: " << autoprobed_ << "\n";
  os << router_->explain(l.problem(m, 16, route(m).backend));
  return os.str();
}

}  // namespace fp8route
