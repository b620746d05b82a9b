// CPU reference of the grouped scaled GEMM: per expert, the dense reference on its rows.

#include "reference/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp8route/error.h"
#include "fp8route/reference.h"

namespace fp8route::ref {

std::vector<GroupRows> grouped_rows(GroupedForm form, std::span<const int32_t> groups, int64_t experts,
                                    int64_t rows) {
  std::vector<GroupRows> out(static_cast<size_t>(experts));
  if (form == GroupedForm::masked) {
    FP8ROUTE_CHECK(static_cast<int64_t>(groups.size()) == experts, "masked_m: expected " << experts << " counts");
    for (int64_t e = 0; e < experts; ++e) out[e] = {0, std::clamp<int64_t>(groups[e], 0, rows)};
    return out;
  }
  const bool with_start = static_cast<int64_t>(groups.size()) == experts + 1;
  FP8ROUTE_CHECK(with_start || static_cast<int64_t>(groups.size()) == experts,
                 "offsets: expected " << experts + 1 << " or " << experts << " values");
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t s = with_start ? groups[e] : (e == 0 ? 0 : groups[e - 1]);
    const int64_t end = with_start ? groups[e + 1] : groups[e];
    const int64_t cs = std::clamp<int64_t>(s, 0, rows);
    out[e] = {cs, std::clamp<int64_t>(end, cs, rows) - cs};
  }
  return out;
}

float grouped_block_scale_a(const GroupedProblemRef& p, int64_t be, int64_t t, int64_t kb) {
  GroupQuantSpec spec;
  spec.layout = p.sa_layout;
  const bool packed = !p.sa_packed.empty();
  if (packed) spec.rounding = ScaleRounding::pow2, spec.storage = ScaleStorage::ue8m0_packed;
  const bool masked = p.form == GroupedForm::masked;
  const QuantLayout L = quant_layout(spec, p.rows, p.k, masked ? std::max<int64_t>(p.experts, 1) : 0);
  const int64_t base = (masked ? be * L.scale_batch_stride : 0) + t * L.scale_stride_t;
  if (!packed) return p.sa_f32[base + kb * L.scale_stride_c];
  const uint32_t w = static_cast<uint32_t>(p.sa_packed[base + (kb / 4) * L.scale_stride_c]);
  return ue8m0_to_f32(static_cast<uint8_t>((w >> (8 * (kb % 4))) & 0xFF));
}

std::vector<float> grouped_scaled_mm(const GroupedProblemRef& p) {
  const bool masked = p.form == GroupedForm::masked;
  const int64_t E = p.experts, N = p.n, K = p.k;
  const int64_t out_rows = masked ? E * p.rows : p.rows;
  FP8ROUTE_CHECK(static_cast<int64_t>(p.a.size()) == out_rows * K, "a: expected " << out_rows * K << " codes");
  FP8ROUTE_CHECK(static_cast<int64_t>(p.b.size()) == E * N * K, "b: expected " << E * N * K << " codes");
  FP8ROUTE_CHECK(p.scale != ScaleKind::block || K % kScaleBlock == 0, "k: block scales need K % 128 == 0");
  std::vector<float> out(static_cast<size_t>(out_rows * N), std::numeric_limits<float>::quiet_NaN());
  const std::vector<GroupRows> groups = grouped_rows(p.form, p.groups, E, p.rows);
  const int64_t kb = (K + kScaleBlock - 1) / kScaleBlock, nb = (N + kScaleBlock - 1) / kScaleBlock;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = groups[e].count;
    if (m == 0) continue;
    const int64_t row0 = masked ? e * p.rows + groups[e].start : groups[e].start;  // in a's 2-D view
    const int64_t t0 = masked ? groups[e].start : groups[e].start;                  // row within the scale batch
    const std::span<const uint8_t> a = p.a.subspan(row0 * K, m * K);
    const std::span<const uint8_t> b = p.b.subspan(e * N * K, N * K);
    std::vector<float> sa, sb;
    switch (p.scale) {
      case ScaleKind::tensor:
        sa = {p.sa_f32.size() == 1 ? p.sa_f32[0] : p.sa_f32[e]};
        sb = {p.sb[e]};
        break;
      case ScaleKind::row:
        sa.assign(p.sa_f32.begin() + (masked ? e * p.rows : 0) + t0, p.sa_f32.begin() + (masked ? e * p.rows : 0) + t0 + m);
        sb.assign(p.sb.begin() + e * N, p.sb.begin() + (e + 1) * N);
        break;
      case ScaleKind::block: {
        const int64_t m_pad = (m + 3) / 4 * 4;
        sa.assign(static_cast<size_t>(kb * m_pad), 0.0f);
        for (int64_t q = 0; q < kb; ++q)
          for (int64_t i = 0; i < m; ++i) sa[q * m_pad + i] = grouped_block_scale_a(p, masked ? e : 0, t0 + i, q);
        sb.assign(p.sb.begin() + e * nb * kb, p.sb.begin() + (e + 1) * nb * kb);
        break;
      }
    }
    const std::vector<float> y = scaled_mm(a, b, m, N, K, p.scale, sa, sb, {}, p.out);
    std::copy(y.begin(), y.end(), out.begin() + row0 * N);
  }
  return out;
}

}  // namespace fp8route::ref
