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
// bench/moe_bench.py can time the split counts the rule chooses between; another value throws
// invalid_argument. Results are bit-identical only for the same split count.
void set_grouped_decode_splits(int splits);
int grouped_decode_splits();

}  // namespace fp8route::moe
