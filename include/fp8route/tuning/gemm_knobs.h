#pragma once
// Launch knobs of the GEMM backends, for the benchmarks that measure their rules (not thread-safe
// with calls in flight).
//
// The decode backend's deep ring (src/gemm/decode/decode.cu, "The ring"): with static weights, a config that runs one
// block per SM in a one-wave grid deepens its weight ring up to the block's whole K slice, within a
// shared-memory budget, so that more of the weight is requested before griddepcontrol.wait. Off by
// default until measured in the chain (bench/decode_chain.py --deep-ring compares both); results are
// bit-identical either way. Applies to launches made afterwards (a captured graph keeps its own).

namespace fp8route::gemm {

void set_decode_deep_ring(bool enabled);
bool decode_deep_ring();

}  // namespace fp8route::gemm

namespace fp8route::moe {

// The grouped decode backend's K splits (src/moe/decode/decode.cu, plan): 0 (the default) follows
// its split rule; s in [1, 8] asks for s splits per item where they fit (else the rule), so that
// bench/moe_bench.py can time the split counts the rule chooses between. Results are bit-identical
// only for the same split count.
void set_grouped_decode_splits(int splits);
int grouped_decode_splits();

// The grouped decode backend's run-ahead split K (src/moe/decode/kernel.cuh): each item's split sums
// in an area of their own, handed over by cluster-scope barriers among the consumer warps, so that
// the producer streams the next item's tiles during the reduction (default: the sums reuse the ring
// and the producer waits); its split rule then counts a block's start and end once, not per wave.
// Off until measured (bench/moe_bench.py --decode-splits: decode@ra, decode@sNra); the outputs are
// bit-identical for the same split count.
void set_grouped_decode_run_ahead(bool enabled);
bool grouped_decode_run_ahead();

}  // namespace fp8route::moe
