#pragma once
// Host-side grouped GEMM problems for the MoE suites: operands, device counts and scales in the
// layouts of include/fp8route/moe.h, drawn at random, with the CPU reference's view of them.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fp8route/moe.h"
#include "fp8route/quant_layout.h"
#include "fp8route/reference.h"
#include "reference/moe.h"

namespace fp8route::test {

struct MoeSpec {
  GroupedForm form = GroupedForm::contiguous;
  ScaleKind scale = ScaleKind::block;
  DType out = DType::bf16;
  ScaleLayout layout = ScaleLayout::col_major_tma;
  bool packed = false;         // block: scale_a as packed UE8M0 words
  bool offsets_ends = false;   // contiguous: offsets [E] (ends only)
  bool sa_per_expert = true;   // tensor: scale_a [E] (false: one element)
  bool small_integers = false; // codes in [-4, 4], power-of-two scales: every product and sum exact
  int64_t experts = 4, rows = 64, n = 96, k = 256;
  std::vector<int32_t> groups;  // offsets or masked_m; empty: drawn
};

// Every form, output dtype, scale kind, scale_a layout and storage, and offsets form, on one small
// problem (5 experts, 77 rows, N 200, K 640: a partial weight block, packed scales over two words).
inline std::vector<MoeSpec> every_moe_kind(bool small_integers) {
  std::vector<MoeSpec> out;
  for (GroupedForm form : {GroupedForm::contiguous, GroupedForm::masked})
    for (DType dt : {DType::bf16, DType::f16}) {
      MoeSpec s;
      s.form = form, s.out = dt, s.small_integers = small_integers;
      s.experts = 5, s.rows = 77, s.n = 200, s.k = 640;
      for (bool per_expert : {false, true}) {
        s.scale = ScaleKind::tensor, s.sa_per_expert = per_expert;
        out.push_back(s);
      }
      s.scale = ScaleKind::row;
      out.push_back(s);
      s.scale = ScaleKind::block;
      for (ScaleLayout l : {ScaleLayout::row_major, ScaleLayout::col_major, ScaleLayout::col_major_tma})
        for (bool packed : {false, true}) {
          s.layout = l, s.packed = packed;
          out.push_back(s);
        }
      if (form == GroupedForm::contiguous) {
        s.offsets_ends = true;
        out.push_back(s);
      }
    }
  return out;
}

inline std::string to_string(const MoeSpec& s) {
  std::string r = std::string(name(s.form)) + "." + std::string(name(s.scale)) + "." +
                  std::string(dtype_name(s.out)) + ".e" + std::to_string(s.experts) + ".m" + std::to_string(s.rows) +
                  ".n" + std::to_string(s.n) + ".k" + std::to_string(s.k);
  if (s.scale == ScaleKind::block) r += "." + std::string(name(s.layout)) + (s.packed ? ".ue8m0" : ".f32");
  if (s.scale == ScaleKind::tensor) r += s.sa_per_expert ? ".sa_per_expert" : ".sa_scalar";
  if (s.form == GroupedForm::contiguous && s.offsets_ends) r += ".ends";
  return r;
}

struct MoeCase {
  MoeSpec spec;
  std::vector<uint8_t> a, b;
  std::vector<int32_t> groups;
  std::vector<float> sa_f32, sb;
  std::vector<int32_t> sa_packed;
  QuantLayout sa_layout{};  // block

  GroupQuantSpec quant_spec() const {
    GroupQuantSpec q;
    q.layout = spec.layout;
    if (spec.packed) q.rounding = ScaleRounding::pow2, q.storage = ScaleStorage::ue8m0_packed;
    return q;
  }
  bool masked() const { return spec.form == GroupedForm::masked; }
  int64_t a_rows() const { return masked() ? spec.experts * spec.rows : spec.rows; }

  ref::GroupedProblemRef view() const {
    ref::GroupedProblemRef p;
    p.form = spec.form;
    p.experts = spec.experts, p.rows = spec.rows, p.n = spec.n, p.k = spec.k;
    p.scale = spec.scale;
    p.out = spec.out;
    p.a = a, p.b = b, p.groups = groups;
    if (spec.packed) p.sa_packed = sa_packed;
    else p.sa_f32 = sa_f32;
    p.sa_layout = spec.layout;
    p.sb = sb;
    return p;
  }
};

// Uneven groups over `rows` for E experts: some empty, one possibly holding most rows.
inline std::vector<int32_t> random_counts(int64_t experts, int64_t rows, std::mt19937_64& rng) {
  std::vector<int32_t> c(static_cast<size_t>(experts), 0);
  if (experts == 0) return c;
  std::uniform_int_distribution<int64_t> pick(0, experts - 1);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int64_t r = 0; r < rows; ++r) {
    // Skewed: a quarter of the rows go to expert 0, the rest spread; then a few experts emptied.
    const int64_t e = coin(rng) == 0 ? 0 : pick(rng);
    ++c[e];
  }
  return c;
}

inline MoeCase make_moe_case(const MoeSpec& s, std::mt19937_64& rng) {
  MoeCase c;
  c.spec = s;
  const int64_t E = s.experts, N = s.n, K = s.k;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-4, 4), ex(-4, 4), pow2e(-9, -5);
  auto code = [&] {
    return s.small_integers ? ref::e4m3_encode(float(small(rng))) : ref::e4m3_encode(std::ldexp(nd(rng), ex(rng)) * 8.0f);
  };
  auto scale = [&] {
    if (s.small_integers) return std::ldexp(1.0f, pow2e(rng));
    return std::ldexp(std::uniform_real_distribution<float>(1.0f, 4.0f)(rng), -8);
  };
  // Operands of real layer sizes (a weight of hundreds of MB) are filled with random finite codes,
  // eight per draw: the tests that use them compare bits against the dense kernel, any data does.
  auto fill = [&](std::vector<uint8_t>& v, int64_t n) {
    v.resize(static_cast<size_t>(n));
    if (s.small_integers || n < (int64_t{1} << 24)) {
      for (uint8_t& x : v) x = code();
      return;
    }
    for (int64_t i = 0; i < n; i += 8) {
      uint64_t r = rng();
      for (int64_t j = i; j < std::min(n, i + 8); ++j, r >>= 8) v[j] = (r & 0x7F) == 0x7F ? 0 : uint8_t(r);
    }
  };
  fill(c.a, c.a_rows() * K);
  fill(c.b, E * N * K);

  // Device counts.
  if (!s.groups.empty()) {
    c.groups = s.groups;
  } else if (c.masked()) {
    std::uniform_int_distribution<int64_t> m(0, s.rows);
    c.groups.resize(static_cast<size_t>(E));
    for (int32_t& v : c.groups) v = static_cast<int32_t>(m(rng));
    if (E > 1) c.groups[1] = 0;  // an empty expert
  } else {
    const std::vector<int32_t> counts = random_counts(E, s.rows, rng);
    int32_t run = 0;
    if (!s.offsets_ends) c.groups.push_back(0);
    for (int32_t n : counts) c.groups.push_back(run += n);
  }

  // Scales.
  switch (s.scale) {
    case ScaleKind::tensor:
      c.sa_f32.resize(s.sa_per_expert ? static_cast<size_t>(E) : 1);
      for (float& v : c.sa_f32) v = scale();
      c.sb.resize(static_cast<size_t>(E));
      for (float& v : c.sb) v = scale();
      break;
    case ScaleKind::row:
      c.sa_f32.resize(static_cast<size_t>(c.a_rows()));
      for (float& v : c.sa_f32) v = scale();
      c.sb.resize(static_cast<size_t>(E * N));
      for (float& v : c.sb) v = scale();
      break;
    case ScaleKind::block: {
      const GroupQuantSpec q = c.quant_spec();
      c.sa_layout = quant_layout(q, s.rows, K, c.masked() ? std::max<int64_t>(E, 1) : 0);
      const QuantLayout& L = c.sa_layout;
      const int64_t batches = c.masked() ? E : 1, groups = K / 128;
      std::uniform_int_distribution<int> byte(s.small_integers ? 124 : 118, s.small_integers ? 127 : 130);
      if (s.packed) c.sa_packed.assign(static_cast<size_t>(L.scale_elems), 0);
      else c.sa_f32.assign(static_cast<size_t>(L.scale_elems), 0.0f);
      for (int64_t be = 0; be < batches; ++be)
        for (int64_t t = 0; t < s.rows; ++t)
          for (int64_t g = 0; g < groups; ++g) {
            const int64_t base = be * L.scale_batch_stride + t * L.scale_stride_t;
            if (s.packed) {
              const uint32_t e8 = static_cast<uint32_t>(byte(rng));
              uint32_t& w = reinterpret_cast<uint32_t&>(c.sa_packed[base + (g / 4) * L.scale_stride_c]);
              w |= e8 << (8 * (g % 4));
            } else {
              c.sa_f32[base + g * L.scale_stride_c] = scale();
            }
          }
      const int64_t nb = (N + 127) / 128;
      c.sb.resize(static_cast<size_t>(E * nb * groups));
      for (float& v : c.sb) v = scale();
      break;
    }
  }
  return c;
}

}  // namespace fp8route::test
