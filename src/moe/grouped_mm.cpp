// The grouped GEMM entry points (include/fp8route/moe.h): argument checks, once per call, then the
// backend.

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <utility>

#include "core/checks.h"
#include "fp8route/error.h"
#include "fp8route/moe.h"
#include "moe/backend.h"

namespace fp8route {

namespace {

// The kernels index rows, columns and K in int32 with up to one tile of overhang past the end.
constexpr int64_t kMaxDim = (int64_t{1} << 31) - 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Largest power of two <= 16 dividing v.
int pow2_align(uint64_t v) {
  int a = 1;
  while (a < 16 && v % (2 * a) == 0) a *= 2;
  return a;
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "[";
  for (int64_t v : d) s += (s.size() > 1 ? "," : "") + std::to_string(v);
  return s + "]";
}

bool has_shape(const TensorView& t, std::initializer_list<int64_t> d) {
  if (t.ndim != static_cast<int>(d.size())) return false;
  int i = 0;
  for (int64_t v : d)
    if (t.shape[i++] != v) return false;
  return true;
}

// A contiguous tensor of `dtype` with one of the shapes `forms` (each a rule's spelling in `rule`).
void check_form(const TensorView& t, const char* name, DType dtype,
                std::initializer_list<std::initializer_list<int64_t>> forms, const std::string& rule) {
  detail::check_device_tensor(t, name);
  detail::check_dtype(t, name, {dtype});
  bool ok = false;
  for (auto f : forms) ok = ok || has_shape(t, f);
  FP8ROUTE_CHECK(ok, name << ": expected " << rule << ", got " << to_string(t));
  FP8ROUTE_CHECK(t.is_contiguous(), name << ": must be contiguous, got " << to_string(t));
  detail::check_aligned(t.data, dtype_size(dtype), name);
}

struct Checked {
  GroupedProblem p;
  moe::GroupedOperands ops;
};

Checked check(const GroupedMmArgs& args) {
  Checked c;
  GroupedProblem& p = c.p;
  p.form = args.form;
  FP8ROUTE_CHECK(p.form == GroupedForm::contiguous || p.form == GroupedForm::masked,
                 "form: expected GroupedForm::contiguous or GroupedForm::masked, got " << int(p.form));
  const bool masked = p.form == GroupedForm::masked;

  detail::check_device_tensor(args.b, "b");
  detail::check_dtype(args.b, "b", {DType::e4m3});
  detail::check_ndim(args.b, "b", 3, "[E, N, K]");
  FP8ROUTE_CHECK(args.b.is_contiguous(), "b: must be contiguous [E, N, K], got " << to_string(args.b));
  p.experts = args.b.shape[0];
  p.n = args.b.shape[1];
  p.k = args.b.shape[2];

  detail::check_device_tensor(args.a, "a");
  detail::check_dtype(args.a, "a", {DType::e4m3});
  if (masked) {
    detail::check_ndim(args.a, "a", 3, "[E, M_max, K] (masked form)");
    FP8ROUTE_CHECK(args.a.shape[0] == p.experts && args.a.shape[2] == p.k,
                   "a: expected [E, M_max, K] with E = " << p.experts << " and K = " << p.k << " (b's), got "
                                                         << to_string(args.a));
    p.rows = args.a.shape[1];
  } else {
    detail::check_ndim(args.a, "a", 2, "[M_total, K] (contiguous form)");
    FP8ROUTE_CHECK(args.a.shape[1] == p.k,
                   "a: expected [M_total, K] with K = " << p.k << " (b's), got " << to_string(args.a));
    p.rows = args.a.shape[0];
  }
  FP8ROUTE_CHECK(args.a.is_contiguous(), "a: must be contiguous, got " << to_string(args.a));
  FP8ROUTE_CHECK(p.k >= 1, "b: K must be >= 1 (an empty reduction is not a GEMM), got " << to_string(args.b));
  FP8ROUTE_CHECK(p.rows <= kMaxDim && p.n <= kMaxDim && p.k <= kMaxDim && p.experts <= kMaxDim,
                 "a, b: E, M, N and K must each be below 2^31 - 256, got e=" << p.experts << " m=" << p.rows
                                                                             << " n=" << p.n << " k=" << p.k);

  detail::check_device_tensor(args.out, "out");
  detail::check_dtype(args.out, "out", {DType::bf16, DType::f16});
  p.out = args.out.dtype;
  if (masked)
    FP8ROUTE_CHECK(has_shape(args.out, {p.experts, p.rows, p.n}),
                   "out: expected [E, M_max, N] = " << dims({p.experts, p.rows, p.n}) << ", got " << to_string(args.out));
  else
    FP8ROUTE_CHECK(has_shape(args.out, {p.rows, p.n}),
                   "out: expected [M_total, N] = " << dims({p.rows, p.n}) << ", got " << to_string(args.out));
  FP8ROUTE_CHECK(args.out.is_contiguous(), "out: must be contiguous, got " << to_string(args.out));
  detail::check_aligned(args.out.data, dtype_size(p.out), "out");

  // The device counts: the form's own, the other one absent.
  const TensorView& groups = masked ? args.masked_m : args.offsets;
  const char* groups_name = masked ? "masked_m" : "offsets";
  const TensorView& other = masked ? args.offsets : args.masked_m;
  FP8ROUTE_CHECK(!detail::given(other), (masked ? "offsets" : "masked_m")
                                            << ": the " << name(p.form) << " form takes " << groups_name
                                            << ", not this tensor");
  FP8ROUTE_CHECK(detail::given(groups), groups_name << ": required by the " << name(p.form) << " form");
  if (masked) {
    check_form(groups, "masked_m", DType::i32, {{p.experts}}, "int32 [E] = " + dims({p.experts}));
  } else {
    check_form(groups, "offsets", DType::i32, {{p.experts + 1}, {p.experts}},
               "int32 [E + 1] = " + dims({p.experts + 1}) + " (start of expert 0, then each expert's end) or [E] = " +
                   dims({p.experts}) + " (the ends only)");
    p.offsets_with_start = groups.shape[0] == p.experts + 1;
  }

  // Scales.
  p.scale = args.scale;
  const int64_t e = p.experts, rows = p.rows, n = p.n, k = p.k;
  switch (p.scale) {
    case ScaleKind::tensor:
      check_form(args.scale_a, "scale_a", DType::f32, {{1}, {e}, {1, 1}, {e, 1}},
                 "tensor scales: f32 with one element, or [E] = " + dims({e}) + " (one per expert)");
      check_form(args.scale_b, "scale_b", DType::f32, {{e}, {e, 1}},
                 "tensor scales: f32 [E] = " + dims({e}) + " (one per expert)");
      p.sa_per_expert = args.scale_a.numel() == e && e != 1;
      break;
    case ScaleKind::row:
      if (masked)
        check_form(args.scale_a, "scale_a", DType::f32, {{e, rows}, {e, rows, 1}},
                   "row scales: f32 [E, M_max] = " + dims({e, rows}) + " (one per token)");
      else
        check_form(args.scale_a, "scale_a", DType::f32, {{rows}, {rows, 1}},
                   "row scales: f32 [M_total] = " + dims({rows}) + " (one per token)");
      check_form(args.scale_b, "scale_b", DType::f32, {{e, n}, {e, n, 1}},
                 "row scales: f32 [E, N] = " + dims({e, n}) + " (one per expert channel)");
      p.sa_per_expert = true;
      c.ops.sa_stride_e = rows;
      c.ops.sa_stride_t = 1;
      break;
    case ScaleKind::block: {
      FP8ROUTE_CHECK(k % kScaleBlock == 0, "a, b: block scales need K a multiple of 128 (1x128 activation groups), got K = "
                                               << k);
      detail::check_device_tensor(args.scale_a, "scale_a");
      detail::check_dtype(args.scale_a, "scale_a", {DType::f32, DType::i32});
      GroupQuantSpec spec;
      spec.group_size = kScaleBlock;
      spec.layout = args.scale_a_layout;
      FP8ROUTE_CHECK(spec.layout == ScaleLayout::row_major || spec.layout == ScaleLayout::col_major ||
                         spec.layout == ScaleLayout::col_major_tma,
                     "scale_a_layout: expected row_major, col_major or col_major_tma, got " << int(spec.layout));
      if (args.scale_a.dtype == DType::i32) {
        spec.rounding = ScaleRounding::pow2;
        spec.storage = ScaleStorage::ue8m0_packed;
      }
      // What group quant writes for this a (masked: batched, also with E = 0).
      QuantLayout L = quant_layout(spec, rows, k, masked ? std::max<int64_t>(e, 1) : 0);
      if (masked) L.scale_shape[0] = e;
      bool ok = args.scale_a.ndim == L.scale_ndim;
      for (int i = 0; ok && i < L.scale_ndim; ++i) ok = args.scale_a.shape[i] == L.scale_shape[i];
      std::string want = "[";
      for (int i = 0; i < L.scale_ndim; ++i) want += (i ? "," : "") + std::to_string(L.scale_shape[i]);
      want += "]";
      FP8ROUTE_CHECK(ok, "scale_a: block scales in layout " << name(spec.layout) << ", storage " << name(spec.storage)
                                                            << " (the s of group quant of a, group 128) are "
                                                            << want << ", got " << to_string(args.scale_a));
      FP8ROUTE_CHECK(args.scale_a.is_contiguous(), "scale_a: must be contiguous, got " << to_string(args.scale_a));
      detail::check_aligned(args.scale_a.data, 4, "scale_a");
      p.sa_layout = spec.layout;
      p.sa_storage = spec.storage;
      p.sa_per_expert = true;
      c.ops.sa_stride_e = masked ? L.scale_batch_stride : 0;
      c.ops.sa_stride_t = L.scale_stride_t;
      c.ops.sa_stride_c = L.scale_stride_c;
      const int64_t nb = ceil_div(n, kScaleBlock), kb = k / kScaleBlock;
      check_form(args.scale_b, "scale_b", DType::f32, {{e, nb, kb}},
                 "block scales: f32 [E, ceil(N/128), ceil(K/128)] = " + dims({e, nb, kb}) + " (128x128 weight blocks)");
      break;
    }
    default:
      FP8ROUTE_FAIL(ErrorCategory::invalid_argument, "scale: expected tensor, row or block, got " << int(p.scale));
  }

  // One device; out shares no byte with anything it is computed from.
  for (const auto& [t, nm] : {std::pair{&args.b, "b"}, std::pair{&args.out, "out"}, std::pair{&args.scale_a, "scale_a"},
                              std::pair{&args.scale_b, "scale_b"}, std::pair{&groups, groups_name}})
    detail::check_same_device(*t, nm, args.a, "a");
  for (const auto& [t, nm] : {std::pair{&args.a, "a"}, std::pair{&args.b, "b"}, std::pair{&args.scale_a, "scale_a"},
                              std::pair{&args.scale_b, "scale_b"}, std::pair{&groups, groups_name}})
    detail::check_no_overlap(args.out, "out", *t, nm);

  p.align = 16;
  for (uint64_t v : {uint64_t(reinterpret_cast<uintptr_t>(args.a.data)), uint64_t(reinterpret_cast<uintptr_t>(args.b.data)),
                     uint64_t(p.k)})
    p.align = std::min(p.align, pow2_align(v));

  c.ops.a = static_cast<const uint8_t*>(args.a.data);
  c.ops.b = static_cast<const uint8_t*>(args.b.data);
  c.ops.sa = args.scale_a.data;
  c.ops.sb = static_cast<const float*>(args.scale_b.data);
  c.ops.groups = static_cast<const int32_t*>(groups.data);
  c.ops.out = args.out.data;
  return c;
}

bool empty(const GroupedProblem& p) { return p.experts == 0 || p.rows == 0 || p.n == 0; }

void run(const Checked& c, const moe::GroupedBackend& b, cudaStream_t stream) {
  if (empty(c.p)) return;
  const std::string why = b.supports(c.p);
  FP8ROUTE_CHECK_CAT(why.empty(), ErrorCategory::unsupported,
                     "grouped_scaled_mm: backend " << b.name() << " cannot run " << to_string(c.p) << ": " << why);
  b.run(c.p, c.ops, stream);
}

}  // namespace

std::string to_string(const GroupedProblem& p) {
  std::ostringstream os;
  os << name(p.form) << ' ' << name(p.scale) << ' ' << dtype_name(p.out) << " e=" << p.experts << " rows=" << p.rows
     << " n=" << p.n << " k=" << p.k;
  if (p.scale == ScaleKind::block) os << " sa=" << name(p.sa_layout) << '.' << name(p.sa_storage);
  if (p.scale == ScaleKind::tensor) os << " sa=" << (p.sa_per_expert ? "per_expert" : "scalar");
  if (p.form == GroupedForm::contiguous && !p.offsets_with_start) os << " offsets=ends";
  if (p.align != 16) os << " align=" << p.align;
  return os.str();
}

GroupedProblem check_grouped_scaled_mm(const GroupedMmArgs& args) { return check(args).p; }

void grouped_scaled_mm(const GroupedMmArgs& args, cudaStream_t stream) { grouped_scaled_mm(args, "", stream); }

void grouped_scaled_mm(const GroupedMmArgs& args, std::string_view backend, cudaStream_t stream) {
  const Checked c = check(args);
  if (backend.empty() && empty(c.p)) return;
  run(c, backend.empty() ? moe::default_grouped_backend(c.p) : moe::find_grouped_backend(backend), stream);
}

std::vector<std::string> grouped_backends() {
  std::vector<std::string> out;
  for (const moe::GroupedBackend* b : moe::all_grouped_backends()) out.emplace_back(b->name());
  return out;
}

std::string grouped_supports(std::string_view backend, const GroupedProblem& p) {
  return moe::find_grouped_backend(backend).supports(p);
}

std::string grouped_default_backend(const GroupedProblem& p) {
  return std::string(moe::default_grouped_backend(p).name());
}

std::string explain_grouped(const GroupedProblem& p) {
  std::ostringstream os;
  os << to_string(p) << ": " << moe::default_grouped_backend(p).name() << "\n";
  const GroupedTableInfo info = grouped_table_info();
  if (const auto t = moe::default_grouped_table()) {
    std::string why;
    const std::string c = grouped_table_choice(*t, p, [&](std::string_view b) { return grouped_supports(b, p); }, &why);
    os << "grouped table " << info.path << " (" << t->stamp.gpu << ", measured " << t->stamp.date << "): " << why
       << "\n";
    if (c.empty()) os << "the rule decides (docs/moe.md, Routing)\n";
  } else {
    os << "no grouped table ("
       << (info.load_error.empty() ? "none found; FP8ROUTE_GROUPED_TABLE names one" : info.load_error)
       << "); the rule decides (docs/moe.md, Routing)\n";
  }
  return os.str();
}

namespace moe {

const std::vector<const GroupedBackend*>& all_grouped_backends() {
  static const std::vector<const GroupedBackend*> list = {&simt_backend(), &decode_backend(), &wgmma_backend(),
                                                           &cutlass_backend()};
  return list;
}

// The rule, where the grouped table has no choice (docs/moe.md, Routing). decode
// reads only the active experts' weights and wins at the few rows per expert of a decode step; but it
// sizes its tiles and K split for the rows it may meet (masked: M_max; contiguous: up to M_total
// active experts), so past a few rows wgmma's 128-row tiles, whose cost is flat up to 128 rows, take
// over, also where M_max is only a bound and each expert holds fewer rows. simt runs what neither
// supports (unaligned operands, other architectures). The bounds are where decode stopped being the
// faster on the catalog's expert shapes.
constexpr int64_t kDecodeMaskedRows = 8, kDecodeContiguousRows = 16, kDecodeContiguousBlockRows = 8;

static bool decode_is_faster(const GroupedProblem& p) {
  if (p.form == GroupedForm::masked) return p.rows <= kDecodeMaskedRows;
  return p.rows <= (p.scale == ScaleKind::block ? kDecodeContiguousBlockRows : kDecodeContiguousRows);
}

const GroupedBackend& default_grouped_backend(const GroupedProblem& p) {
  if (const auto t = default_grouped_table()) {
    const std::string c =
        grouped_table_choice(*t, p, [&](std::string_view b) { return find_grouped_backend(b).supports(p); });
    if (!c.empty()) return find_grouped_backend(c);
  }
  if (decode_is_faster(p) && decode_backend().supports(p).empty()) return decode_backend();
  if (wgmma_backend().supports(p).empty()) return wgmma_backend();
  if (decode_backend().supports(p).empty()) return decode_backend();
  return simt_backend();
}

const GroupedBackend& find_grouped_backend(std::string_view name) {
  std::string names;
  for (const GroupedBackend* b : all_grouped_backends()) {
    if (b->name() == name) return *b;
    names += (names.empty() ? "" : ", ") + std::string(b->name());
  }
  FP8ROUTE_FAIL(ErrorCategory::invalid_argument,
                "backend: unknown grouped backend '" << name << "' (this build has " << names << ")");
}

}  // namespace moe
}  // namespace fp8route
