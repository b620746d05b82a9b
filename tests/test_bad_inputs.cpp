// The public entry points (the quantization ops and scaled_mm) against bad inputs, as one table:
// each case breaks one rule of a valid call (dtype, rank, shape, strides, alignment, device,
// aliasing, sizes that overflow) and must raise Error(invalid_argument) whose message names the
// argument. Without a GPU the tensors are fake device addresses (every check runs before anything
// is enqueued, so none is dereferenced); with one they live in one poisoned allocation, which must
// be unchanged after all the cases: nothing was written.

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/error.h"
#include "fp8route/gemm.h"
#include "fp8route/quant.h"

namespace fp8route {
namespace {

// One slot of the arena per tensor, far enough apart that the valid calls' tensors never overlap.
enum Slot { kX, kQ, kS, kIndex, kA, kB, kSA, kSB, kBias, kOut, kSlots };
constexpr int64_t kSlotBytes = 64 << 10;
constexpr int64_t kT = 4, kH = 256, kN = 128;  // quant x [T, H]; GEMM a [T, H], b [N, H]
constexpr uint8_t kPoison = 0x5A;
constexpr int64_t kHuge = int64_t{1} << 62;

// v with one field changed.
template <class Edit>
TensorView with(TensorView v, Edit&& edit) {
  edit(v);
  return v;
}
TensorView with_device(TensorView v, int cuda_index) {
  v.device = Device::cuda(cuda_index);
  return v;
}

struct Case {
  std::string what;          // the rule broken
  std::function<void()> call;
  std::string needle;        // the error must contain this (it names the argument)
};

class BadInputs : public testing::Test {
 protected:
  void SetUp() override {
    gpu_ = cuda_device_count() > 0;
    if (gpu_) {
      arena_ = DeviceBuffer(kSlots * kSlotBytes);
      ASSERT_EQ(cudaMemset(arena_.data(), kPoison, arena_.bytes()), cudaSuccess);
      base_ = static_cast<char*>(arena_.data());
    } else {
      base_ = reinterpret_cast<char*>(uintptr_t{1} << 36);
    }
  }

  char* at(Slot s, int64_t offset = 0) const { return base_ + s * kSlotBytes + offset; }
  TensorView t(Slot s, DType d, std::initializer_list<int64_t> shape, int64_t offset = 0) const {
    return TensorView::contiguous(at(s, offset), d, shape);
  }

  // Runs every case; each must throw invalid_argument naming its argument. With a GPU, the arena
  // must still hold the poison afterwards.
  void run(const std::vector<Case>& cases) {
    for (const Case& c : cases) {
      try {
        c.call();
        ADD_FAILURE() << c.what << ": accepted; expected an error containing '" << c.needle << "'";
      } catch (const Error& e) {
        EXPECT_EQ(e.category(), ErrorCategory::invalid_argument) << c.what << ": " << e.what();
        EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos)
            << c.what << ": expected '" << c.needle << "' in: " << e.what();
      }
    }
    if (!gpu_) return;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> host(arena_.bytes());
    ASSERT_EQ(cudaMemcpy(host.data(), arena_.data(), host.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < host.size(); ++i)
      ASSERT_EQ(host[i], kPoison) << "byte " << i % kSlotBytes << " of slot " << i / kSlotBytes
                                  << " written by a call that raised";
  }

  // Without a GPU, the unmodified call must pass every argument check (it then stops at the GPU
  // requirement), so that each case's error comes from the one rule it breaks.
  void expect_valid(const char* what, const std::function<void()>& call) const {
    if (gpu_) return;
    try {
      call();
    } catch (const Error& e) {
      EXPECT_NE(e.category(), ErrorCategory::invalid_argument) << what << " is not a valid call: " << e.what();
    }
  }

  bool gpu_ = false;
  DeviceBuffer arena_;
  char* base_ = nullptr;
};

TEST_F(BadInputs, GroupQuantOps) {
  const GroupQuantSpec spec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::row_major};
  const TensorView x = t(kX, DType::bf16, {kT, kH}), q = t(kQ, DType::e4m3, {kT, kH});
  const TensorView s = t(kS, DType::f32, {kT, kH / 128}), map = t(kIndex, DType::i32, {kT, 2});
  const TensorView xm = t(kX, DType::bf16, {2, kT, kH}), qm = t(kQ, DType::e4m3, {2, kT, kH});
  const TensorView sm = t(kS, DType::f32, {2, kT, kH / 128}), mm = t(kIndex, DType::i32, {2});
  auto group = [&](TensorView x_, TensorView q_, TensorView s_) { return [=] { per_token_group_quant(x_, spec, q_, s_, nullptr); }; };
  auto masked = [&](TensorView x_, TensorView m_, TensorView q_, TensorView s_) {
    return [=] { masked_per_token_group_quant(x_, m_, spec, q_, s_, nullptr); };
  };
  auto scatter = [&](TensorView x_, TensorView m_, TensorView q_, TensorView s_) {
    return [=] { scatter_per_token_group_quant(x_, m_, spec, q_, s_, nullptr); };
  };
  expect_valid("per_token_group_quant", group(x, q, s));
  expect_valid("masked_per_token_group_quant", masked(xm, mm, qm, sm));
  expect_valid("scatter_per_token_group_quant", scatter(x, map, q, s));

  run({
      {"x dtype", group(with(x, [](TensorView& v) { v.dtype = DType::i32; }), q, s), "x: dtype"},
      {"x rank", group(t(kX, DType::bf16, {1, kT, kH}), q, s), "x: expected 2 dims"},
      {"x rank beyond kMaxDims", group(with(x, [](TensorView& v) { v.ndim = 7; }), q, s), "x: rank 7"},
      {"x negative size", group(with(x, [](TensorView& v) { v.shape[0] = -1; }), q, s), "x: negative size"},
      {"H not a multiple of the group", group(t(kX, DType::bf16, {kT, 200}), q, s), "group_size"},
      {"x last stride", group(TensorView::strided(at(kX), DType::bf16, {kT, kH}, {2 * kH, 2}), q, s),
       "x: last dim must be contiguous"},
      {"x row stride below the row", group(TensorView::strided(at(kX), DType::bf16, {kT, kH}, {kH - 8, 1}), q, s),
       "x: stride of dim 0"},
      {"x row stride not 16-byte", group(TensorView::strided(at(kX), DType::bf16, {kT, kH}, {kH + 4, 1}), q, s),
       "x: stride of dim 0"},
      {"x pointer alignment", group(t(kX, DType::bf16, {kT, kH}, 2), q, s), "x: pointer"},
      {"x null", group(with(x, [](TensorView& v) { v.data = nullptr; }), q, s), "x: null pointer"},
      {"x host memory", group(with(x, [](TensorView& v) { v.device = Device::cpu(); }), q, s), "x: must be CUDA"},
      {"q dtype", group(x, t(kQ, DType::i8, {kT, kH}), s), "q: dtype"},
      {"q shape", group(x, t(kQ, DType::e4m3, {kT, kH / 2}), s), "q: expected shape"},
      {"q strides", group(x, TensorView::strided(at(kQ), DType::e4m3, {kT, kH}, {2 * kH, 1}), s), "q: must be contiguous"},
      {"q pointer alignment", group(x, t(kQ, DType::e4m3, {kT, kH}, 8), s), "q: pointer"},
      {"s dtype", group(x, q, t(kS, DType::f16, {kT, kH / 128})), "s: dtype"},
      {"s shape", group(x, q, t(kS, DType::f32, {kH / 128, kT})), "s: expected shape"},
      {"s pointer alignment", group(x, q, t(kS, DType::f32, {kT, kH / 128}, 2)), "s: pointer"},
      {"q on another GPU", group(x, with_device(q, 1), s), "q and x: must be on one device"},
      {"s on another GPU", group(x, q, with_device(s, 1)),
       "s and x: must be on one device"},
      {"s inside q", group(x, q, t(kQ, DType::f32, {kT, kH / 128}, 512)), "q and s overlap"},
      {"q over x", group(x, t(kX, DType::e4m3, {kT, kH}, 1024), s), "q and x overlap"},
      {"s inside x", group(x, q, t(kX, DType::f32, {kT, kH / 128}, 16)), "s and x overlap"},
      {"x element count overflows", group(t(kX, DType::bf16, {kHuge, kHuge}), q, s), "x: element count overflows"},
      {"x strides past the address space",
       group(TensorView::strided(at(kX), DType::bf16, {kT, kH}, {kHuge, 1}), q, s), "x: sizes and strides"},
      {"spec group_size", [&] { per_token_group_quant(x, {100, DType::e4m3}, q, s, nullptr); }, "group_size"},
      {"fused: odd width", [&] { silu_and_mul_per_token_group_quant(t(kX, DType::bf16, {kT, 2 * kH + 1}), spec, q, s, nullptr); },
       "x: the fused silu_and_mul form takes [.., 2 x hidden]"},
      {"fused: hidden not a multiple of the group",
       [&] { silu_and_mul_per_token_group_quant(t(kX, DType::bf16, {kT, 264}), spec, q, s, nullptr); },
       "x: hidden = 132 (half the last dim 264: [gate | up]) must be a multiple of group_size 128"},
      {"fused: q over x", [&] { silu_and_mul_per_token_group_quant(t(kX, DType::bf16, {kT, 2 * kH}), spec, t(kX, DType::e4m3, {kT, kH}, 2048), s, nullptr); },
       "q and x overlap"},
      {"masked_m dtype", masked(xm, t(kIndex, DType::f32, {2}), qm, sm), "masked_m: dtype"},
      {"masked_m shape", masked(xm, t(kIndex, DType::i32, {3}), qm, sm), "masked_m: expected shape"},
      {"masked_m on another GPU", masked(xm, with_device(mm, 1), qm, sm),
       "masked_m and x: must be on one device"},
      {"masked: s over masked_m", masked(xm, mm, qm, t(kIndex, DType::f32, {2, kT, kH / 128})), "s and masked_m overlap"},
      {"masked: x rank", masked(x, mm, qm, sm), "x: expected 3 dims"},
      {"src2dst dtype", scatter(x, t(kIndex, DType::i8, {kT, 2}), q, s), "src2dst: dtype"},
      {"src2dst rows", scatter(x, t(kIndex, DType::i32, {kT + 1, 2}), q, s), "src2dst: expected contiguous [T=4"},
      {"src2dst over int32 entries", scatter(x, t(kIndex, DType::i32, {kT, int64_t{1} << 30}), q, s),
       "src2dst, q: at most 2^31-1"},
      {"scatter: q over src2dst", scatter(x, map, t(kIndex, DType::e4m3, {kT, kH}), s), "q and src2dst overlap"},
      {"src2dst on another GPU", scatter(x, with_device(map, 1), q, s),
       "src2dst and x: must be on one device"},
  });
}

TEST_F(BadInputs, RowAndTensorQuantOps) {
  const TensorView x = t(kX, DType::f16, {kT, kH}), q = t(kQ, DType::i8, {kT, kH});
  const TensorView s = t(kS, DType::f32, {kT}), scale = t(kS, DType::f32, {1});
  auto token = [](TensorView x_, TensorView q_, TensorView s_) {
    return [=] { per_token_quant(x_, q_, s_, ScaleRounding::pow2, nullptr); };
  };
  auto stat = [](TensorView x_, TensorView s_, TensorView q_) { return [=] { per_tensor_quant_static(x_, s_, q_, nullptr); }; };
  auto dyn = [](TensorView x_, TensorView q_, TensorView s_) { return [=] { per_tensor_quant_dynamic(x_, q_, s_, nullptr); }; };
  expect_valid("per_token_quant", token(x, q, s));
  expect_valid("per_tensor_quant_static", stat(x, scale, q));
  expect_valid("per_tensor_quant_dynamic", dyn(x, q, scale));
  // Any H >= 1, any row stride >= H, x aligned to its element, q at any address.
  const TensorView x_odd = TensorView::strided(at(kX, 2), DType::f16, {kT, 17}, {kH + 1, 1}), q_odd = t(kQ, DType::i8, {kT, 17}, 1);
  expect_valid("per_token_quant of odd H and stride", token(x_odd, q_odd, s));
  expect_valid("per_tensor_quant_static of odd H and stride", stat(x_odd, scale, q_odd));
  expect_valid("per_tensor_quant_dynamic of odd H and stride", dyn(x_odd, q_odd, scale));
  run({
      {"x dtype", token(t(kX, DType::e4m3, {kT, kH}), q, s), "x: dtype"},
      {"x rank", token(t(kX, DType::f16, {kT * kH}), q, s), "x: expected 2 dims"},
      {"H zero", token(t(kX, DType::f16, {kT, 0}), t(kQ, DType::i8, {kT, 0}), s), "x: H = 0"},
      {"x row stride", token(TensorView::strided(at(kX), DType::f16, {kT, kH}, {kH - 1, 1}), q, s), "x: row stride"},
      {"x pointer alignment", token(t(kX, DType::f16, {kT, kH}, 1), q, s), "x: pointer"},
      {"q dtype", token(x, t(kQ, DType::f32, {kT, kH}), s), "q: dtype"},
      {"s shape", token(x, q, t(kS, DType::f32, {kT + 1})), "s: expected shape"},
      {"s on another GPU", token(x, q, with_device(s, 1)), "s and x: must be on one device"},
      {"q on another GPU", token(x, with_device(q, 1), s), "q and x: must be on one device"},
      {"per-token: s inside q", token(x, q, t(kQ, DType::f32, {kT}, 64)), "q and s overlap"},
      {"per-token: s inside x", token(x, q, t(kX, DType::f32, {kT}, 64)), "s and x overlap"},
      {"per-token: q over x", token(x, t(kX, DType::i8, {kT, kH}, 256), s), "q and x overlap"},
      {"static: scale not one element", stat(x, t(kS, DType::f32, {2}), q), "scale: expected one f32 element"},
      {"static: scale on another GPU", stat(x, with_device(scale, 1), q), "scale and x: must be on one device"},
      {"static: q over scale", stat(x, t(kQ, DType::f32, {1}, 32), q), "q and scale overlap"},
      {"dynamic: scale dtype", dyn(x, q, t(kS, DType::i32, {1})), "scale: dtype"},
      {"dynamic: scale inside x", dyn(x, q, t(kX, DType::f32, {1}, 128)), "scale and x overlap"},
      {"dynamic: scale inside q", dyn(x, q, t(kQ, DType::f32, {1}, 128)), "q and scale overlap"},
      {"dynamic: x element count overflows", dyn(t(kX, DType::f16, {kHuge, 64}), q, scale), "x: element count overflows"},
  });
}

TEST_F(BadInputs, ScaledMm) {
  ScaledMmArgs valid;
  valid.scale = ScaleKind::row;
  valid.a = t(kA, DType::e4m3, {kT, kH});
  valid.b = t(kB, DType::e4m3, {kN, kH});
  valid.scale_a = t(kSA, DType::f32, {kT});
  valid.scale_b = t(kSB, DType::f32, {kN});
  valid.bias = t(kBias, DType::bf16, {kN});
  valid.out = t(kOut, DType::bf16, {kT, kN});
  auto mm = [&](auto&& edit) {
    ScaledMmArgs args = valid;
    edit(args);
    return [args] { scaled_mm(args, nullptr); };
  };
  // With no GPU the routed call stops at the backend (unsupported / cuda_error), never at a check.
  expect_valid("scaled_mm", mm([](ScaledMmArgs&) {}));
  run({
      {"a dtype", mm([](ScaledMmArgs& g) { g.a.dtype = DType::bf16; }), "a: dtype"},
      {"a rank", mm([&](ScaledMmArgs& g) { g.a = t(kA, DType::e4m3, {1, kT, kH}); }), "a: expected 2 dims"},
      {"b's K", mm([&](ScaledMmArgs& g) { g.b = t(kB, DType::e4m3, {kN, kH + 16}); }), "b: expected [N, K]"},
      {"a row stride", mm([&](ScaledMmArgs& g) { g.a = TensorView::strided(at(kA), DType::e4m3, {kT, kH}, {kH - 16, 1}); }),
       "a: row stride"},
      {"out last stride", mm([&](ScaledMmArgs& g) { g.out = TensorView::strided(at(kOut), DType::bf16, {kT, kN}, {1, kT}); }),
       "out: last dim must have stride 1"},
      {"scale_a alignment", mm([&](ScaledMmArgs& g) { g.scale_a = t(kSA, DType::f32, {kT}, 2); }), "scale_a: pointer"},
      {"scale_b shape", mm([&](ScaledMmArgs& g) { g.scale_b = t(kSB, DType::f32, {kN + 1}); }), "scale_b: row scales"},
      {"bias dtype", mm([&](ScaledMmArgs& g) { g.bias = t(kBias, DType::f16, {kN}); }), "bias: dtype"},
      {"b on another GPU", mm([](ScaledMmArgs& g) { g.b.device = Device::cuda(1); }), "a, b, out: must be on one device"},
      {"scale_a on another GPU", mm([](ScaledMmArgs& g) { g.scale_a.device = Device::cuda(1); }),
       "scale_a and a: must be on one device"},
      {"scale_b on another GPU", mm([](ScaledMmArgs& g) { g.scale_b.device = Device::cuda(1); }),
       "scale_b and a: must be on one device"},
      {"bias on another GPU", mm([](ScaledMmArgs& g) { g.bias.device = Device::cuda(1); }), "bias and a: must be on one device"},
      {"scale_b in host memory", mm([](ScaledMmArgs& g) { g.scale_b.device = Device::cpu(); }), "scale_b: must be CUDA"},
      {"out over a", mm([&](ScaledMmArgs& g) { g.out = t(kA, DType::bf16, {kT, kN}, 16); }), "out and a overlap"},
      {"out over b", mm([&](ScaledMmArgs& g) { g.out = t(kB, DType::bf16, {kT, kN}, 4096); }), "out and b overlap"},
      {"out over scale_a", mm([&](ScaledMmArgs& g) { g.out = t(kSA, DType::bf16, {kT, kN}); }), "out and scale_a overlap"},
      {"out over scale_b", mm([&](ScaledMmArgs& g) { g.out = t(kSB, DType::bf16, {kT, kN}, 64); }), "out and scale_b overlap"},
      {"out over bias", mm([&](ScaledMmArgs& g) { g.out = t(kBias, DType::bf16, {kT, kN}); }), "out and bias overlap"},
      {"M past int32", mm([&](ScaledMmArgs& g) {
         g.a = t(kA, DType::e4m3, {int64_t{1} << 31, kH});
         g.scale_a = t(kSA, DType::f32, {1});
       }), "M, N and K must each be < 2^31"},
      {"a element count overflows", mm([&](ScaledMmArgs& g) { g.a = t(kA, DType::e4m3, {kHuge, kHuge}); }),
       "a: element count overflows"},
  });
}

TEST_F(BadInputs, LayoutSizesThatOverflow) {
  const GroupQuantSpec spec{128, DType::e4m3, ScaleRounding::none, ScaleStorage::f32, ScaleLayout::col_major_tma};
  run({
      {"codes past 64 bits", [&] { quant_layout(spec, kHuge, 1024); }, "overflow"},
      {"experts x tokens past 64 bits", [&] { quant_layout(spec, int64_t{1} << 40, 1024, int64_t{1} << 30); }, "overflow"},
      {"padded tokens past 64 bits", [&] { quant_layout(spec, INT64_MAX - 1, 128); }, "overflow"},
      {"allocation past 64 bits", [&] { allocate_group_quant_outputs(spec, kHuge, 1024); }, "overflow"},
  });
}

}  // namespace
}  // namespace fp8route
