// Test support of scale_math.h: the scale divisions of make_scale (common.cuh) against __fdiv_rn
// over every float they can take.

#include <bit>
#include <cstdint>

#include "fp8route/tuning/cuda_check.h"
#include "fp8route/buffer.h"
#include "fp8route/device.h"
#include "fp8route/quant_layout.h"
#include "quant/common.cuh"
#include "fp8route/tuning/quant_knobs.h"

namespace fp8route::kernels {

// Test support: counts the floats a in [first, end) (bit patterns) where the scale divisions of
// make_scale differ from __fdiv_rn (GroupQuantGpu.ScaleDivisionsExactOverTheWholeRange).
__global__ void scale_division_mismatch_kernel(float qmax, uint32_t first, uint32_t end,
                                               unsigned long long* mismatches) {
  unsigned long long bad = 0;
  for (uint64_t b = first + static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < end;
       b += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float a = __uint_as_float(static_cast<uint32_t>(b));
    bad += __float_as_uint(qmax_div(qmax, a)) != __float_as_uint(__fdiv_rn(qmax, a));
    bad += __float_as_uint(div_by_qmax(a, qmax)) != __float_as_uint(__fdiv_rn(a, qmax));
  }
  if (bad) atomicAdd(mismatches, bad);
}

}  // namespace fp8route::kernels

namespace fp8route {

static_assert(kernels::kAmaxFloorDevice == kAmaxFloor, "device and host amax floors must agree");

namespace detail {

unsigned long long scale_division_mismatches(float qmax) {
  DeviceBuffer count(sizeof(unsigned long long));
  FP8ROUTE_CUDA_CHECK(cudaMemset(count.data(), 0, sizeof(unsigned long long)));
  kernels::scale_division_mismatch_kernel<<<device_info(-1).sm_count * 8, 256>>>(
      qmax, std::bit_cast<uint32_t>(kAmaxFloor), 0x7F800000u, static_cast<unsigned long long*>(count.data()));
  FP8ROUTE_CHECK_LAUNCH();
  unsigned long long n = 0;
  FP8ROUTE_CUDA_CHECK(cudaMemcpy(&n, count.data(), sizeof n, cudaMemcpyDeviceToHost));
  return n;
}
}  // namespace detail

}  // namespace fp8route
