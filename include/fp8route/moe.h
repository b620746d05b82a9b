#pragma once
// Grouped scaled FP8 GEMM for mixture-of-experts layers (docs/moe.md):
//   out[r, n] = (sum_k a[r, k] * b[e, n, k]) * sa * sb[e]   for every row r of expert e's group,
// b = E4M3 [E, N, K] (each expert's nn.Linear weight), fp32 accumulation, out bf16 or f16, no bias.
//
// | form       | a               | groups (device int32)                      | out             |
// | contiguous | [M_total, K]    | offsets [E + 1] (start of 0, end of each)  | [M_total, N]    |
// |            |                 | or [E] (ends only: torch's `offs`)         |                 |
// | masked     | [E, M_max, K]   | masked_m [E]: rows [0, masked_m[e]) of e   | [E, M_max, N]   |
//
// No alignment of a group's rows is required. Rows of no group (before offsets[0], from the last
// end on, and masked rows past masked_m[e]) are never written and reach no output (a tensor-core
// backend may load their codes as part of a tile; docs/moe.md). Device counts are never
// read by the host: masked_m[e] is clamped to [0, M_max] and offsets to [0, M_total] (start <= end),
// so no value reads or writes out of bounds; offsets must be non-decreasing (overlapping groups give
// unspecified values in the overlap, never an access out of bounds).
//
// | scale kind | scale_a                                        | scale_b                             |
// | tensor     | f32, one element or [E]                         | f32 [E] (or [E, 1])                 |
// | row        | f32 [M_total] / [E, M_max] per token (or ,1)    | f32 [E, N] per channel (or [E,N,1]) |
// | block      | 1x128 groups: the `s` of group quant (below)    | f32 [E, ceil(N/128), ceil(K/128)]   |
//
// Block scale_a is what per_token_group_quant / scatter_per_token_group_quant (contiguous:
// quant_layout({128, ..}, M_total, K)) and masked_per_token_group_quant (masked:
// quant_layout({128, ..}, M_max, K, E)) write, in the layout named by scale_a_layout; f32 storage,
// or int32 for packed UE8M0 (byte e = 2^(e - 127)). Block scales need K % 128 == 0.
//
// a, b, scale_b, out and the group counts are contiguous; out shares no byte with an input. Every
// argument is checked before anything is enqueued and a bad one throws Error(invalid_argument)
// naming it (nothing is written). M_total = 0, M_max = 0, E = 0 or N = 0 enqueue nothing. Work is
// enqueued on `stream`, nothing synchronizes, and the launch does not depend on the device counts:
// it can be captured in a CUDA graph and replayed for any routing.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "fp8route/dtype.h"
#include "fp8route/quant_layout.h"
#include "fp8route/scale_kind.h"
#include "fp8route/table.h"
#include "fp8route/tensor.h"

namespace fp8route {

enum class GroupedForm : uint8_t { contiguous, masked };
std::string_view name(GroupedForm f);             // "contiguous", "masked"
GroupedForm parse_grouped_form(std::string_view s);  // throws Error(invalid_argument) naming `form`

// The one description of a grouped GEMM: error context, backend choice, benchmark rows. rows is
// M_total (contiguous) or M_max (masked); the device counts are not part of it.
struct GroupedProblem {
  GroupedForm form = GroupedForm::contiguous;
  int64_t experts = 0, rows = 0, n = 0, k = 0;
  ScaleKind scale = ScaleKind::tensor;
  DType out = DType::bf16;
  // tensor: scale_a is [E] (false: one element). row: scale_a per token (always true). block: true.
  bool sa_per_expert = false;
  // block: the layout and storage of scale_a (group quant's); unused otherwise.
  ScaleLayout sa_layout = ScaleLayout::col_major_tma;
  ScaleStorage sa_storage = ScaleStorage::f32;
  // contiguous: offsets has E + 1 entries (false: E ends).
  bool offsets_with_start = true;
  // Largest power of two <= 16 dividing, in bytes, the addresses of a and b and their row stride K.
  // The tensor-core backends read a and b with TMA and need 16; simt takes any.
  int align = 16;

  bool operator==(const GroupedProblem&) const = default;
};

// "masked block bf16 e=32 rows=64 n=4096 k=7168 sa=col_major_tma.ue8m0_packed"
std::string to_string(const GroupedProblem& p);

struct GroupedMmArgs {
  GroupedForm form = GroupedForm::contiguous;
  TensorView a;         // e4m3 [M_total, K] | [E, M_max, K]
  TensorView b;         // e4m3 [E, N, K]
  TensorView scale_a;   // see the table above
  TensorView scale_b;
  TensorView offsets;   // contiguous: i32 [E + 1] or [E]
  TensorView masked_m;  // masked: i32 [E]
  TensorView out;       // bf16 or f16 [M_total, N] | [E, M_max, N]
  ScaleKind scale = ScaleKind::block;
  ScaleLayout scale_a_layout = ScaleLayout::col_major_tma;  // block only
};

// Checks every argument (throws Error(invalid_argument) naming it) and describes the problem.
GroupedProblem check_grouped_scaled_mm(const GroupedMmArgs& args);

// The grouped GEMM on the default backend for the problem.
void grouped_scaled_mm(const GroupedMmArgs& args, cudaStream_t stream);

// The same on a named backend ("" = the default); throws Error(unsupported) with the backend's reason
// when it cannot run the problem, Error(invalid_argument) for an unknown name.
void grouped_scaled_mm(const GroupedMmArgs& args, std::string_view backend, cudaStream_t stream);

// Grouped backends in this build: "simt" (portable CUDA-core kernel, every valid problem, each
// expert bit-identical to scaled_mm's "reference" backend on its rows); "decode" (tensor cores,
// groups of at most 64 rows: masked M_max <= 64 or contiguous M_total <= 64, streams only the
// active experts' weights); "wgmma" (tensor cores, persistent 128-row tiles over (expert, n-tile,
// m-tile), any group sizes); "cutlass" (CUTLASS's pointer-array grouped GEMM, bf16 out, block scales
// with K % 128 == 0, in builds with the CUTLASS headers). The default (grouped_default_backend): the
// grouped routing table's choice where it has one, else decode while groups are short (masked
// M_max <= 8, contiguous M_total <= 16), else wgmma, else simt (docs/moe.md, Routing).
std::vector<std::string> grouped_backends();
// Why `backend` cannot run `p` on the current device, or "" when it can.
std::string grouped_supports(std::string_view backend, const GroupedProblem& p);
// The backend grouped_scaled_mm runs p with when none is named (docs/moe.md, Routing); "simt"
// where no tensor-core backend runs p, and without a GPU.
std::string grouped_default_backend(const GroupedProblem& p);
// Why: the table entry and measured rows it routes by and each backend's time there, or the rule.
std::string explain_grouped(const GroupedProblem& p);

// ---- Grouped routing tables (docs/moe.md, Routing) --------------------------------------------------
// Per (form, scale, out, E, N, K) of a layer: each grouped backend's time at measured rows (M_max
// masked, M_total contiguous), with the device counts drawn as `source` says (fp8route.tune_grouped:
// a model's top-k routing, uniform over its experts). A problem is routed by the entry of its form
// and scale (and out dtype, else the other) nearest in (E, N, K) (sum of |ln| ratios; an exact match
// is distance 0): at measured rows, the fastest measured backend there that supports it; between
// two measured rows, the backends measured at both ranked by their times interpolated linearly in
// rows, then the others measured at the upper; below or above the measured rows, the nearest end.
// No entry of its form and scale, or no measured backend that runs it: the rule above.
struct GroupedMeasured {
  int64_t rows = 0;
  std::string backend;
  double us = 0;
  bool operator==(const GroupedMeasured&) const = default;
};

struct GroupedTableEntry {
  GroupedForm form = GroupedForm::masked;
  ScaleKind scale = ScaleKind::block;
  DType out = DType::bf16;
  int64_t experts = 0, n = 0, k = 0;
  std::string source;  // the workload measured ("deepseek-v3 ep8 top_k 8 uniform"), informative
  std::vector<GroupedMeasured> measured;  // non-empty; (rows, backend) at most once
  bool operator==(const GroupedTableEntry&) const = default;
};

struct GroupedRoutingTable {
  TableStamp stamp;
  std::vector<GroupedTableEntry> entries;  // (form, scale, out, experts, n, k) at most once
  bool operator==(const GroupedRoutingTable&) const = default;
};

// Throws Error(io_error) naming the file, the JSON path and what is wrong (format
// "fp8route-grouped-table", version 1; the fields above; a backend this build lacks is an error).
GroupedRoutingTable load_grouped_table(const std::string& path);
void save_grouped_table(const GroupedRoutingTable& table, const std::string& path);

// The table's choice for p ("" when it has none), `supports` answering for a backend as
// grouped_supports does; *why (when given) says which entry, rows and times decided.
std::string grouped_table_choice(const GroupedRoutingTable& table, const GroupedProblem& p,
                                 const std::function<std::string(std::string_view)>& supports,
                                 std::string* why = nullptr);

// The process-wide grouped table, loaded at the first routed grouped call from
// default_grouped_table_path(): $FP8ROUTE_GROUPED_TABLE, else the first of
// default_grouped_table_files() that exists, looked for as default_table_path() looks for
// routes/h200.json: this GPU's (routes/h100-grouped.json on an H100, routes/h200-grouped.json on an
// H200), then the other's (a table of the other Hopper still ranks the backends better than the
// rule; its stamp says where it was measured). None found: the rule routes, and that is no error; a
// file that does not load: the rule routes and grouped_table_info() keeps the error.
std::vector<std::string> default_grouped_table_files();
std::string default_grouped_table_path();
// Replaces the process-wide grouped table with the one at `path` (throws as load_grouped_table,
// keeping the previous one); "" drops it (the rule routes every grouped call).
void load_default_grouped_table(const std::string& path);
struct GroupedTableInfo {
  std::string path;        // the file in use ("" none)
  std::string load_error;  // why the default file did not load ("" none)
  size_t entries = 0;
  TableStamp stamp;
};
GroupedTableInfo grouped_table_info();

// ---- Glue (docs/moe.md, "The glue kernels") -------------------------------------------------------
// The small steps around the grouped GEMMs of an MoE layer, one kernel each (the contiguous dispatch:
// three). The same
// argument rules as above: every argument is checked before anything is enqueued (a bad one throws
// Error(invalid_argument) naming it, nothing is written), tensors are contiguous device tensors on
// one device, outputs share no byte with an input, T = 0 enqueues nothing (except that
// moe_contiguous_dispatch writes its offsets), nothing synchronizes, and the device values (ids,
// src2dst) are never read by the host: any value is safe (out-of-range ids and rows are dropped,
// never used out of bounds).

// Bounds of the glue kernels: moe_softmax_topk holds one token's E probabilities in shared memory
// (one warp per token) and picks at most kMoeMaxTopK; moe_masked_dispatch runs in one thread block
// over all T * top_k entries (decode batches; moe_contiguous_dispatch takes any T).
inline constexpr int64_t kMoeMaxExperts = 1024;
inline constexpr int64_t kMoeMaxTopK = 16;
inline constexpr int64_t kMoeDispatchMaxEntries = 4096;

// Softmax routing (Qwen3-MoE, Mixtral): p = softmax(logits[t]) in fp32, the top_k largest p with
// their expert ids, weights renormalized to sum to 1 when `renormalize`. logits [T, E] bf16/f16/f32
// (1 <= E <= kMoeMaxExperts), weights f32 [T, top_k], ids int32 [T, top_k] (1 <= top_k <=
// min(E, kMoeMaxTopK)), in decreasing p; equal p: the lower expert index first. NaN logits give
// unspecified ids (always in [0, E)).
void moe_softmax_topk(const TensorView& logits, bool renormalize, const TensorView& weights, const TensorView& ids,
                      cudaStream_t stream);

// DeepSeek-V3 routing: s = sigmoid(logits[t]) in fp32 and the choice score c = s + bias (bias f32
// [E], the load-balancing correction); each of n_group groups of E / n_group (>= 2) experts is scored
// by the sum of its two best c, the topk_group best groups are kept (equal scores: the lower group),
// and the top_k largest c among their experts are chosen (equal c: the lower expert index), in
// decreasing c. Weights: s of the chosen, divided by their sum when `renormalize`, times
// scaling_factor (routed_scaling_factor). logits [T, E] bf16/f16/f32 (2 <= E <= kMoeMaxExperts),
// 1 <= n_group <= 32, 1 <= topk_group <= n_group, weights f32 and ids int32 [T, top_k] with 1 <= top_k
// <= min(topk_group * E / n_group, kMoeMaxTopK). NaN scores give unspecified ids (always in [0, E)).
void moe_grouped_topk(const TensorView& logits, const TensorView& bias, int64_t n_group, int64_t topk_group,
                      bool renormalize, double scaling_factor, const TensorView& weights, const TensorView& ids,
                      cudaStream_t stream);

// Masked dispatch: entry (t, j) of ids int32 [T, top_k] (T * top_k <= kMoeDispatchMaxEntries) goes to
// row e * m_max + pos of the [E * m_max] masked rows, e = ids[t, j] (mapped first through expert_map
// int32 [E_global] when given: global id -> local id or -1), pos = the number of earlier entries in
// row-major (t, j) order with the same e. src2dst int32 [T, top_k] gets that row, or -1 when
// pos >= m_max or e is outside [0, E) (-1 included; ids outside [0, E_global) with a map too).
// masked_m int32 [E] (E = its length) = each expert's entries, at most m_max; every element is
// written, except with T = 0, which enqueues nothing (give zeros). m_max >= 1, E * m_max < 2^31. The result does not depend on thread timing. An absent
// expert_map is the default TensorView.
void moe_masked_dispatch(const TensorView& ids, const TensorView& expert_map, int64_t m_max,
                         const TensorView& src2dst, const TensorView& masked_m, cudaStream_t stream);

// Routing and masked dispatch in one kernel (decode): moe_softmax_topk of logits (bias absent:
// n_group = topk_group = 1 and scaling_factor = 1 required) or moe_grouped_topk (bias given), then
// moe_masked_dispatch of the ids, in one thread block: weights, ids, src2dst and masked_m are what
// those two calls give, bit for bit, with the bounds of both (T * top_k <= kMoeDispatchMaxEntries).
// Up to 32 tokens (fewer for large E: 32 KB of routing scratch) are routed at once, one warp each;
// more are routed in turns, so for larger batches the two calls are faster.
void moe_route_masked_dispatch(const TensorView& logits, const TensorView& bias, int64_t n_group, int64_t topk_group,
                               bool renormalize, double scaling_factor, const TensorView& expert_map, int64_t m_max,
                               const TensorView& weights, const TensorView& ids, const TensorView& src2dst,
                               const TensorView& masked_m, cudaStream_t stream);

// Contiguous dispatch (prefill, EP "normal" dispatch): the entries of ids int32 [T, top_k], mapped
// first through expert_map int32 [E_global] when given (as moe_masked_dispatch), grouped by expert in
// row-major (t, j) order. offsets int32 [E + 1] (1 <= E <= kMoeMaxExperts) gets offsets[0] = 0 and
// offsets[e + 1] = the end of expert e's rows; src2dst int32 [T, top_k] = offsets[e] + pos (pos = the
// earlier entries of the same e), or -1 for an entry whose expert is outside [0, E) (-1 included).
// The rows of entries of no expert follow offsets[E] in no group: a [T * top_k, K] activation buffer
// holds every entry. workspace: int32, at least moe_contiguous_dispatch_workspace(T * top_k, E)
// elements (contents in and out unspecified; 0 for T = 0). Any T with T * top_k < 2^31 - 1024; every
// element of offsets is written, also for T = 0; three kernels, no atomics in global memory: the
// result is the same on every run.
int64_t moe_contiguous_dispatch_workspace(int64_t entries, int64_t experts);
void moe_contiguous_dispatch(const TensorView& ids, const TensorView& expert_map, const TensorView& src2dst,
                             const TensorView& offsets, const TensorView& workspace, cudaStream_t stream);

// Weighted combine: out[t] = sum over j of weights[t, j] * down_rows[src2dst[t, j]], accumulated in
// fp32 in j order from +0 (each product and sum rounded once, no FMA), then rounded once to out's
// dtype. down_rows [R, H] bf16 or f16 (rows 16-byte aligned: H % 8 == 0), src2dst int32 [T, top_k],
// weights f32 [T, top_k], out [T, H] f32 or down_rows' dtype. An entry whose row is outside [0, R)
// (-1: dropped) contributes nothing and its row is never read.
void moe_combine(const TensorView& down_rows, const TensorView& src2dst, const TensorView& weights,
                 const TensorView& out, cudaStream_t stream);

}  // namespace fp8route
