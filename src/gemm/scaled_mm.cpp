// The GEMM entry points: argument checks (once per call), the backend registry, dispatch.

#include <algorithm>
#include <atomic>
#include <bit>
#include <map>
#include <tuple>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "core/checks.h"
#include "fp8route/tuning/cuda_check.h"
#include "core/workspace.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "gemm/backend.h"
#include "gemm/call.h"
#include "gemm/stage_scales.h"

namespace fp8route {

namespace {

constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;  // the kernels index rows and columns in int32

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Largest power of two <= 16 dividing v (v = 0 counts as aligned).
int pow2_align(uint64_t v) {
  if (v == 0) return 16;
  return static_cast<int>(std::min<uint64_t>(16, uint64_t{1} << std::countr_zero(v)));
}

// A row-major matrix with unit last stride and a row stride >= its width; returns the row stride.
int64_t check_matrix(const TensorView& t, const char* name, DType dtype, int64_t rows, int64_t cols,
                     const char* shape_rule) {
  detail::check_device_tensor(t, name);
  detail::check_dtype(t, name, {dtype});
  detail::check_ndim(t, name, 2, shape_rule);
  FP8ROUTE_CHECK(t.shape[0] == rows && t.shape[1] == cols,
                 name << ": expected shape [" << rows << "," << cols << "] (" << shape_rule
                      << "), got " << to_string(t));
  FP8ROUTE_CHECK(t.strides[1] == 1 || cols <= 1,
                 name << ": last dim must have stride 1, got " << to_string(t));
  const int64_t ld = rows <= 1 ? std::max<int64_t>(t.strides[0], cols) : t.strides[0];
  FP8ROUTE_CHECK(ld >= cols, name << ": row stride " << t.strides[0] << " must be >= " << cols
                                  << " (rows would overlap), got " << to_string(t));
  return ld;
}

// A contiguous f32 scale of exactly `numel` elements (any number of dims).
void check_scale_numel(const TensorView& t, const char* name, std::initializer_list<int64_t> allowed,
                       const char* rule) {
  detail::check_device_tensor(t, name);
  detail::check_dtype(t, name, {DType::f32});
  bool ok = false;
  for (int64_t n : allowed) ok = ok || t.numel() == n;
  FP8ROUTE_CHECK(ok, name << ": " << rule << ", got " << to_string(t));
  FP8ROUTE_CHECK(t.is_contiguous(), name << ": must be contiguous, got " << to_string(t));
  detail::check_aligned(t.data, 4, name);
}

// The scales and bias on a's device (a, b and out are checked together above), and out sharing
// no byte with an input: a GEMM would read what it already overwrote.
void check_operands_apart(const ScaledMmArgs& args) {
  detail::check_same_device(args.scale_a, "scale_a", args.a, "a");
  detail::check_same_device(args.scale_b, "scale_b", args.a, "a");
  if (args.bias.data != nullptr) detail::check_same_device(args.bias, "bias", args.a, "a");
  for (const auto& [t, name] : {std::pair{&args.a, "a"}, std::pair{&args.b, "b"}, std::pair{&args.scale_a, "scale_a"},
                                std::pair{&args.scale_b, "scale_b"}, std::pair{&args.bias, "bias"}})
    if (t->data != nullptr) detail::check_no_overlap(args.out, "out", *t, name);
}

int64_t align4(int64_t v) { return (v + 3) / 4 * 4; }

// t is 2-D with exactly this shape.
bool has_shape(const TensorView& t, int64_t rows, int64_t cols) {
  return t.ndim == 2 && t.shape[0] == rows && t.shape[1] == cols;
}

TensorView transposed(const TensorView& t) {
  return TensorView::strided(t.data, t.dtype, {t.shape[1], t.shape[0]}, {t.strides[1], t.strides[0]}, t.device);
}

// b as the [N, K] row-major view the kernels read (gemm.h): b itself, or the [K, N] view with unit
// first stride (torch._scaled_mm's `b`, weight.t()) transposed. A shape that fits both (K == N) is
// the [N, K] form when its last stride is 1, the [K, N] view when its first stride is 1.
TensorView b_as_nk(const TensorView& b, int64_t k) {
  if (b.shape[1] == k && (b.strides[1] == 1 || k <= 1)) return b;
  if (b.shape[0] == k && (b.strides[0] == 1 || k <= 1)) return transposed(b);
  FP8ROUTE_CHECK(b.shape[1] != k, "b: last dim must have stride 1 in the [N, K] form (nn.Linear's weight); a [K, N] b "
                                  "must be its transpose view, with stride(0) == 1, got " << to_string(b));
  FP8ROUTE_CHECK(b.shape[0] != k, "b: a [K, N] b must be the transpose view of a row-major [N, K] weight (stride(0) "
                                  "== 1, as weight.t() gives); a row-major [K, N] b is not supported, got "
                                      << to_string(b));
  FP8ROUTE_FAIL(ErrorCategory::invalid_argument,
                "b: expected [N, K] with K = " << k << " (a's K) and unit last stride, or its [K, N] transpose view "
                                                   "with unit first stride, got " << to_string(b));
}

// Block scale_b as [ceil(N/128), ceil(K/128)] with unit last stride: itself, or its transpose view
// [ceil(K/128), ceil(N/128)] with unit first stride transposed (a square shape: the strides decide,
// as for b). Anything else is left for the shape check to name.
TensorView block_scale_b_as_nk(const TensorView& s, int64_t nb, int64_t kb) {
  if (s.ndim != 2) return s;
  if (has_shape(s, nb, kb) && (s.strides[1] == 1 || kb <= 1)) return s;
  if (has_shape(s, kb, nb) && (s.strides[0] == 1 || kb <= 1)) return transposed(s);
  return s;
}

// Block scale_a: the physical [kb, align(M, 4)] form (contiguous; also when the shape is the
// [M, kb] one too, M == kb == align(M, 4)), or an [M, kb] view. The view with strides
// [1, align(M, 4)] (the physical buffer's transpose view; with one K block, any [M, 1] view with
// unit first stride when M % 4 == 0) is that memory and is rewritten as it, in `physical`. Any other
// [M, kb] view (K-major, or M-major with another row stride) cannot be read in place: returns true,
// `physical` = s, and scaled_mm() gathers it. Other shapes are left for the shape check to name.
bool block_scale_a_physical(const TensorView& s, int64_t m, int64_t kb, TensorView& physical) {
  const int64_t ld = align4(m);
  physical = s;
  if (has_shape(s, kb, ld) && s.is_contiguous()) return false;
  if (!has_shape(s, m, kb)) return false;
  const bool in_place = m == 0 || ((s.strides[0] == 1 || m <= 1) && (s.strides[1] == ld || (kb <= 1 && m == ld)));
  if (!in_place) return true;
  physical = TensorView::contiguous(s.data, s.dtype, {kb, ld}, s.device);
  return false;
}

// A call's arguments in the forms the kernels read (gemm.h): b as [N, K], block scales in their
// physical forms. Views of the same memory are rewritten in place; a block scale_a that is not one
// stays as given, with gather_scale_a set.
using Normalized = gemm::CheckedCall;

Normalized normalize(const ScaledMmArgs& args) {
  detail::check_device_tensor(args.a, "a");
  detail::check_ndim(args.a, "a", 2, "[M, K]");
  detail::check_device_tensor(args.b, "b");
  detail::check_ndim(args.b, "b", 2, "[N, K] (or its [K, N] transpose view)");
  Normalized c;
  c.args = args;
  const int64_t m = args.a.shape[0], k = args.a.shape[1];
  c.args.b = b_as_nk(args.b, k);
  if (args.scale == ScaleKind::block) {
    const int64_t kb = ceil_div(k, kScaleBlock), nb = ceil_div(c.args.b.shape[0], kScaleBlock);
    c.args.scale_b = block_scale_b_as_nk(args.scale_b, nb, kb);
    c.gather_scale_a = block_scale_a_physical(args.scale_a, m, kb, c.args.scale_a);
  }
  return c;
}

// check_scaled_mm on normalized arguments.
GemmProblem check_normalized(const Normalized& c);

// The operands of normalized, checked arguments, as they are in memory.
gemm::GemmOperands operands_in_place(const ScaledMmArgs& args) {
  gemm::GemmOperands o;
  o.a = static_cast<const uint8_t*>(args.a.data);
  o.lda = args.a.shape[0] <= 1 ? std::max(args.a.strides[0], args.a.shape[1]) : args.a.strides[0];
  o.b = static_cast<const uint8_t*>(args.b.data);
  o.ldb = args.b.shape[0] <= 1 ? std::max(args.b.strides[0], args.b.shape[1]) : args.b.strides[0];
  o.sa = static_cast<const float*>(args.scale_a.data);
  o.sb = static_cast<const float*>(args.scale_b.data);
  o.bias = args.bias.data;
  o.out = args.out.data;
  o.ldo = args.out.shape[0] <= 1 ? std::max(args.out.strides[0], args.out.shape[1]) : args.out.strides[0];
  return o;
}

// The operands a backend runs: in place, with a block scale_a to gather gathered on `stream`.
gemm::GemmOperands prepared_operands(const Normalized& c, const GemmProblem& p, cudaStream_t stream,
                                     const std::string& who = "scaled_mm") {
  gemm::GemmOperands o = operands_in_place(c.args);
  if (c.gather_scale_a) {
    const TensorView& s = c.args.scale_a;
    o.sa = gemm::stage_block_scale_a(static_cast<const float*>(s.data), s.strides[0], s.strides[1], p.m,
                                     ceil_div(p.k, kScaleBlock), stream, who);
  }
  return o;
}

}  // namespace

std::string to_string(const GemmProblem& p) {
  std::ostringstream os;
  os << name(p.scale) << ' ' << dtype_name(p.out) << " m=" << p.m << " n=" << p.n << " k=" << p.k;
  if (p.scale == ScaleKind::row)
    os << " sa=" << (p.sa_vector ? "vec" : "scalar") << " sb=" << (p.sb_vector ? "vec" : "scalar");
  if (p.bias) os << " bias";
  if (p.align < 16) os << " align=" << p.align;
  if (p.sb_padded) os << " sb=padded4";
  if (p.accum == Accum::precise) os << " accum=precise";
  return os.str();
}

std::string_view name(Accum a) { return a == Accum::precise ? "precise" : "fast"; }

Accum parse_accum(std::string_view s) {
  if (s == "fast") return Accum::fast;
  if (s == "precise") return Accum::precise;
  FP8ROUTE_FAIL(ErrorCategory::invalid_argument, "accum: expected \"fast\" or \"precise\", got \"" << s << "\"");
}

GemmProblem make_problem(int64_t m, int64_t n, int64_t k, ScaleKind scale, DType out, bool bias) {
  GemmProblem p;
  p.m = m, p.n = n, p.k = k, p.scale = scale, p.out = out, p.bias = bias;
  // As check_scaled_mm describes a call: a per-token vector of one element is a scalar.
  p.sa_vector = scale == ScaleKind::block || (scale == ScaleKind::row && m != 1);
  p.sb_vector = scale == ScaleKind::block || (scale == ScaleKind::row && n != 1);
  return p;
}

GemmProblem check_scaled_mm(const ScaledMmArgs& args) { return check_normalized(normalize(args)); }

namespace {

GemmProblem check_normalized(const Normalized& c) {
  const ScaledMmArgs& args = c.args;
  GemmProblem p;
  p.m = args.a.shape[0];
  p.k = args.a.shape[1];
  p.n = args.b.shape[0];
  p.scale = args.scale;
  gemm::check_accum(args.accum);
  p.accum = args.accum;
  FP8ROUTE_CHECK(p.k >= 1, "a: K must be >= 1 (an empty reduction is not a GEMM), got "
                               << to_string(args.a));
  FP8ROUTE_CHECK(p.m <= kMaxDim && p.n <= kMaxDim && p.k <= kMaxDim,
                 "a, b: M, N and K must each be < 2^31, got m=" << p.m << " n=" << p.n << " k=" << p.k);
  const int64_t lda = check_matrix(args.a, "a", DType::e4m3, p.m, p.k, "[M, K]");
  const int64_t ldb = check_matrix(args.b, "b", DType::e4m3, p.n, p.k, "[N, K]");
  detail::check_device_tensor(args.out, "out");
  detail::check_dtype(args.out, "out", {DType::bf16, DType::f16});
  p.out = args.out.dtype;
  const int64_t ldo = check_matrix(args.out, "out", p.out, p.m, p.n, "[M, N]");
  FP8ROUTE_CHECK(args.a.device == args.b.device && args.a.device == args.out.device,
                 "a, b, out: must be on one device, got " << to_string(args.a) << ", "
                                                          << to_string(args.b) << ", " << to_string(args.out));

  switch (p.scale) {
    case ScaleKind::tensor:
      check_scale_numel(args.scale_a, "scale_a", {1}, "tensor scales: expected one element");
      check_scale_numel(args.scale_b, "scale_b", {1}, "tensor scales: expected one element");
      break;
    case ScaleKind::row:
      check_scale_numel(args.scale_a, "scale_a", {1, p.m}, "row scales: expected [M] or one element");
      check_scale_numel(args.scale_b, "scale_b", {1, p.n}, "row scales: expected [N] or one element");
      p.sa_vector = args.scale_a.numel() != 1;
      p.sb_vector = args.scale_b.numel() != 1;
      break;
    case ScaleKind::block: {
      const int64_t kb = ceil_div(p.k, kScaleBlock), nb = ceil_div(p.n, kScaleBlock);
      detail::check_device_tensor(args.scale_a, "scale_a");
      detail::check_dtype(args.scale_a, "scale_a", {DType::f32});
      // The physical form (or a view normalize() rewrote as it), or an [M, kb] view it gathers.
      if (!c.gather_scale_a) {
        const char* rule = "scale_a (block: [ceil(K/128), align(M, 4)], M-major)";
        FP8ROUTE_CHECK(has_shape(args.scale_a, kb, align4(p.m)),
                       rule << ": expected shape [" << kb << "," << align4(p.m) << "], or an [M, ceil(K/128)] = ["
                            << p.m << "," << kb << "] view (any strides), got " << to_string(args.scale_a));
        FP8ROUTE_CHECK(args.scale_a.is_contiguous(), rule << ": must be contiguous, got " << to_string(args.scale_a));
      }
      detail::check_device_tensor(args.scale_b, "scale_b");
      detail::check_dtype(args.scale_b, "scale_b", {DType::f32});
      // Unpadded (contiguous), or rows padded to 4 floats: the form cuBLASLt reads (gemm.h).
      const int64_t padded_ld = (kb + 3) / 4 * 4;
      // With one row of blocks (N <= 128) the row stride is never used: both forms, unpadded.
      p.sb_padded = kb % 4 != 0 && nb > 1 && has_shape(args.scale_b, nb, kb) && args.scale_b.strides[1] == 1 &&
                    args.scale_b.strides[0] == padded_ld;
      if (!p.sb_padded) {
        const char* rule =
            "scale_b (block: [ceil(N/128), ceil(K/128)], contiguous or with rows padded to a multiple of 4)";
        FP8ROUTE_CHECK(has_shape(args.scale_b, nb, kb),
                       rule << ": expected shape [" << nb << "," << kb << "] (or its [" << kb << "," << nb
                            << "] transpose view, with unit first stride), got " << to_string(args.scale_b));
        FP8ROUTE_CHECK(args.scale_b.is_contiguous(), rule << ": must be contiguous, got " << to_string(args.scale_b));
      }
      detail::check_aligned(args.scale_a.data, 4, "scale_a");
      detail::check_aligned(args.scale_b.data, 4, "scale_b");
      p.sa_vector = p.sb_vector = true;
      break;
    }
  }
  if (args.bias.data != nullptr) {
    detail::check_device_tensor(args.bias, "bias");
    detail::check_dtype(args.bias, "bias", {p.out});
    FP8ROUTE_CHECK(args.bias.numel() == p.n && args.bias.is_contiguous(),
                   "bias: expected a contiguous [N] = [" << p.n << "] vector, got " << to_string(args.bias));
    p.bias = true;
  }
  check_operands_apart(args);

  // Every kernel reads and writes whole elements: out and bias at least at their element size (the
  // scales' 4 bytes are checked above).
  const int es = dtype_size(p.out);
  detail::check_aligned(args.out.data, es, "out");
  if (p.bias) detail::check_aligned(args.bias.data, es, "bias");
  // The alignment of a, b and out only: what TMA and cuBLASLt's FP8 kernels need. The scales and
  // bias are not in it: every backend runs them at any element alignment (the skinny and decode
  // kernels load them one element at a time; cuBLASLt and CUTLASS get 16-byte aligned copies,
  // with_aligned_scales), so a slice of a larger scale tensor routes like the whole one.
  int align = 16;
  for (uint64_t v : {uint64_t(reinterpret_cast<uintptr_t>(args.a.data)), uint64_t(lda),
                     uint64_t(reinterpret_cast<uintptr_t>(args.b.data)), uint64_t(ldb),
                     uint64_t(reinterpret_cast<uintptr_t>(args.out.data)), uint64_t(ldo * es)})
    align = std::min(align, pow2_align(v));
  p.align = align;
  return p;
}

}  // namespace

gemm::GemmOperands gemm::operands_of(const ScaledMmArgs& args) {
  const Normalized c = normalize(args);
  FP8ROUTE_CHECK(!c.gather_scale_a,
                 "scale_a: this [M, ceil(K/128)] block scale " << to_string(args.scale_a)
                     << " is not the memory of the [ceil(K/128), align(M, 4)] form the kernels read and must be "
                        "gathered (staged_operands_of); pass that form or its transpose view (strides [1, align(M, 4)])");
  return operands_in_place(c.args);
}

gemm::GemmOperands gemm::staged_operands_of(const ScaledMmArgs& args, const GemmProblem& p, cudaStream_t stream,
                                            const std::string& who) {
  return prepared_operands(normalize(args), p, stream, who);
}

namespace {

void run_checked(const gemm::GemmBackend& b, int config, const GemmProblem& p,
                 const Normalized& c, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return;
  const std::string why = gemm::cannot_run_reason(b, config, p);
  FP8ROUTE_CHECK_CAT(why.empty(), ErrorCategory::unsupported,
                     b.name() << "/" << b.configs()[config] << " cannot run " << to_string(p) << ": " << why);
  b.run(p, prepared_operands(c, p, stream), config, stream);
}

}  // namespace

gemm::CheckedCall gemm::check_call(const ScaledMmArgs& args) {
  CheckedCall c = normalize(args);
  c.problem = check_normalized(c);
  return c;
}

void gemm::run_call(const GemmBackend& b, int config, const CheckedCall& call, cudaStream_t stream) {
  if (call.problem.m == 0 || call.problem.n == 0) return;
  b.run(call.problem, prepared_operands(call, call.problem, stream), config, stream);
}

void scaled_mm(const ScaledMmArgs& args, std::string_view backend, std::string_view config,
               cudaStream_t stream) {
  const Normalized c = normalize(args);
  const GemmProblem p = check_normalized(c);
  const gemm::GemmBackend& b = gemm::find_backend(backend);
  run_checked(b, gemm::find_config(b, config), p, c, stream);
}

ScaleKind infer_scale_kind(const ScaledMmArgs& args) {
  detail::check_device_tensor(args.a, "a");
  detail::check_ndim(args.a, "a", 2, "[M, K]");
  detail::check_device_tensor(args.b, "b");
  detail::check_ndim(args.b, "b", 2, "[N, K] (or its [K, N] transpose view)");
  detail::check_device_tensor(args.scale_a, "scale_a");
  detail::check_device_tensor(args.scale_b, "scale_b");
  const int64_t m = args.a.shape[0], k = args.a.shape[1], n = b_as_nk(args.b, k).shape[0];
  const int64_t kb = ceil_div(k, kScaleBlock), nb = ceil_div(n, kScaleBlock);
  const TensorView& sa = args.scale_a;
  const TensorView& sb = args.scale_b;
  const bool sa_one = sa.numel() == 1, sb_one = sb.numel() == 1;
  if (sa_one && sb_one) return ScaleKind::tensor;
  // Row before block: with K <= 128 an [M, 1] scale_a is both a per-token vector and one 1x128 block
  // per row, and then scale_b fits both kinds only as one element or with N == 1, where the two
  // kinds are the same product.
  const bool sa_row = sa_one || (sa.ndim == 1 && sa.shape[0] == m) || has_shape(sa, m, 1);
  const bool sb_row = sb_one || (sb.ndim == 1 && sb.shape[0] == n) || has_shape(sb, n, 1) || has_shape(sb, 1, n);
  if (sa_row && sb_row) return ScaleKind::row;
  const bool sa_block = has_shape(sa, kb, align4(m)) || has_shape(sa, m, kb);
  const bool sb_block = has_shape(sb, nb, kb) || has_shape(sb, kb, nb);
  if (sa_block && sb_block) return ScaleKind::block;
  FP8ROUTE_FAIL(ErrorCategory::invalid_argument,
                "scale_a, scale_b: their shapes fit no scale kind for m=" << m << " n=" << n << " k=" << k
                    << ": tensor (one element each), row (scale_a [M] or [M, 1], scale_b [N], [N, 1] or [1, N]; "
                       "either may be one element), block (scale_a [ceil(K/128), align(M, 4)] or [M, ceil(K/128)], "
                       "scale_b [ceil(N/128), ceil(K/128)] or [ceil(K/128), ceil(N/128)]); got scale_a "
                    << to_string(sa) << ", scale_b " << to_string(sb));
}

std::vector<std::string> gemm_backends() {
  std::vector<std::string> out;
  for (const gemm::GemmBackend* b : gemm::all_backends()) out.emplace_back(b->name());
  return out;
}

std::vector<std::string> gemm_configs(std::string_view backend) {
  return gemm::find_backend(backend).configs();
}

std::string gemm_supports(std::string_view backend, std::string_view config, const GemmProblem& p) {
  const gemm::GemmBackend& b = gemm::find_backend(backend);
  return gemm::cannot_run_reason(b, gemm::find_config(b, config), p);
}

Accum gemm_accum(std::string_view backend, std::string_view config, const GemmProblem& p) {
  const gemm::GemmBackend& b = gemm::find_backend(backend);
  return b.accum(p, gemm::find_config(b, config));
}

std::string gemm_describe(std::string_view backend, std::string_view config, const GemmProblem& p) {
  const gemm::GemmBackend& b = gemm::find_backend(backend);
  return b.describe(p, gemm::find_config(b, config));
}

namespace gemm {

const std::vector<const GemmBackend*>& all_backends() {
  static const std::vector<const GemmBackend*> list = {&cublaslt_backend(), &cutlass_sm90_backend(),
                                                       &skinny_backend(), &decode_backend(),
                                                       &wgmma_backend(),
                                                       &reference_backend()};
  return list;
}

const GemmBackend& find_backend(std::string_view name) {
  std::string names;
  for (const GemmBackend* b : all_backends()) {
    if (b->name() == name) return *b;
    names += (names.empty() ? "" : ", ") + std::string(b->name());
  }
  FP8ROUTE_FAIL(ErrorCategory::invalid_argument,
                "backend: unknown name '" << name << "' (this build has " << names << ")");
}

int find_config(const GemmBackend& b, std::string_view config) {
  const std::vector<std::string>& cs = b.configs();
  if (config.empty()) return 0;
  for (size_t i = 0; i < cs.size(); ++i)
    if (cs[i] == config) return static_cast<int>(i);
  std::string names;
  for (const std::string& c : cs) names += (names.empty() ? "" : ", ") + c;
  FP8ROUTE_FAIL(ErrorCategory::invalid_argument,
                "config: backend " << b.name() << " has no config '" << config << "' (it has " << names << ")");
}

std::string accum_reason(const GemmBackend& b, int config, const GemmProblem& p) {
  if (p.accum != Accum::precise || b.accum(p, config) == Accum::precise) return "";
  return "accumulates in the FP8 tensor core over all of K (fast class); accum=precise takes precise-class "
         "configs only";
}

namespace {

// The backend named `backend` and the index of its config `config`, or {nullptr, -1} when this build
// has no such pair (a table from another version): find_backend/find_config without the throw.
std::pair<const GemmBackend*, int> lookup(std::string_view backend, std::string_view config) {
  for (const GemmBackend* b : all_backends())
    if (b->name() == backend) {
      const std::vector<std::string>& cs = b->configs();
      for (size_t i = 0; i < cs.size(); ++i)
        if (cs[i] == config) return {b, static_cast<int>(i)};
    }
  return {nullptr, -1};
}

}  // namespace

std::string accum_reason(std::string_view backend, std::string_view config, const GemmProblem& p) {
  if (p.accum != Accum::precise) return "";
  const auto [b, i] = lookup(backend, config);
  return b ? accum_reason(*b, i, p) : "";
}

namespace {

struct Quarantine {
  std::mutex mu;
  std::map<std::tuple<std::string, std::string, int, int, int64_t, int64_t>, std::string> why;
  std::atomic<bool> any{false};  // read without the lock on every check
};
Quarantine& quarantined() {
  static Quarantine* q = new Quarantine;  // never destroyed: calls may outlive static destruction
  return *q;
}
auto quarantine_key(std::string_view backend, std::string_view config, const GemmProblem& p) {
  return std::tuple{std::string(backend), std::string(config), int(p.scale), int(p.out), p.n, p.k};
}

}  // namespace

void quarantine(std::string_view backend, std::string_view config, const GemmProblem& p, const std::string& why) {
  Quarantine& q = quarantined();
  std::lock_guard<std::mutex> lock(q.mu);
  q.why.emplace(quarantine_key(backend, config, p), why);
  q.any = true;
}

std::string quarantine_reason(std::string_view backend, std::string_view config, const GemmProblem& p) {
  Quarantine& q = quarantined();
  if (!q.any) return "";
  std::lock_guard<std::mutex> lock(q.mu);
  const auto it = q.why.find(quarantine_key(backend, config, p));
  return it == q.why.end() ? "" : "quarantined in this process: " + it->second;
}

std::string cannot_run_reason(const GemmBackend& b, int config, const GemmProblem& p) {
  if (std::string why = accum_reason(b, config, p); !why.empty()) return why;
  if (std::string why = quarantine_reason(b.name(), b.configs()[config], p); !why.empty()) return why;
  return b.supports(p, config);
}

void check_accum(Accum a) {
  FP8ROUTE_CHECK(a == Accum::fast || a == Accum::precise, "accum: expected Accum::fast or Accum::precise, got " << int(a));
}

int config_m_tile(std::string_view backend, std::string_view config) {
  const auto [b, i] = lookup(backend, config);
  return b ? b->m_tile(i) : 0;
}

bool config_carries_over(std::string_view backend, std::string_view config) {
  if (const auto [b, i] = lookup(backend, config); b) return b->carries_over(i);
  for (const GemmBackend* b : all_backends())
    if (b->name() == backend) return !b->ranks_configs_per_problem();
  return true;
}

std::string sm90_device_reason() {
  if (cuda_device_count() == 0) return cuda_unavailable_reason();
  const DeviceInfo& dev = device_info();
  if (!dev.is_sm90())
    return "needs an SM90 GPU (kernels built for sm_90a), device " + std::to_string(dev.index) + " is sm_" +
           std::to_string(dev.sm_version());
  return "";
}

std::string unpadded_scale_b_reason(const GemmProblem& p) {
  if (!p.sb_padded) return "";
  return "reads block scale_b unpadded ([ceil(N/128), ceil(K/128)] contiguous); this call passes rows "
         "padded to a multiple of 4 (the cuBLASLt form)";
}

std::string common_fast_path_reason(const GemmProblem& p) {
  if (p.align < 16)
    return "needs a, b and out 16-byte aligned (addresses and row strides: TMA / cuBLASLt FP8), problem has "
           "align=" + std::to_string(p.align);
  return "";
}

namespace {

// Elements of scale_a and scale_b as the kernels read them (gemm.h's table; a padded block scale_b
// spans its last row's ceil(K/128) elements, not the padding after it).
int64_t scale_a_elements(const GemmProblem& p) {
  if (p.scale == ScaleKind::block) return ceil_div(p.k, kScaleBlock) * ((p.m + 3) / 4 * 4);
  return p.scale == ScaleKind::row && p.sa_vector ? p.m : 1;
}
int64_t scale_b_elements(const GemmProblem& p) {
  if (p.scale == ScaleKind::block) {
    const int64_t nb = ceil_div(p.n, kScaleBlock), kb = ceil_div(p.k, kScaleBlock);
    return p.sb_padded ? (nb - 1) * ((kb + 3) / 4 * 4) + kb : nb * kb;
  }
  return p.scale == ScaleKind::row && p.sb_vector ? p.n : 1;
}

}  // namespace

GemmOperands with_aligned_scales(const GemmProblem& p, const GemmOperands& ops, cudaStream_t stream,
                                 const std::string& who) {
  struct Operand {
    const void* src;
    size_t bytes;
    size_t offset = 0;
  };
  Operand parts[3] = {{ops.sa, size_t(scale_a_elements(p)) * 4},
                      {ops.sb, size_t(scale_b_elements(p)) * 4},
                      {ops.bias, ops.bias ? size_t(p.n) * dtype_size(p.out) : 0}};
  size_t total = 0;
  for (Operand& o : parts)
    if (o.src != nullptr && reinterpret_cast<uintptr_t>(o.src) % 16 != 0) {
      o.offset = total;
      total += (o.bytes + 255) / 256 * 256;
    }
  if (total == 0) return ops;
  int device = 0;
  FP8ROUTE_CUDA_CHECK(cudaGetDevice(&device));
  // Per stream, or per captured graph (core/workspace.h): a copy is written and read in order on
  // `stream`, and never by two launches that may overlap.
  static Workspaces copies{"aligned copy of scales and bias"};
  char* base = static_cast<char*>(copies.get(device, total, stream, who));
  const void* staged[3];
  for (int i = 0; i < 3; ++i) {
    staged[i] = parts[i].src;
    if (parts[i].src == nullptr || reinterpret_cast<uintptr_t>(parts[i].src) % 16 == 0) continue;
    FP8ROUTE_CUDA_CHECK(cudaMemcpyAsync(base + parts[i].offset, parts[i].src, parts[i].bytes,
                                        cudaMemcpyDeviceToDevice, stream));
    staged[i] = base + parts[i].offset;
  }
  GemmOperands out = ops;
  out.sa = static_cast<const float*>(staged[0]);
  out.sb = static_cast<const float*>(staged[1]);
  out.bias = staged[2];
  return out;
}

}  // namespace gemm
}  // namespace fp8route
