#pragma once
// LinearPlan (docs/design.md, LinearPlan): one per FP8 linear layer, made once at load time from the
// weight, its scales and how the activations will be scaled. It decides which backends can ever
// run the layer, prepares the scale forms those backends need (so no call broadcasts or pads a
// weight scale), and keeps the routing table's slice for its (N, K). A call only looks M up.
//
// | act scale | weight_scale                          | GEMM run                  | prepared at load           |
// | tensor    | one element                           | tensor                    | -                          |
// | tensor    | [N] per channel                       | row, scalar x vector      | - (cuBLASLt cannot run it) |
// | row       | [N] per channel                       | row, vector x vector      | -                          |
// | row       | one element (per-tensor checkpoint)   | row, vector x vector      | weight scale as an [N] vector |
// | block     | [ceil(N/128), ceil(K/128)] 128x128    | block                     | rows padded to 4 for cuBLASLt, when ceil(K/128) % 4 != 0 |
//
// The decision for M (route(m)) and the operands run(...) passes are one decision: run() takes
// the route of its M, passes the scale form that route's backend reads, and checks that the
// problem it runs is the one the route was chosen for.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fp8route/buffer.h"
#include "fp8route/gemm.h"
#include "fp8route/probe.h"
#include "fp8route/router.h"
#include "fp8route/tensor.h"

namespace fp8route {

// What a layer looks like to the router, without its device memory: the CPU-side half of a
// LinearPlan (LinearPlan::layout()).
struct LinearLayout {
  int64_t n = 0, k = 0;
  ScaleKind act = ScaleKind::row;  // how activations are scaled
  ScaleKind gemm = ScaleKind::row; // the scale kind of the GEMM that runs
  DType out = DType::bf16;
  bool bias = false;
  bool weight_scale_vector = false;  // row/tensor: weight scale per channel
  bool expand_weight_scale = false;  // a scalar weight scale is broadcast to [N] at load
  bool pad_weight_scale = false;     // block: a padded copy is made for cuBLASLt
  std::vector<std::string> backends; // those that can run the layer for some M
  std::string excluded;              // "backend: reason; ..." for the others
  // The accumulation class the layer's calls ask for (Accum in gemm.h); the backends above are
  // those that can run the layer in some class, and routing keeps each M to this one.
  Accum accum = Accum::fast;

  // The problem a call with m rows and alignment `align` runs on `backend` (scale form included).
  GemmProblem problem(int64_t m, int align, const std::string& backend) const;
};


class LinearPlan {
 public:
  // weight: e4m3 [N, K]; weight_scale: f32 as in the table above; bias: optional [N] in out's
  // dtype. They stay owned by the caller and must outlive the plan. router: default_router() when
  // null; then a shape the table has no exact entry for is routed by this GPU's timings of it, from
  // the probe cache or probed here once (automatic probing, route.h; autoprobe_config() turns it
  // off). accum: the class every call asks for (Accum in gemm.h): precise routes each M among
  // precise-class configs only, fast (the default) among all. Load-time work (a copy of a scale)
  // is done on `stream` and waited for (a layer that needs none touches no device memory); a probe
  // times on a stream of its own. Throws Error(invalid_argument) naming the argument when something
  // does not fit.
  LinearPlan(TensorView weight, TensorView weight_scale, ScaleKind act, DType out,
             TensorView bias = {}, std::shared_ptr<const Router> router = nullptr,
             cudaStream_t stream = nullptr, Accum accum = Accum::fast);

  // out[M, N] = a[M, K] @ weight^T, scaled (+ bias). a: e4m3 [M, K]; a_scale f32: tensor: one
  // element; row: [M] (or one element); block: every form scaled_mm takes (gemm.h): the physical
  // [ceil(K/128), align(M, 4)] M-major buffer (what col_major_tma group quant writes), its
  // [M, ceil(K/128)] transpose view, read in place, or any other [M, ceil(K/128)] view (K-major,
  // M-major with another row stride), gathered on `stream` into scratch of the stream or the graph
  // being captured, as scaled_mm does. out: out dtype [M, N]. Enqueued on `stream`;
  // graph-capturable after the first call of a given M on the stream (see scaled_mm).
  void run(TensorView a, TensorView a_scale, TensorView out, cudaStream_t stream) const;

  // Times the layer's routing candidates of its accumulation class on this GPU (probe_shape in
  // route.h, with the scale form each backend will be given) and routes by those times from then on: at the M of opt.m_grid
  // where the table has no exact entry serving (a shape it lacks; an M beyond its entry's largest),
  // or at every M with opt.always. Load-time work, like the constructor: call it before run() and
  // before capturing a graph, never concurrently with run() or route(). Returns what it measured
  // (empty when no M needed it), to keep or to merge into a table (Router::with_measurements).
  std::vector<MeasurementRecord> probe(const ProbeOptions& opt = {});

  // The route run() takes for M rows (16-byte aligned operands; `align` otherwise).
  Route route(int64_t m, int align = 16) const;
  // The layout, the table slice, and router.explain() of the problem for M.
  std::string explain(int64_t m) const;

  const LinearLayout& layout() const { return layout_; }
  const Router& router() const { return *router_; }

 private:
  struct Decided;
  const Decided& decide(int64_t m, int align) const;

  TensorView weight_, weight_scale_, bias_;
  LinearLayout layout_;
  DeviceBuffer prepared_scale_;  // the expanded or padded weight scale, when the layout needs one
  TensorView prepared_scale_view_;
  std::shared_ptr<const Router> router_;
  std::set<int64_t> probed_m_;  // the M probe() or the automatic probe measured
  std::string autoprobed_;      // where the automatic probe's timings came from ("" when none)
  struct Cache;
  std::shared_ptr<Cache> cache_;
};

}  // namespace fp8route
