#pragma once
// The interface every GEMM backend implements (docs/design.md): what it can run, kept apart from
// running it. Internal to the library; the public face is fp8route/gemm.h.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fp8route/gemm.h"

namespace fp8route::gemm {

// Validated device operands of one call (check_scaled_mm has run). Leading dimensions in elements.
struct GemmOperands {
  const uint8_t* a = nullptr;  // e4m3 [M, K], row stride lda
  int64_t lda = 0;
  const uint8_t* b = nullptr;  // e4m3 [N, K], row stride ldb
  int64_t ldb = 0;
  const float* sa = nullptr;   // layout per GemmProblem::scale (gemm.h)
  const float* sb = nullptr;
  const void* bias = nullptr;  // [N] in out's dtype, or null
  void* out = nullptr;         // [M, N], row stride ldo
  int64_t ldo = 0;
};

// The operands of checked arguments (check_scaled_mm has accepted them), engine forms read in place
// (gemm.h); a block scale_a that must be gathered is an Error(invalid_argument) naming it.
GemmOperands operands_of(const ScaledMmArgs& args);
// The same, with such a block scale_a gathered on `stream` into scratch of the stream or of the
// graph being captured (gemm/stage_scales.h), as scaled_mm() runs it. p = check_scaled_mm(args).
GemmOperands staged_operands_of(const ScaledMmArgs& args, const GemmProblem& p, cudaStream_t stream,
                                const std::string& who);

// How a call may be run beyond what its problem says.
struct RunOptions {
  // b, scale_b and bias were not written by the kernel enqueued just before on the stream (a
  // layer's weights, written at load time): a backend that launches with programmatic dependent
  // launch may start reading them before that kernel finishes.
  bool static_weight = false;
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual std::string_view name() const = 0;
  // Config names, listed once per backend; run/supports take an index into this list.
  virtual const std::vector<std::string>& configs() const = 0;
  // "" when config `config` can run `p`; otherwise the reason, one line, naming the rule.
  virtual std::string supports(const GemmProblem& p, int config) const = 0;
  // Enqueues the GEMM. Precondition: supports(p, config) == "" and ops match p.
  virtual void run(const GemmProblem& p, const GemmOperands& ops, int config,
                   cudaStream_t stream) const = 0;
  // run() with options; backends that make no use of them run().
  virtual void run_with(const GemmProblem& p, const GemmOperands& ops, int config, const RunOptions& /*opt*/,
                        cudaStream_t stream) const {
    run(p, ops, config, stream);
  }
  // The configs a load-time probe times for p besides the table's guesses (Router::probe_candidates):
  // those whose speed on p a neighbouring shape's measurement does not tell. None by default.
  virtual std::vector<int> probe_configs(const GemmProblem& /*p*/) const { return {}; }
  // Every config: for backends whose configs are few or ranked per shape.
  std::vector<int> all_configs() const {
    std::vector<int> v(configs().size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i);
    return v;
  }
  // Rows of a (tokens, M) one tile of the config covers, when its time steps with ceil(M / tile)
  // (a CUTLASS tile: tile_m, or tile_n for swap-AB); 0 when it does not say.
  virtual int m_tile(int /*config*/) const { return 0; }
  // What config runs for p on this GPU, in words, when its name does not say it all (cuBLASLt's
  // "heuristicN" is a rank in a list the library computes); "" otherwise.
  virtual std::string describe(const GemmProblem& /*p*/, int /*config*/) const { return ""; }

  // Properties the router, LinearPlan and the tools ask instead of naming a backend:
  // Its configs are ranks in a list it computes for each problem, the first being its own choice
  // (cuBLASLt: "heuristic", then "heuristic1..3"): a later rank's time on one problem says nothing
  // of another M or shape (another problem, another algorithm), so the router carries only its own
  // choices (carries_over) to neighbours, and a bench of the backend alone includes the first.
  virtual bool ranks_configs_per_problem() const { return false; }
  // Whether a time of `config` at one problem speaks for it at another M or shape: a fixed kernel
  // does, and so does a ranking backend's own choice for each problem (its first config; cuBLASLt's
  // "precise" too, the first answer to the request torch makes), but not a later rank.
  virtual bool carries_over(int config) const { return !ranks_configs_per_problem() || config == 0; }
  // Block scale_b: it reads the form with rows padded to a multiple of 4 floats
  // (GemmProblem::sb_padded), and cannot take the unpadded one where ceil(K/128) % 4 != 0 and
  // N > 128 (cuBLASLt's BLK128x128 layout). LinearPlan prepares that copy at load for it alone.
  virtual bool wants_padded_block_scale_b() const { return false; }
  // It runs every valid problem, on CUDA cores, tens of times slower than the others (the
  // reference kernel): gemm_select()'s last resort, never a measured routing choice (table build
  // leaves its timings out), and the "slow path" of explain().
  virtual bool slow_fallback() const { return false; }
  // Config `config` writes the same bits on every run of one problem with the same operands on one
  // GPU: no float atomics, no sum whose order depends on which block finishes first. A config that
  // is not (a split-K reduced with atomicAdd, say) must override this; tests/test_determinism.cpp
  // holds every config that claims it to 100 identical runs. The built-in ones all do: skinny and
  // decode sum their K splits in split order, CUTLASS's stream-K reduces in its deterministic mode
  // (the default of its scheduler arguments), cuBLASLt gives the same bits for one library
  // version, GPU model and workspace per stream (cuBLAS docs, Results reproducibility), and the
  // reference kernel sums K in order.
  virtual bool deterministic(int /*config*/) const { return true; }
  // How config `config` accumulates on p (fp8route::Accum). The default, precise, holds for kernels
  // that add each K block's MMA result (at most 128 of K) into fp32 totals (skinny, decode) and for
  // the reference kernel (fp32 throughout); a config whose tensor-core accumulator runs across K
  // blocks without that promotion must say fast.
  virtual Accum accum(const GemmProblem& /*p*/, int /*config*/) const { return Accum::precise; }
};

// The names of a backend's config table, in its order: config_name(entry) for each entry.
template <class Table>
std::vector<std::string> config_names(const Table& table) {
  std::vector<std::string> v;
  for (const auto& c : table) v.push_back(config_name(c));
  return v;
}

// One instance of each backend, defined next to its implementation.
const GemmBackend& cublaslt_backend();
const GemmBackend& cutlass_sm90_backend();
const GemmBackend& skinny_backend();
const GemmBackend& decode_backend();
const GemmBackend& wgmma_backend();
const GemmBackend& reference_backend();

// Every backend of this build, in a fixed order.
const std::vector<const GemmBackend*>& all_backends();
// By name; throws Error(invalid_argument) listing the names when unknown.
const GemmBackend& find_backend(std::string_view name);
// Index of `config` in b.configs() ("" = the first); throws Error(invalid_argument) listing them.
int find_config(const GemmBackend& b, std::string_view config);
// GemmBackend::m_tile by names; 0 for a backend or config this build does not have (a table made
// by another build may name one).
int config_m_tile(std::string_view backend, std::string_view config);
// GemmBackend::carries_over by names; true for a backend this build does not have, and for a config
// it does not have unless the backend ranks its configs per problem.
bool config_carries_over(std::string_view backend, std::string_view config);

// Why backend/config cannot run p for its accumulation class: "" unless p.accum is precise and the
// config is of the fast class (or names a backend or config this build lacks: "" too, supports()
// says why).
std::string accum_reason(std::string_view backend, std::string_view config, const GemmProblem& p);
std::string accum_reason(const GemmBackend& b, int config, const GemmProblem& p);
// Why config `config` of b cannot run p: accum_reason, quarantine_reason, then b.supports(); ""
// when it can.
std::string cannot_run_reason(const GemmBackend& b, int config, const GemmProblem& p);

// A (backend, config) that did not finish within its bound when timed on a shape (fp8route/tuning/measure.h)
// is never run on that shape (scale kind, out dtype, N, K) again in this process: the router skips
// it as it skips any config that cannot run a problem, and a call that names it is refused.
void quarantine(std::string_view backend, std::string_view config, const GemmProblem& p, const std::string& why);
// Why (backend, config) is quarantined for p's shape; "" when it is not.
std::string quarantine_reason(std::string_view backend, std::string_view config, const GemmProblem& p);
// Throws Error(invalid_argument) naming `accum` unless a is Accum::fast or Accum::precise.
void check_accum(Accum a);

// The rule every fast backend shares (a, b and out 16-byte aligned, GemmProblem::align): "" or why not.
std::string common_fast_path_reason(const GemmProblem& p);
// The kernels are built for sm_90a: "" when the current device is an SM90 GPU, else why not (no
// GPU, or another architecture).
std::string sm90_device_reason();
// Every backend but cuBLASLt reads block scale_b unpadded: "" or why not (GemmProblem::sb_padded).
std::string unpadded_scale_b_reason(const GemmProblem& p);

// ops with scale_a, scale_b and bias at 16-byte aligned addresses, for the backends whose kernels
// may read them with vector loads or TMA (cuBLASLt documents no alignment for them and may
// vectorize; CUTLASS's blockwise mainloop loads block scales with TMA, and its epilogue broadcasts
// assume 16 bytes): each operand that is only element-aligned (a slice of a larger tensor) is copied
// on `stream` into scratch of the stream or the graph being captured (core/workspace.h), an
// M-, N- or block-scale-sized copy. Aligned operands pass as they are, at no cost.
GemmOperands with_aligned_scales(const GemmProblem& p, const GemmOperands& ops, cudaStream_t stream,
                                 const std::string& who);

}  // namespace fp8route::gemm
