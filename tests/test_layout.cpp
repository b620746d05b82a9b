// The one layout function: shapes, strides, bytes and padding of quantization outputs.

#include <gtest/gtest.h>

#include <string>

#include "fp8route/error.h"
#include "fp8route/quant_layout.h"

namespace fp8route {
namespace {

GroupQuantSpec spec(int g, ScaleLayout l, bool packed = false) {
  GroupQuantSpec s;
  s.group_size = g;
  s.layout = l;
  if (packed) {
    s.rounding = ScaleRounding::pow2;
    s.storage = ScaleStorage::ue8m0_packed;
  }
  return s;
}

TEST(Layout, RowMajorF32) {
  const QuantLayout L = quant_layout(spec(128, ScaleLayout::row_major), 5, 7168);
  EXPECT_EQ(L.groups, 56);
  EXPECT_EQ(L.scale_cols, 56);
  EXPECT_EQ(L.t_pad, 5);
  EXPECT_EQ(L.scale_dtype, DType::f32);
  EXPECT_EQ(L.code_ndim, 2);
  EXPECT_EQ(L.code_shape[0], 5);
  EXPECT_EQ(L.code_shape[1], 7168);
  EXPECT_EQ(L.code_bytes, 5 * 7168);
  EXPECT_EQ(L.scale_shape[0], 5);
  EXPECT_EQ(L.scale_shape[1], 56);
  EXPECT_EQ(L.scale_stride_t, 56);
  EXPECT_EQ(L.scale_stride_c, 1);
  EXPECT_EQ(L.scale_bytes, 5 * 56 * 4);
}

TEST(Layout, ColMajorAndTmaPadding) {
  const QuantLayout c = quant_layout(spec(128, ScaleLayout::col_major), 5, 4096);
  EXPECT_EQ(c.scale_shape[0], 32);
  EXPECT_EQ(c.scale_shape[1], 5);
  EXPECT_EQ(c.scale_stride_t, 1);
  EXPECT_EQ(c.scale_stride_c, 5);
  const QuantLayout t = quant_layout(spec(128, ScaleLayout::col_major_tma), 5, 4096);
  EXPECT_EQ(t.t_pad, 8);
  EXPECT_EQ(t.scale_shape[1], 8);
  EXPECT_EQ(t.scale_stride_c, 8);
  EXPECT_EQ(t.scale_bytes, 32 * 8 * 4);
  EXPECT_EQ((t.scale_stride_c * 4) % 16, 0) << "each TMA column must start 16-byte aligned";
  EXPECT_EQ(quant_layout(spec(128, ScaleLayout::col_major_tma), 8, 4096).t_pad, 8);
  EXPECT_EQ(quant_layout(spec(128, ScaleLayout::col_major_tma), 1, 4096).t_pad, 4);
  EXPECT_EQ(quant_layout(spec(128, ScaleLayout::col_major_tma), 0, 4096).t_pad, 0);
}

TEST(Layout, PackedUe8m0GroupsNotMultipleOfFour) {
  // H = 5 * 128: 5 groups -> 2 words per token; bytes 1..3 of the second word are padding.
  const QuantLayout r = quant_layout(spec(128, ScaleLayout::row_major, true), 3, 640);
  EXPECT_EQ(r.groups, 5);
  EXPECT_EQ(r.scale_cols, 2);
  EXPECT_EQ(r.scale_dtype, DType::i32);
  EXPECT_EQ(r.scale_bytes, 3 * 2 * 4);
  const QuantLayout t = quant_layout(spec(128, ScaleLayout::col_major_tma, true), 3, 640);
  EXPECT_EQ(t.scale_shape[0], 2);
  EXPECT_EQ(t.scale_shape[1], 4);
  EXPECT_EQ(t.scale_bytes, 2 * 4 * 4);
}

TEST(Layout, BatchedExperts) {
  const QuantLayout L = quant_layout(spec(128, ScaleLayout::col_major_tma), 7, 256, 3);
  EXPECT_EQ(L.code_ndim, 3);
  EXPECT_EQ(L.code_shape[0], 3);
  EXPECT_EQ(L.code_strides[0], 7 * 256);
  EXPECT_EQ(L.scale_ndim, 3);
  EXPECT_EQ(L.scale_shape[0], 3);
  EXPECT_EQ(L.scale_shape[1], 2);
  EXPECT_EQ(L.scale_shape[2], 8);
  EXPECT_EQ(L.scale_batch_stride, 16);
  EXPECT_EQ(L.scale_bytes, 3 * 16 * 4);
  EXPECT_EQ(L.code_bytes, 3 * 7 * 256);
}

TEST(Layout, EveryShapeIsConsistent) {
  for (int g : kGroupSizes)
    for (auto l : {ScaleLayout::row_major, ScaleLayout::col_major, ScaleLayout::col_major_tma})
      for (bool packed : {false, true})
        for (int64_t t : {0, 1, 3, 4, 127, 4097}) {
          const QuantLayout L = quant_layout(spec(g, l, packed), t, g * 7);
          EXPECT_EQ(L.scale_elems * 4, L.scale_bytes);
          EXPECT_EQ(L.scale_shape[0] * L.scale_shape[1], L.scale_elems);
          // The last addressed element is inside the buffer.
          if (t > 0) {
            const int64_t last = (t - 1) * L.scale_stride_t + (L.scale_cols - 1) * L.scale_stride_c;
            EXPECT_LT(last, L.scale_elems) << to_string(spec(g, l, packed)) << " T=" << t;
          }
        }
}

TEST(Layout, ErrorsNameTheArgument) {
  auto expect_error = [](auto fn, const std::string& word) {
    try {
      fn();
      ADD_FAILURE() << "no exception, expected one naming " << word;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  expect_error([] { quant_layout(spec(128, ScaleLayout::row_major), 4, 1000); }, "hidden");
  expect_error([] { quant_layout(spec(48, ScaleLayout::row_major), 4, 96); }, "group_size");
  expect_error([] { quant_layout(spec(128, ScaleLayout::row_major), -1, 128); }, "tokens");
  GroupQuantSpec bad = spec(128, ScaleLayout::row_major);
  bad.storage = ScaleStorage::ue8m0_packed;  // without pow2 rounding
  expect_error([&] { quant_layout(bad, 4, 128); }, "storage");
  GroupQuantSpec bad_code = spec(128, ScaleLayout::row_major);
  bad_code.code = DType::bf16;
  expect_error([&] { quant_layout(bad_code, 4, 128); }, "code dtype");
}

TEST(Layout, SpecStringAndParsing) {
  GroupQuantSpec s = spec(64, ScaleLayout::col_major_tma, true);
  s.code = DType::i8;
  EXPECT_EQ(to_string(s), "g64.i8.pow2.ue8m0_packed.col_major_tma");
  EXPECT_EQ(parse_layout("col_major"), ScaleLayout::col_major);
  EXPECT_EQ(parse_rounding("pow2"), ScaleRounding::pow2);
  EXPECT_EQ(parse_storage("ue8m0_packed"), ScaleStorage::ue8m0_packed);
  EXPECT_THROW(parse_layout("tma"), Error);
}

}  // namespace
}  // namespace fp8route
