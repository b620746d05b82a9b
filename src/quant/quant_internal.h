#pragma once
// Knobs of the quantization launchers for benchmarks and tests only.

namespace fp8route::detail {
// Items per thread of the group kernel: 0 = the automatic rule, 1 or 4 to force one (not
// thread-safe; for benchmarks that re-measure the rule).
void force_group_items(int items);
}  // namespace fp8route::detail
