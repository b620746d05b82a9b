// The cublaslt backend: scaled FP8 GEMMs through cuBLASLt 13 on SM90 (docs/design.md, GEMM backends).
//
// Row-major y[M, N] = a[M, K] b[N, K]^T is computed as the column-major y^T[N, M] = b a^T, the "TN"
// form cuBLASLt requires for FP8 (cuBLAS docs, cublasLtMatmul, FP8 requirements): cuBLAS A = b
// (K x N, ld = ldb, TRANSA = T), cuBLAS B = a (K x M, ld = lda, TRANSB = N), D = y (N x M, ld = ldo),
// cuBLAS (m, n, k) = (N, M, K). So cuBLAS's A scale is our scale_b, its B scale our scale_a, and its
// per-row bias of D (EPILOGUE_BIAS) is our bias[n]. C aliases D with beta = 0 (C type = D type).
//
// Scale modes (cuBLAS docs 3.1.4, "Narrow Precision Data Types Usage"):
//   tensor              SCALAR_32F x SCALAR_32F, fast accumulation
//   row, both vectors   OUTER_VEC_32F x OUTER_VEC_32F, fast accumulation
//   row, both scalars   run as tensor: the same math, and the faster kernel (docs/design.md)
//   row, one scalar     OUTER_VEC_32F x OUTER_VEC_32F when the scalar side has length 1 (M = 1:
//                       its one element is the [M] vector); otherwise unsupported, since
//                       OUTER_VEC_32F must be set on both A and B (3.1.4.3), mixing it with
//                       SCALAR_32F is not documented, and a one-element buffer cannot stand in for
//                       a longer vector. Other backends take those.
//   block               BLK128x128_32F (weight) x VEC128_32F (activation), no fast accumulation
// Block scale layouts (3.1.4.5.1, "Scaling factors layouts"): M and N must be multiples of 4.
// VEC128 on cuBLAS B is N-major [n x ceil(K/128)], stride exactly cuBLAS n = our M: our scale_a has
// stride align(M, 4), the same since M % 4 == 0. BLK128x128 on cuBLAS A is K-major with a column
// stride of ceil(K/128) rounded up to 4: our scale_b [ceil(N/128), ceil(K/128)] is unpadded, so it
// matches only when ceil(K/128) % 4 == 0 (K = 512, 1536, 2048, 7168, 14336, 18432; not 5376).
//
// Caching (nothing below is created per call in the steady state; the process owns it for life, but
// for a graph's workspace):
// - per device: one cublasLtHandle;
// - the workspace (split-K partials live there): per (device, stream), or per graph for a call
//   under CUDA graph capture (core/workspace.h), so that GEMMs that may overlap on the GPU (two
//   streams, two graphs replayed at once, a graph beside eager calls) never share one. Sized to what
//   the algorithm needs (the heuristic's workspaceSize, often 0), so a graph holds little.
// - per problem key (device, M, N, K, lda, ldb, ldo, scale kind and vector flags, out dtype, bias,
//   config family, alignment): a Plan with the matmul descriptor, the layouts and the heuristic's
//   ranked algorithms. The configs come in three families:
//   * "heuristicN": the N-th algorithm ranked with 32 MiB of workspace on offer;
//   * "ws1m", "ws1m1": the first two ranked with 1 MiB that no "heuristicN" already runs. With less
//     workspace the heuristic often ranks algorithms without split-K first, which can be the
//     faster ones (a short M with a long K);
//   * "precise", "precise1" (tensor and row scales): asked as torch._scaled_mm asks by default:
//     fast accumulation off, 1 MiB, and the operands' own pointer alignment (up to 256 bytes)
//     instead of the 16 bytes the other families assume. "precise" is the algorithm torch runs
//     for the problem, so its choice is always among the candidates, and a call that asks for
//     precise accumulation has cuBLASLt to route to.
//   The first two families share one Plan (their descriptor is the same); the third has its own,
//   per pointer alignment.
// Thread safety: one mutex guards the maps; nothing is ever erased, and a Plan's layouts and
// algorithms are immutable. The scale and bias pointers change per call (16-byte aligned:
// with_aligned_scales copies a slice that is not), and setting them on a shared descriptor is not
// thread-safe, so each Plan has a mutex held from setting them through cublasLtMatmul (a host-side
// enqueue of a few microseconds): different problems never contend,
// concurrent calls of one problem serialize only their enqueue. Per-thread descriptors would avoid
// even that at the cost of one descriptor set per thread and problem; it is not worth it here.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <compare>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fp8route/tuning/cuda_check.h"
#include "core/workspace.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "gemm/backend.h"

namespace fp8route::gemm {
namespace {

// The configs (the Plan comment above): the heuristic's top four algorithms with a large workspace
// on offer, its top two with a small one, then its top two asked as torch asks. New configs go at
// the end: tables name configs, and indices stay stable.
constexpr int kLargeAlgos = 4, kSmallAlgos = 2, kPreciseAlgos = 2;
constexpr int kFirstPrecise = kLargeAlgos + kSmallAlgos, kAlgos = kFirstPrecise + kPreciseAlgos;
constexpr std::array<const char*, kAlgos> kConfigNames = {"heuristic", "heuristic1", "heuristic2", "heuristic3",
                                                          "ws1m",      "ws1m1",      "precise",    "precise1"};
// The most workspace an algorithm may ask for: NVIDIA's recommended size on Hopper for the
// "heuristicN" configs, what torch offers (its default CUBLASLT_WORKSPACE_SIZE) for the others.
// Each call gets what its algorithm needs.
constexpr size_t kWorkspaceBytes = size_t{32} << 20, kSmallWorkspaceBytes = size_t{1} << 20;
// What GemmProblem::align == 16 guarantees of a, b and y; unset, the heuristic assumes 256 bytes and
// may pick a kernel that fails on a 16-byte aligned slice. The precise family states the
// operands' actual alignment instead (pointer_alignment), as torch leaves the default for its
// 256-byte aligned allocations.
constexpr uint32_t kMinAlignBytes = 16, kMaxAlignBytes = 256;

bool precise_family(int config) { return config >= kFirstPrecise; }

// The largest power of two <= 256 that divides the address (256 for null: a stand-in).
uint32_t pointer_alignment(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  uint32_t align = kMaxAlignBytes;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// ---- RAII for cuBLASLt descriptors ---------------------------------------------------------------

template <class H, cublasStatus_t (*Destroy)(H)>
struct LtDeleter {
  void operator()(H h) const { (void)Destroy(h); }  // destroying never fails for a valid handle
};
template <class H, cublasStatus_t (*Destroy)(H)>
using LtPtr = std::unique_ptr<std::remove_pointer_t<H>, LtDeleter<H, Destroy>>;
using DescPtr = LtPtr<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LayoutPtr = LtPtr<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using PrefPtr = LtPtr<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

template <class T>
void set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

LayoutPtr layout(cudaDataType type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  FP8ROUTE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                                   static_cast<uint64_t>(cols), ld));
  return LayoutPtr(l);
}

// ---- scale modes ---------------------------------------------------------------------------------

struct Modes {
  cublasLtMatmulMatrixScale_t a, b;  // cuBLAS A (our weight b), cuBLAS B (our activation a)
  int8_t fast_accum;
};

Modes modes(const GemmProblem& p) {
  switch (p.scale) {
    case ScaleKind::tensor: break;
    case ScaleKind::row:  // supports() has ruled out a scalar standing for a vector longer than 1
      if (p.sa_vector || p.sb_vector)
        return {CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, 1};
      break;
    case ScaleKind::block:
      // No fast accumulation (docs/numerics.md): the scales change per 128-wide K block, so partial sums
      // are promoted to fp32 per block anyway.
      return {CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, 0};
  }
  // Fast accumulation as in FP8 inference engines (torch._scaled_mm use_fast_accum): faster on
  // Hopper, the accumulator promoted to full fp32 less often.
  return {CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, 1};
}

cudaDataType out_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

// The pointers that change per call.
void set_pointers(cublasLtMatmulDesc_t d, const GemmProblem& p, const GemmOperands& ops) {
  set(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(ops.sb));
  set(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(ops.sa));
  if (p.bias) set(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ops.bias);
}

// ---- the cache -----------------------------------------------------------------------------------

struct Key {
  int device;
  int64_t m, n, k, lda, ldb, ldo;
  ScaleKind scale;
  bool sa_vector, sb_vector, bias;
  DType out;
  bool precise;    // the precise family's Plan (precise_family)
  uint32_t align;  // the alignment its heuristic was told: kMinAlignBytes, or the operands' own
  auto operator<=>(const Key&) const = default;
};

struct Plan {
  DescPtr desc;
  LayoutPtr a, b, d;                        // cuBLAS A = our b, B = our a, D (and C) = y
  // Per config (kConfigNames), the algorithm and the workspace bytes it needs; nullopt where the
  // heuristic ranked fewer algorithms than that config's rank (it happens, with none at all too).
  std::array<std::optional<cublasLtMatmulAlgo_t>, kAlgos> algos;
  std::array<size_t, kAlgos> workspace{};
  int offered() const {
    int n = 0;
    for (const auto& a : algos) n += a.has_value();
    return n;
  }
  std::mutex mu;                            // held from set_pointers through cublasLtMatmul
};

// The Plan of one family: the "heuristicN" and "ws1mN" configs (precise = false, align =
// kMinAlignBytes), or the "preciseN" configs (precise = true, align = the operands' alignment).
std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const GemmProblem& p, const GemmOperands& ops,
                                bool precise, uint32_t align) {
  auto plan = std::make_unique<Plan>();
  cublasLtMatmulDesc_t desc = nullptr;
  FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan->desc.reset(desc);
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_T));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(CUBLAS_OP_N));
  const Modes m = modes(p);
  set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<int32_t>(m.a));
  set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(m.b));
  set(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, precise ? int8_t{0} : m.fast_accum);
  if (p.bias) {
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    // FP8 with a bf16 (f16) D takes a bf16 (f16) bias (cuBLAS docs, cublasLtMatmul FP8 table).
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(out_type(p.out)));
  }
  set_pointers(desc, p, ops);  // real pointers when run() makes the plan; stand-ins from supports()
  plan->a = layout(CUDA_R_8F_E4M3, p.k, p.n, ops.ldb);
  plan->b = layout(CUDA_R_8F_E4M3, p.k, p.m, ops.lda);
  plan->d = layout(out_type(p.out), p.n, p.m, ops.ldo);

  // Ranked algorithms with `ws` bytes of workspace on offer, into configs [first, first + count).
  const auto rank = [&](uint64_t ws, int first, int count) {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
    const PrefPtr pref(raw_pref);
    FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    for (cublasLtMatmulPreferenceAttributes_t attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      FP8ROUTE_CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(raw_pref, attr, &align, sizeof(align)));
    // Asked for more than it fills: an algorithm an earlier config of this plan holds is skipped.
    const int requested = count + plan->offered();
    std::array<cublasLtMatmulHeuristicResult_t, 2 * kAlgos> found{};
    int count_found = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(handle, desc, plan->a.get(), plan->b.get(), plan->d.get(),
                                       plan->d.get(), raw_pref, requested, found.data(), &count_found);
    // NOT_SUPPORTED is an answer (no algorithm for this problem), kept in the Plan; anything else
    // that is not success is a failure.
    FP8ROUTE_CHECK_CAT(s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED,
                       ErrorCategory::cuda_error,
                       "cublasLtMatmulAlgoGetHeuristic failed: " << cublasLtGetStatusName(s) << " ("
                           << cublasLtGetStatusString(s) << ") for " << to_string(p));
    if (s != CUBLAS_STATUS_SUCCESS) return;
    int next = first;
    for (int i = 0; i < count_found && next < first + count; ++i) {
      if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
      const auto same = [&](const std::optional<cublasLtMatmulAlgo_t>& a) {
        return a && std::memcmp(&*a, &found[i].algo, sizeof(cublasLtMatmulAlgo_t)) == 0;
      };
      if (std::any_of(plan->algos.begin(), plan->algos.begin() + first, same)) continue;
      plan->algos[next] = found[i].algo;
      plan->workspace[next++] = found[i].workspaceSize;
    }
  };
  if (precise) {
    rank(kSmallWorkspaceBytes, kFirstPrecise, kPreciseAlgos);
  } else {
    rank(kWorkspaceBytes, 0, kLargeAlgos);
    rank(kSmallWorkspaceBytes, kLargeAlgos, kSmallAlgos);
  }
  return plan;
}

struct State {
  std::mutex mu;  // guards the two maps
  std::map<int, cublasLtHandle_t> handles;
  std::map<Key, std::unique_ptr<Plan>> plans;
  // Zeroed when made, as a fresh cudaMalloc hands out in a new process: memory recycled from
  // earlier work is not left for an algorithm to find. Thread-safe on its own.
  Workspaces workspaces{"cuBLASLt workspace", /*zero_new=*/true};
};

// Never destroyed: releasing cuBLAS and CUDA objects from a static destructor races the CUDA
// runtime's own teardown at exit.
State& state() {
  static State* s = new State;
  return *s;
}

cublasLtHandle_t handle_locked(State& st, int device) {
  if (auto it = st.handles.find(device); it != st.handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  FP8ROUTE_CUBLAS_CHECK(cublasLtCreate(&h));
  st.handles.emplace(device, h);
  return h;
}

// The Plan that holds `config` for p with these operands.
Plan* plan_locked(State& st, int device, cublasLtHandle_t handle, const GemmProblem& p,
                  const GemmOperands& ops, int config) {
  const bool precise = precise_family(config);
  const uint32_t align =
      precise ? std::min({pointer_alignment(ops.a), pointer_alignment(ops.b), pointer_alignment(ops.out)})
              : kMinAlignBytes;
  const Key key{device, p.m, p.n, p.k, ops.lda, ops.ldb, ops.ldo, p.scale,
                p.sa_vector, p.sb_vector, p.bias, p.out, precise, align};
  auto it = st.plans.find(key);
  if (it == st.plans.end()) it = st.plans.emplace(key, make_plan(handle, p, ops, precise, align)).first;
  return it->second.get();
}

// The Plan of p with packed operands (lda = ldb = K, ldo = N), made once and cached: what
// supports() and describe() ask about. A host-side query, safe under capture. cuBLASLt rejects null
// scale pointers with OUTER_VEC (INVALID_VALUE) but never dereferences them in the heuristic: a
// stand-in 256-byte aligned address serves. The operands' null stand-ins count as 256-byte aligned,
// as fresh allocations are.
const Plan* packed_plan(const GemmProblem& p, int config) {
  int device = 0;
  FP8ROUTE_CUDA_CHECK(cudaGetDevice(&device));
  static const float* const kStandIn = reinterpret_cast<const float*>(uintptr_t{256});
  GemmOperands packed;
  packed.lda = p.k, packed.ldb = p.k, packed.ldo = p.n;
  packed.sa = packed.sb = kStandIn;
  packed.bias = p.bias ? kStandIn : nullptr;
  State& st = state();
  const std::lock_guard lock(st.mu);
  return plan_locked(st, device, handle_locked(st, device), p, packed, config);
}

// One attribute of an algorithm's config, whatever its width (int32, uint32 or uint16: the header's
// comments); the query's size must match the attribute's exactly, so it is asked first.
int64_t algo_attribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  size_t size = 0;
  FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, nullptr, 0, &size));
  int64_t v = 0;  // little-endian: the low bytes hold the value; int32 IDs and counts are >= 0
  FP8ROUTE_CHECK_CAT(size > 0 && size <= sizeof(v), ErrorCategory::cuda_error,
                     "cuBLASLt algo attribute " << static_cast<int>(attr) << " has " << size << " bytes");
  FP8ROUTE_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, size, &size));
  return v;
}

// ---- the backend ---------------------------------------------------------------------------------

class CublasLtBackend final : public GemmBackend {
 public:
  std::string_view name() const override { return "cublaslt"; }

  const std::vector<std::string>& configs() const override {
    static const std::vector<std::string> c(kConfigNames.begin(), kConfigNames.end());
    return c;
  }

  // cuBLASLt ranks its algorithms per shape, so a neighbour's heuristicN win says nothing here.
  std::vector<int> probe_configs(const GemmProblem& /*p*/) const override { return all_configs(); }
  // "heuristicN" (and "ws1mN", "preciseN") is the N-th algorithm its heuristic ranks for the
  // problem at hand.
  bool ranks_configs_per_problem() const override { return true; }
  // Each family's first answer is cuBLASLt's own choice for its request at any problem; "ws1m" is
  // not (the first algorithm no "heuristicN" runs).
  bool carries_over(int config) const override { return config == 0 || config == kFirstPrecise; }
  // BLK128x128_32F reads scale_b with a row stride of ceil(K/128) rounded up to 4 (supports()).
  bool wants_padded_block_scale_b() const override { return true; }
  // CUBLASLT_MATMUL_DESC_FAST_ACCUM as modes() sets it (on for tensor and row scales, off for block
  // scales), but off in every "preciseN" config.
  Accum accum(const GemmProblem& p, int config) const override {
    return modes(p).fast_accum && !precise_family(config) ? Accum::fast : Accum::precise;
  }

  // Static rules, then (with a GPU) whether cuBLASLt's heuristic has a config-th algorithm.
  std::string supports(const GemmProblem& p, int config) const override {
    if (std::string why = common_fast_path_reason(p); !why.empty()) return why;
    constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
    if (p.m > kMaxInt || p.n > kMaxInt || p.k > kMaxInt)
      return "cuBLASLt: M, N and K must each fit int32, got m=" + std::to_string(p.m) +
             " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k);
    // FP8 needs every dimension 16-byte aligned (cuBLAS docs, cublasLtMatmul FP8 requirements and
    // "Tensor Core Usage"): K bytes of a row of a and b, N 2-byte elements of a column of y^T.
    if (p.k % 16 != 0) return "cuBLASLt FP8 needs K % 16 == 0, got k=" + std::to_string(p.k);
    if (p.n % 8 != 0)
      return "cuBLASLt FP8 needs N % 8 == 0 (16-byte columns of y^T), got n=" + std::to_string(p.n);
    if (p.scale == ScaleKind::row && (p.sa_vector || p.sb_vector) &&
        !((p.sa_vector || p.m == 1) && (p.sb_vector || p.n == 1)))
      return "cuBLASLt row scaling (OUTER_VEC_32F) needs vectors for both scale_a and scale_b "
             "(cuBLAS docs 3.1.4.3), got one scalar";
    if (precise_family(config) && p.scale == ScaleKind::block)
      return "cuBLASLt's block scaling accumulates precisely in every config: heuristicN and ws1mN run it";
    if (p.scale == ScaleKind::block) {
      if (p.m % 4 != 0 || p.n % 4 != 0)
        return "cuBLASLt block scaling needs M and N multiples of 4 (cuBLAS docs 3.1.4.5.1), got m=" +
               std::to_string(p.m) + " n=" + std::to_string(p.n);
      const int64_t kb = (p.k + kScaleBlock - 1) / kScaleBlock;
      if (kb % 4 != 0 && !p.sb_padded && p.n > kScaleBlock)  // one row of blocks: no stride read
        return "cuBLASLt BLK128x128_32F reads scale_b with a row stride of ceil(K/128) rounded up to 4 "
               "(cuBLAS docs 3.1.4.5.1); an unpadded scale_b matches only when ceil(K/128) % 4 == 0, got "
               "ceil(K/128)=" + std::to_string(kb) + " (pass the padded form; LinearPlan prepares it)";
    }
    // Outer-vector and 128-block scaling exist on SM 9.0 only (cuBLAS docs 3.1.4); the backend is
    // built and measured for SM 9.0. No GPU here: the static rules above are all we can say.
    if (cuda_device_count() == 0) return "";
    if (!device_info(0).is_sm90())
      return "cuBLASLt backend needs SM 9.0 (Hopper); device 0 is SM " +
             std::to_string(device_info(0).sm_major) + "." + std::to_string(device_info(0).sm_minor);
    // Whether the heuristic has an algorithm (the router must know before it commits).
    const Plan* plan = packed_plan(p, config);
    if (!plan->algos[config])
      return "cuBLASLt's heuristic offers " + std::to_string(plan->offered()) +
             " algorithm(s) for this problem, none ranked as " + kConfigNames[config];
    return "";
  }

  // The algorithm behind "heuristicN" for p, by its attributes (cuBLAS docs,
  // cublasLtMatmulAlgoConfigAttributes_t; the enums' numbers): the heuristic's ranking can change with
  // the cuBLASLt version, so a table's config names the rank and this names what ran. The precise
  // family's algorithm may be one a fast config also runs, with another accumulation: " accum=precise"
  // says which. "" without an SM 9.0 GPU or when the rank has no algorithm.
  std::string describe(const GemmProblem& p, int config) const override {
    if (!supports(p, config).empty() || cuda_device_count() == 0) return "";
    const cublasLtMatmulAlgo_t& algo = *packed_plan(p, config)->algos[config];
    std::string s;
    for (const auto& [attr, label] :
         {std::pair{CUBLASLT_ALGO_CONFIG_ID, "algo"}, {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile"},
          {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages"}, {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk"},
          {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "reduction"}, {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle"},
          {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "custom"}, {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner"},
          {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster"}})
      s += (s.empty() ? "" : " ") + std::string(label) + "=" + std::to_string(algo_attribute(algo, attr));
    if (accum(p, config) == Accum::precise && modes(p).fast_accum) s += " accum=precise";
    return s;
  }

  void run(const GemmProblem& p, const GemmOperands& ops_in, int config, cudaStream_t stream) const override {
    int device = 0;
    FP8ROUTE_CUDA_CHECK(cudaGetDevice(&device));
    const std::string who = std::string("cublaslt/") + kConfigNames[config];
    const GemmOperands ops = with_aligned_scales(p, ops_in, stream, who);
    State& st = state();
    cublasLtHandle_t handle = nullptr;
    Plan* plan = nullptr;
    {
      const std::lock_guard lock(st.mu);
      handle = handle_locked(st, device);
      plan = plan_locked(st, device, handle, p, ops, config);
    }
    FP8ROUTE_CHECK_CAT(plan->algos[config].has_value(), ErrorCategory::unsupported,
                       "cublaslt/" << kConfigNames[config] << ": cuBLASLt's heuristic offers "
                                   << plan->offered() << " algorithm(s) for " << to_string(p)
                                   << ", none ranked as " << kConfigNames[config]
                                   << " (lda=" << ops.lda << " ldb=" << ops.ldb << " ldo=" << ops.ldo << ")");
    const size_t ws_bytes = plan->workspace[config];
    void* ws = ws_bytes == 0 ? nullptr : st.workspaces.get(device, ws_bytes, stream, who);
    const float one = 1.f, zero = 0.f;
    const std::lock_guard lock(plan->mu);
    set_pointers(plan->desc.get(), p, ops);
    const cublasStatus_t s =
        cublasLtMatmul(handle, plan->desc.get(), &one, ops.b, plan->a.get(), ops.a, plan->b.get(),
                       &zero, ops.out, plan->d.get(), ops.out, plan->d.get(), &*plan->algos[config], ws,
                       ws_bytes, stream);
    FP8ROUTE_CHECK_CAT(s == CUBLAS_STATUS_SUCCESS, ErrorCategory::cuda_error,
                       "cublasLtMatmul failed: " << cublasLtGetStatusName(s) << " ("
                           << cublasLtGetStatusString(s) << ") for " << to_string(p) << ", config "
                           << kConfigNames[config]);
  }
};

}  // namespace

const GemmBackend& cublaslt_backend() {
  static const CublasLtBackend b;
  return b;
}

}  // namespace fp8route::gemm
