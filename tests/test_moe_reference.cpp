// The CPU reference of the grouped GEMM (src/reference/moe.cpp) against a direct fp64 loop written
// from docs/moe.md, on small-integer data where every product and sum is exact (only the output
// rounding remains), for every form, scale kind, scale_a layout and storage; and the row ranges the
// device counts give, clamping included. CPU only.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "fp8route/reference.h"
#include "moe_util.h"
#include "reference/moe.h"

namespace fp8route {
namespace {

using test::every_moe_kind;
using test::make_moe_case;
using test::MoeCase;
using test::MoeSpec;

uint64_t seed() {
  static const uint64_t s = std::random_device{}();
  return s;
}

// out[r, n] of docs/moe.md's product, straight from the definition: fp64, the block sum per 128-wide
// block, rounded once to the output dtype (exact data: no double rounding to worry about).
std::vector<float> direct(const MoeCase& c) {
  const MoeSpec& s = c.spec;
  const bool masked = c.masked();
  const std::vector<ref::GroupRows> rows = ref::grouped_rows(s.form, c.groups, s.experts, s.rows);
  std::vector<float> out(static_cast<size_t>(c.a_rows() * s.n), NAN);
  const ref::GroupedProblemRef v = c.view();
  for (int64_t e = 0; e < s.experts; ++e)
    for (int64_t i = 0; i < rows[e].count; ++i) {
      const int64_t t = rows[e].start + i;            // row within the batch
      const int64_t r = (masked ? e * s.rows : 0) + t;  // row of a / out
      for (int64_t n = 0; n < s.n; ++n) {
        double acc = 0;
        for (int64_t q = 0; q * 128 < s.k; ++q) {
          double part = 0;
          for (int64_t k = q * 128; k < std::min<int64_t>(s.k, (q + 1) * 128); ++k)
            part += double(ref::e4m3_decode(c.a[r * s.k + k])) * ref::e4m3_decode(c.b[(e * s.n + n) * s.k + k]);
          if (s.scale == ScaleKind::block)
            part *= double(ref::grouped_block_scale_a(v, masked ? e : 0, t, q)) *
                    c.sb[(e * ((s.n + 127) / 128) + n / 128) * (s.k / 128) + q];
          acc += part;
        }
        if (s.scale == ScaleKind::tensor) acc *= double(c.sa_f32.size() == 1 ? c.sa_f32[0] : c.sa_f32[e]) * c.sb[e];
        if (s.scale == ScaleKind::row) acc *= double(c.sa_f32[r]) * c.sb[e * s.n + n];
        const float f = static_cast<float>(acc);
        out[r * s.n + n] = s.out == DType::bf16 ? ref::bf16_to_f32(ref::f32_to_bf16(f)) : ref::f16_to_f32(ref::f32_to_f16(f));
      }
    }
  return out;
}

testing::AssertionResult same(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))))
      return testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return testing::AssertionSuccess();
}

TEST(MoeReference, ExactOnSmallIntegersEveryFormKindAndLayout) {
  std::mt19937_64 rng(seed());
  for (MoeSpec s : every_moe_kind(true)) {
    // K of five 128-blocks so that packed scales span two words; N with a partial weight block.
    s.experts = 5, s.rows = 13, s.n = 136, s.k = 640;
    const MoeCase c = make_moe_case(s, rng);
    EXPECT_TRUE(same(ref::grouped_scaled_mm(c.view()), direct(c))) << test::to_string(s) << " seed " << seed();
  }
}

TEST(MoeReference, RowsOfNoGroupAreLeftAlone) {
  std::mt19937_64 rng(seed());
  MoeSpec s;
  s.experts = 3, s.rows = 10, s.n = 8, s.k = 128, s.small_integers = true;
  s.groups = {2, 4, 4, 7};  // rows 0-1 and 7-9 belong to no expert; expert 1 is empty
  const std::vector<float> y = ref::grouped_scaled_mm(make_moe_case(s, rng).view());
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t n = 0; n < s.n; ++n)
      EXPECT_EQ(std::isnan(y[r * s.n + n]), r < 2 || r >= 7) << "row " << r;
}

TEST(MoeReference, DeviceCountsAreClamped) {
  using ref::GroupRows;
  auto eq = [](const std::vector<GroupRows>& got, const std::vector<GroupRows>& want) {
    if (got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].start != want[i].start || got[i].count != want[i].count) return false;
    return true;
  };
  // masked_m above M_max counts as M_max, negative as 0.
  EXPECT_TRUE(eq(ref::grouped_rows(GroupedForm::masked, std::vector<int32_t>{-3, 0, 9, 2}, 4, 8),
                 {{0, 0}, {0, 0}, {0, 8}, {0, 2}}));
  // Offsets past M_total end there; a start past the end of the previous group is kept.
  EXPECT_TRUE(eq(ref::grouped_rows(GroupedForm::contiguous, std::vector<int32_t>{1, 3, 20, 30}, 3, 10),
                 {{1, 2}, {3, 7}, {10, 0}}));
  // A decreasing end gives an empty group, never a negative count.
  EXPECT_TRUE(eq(ref::grouped_rows(GroupedForm::contiguous, std::vector<int32_t>{0, 5, 2}, 2, 10), {{0, 5}, {5, 0}}));
  // The [E] form: ends only, expert 0 from row 0 (torch's offs).
  EXPECT_TRUE(eq(ref::grouped_rows(GroupedForm::contiguous, std::vector<int32_t>{4, 4, 9}, 3, 9),
                 {{0, 4}, {4, 0}, {4, 5}}));
}

TEST(MoeReference, PackedScalesEqualTheirPowersOfTwo) {
  std::mt19937_64 rng(seed());
  for (GroupedForm form : {GroupedForm::contiguous, GroupedForm::masked}) {
    MoeSpec s;
    s.form = form, s.packed = true, s.experts = 3, s.rows = 9, s.n = 64, s.k = 640;
    const MoeCase c = make_moe_case(s, rng);
    // The same scales unpacked into the f32 form of the same layout.
    MoeCase f = c;
    f.spec.packed = false;
    f.sa_packed.clear();
    const QuantLayout L = quant_layout(f.quant_spec(), s.rows, s.k, form == GroupedForm::masked ? s.experts : 0);
    f.sa_f32.assign(static_cast<size_t>(L.scale_elems), 0.0f);
    const ref::GroupedProblemRef pv = c.view();
    for (int64_t be = 0; be < (form == GroupedForm::masked ? s.experts : 1); ++be)
      for (int64_t t = 0; t < s.rows; ++t)
        for (int64_t g = 0; g < s.k / 128; ++g)
          f.sa_f32[be * L.scale_batch_stride + t * L.scale_stride_t + g * L.scale_stride_c] =
              ref::grouped_block_scale_a(pv, be, t, g);
    EXPECT_TRUE(same(ref::grouped_scaled_mm(c.view()), ref::grouped_scaled_mm(f.view()))) << name(form);
  }
}

TEST(MoeReference, EmptyProblems) {
  std::mt19937_64 rng(seed());
  for (GroupedForm form : {GroupedForm::contiguous, GroupedForm::masked}) {
    MoeSpec s;
    s.form = form, s.experts = 3, s.rows = 0, s.n = 16, s.k = 128;
    EXPECT_TRUE(ref::grouped_scaled_mm(make_moe_case(s, rng).view()).empty());
    s.rows = 4, s.experts = 0;
    if (form == GroupedForm::contiguous) s.groups = {0};
    EXPECT_EQ(ref::grouped_scaled_mm(make_moe_case(s, rng).view()).size(),
              form == GroupedForm::masked ? 0u : 4u * 16u);
  }
}

}  // namespace
}  // namespace fp8route
