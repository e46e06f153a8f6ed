// Issue rate of register-only mma.sync at a given number of warps per SM: how much of the tensor pipe a GEMM
// main loop with MI x NJ independent accumulator tiles per warp can use when nothing else runs. Prints TFLOP/s
// per (dtype, warps per CTA, CTAs per SM, MI x NJ). Build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3
// -o mma_rate mma_rate.cu; run: ./mma_rate.
#include <cstdio>
#include <cuda_runtime.h>

template <bool TF32, int MI, int NJ>
__global__ void chains(int iters, float *out)
{
  unsigned a[MI][4], b[NJ][2];
  float acc[MI][NJ][4] = {};
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int r = 0; r < 4; r++) a[i][r] = threadIdx.x * 7u + i * 13u + r;
#pragma unroll
  for (int j = 0; j < NJ; j++) b[j][0] = threadIdx.x * 3u + j, b[j][1] = threadIdx.x + 5u * j;
  for (int it = 0; it < iters; it++)
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
      for (int j = 0; j < NJ; j++) {
        float *d = acc[i][j];
        if constexpr (TF32)
          asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                       : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
        else
          asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                       : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                       : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
      }
  float s = 0;
#pragma unroll
  for (int i = 0; i < MI; i++)
#pragma unroll
    for (int j = 0; j < NJ; j++) s += acc[i][j][0] + acc[i][j][1] + acc[i][j][2] + acc[i][j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

template <bool TF32, int MI, int NJ>
static void run(int warps, int ctas_per_sm, int sms, float *out)
{
  const int iters = 4096, blocks = sms * ctas_per_sm;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  chains<TF32, MI, NJ><<<blocks, 32 * warps>>>(16, out);
  cudaEventRecord(e0);
  chains<TF32, MI, NJ><<<blocks, 32 * warps>>>(iters, out);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  const double flop = 2.0 * 16 * 8 * (TF32 ? 8 : 16) * MI * NJ * (double)iters * warps * blocks;
  int occ = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, chains<TF32, MI, NJ>, 32 * warps, 0);
  cudaError_t err = cudaGetLastError();
  printf("%s warps/CTA %2d CTAs/SM %d (fits %d) tile %dx%d: %7.1f TFLOP/s %s\n", TF32 ? "tf32" : "f16 ", warps,
         ctas_per_sm, occ, MI, NJ, flop / ms / 1e9, err == cudaSuccess ? "" : cudaGetErrorString(err));
}

int main()
{
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float *out;
  cudaMalloc(&out, sizeof(float) * sms * 8 * 1024);
  for (int rep = 0; rep < 2; rep++) {
    run<true, 4, 8>(4, 1, sms, out);
    run<true, 4, 8>(8, 1, sms, out);
    run<true, 2, 8>(8, 2, sms, out);
    run<true, 2, 4>(16, 2, sms, out);
    run<false, 4, 8>(4, 1, sms, out);
    run<false, 4, 8>(8, 1, sms, out);
    run<false, 2, 8>(8, 2, sms, out);
    run<false, 2, 4>(16, 2, sms, out);
  }
  return 0;
}
