// Hand-written Sm80 GEMM reference: the instruction sequence the generated
// Exo-GPU kernel is meant to have (cp.async into an S-stage shared-memory
// ring synchronised by commit groups and one CTA barrier per K tile; padded
// rows, so fragment loads hit distinct banks; ldmatrix for A and, for 2-byte
// types, ldmatrix.trans for B; mma.sync with f32 accumulators in registers;
// persistent grid over output tiles). C = A @ B, all row-major; C is f32.
// Used only to choose tile shapes, warp layout and stage count before
// writing the schedule (benchmarks/sm80_hand/sweep.py); not part of the package.
#include <cuda_runtime.h>
#include <stdint.h>

enum { TF32 = 0, F16 = 1, BF16 = 2 };
template <int DT> struct Elem { using T = uint16_t; static constexpr int KS = 16; };
template <> struct Elem<TF32> { using T = float; static constexpr int KS = 8; };

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src));
}
__device__ __forceinline__ unsigned to_tf32(unsigned x)
{
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
}

template <int DT, int BM, int BN, int BK, int WM, int WN, int S, int CVT, int MINB>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)
gemm(int M, int N, int K, const typename Elem<DT>::T *A, const typename Elem<DT>::T *B, float *C)
{
  using T = typename Elem<DT>::T;
  constexpr int ES = sizeof(T), KS = Elem<DT>::KS, CH = 16 / ES;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int LDA = BK + 16 / ES;       // 16 bytes of padding: ldmatrix rows in distinct banks
  constexpr int LDB = BN + (DT == TF32 ? 8 : 8);  // tf32: row stride = 8 mod 32 words (scalar B loads); 2-byte: 16 B mod 128
  constexpr int MI = WM / 16, NJ = WN / 8;
  extern __shared__ __align__(128) char smem[];
  T *A_s = reinterpret_cast<T *>(smem);
  T *B_s = A_s + S * BM * LDA;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / (BN / WN), wn = warp % (BN / WN);
  const int g = lane / 4, t = lane % 4;
  const int countN = N / BN, tasks = (M / BM) * countN, KT = K / BK;
  for (int task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int mt = task / countN, nt = task % countN;
    float acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
      for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

    auto load = [&](int kt, int slot) {
      constexpr int ACH = BK / CH, BCH = BN / CH;
#pragma unroll
      for (int q = 0; q < BM * ACH / NT; q++) {
        const int r = q * (NT / ACH) + tid / ACH, c = tid % ACH;
        cp_async16(&A_s[(slot * BM + r) * LDA + c * CH], &A[(mt * BM + r) * K + kt * BK + c * CH]);
      }
#pragma unroll
      for (int q = 0; q < BK * BCH / NT; q++) {
        const int r = q * (NT / BCH) + tid / BCH, c = tid % BCH;
        cp_async16(&B_s[(slot * BK + r) * LDB + c * CH], &B[(kt * BK + r) * N + nt * BN + c * CH]);
      }
    };
    auto compute = [&](int slot) {
#pragma unroll
      for (int kk = 0; kk < BK / KS; kk++) {
        unsigned a[MI][4], b[NJ][2];
#pragma unroll
        for (int i = 0; i < MI; i++) {
          const T *p = &A_s[(slot * BM + wm * WM + 16 * i + lane % 16) * LDA + kk * KS + (lane / 16) * CH];
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(smem_u32(p)));
          if (DT == TF32 && CVT)
#pragma unroll
            for (int r = 0; r < 4; r++) a[i][r] = to_tf32(a[i][r]);
        }
#pragma unroll
        for (int j = 0; j < NJ; j++) {
          if constexpr (DT == TF32) {
            const float *p = reinterpret_cast<const float *>(&B_s[(slot * BK + kk * KS + t) * LDB + wn * WN + 8 * j + g]);
            b[j][0] = __float_as_uint(p[0]);
            b[j][1] = __float_as_uint(p[4 * LDB]);
            if (CVT) { b[j][0] = to_tf32(b[j][0]); b[j][1] = to_tf32(b[j][1]); }
          } else {
            const T *p = &B_s[(slot * BK + kk * KS + lane % 16) * LDB + wn * WN + 8 * j];
            asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                         : "=r"(b[j][0]), "=r"(b[j][1]) : "r"(smem_u32(p)));
          }
        }
#pragma unroll
        for (int i = 0; i < MI; i++)
#pragma unroll
          for (int j = 0; j < NJ; j++) {
            float *d = acc[i][j];
            if constexpr (DT == TF32)
              asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                           : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                           : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
            else if constexpr (DT == F16)
              asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                           : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                           : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
            else
              asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                           : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                           : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
          }
      }
    };

#pragma unroll
    for (int s = 0; s < S - 1; s++) {
      load(s, s);
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int kt = 0; kt < KT - (S - 1); kt++) {
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
      __syncthreads();
      load(kt + S - 1, (kt + S - 1) % S);
      asm volatile("cp.async.commit_group;" ::: "memory");
      compute(kt % S);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    for (int kt = KT - (S - 1); kt < KT; kt++) compute(kt % S);

#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
      for (int j = 0; j < NJ; j++) {
        float *p = &C[(mt * BM + wm * WM + 16 * i + g) * N + nt * BN + wn * WN + 8 * j + 2 * t];
        *reinterpret_cast<float2 *>(p) = make_float2(acc[i][j][0], acc[i][j][1]);
        *reinterpret_cast<float2 *>(p + 8 * N) = make_float2(acc[i][j][2], acc[i][j][3]);
      }
    __syncthreads();  // the CTA's next task reuses the ring
  }
}

template <int DT, int BM, int BN, int BK, int WM, int WN, int S, int CVT, int MINB>
static int launch(int M, int N, int K, const void *A, const void *B, float *C, void *stream)
{
  using T = typename Elem<DT>::T;
  auto *k = gemm<DT, BM, BN, BK, WM, WN, S, CVT, MINB>;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int smem = S * (BM * (BK + 16 / (int)sizeof(T)) + BK * (BN + 8)) * (int)sizeof(T);
  if (M % BM || N % BN || K % BK || K < (S - 1) * BK) return -1;
  cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return (int)e;
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  int tasks = (M / BM) * (N / BN), grid = sms * MINB < tasks ? sms * MINB : tasks;
  k<<<grid, NT, smem, (cudaStream_t)stream>>>(M, N, K, (const T *)A, (const T *)B, C);
  return (int)cudaGetLastError();
}

// name: dtype_BMxBN_BK_WMxWN_S[_cvt|_raw]_minb
#define V(name, ...) \
  extern "C" int name(int M, int N, int K, const void *A, const void *B, float *C, void *s) { return launch<__VA_ARGS__>(M, N, K, A, B, C, s); } \
  extern "C" int name##_smem(void) { return 0; }
#include "variants.inc"
