#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include "kernel_exp.cuh"
#include "gemm/tensor_map.h"
using namespace fp8route;
namespace we = fp8route::kernels::wgmma_exp;
namespace wk = fp8route::kernels::wgmma;
__global__ void fill(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995; x ^= x >> 15;
    uint8_t v = x & 0x7f; if ((v & 0x78) == 0x78) v = 0x38; p[i] = v | (x & 0x80);
  }
}
__global__ void fillf(float* p, size_t n) { for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = 1.0f; }
template <int V, int G, int BN, int ST, int CL>
void run(const char* name, int m, int n, int k, uint8_t* a, uint8_t* b, float* sa, float* sb, void* out) {
  using T = wk::Traits<BN, ST, CL, true>;
  auto kern = &we::exp_kernel<__nv_bfloat16, BN, ST, CL, true, V, G>;
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  wk::Params kp{};
  kp.sb = sb; kp.bias = nullptr; kp.out = out; kp.ldo = n; kp.m = m; kp.n = n; kp.kblocks = (k + 127) / 128; kp.sb_ld = kp.kblocks;
  kp.tiles_m = ((m + 127) / 128 + CL - 1) / CL * CL; kp.tiles_n = (n + BN - 1) / BN;
  int sa_ld = (m + 3) / 4 * 4;
  CUtensorMap am = gemm::byte_matrix_map(a, m, k, k, 128, "x"), bm = gemm::byte_matrix_map(b, n, k, k, BN / CL, "x");
  CUtensorMap sm = gemm::float_matrix_map(sa, kp.kblocks, sa_ld, sa_ld, 128, "x"), dm = gemm::half_matrix_map(out, m, n, n, 64, "x");
  int work = kp.tiles_m / CL * kp.tiles_n; int grid = std::min(work, 132 / CL) * CL;
  cudaLaunchConfig_t cfg{}; cudaLaunchAttribute at[1]; cfg.gridDim = grid; cfg.blockDim = 384; cfg.dynamicSmemBytes = T::kSmemBytes;
  at[0].id = cudaLaunchAttributeClusterDimension; at[0].val.clusterDim.x = CL; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
  cfg.attrs = at; cfg.numAttrs = 1;
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float best = 1e9;
  for (int i = 0; i < 6; ++i) {
    cudaEventRecord(e0);
    cudaLaunchKernelEx(&cfg, kern, am, bm, sm, dm, kp);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1); if (i > 0 && ms < best) best = ms;
  }
  printf("%-28s %5dx%5dx%5d: %7.1f us %5.0f TFLOP/s  (%s)\n", name, m, n, k, best * 1e3, 2.0 * m * n * k / (best * 1e-3) / 1e12, cudaGetErrorString(cudaGetLastError()));
}
// The variant sets of the recorded runs: 1 -> diagnostics.txt, 2 -> diagnostics2.txt, 3 -> diagnostics3.txt.
int main(int argc, char** argv) {
  const int set = argc > 1 ? atoi(argv[1]) : 1;
  int shapes[][3] = {{8192, 4096, 4096}, {8192, 28672, 4096}, {8192, 8192, 28672}};
  for (auto& s : shapes) {
    int m = s[0], n = s[1], k = s[2]; int kb = (k + 127) / 128;
    uint8_t *a, *b; float *sa, *sb; void* out;
    cudaMalloc(&a, size_t(m) * k); cudaMalloc(&b, size_t(n) * k); cudaMalloc(&sa, size_t(kb) * m * 4); cudaMalloc(&sb, size_t((n + 127) / 128) * kb * 4); cudaMalloc(&out, size_t(m) * n * 2);
    fill<<<1024, 256>>>(a, size_t(m) * k, 1); fill<<<1024, 256>>>(b, size_t(n) * k, 2); fillf<<<64, 256>>>(sa, size_t(kb) * m); fillf<<<64, 256>>>(sb, size_t((n + 127) / 128) * kb);
    if (set == 1) {
      run<0, 8, 128, 6, 2>("product g8", m, n, k, a, b, sa, sb, out);
      run<1, 8, 128, 6, 2>("no promote math", m, n, k, a, b, sa, sb, out);
      run<2, 8, 128, 6, 2>("no promote, pipelined", m, n, k, a, b, sa, sb, out);
      run<0, 4, 128, 6, 2>("product g4", m, n, k, a, b, sa, sb, out);
      run<0, 16, 128, 6, 2>("product g16", m, n, k, a, b, sa, sb, out);
      run<0, 32, 128, 6, 2>("product g32", m, n, k, a, b, sa, sb, out);
      run<2, 8, 192, 5, 2>("no promote, pipelined n192", m, n, k, a, b, sa, sb, out);
    } else if (set == 2) {
      run<0, 8, 128, 6, 2>("product", m, n, k, a, b, sa, sb, out);
      run<3, 8, 128, 6, 2>("two accumulators s6", m, n, k, a, b, sa, sb, out);
      run<4, 8, 128, 6, 2>("turns", m, n, k, a, b, sa, sb, out);
      run<4, 8, 128, 6, 1>("turns c1", m, n, k, a, b, sa, sb, out);
      run<4, 8, 192, 5, 2>("turns n192", m, n, k, a, b, sa, sb, out);
      run<2, 8, 128, 6, 2>("no promote, pipelined", m, n, k, a, b, sa, sb, out);
    } else {
      run<0, 8, 128, 6, 2>("product", m, n, k, a, b, sa, sb, out);
      run<5, 8, 128, 6, 2>("n split", m, n, k, a, b, sa, sb, out);
      run<5, 8, 128, 6, 1>("n split c1", m, n, k, a, b, sa, sb, out);
    }
    cudaFree(a); cudaFree(b); cudaFree(sa); cudaFree(sb); cudaFree(out);
  }
}
