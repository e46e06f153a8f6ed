// Hand-written Sm80 GEMM reference: the instruction sequence the generated
// Exo-GPU kernel is meant to have (cp.async into an S-stage shared-memory
// ring synchronised by commit groups and one CTA barrier per K tile; padded
// rows, so fragment loads hit distinct banks; ldmatrix for A and, for 2-byte
// types, ldmatrix.trans for B; mma.sync with f32 accumulators in registers;
// persistent grid over output tiles). C = A @ B, all row-major (BT: B given as
// its transpose, [N, K], K-major like A); C is f32.
// Used only to choose tile shapes, warp layout and stage count before
// writing the schedule (benchmarks/sm80_hand/sweep.py); not part of the package.
#include <cuda_runtime.h>
#include <stdint.h>

enum { TF32 = 0, F16 = 1, BF16 = 2 };
template <int DT> struct Elem { using T = uint16_t; static constexpr int KS = 16; };
template <> struct Elem<TF32> { using T = float; static constexpr int KS = 8; };

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
template <int PF = 0> __device__ __forceinline__ void cp_async16(void *dst, const void *src)
{
  if constexpr (PF)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src));
}
// CVT: 0 raw f32 bits (the tensor core ignores the low 13), 1 cvt.rna (FSETP + IADD in SASS),
// 2 cvt.rn (one F2FP on sm_90; round to nearest even).
template <int CVT> __device__ __forceinline__ unsigned to_tf32(unsigned x)
{
  unsigned r = x;
  if (CVT == 1) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(x)));
  if (CVT == 2) asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
}

// DB: fragments double-buffered across k-steps and across the K-tile barrier (the barrier sits before the last
// k-step's products, whose fragments are already in registers; the next tile's first fragments load after it).
// SPLIT (with DB): each k-step issues its share of the next tile's cp.async (1: committed a k-step early, the
// last share in the next group: racy, kept as measured; 2: committed before the tile's wait). BX4: 2-byte B fragments two at a
// time (ldmatrix.x4.trans); for tf32, B's columns permuted within the warp tile so that a lane's eight fragments
// read two 16-byte runs per k row (4 LDS.128 per k-step instead of 16 LDS.32; C stored as float4). DIAG (timing only, wrong results): 1 loads only the first k-step's fragments of each
// tile, 2 copies no tile after the prologue. BT: B is [N, K] (K-major), staged like A, and its fragments load
// with ldmatrix (no transpose), for tf32 too: a K-major 8 x 4 block of 32-bit words is one b16 8 x 8 matrix.
// BT = 2, 3: B is [K, N] as for BT = 0, and the copies transpose it into BT's shared-memory layout, one 4-byte
// cp.async per element (2: a warp copies 4 k rows x 8 n, distinct banks; 3: one k row x 32 n, 4-way conflicts).
// RG: tasks in raster groups of RG tile rows (0: row by row). PF: cp.async with an L2 256-byte prefetch hint.
template <int DT, int BM, int BN, int BK, int WM, int WN, int S, int CVT, int MINB, int DB, int BX4, int SPLIT, int DIAG, int BT = 0, int RG = 0, int PF = 0>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MINB)
gemm(int M, int N, int K, const typename Elem<DT>::T *A, const typename Elem<DT>::T *B, float *C)
{
  using T = typename Elem<DT>::T;
  constexpr int ES = sizeof(T), KS = Elem<DT>::KS, CH = 16 / ES, KK = BK / KS;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int LDA = BK + 16 / ES;       // 16 bytes of padding: ldmatrix rows in distinct banks
  // tf32: row stride = 8 mod 32 words (scalar B loads); 2-byte: 16 B mod 128; BT: A's padded K rows
  constexpr int LDB = BT ? LDA : BN + 8;
  constexpr int MI = WM / 16, NJ = WN / 8;
  constexpr int ACH = BK / CH, BCH = BN / CH, AQ = BM * ACH / NT;
  constexpr int BQ = BT >= 2 ? BK * BN / NT : BT ? BN * ACH / NT : BK * BCH / NT;
  static_assert(BT < 2 || DT == TF32, "transposing copies move 4-byte elements");
  static_assert(!DB || KK % 2 == 0, "DB needs an even number of k-steps per tile");
  extern __shared__ __align__(128) char smem[];
  T *A_s = reinterpret_cast<T *>(smem);
  T *B_s = A_s + S * BM * LDA;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / (BN / WN), wn = warp % (BN / WN);
  const int g = lane / 4, t = lane % 4;
  const int countN = N / BN, tasks = (M / BM) * countN, KT = K / BK;
  for (int task = blockIdx.x; task < tasks; task += gridDim.x) {
    const int gsize = RG * countN, gfirst = RG ? task / gsize * RG : 0, grows = RG && (M / BM - gfirst < RG) ? M / BM - gfirst : RG;
    const int mt = RG ? gfirst + task % gsize % grows : task / countN, nt = RG ? task % gsize / grows : task % countN;
    float acc[MI][NJ][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
      for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) acc[i][j][r] = 0.0f;

    // copies of chunks [q0, q1) of A's and of B's per-thread share of tile kt into ring slot `slot`
    auto load_part = [&](int kt, int slot, int part, int parts) {
#pragma unroll
      for (int q = AQ * part / parts; q < AQ * (part + 1) / parts; q++) {
        const int r = q * (NT / ACH) + tid / ACH, c = tid % ACH;
        cp_async16<PF>(&A_s[(slot * BM + r) * LDA + c * CH], &A[(mt * BM + r) * K + kt * BK + c * CH]);
      }
#pragma unroll
      for (int q = BQ * part / parts; q < BQ * (part + 1) / parts; q++) {
        if constexpr (BT >= 2) {  // B as [K, N] in global, transposed into the BT layout by 4-byte copies
          const int w = q * (NT / 32) + tid / 32;  // the warp's block of the tile: 4 k x 8 n (2) or 1 k x 32 n (3)
          const int k = BT == 2 ? 4 * (w / (BN / 8)) + lane / 8 : w / (BN / 32);
          const int n = BT == 2 ? 8 * (w % (BN / 8)) + lane % 8 : 32 * (w % (BN / 32)) + lane;
          asm volatile("cp.async.ca.shared.global [%0], [%1], 4;"
                       ::"r"(smem_u32(&B_s[(slot * BN + n) * LDB + k])), "l"(&B[(kt * BK + k) * N + nt * BN + n]));
        } else if constexpr (BT) {
          const int r = q * (NT / ACH) + tid / ACH, c = tid % ACH;
          cp_async16<PF>(&B_s[(slot * BN + r) * LDB + c * CH], &B[(nt * BN + r) * K + kt * BK + c * CH]);
        } else {
          const int r = q * (NT / BCH) + tid / BCH, c = tid % BCH;
          cp_async16<PF>(&B_s[(slot * BK + r) * LDB + c * CH], &B[(kt * BK + r) * N + nt * BN + c * CH]);
        }
      }
    };
    auto load = [&](int kt, int slot) { load_part(kt, slot, 0, 1); };
    auto frags = [&](int slot, int kk, unsigned (&a)[MI][4], unsigned (&b)[NJ][2]) {
#pragma unroll
      for (int i = 0; i < MI; i++) {
        const T *p = &A_s[(slot * BM + wm * WM + 16 * i + lane % 16) * LDA + kk * KS + (lane / 16) * CH];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(smem_u32(p)));
        if (DT == TF32)
#pragma unroll
          for (int r = 0; r < 4; r++) a[i][r] = to_tf32<CVT>(a[i][r]);
      }
      if constexpr (BT) {  // lanes 8 m .. 8 m + 7 address matrix m: fragment j + m / 2, k half m % 2
#pragma unroll
        for (int j = 0; j < NJ; j += 2) {
          const T *p = &B_s[(slot * BN + wn * WN + 8 * j + lane % 8 + 8 * (lane / 16)) * LDB + kk * KS + (lane / 8) % 2 * (KS / 2)];
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1]) : "r"(smem_u32(p)));
          if (DT == TF32)
#pragma unroll
            for (int r = 0; r < 2; r++) { b[j][r] = to_tf32<CVT>(b[j][r]); b[j + 1][r] = to_tf32<CVT>(b[j + 1][r]); }
        }
      } else if constexpr (DT == TF32 && BX4) {  // fragment j's column g is warp column 32 (j / 4) + 4 g + j % 4
        static_assert(NJ == 8, "the tf32 column permutation is written for 64-wide warp tiles");
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
          for (int half = 0; half < 2; half++) {
            const float4 v = *reinterpret_cast<const float4 *>(
                &B_s[(slot * BK + kk * KS + t + 4 * h) * LDB + wn * WN + 32 * half + 4 * g]);
            b[4 * half + 0][h] = to_tf32<CVT>(__float_as_uint(v.x));
            b[4 * half + 1][h] = to_tf32<CVT>(__float_as_uint(v.y));
            b[4 * half + 2][h] = to_tf32<CVT>(__float_as_uint(v.z));
            b[4 * half + 3][h] = to_tf32<CVT>(__float_as_uint(v.w));
          }
      } else if constexpr (DT == TF32) {
#pragma unroll
        for (int j = 0; j < NJ; j++) {
          const float *p = reinterpret_cast<const float *>(&B_s[(slot * BK + kk * KS + t) * LDB + wn * WN + 8 * j + g]);
          b[j][0] = to_tf32<CVT>(__float_as_uint(p[0]));
          b[j][1] = to_tf32<CVT>(__float_as_uint(p[4 * LDB]));
        }
      } else if constexpr (BX4) {  // lanes 0-15: rows k of fragment j, lanes 16-31: of fragment j + 1
#pragma unroll
        for (int j = 0; j < NJ; j += 2) {
          const T *p = &B_s[(slot * BK + kk * KS + lane % 16) * LDB + wn * WN + 8 * j + 8 * (lane / 16)];
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1]) : "r"(smem_u32(p)));
        }
      } else {
#pragma unroll
        for (int j = 0; j < NJ; j++) {
          const T *p = &B_s[(slot * BK + kk * KS + lane % 16) * LDB + wn * WN + 8 * j];
          asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                       : "=r"(b[j][0]), "=r"(b[j][1]) : "r"(smem_u32(p)));
        }
      }
    };
    auto mma = [&](const unsigned (&a)[MI][4], const unsigned (&b)[NJ][2]) {
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
    };
    auto compute = [&](int slot) {
#pragma unroll
      for (int kk = 0; kk < KK; kk++) {
        unsigned a[MI][4], b[NJ][2];
        frags(slot, DIAG == 1 ? 0 : kk, a, b);
        mma(a, b);
      }
    };

#pragma unroll
    for (int s = 0; s < S - 1; s++) {
      load(s, s);
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
    if constexpr (!DB) {
      for (int kt = 0; kt < KT - (S - 1); kt++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
        __syncthreads();
        if (DIAG != 2) load(kt + S - 1, (kt + S - 1) % S);
        asm volatile("cp.async.commit_group;" ::: "memory");
        compute(kt % S);
      }
      asm volatile("cp.async.wait_group 0;" ::: "memory");
      __syncthreads();
      for (int kt = KT - (S - 1); kt < KT; kt++) compute(kt % S);
    } else {
      unsigned a[2][MI][4], b[2][NJ][2];
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
      __syncthreads();
      frags(0, 0, a[0], b[0]);
      for (int kt = 0; kt < KT; kt++) {
        const bool copy = DIAG != 2 && kt + S - 1 < KT;
        const int slot = kt % S, cslot = (kt + S - 1) % S;
#pragma unroll
        for (int kk = 0; kk < KK; kk++) {
          if (SPLIT == 2) {  // each k-step's share of the next copies, the group committed before the tile's wait
            if (copy) load_part(kt + S - 1, cslot, kk, KK);
            if (kk == KK - 1) asm volatile("cp.async.commit_group;" ::: "memory");
          }
          if (kk < KK - 1) {
            if (DIAG != 1) frags(slot, kk + 1, a[(kk + 1) % 2], b[(kk + 1) % 2]);
          } else {  // tile kt + 1 (committed S - 1 groups ago) is complete; every warp is done reading slot kt - 1
            asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
            __syncthreads();
            if (kt + 1 < KT) frags((kt + 1) % S, 0, a[0], b[0]);
          }
          if (SPLIT == 1) {
            if (copy) load_part(kt + S - 1, cslot, kk, KK);
            if (kk == KK - 2) asm volatile("cp.async.commit_group;" ::: "memory");
          } else if (kk == 0 && !SPLIT) {
            if (copy) load(kt + S - 1, cslot);
            asm volatile("cp.async.commit_group;" ::: "memory");
          }
          mma(a[kk % 2], b[kk % 2]);
        }
      }
    }

    if constexpr (DT == TF32 && BX4) {  // lane (g, t) holds columns 8 t .. 8 t + 7 of each 32-column half
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int half = 0; half < 2; half++)
#pragma unroll
          for (int r = 0; r < 2; r++) {
            float *p = &C[(mt * BM + wm * WM + 16 * i + g + 8 * r) * N + nt * BN + wn * WN + 32 * half + 8 * t];
            const float *a0 = acc[i][4 * half], *a1 = acc[i][4 * half + 1], *a2 = acc[i][4 * half + 2], *a3 = acc[i][4 * half + 3];
            *reinterpret_cast<float4 *>(p) = make_float4(a0[2 * r], a1[2 * r], a2[2 * r], a3[2 * r]);
            *reinterpret_cast<float4 *>(p + 4) = make_float4(a0[2 * r + 1], a1[2 * r + 1], a2[2 * r + 1], a3[2 * r + 1]);
          }
    } else
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

template <int DT, int BM, int BN, int BK, int WM, int WN, int S, int CVT, int MINB, int DB, int BX4, int SPLIT, int DIAG, int BT = 0, int RG = 0, int PF = 0>
static int launch(int M, int N, int K, const void *A, const void *B, float *C, void *stream)
{
  using T = typename Elem<DT>::T;
  auto *k = gemm<DT, BM, BN, BK, WM, WN, S, CVT, MINB, DB, BX4, SPLIT, DIAG, BT, RG, PF>;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int LDA = BK + 16 / (int)sizeof(T);
  constexpr int smem = S * (BM * LDA + (BT ? BN * LDA : BK * (BN + 8))) * (int)sizeof(T);
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

// V(name, DT, BM, BN, BK, WM, WN, S, CVT, MINB, DB, BX4, SPLIT, DIAG[, BT, RG, PF])
#define V(name, ...) \
  extern "C" int name(int M, int N, int K, const void *A, const void *B, float *C, void *s) { return launch<__VA_ARGS__>(M, N, K, A, B, C, s); } \
  extern "C" int name##_smem(void) { return 0; }
#include "variants.inc"
