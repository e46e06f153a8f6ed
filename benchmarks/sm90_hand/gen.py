"""Generate gemm_hand.cu: the hand-written Sm90a reference GEMM (C = A @ B^T, f32 out).

It has exactly the instruction sequence spork_lab's generated GEMM is meant to
have (TMA into an mbarrier ring, one producer warp, two consumer warpgroups
running wgmma, setmaxnreg, a cluster of 2 multicasting B, direct epilogue), and
a table of configurations so one device call can time them all.
Run: python3 gen.py && nvcc ... (see build.sh)
"""

from __future__ import annotations

from pathlib import Path

DTYPES = {  # name: (C type, wgmma type string, k per wgmma, tensor map data type)
    "tf32": ("float", "tf32", 8, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"),
    "f16": ("__half", "f16", 16, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"),
    "bf16": ("__nv_bfloat16", "bf16", 16, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"),
}

# (dtype, BN, MI (m64 blocks per consumer warpgroup), stages, cluster)
CONFIGS = []
for dt in ("tf32", "f16", "bf16"):
    CONFIGS += [(dt, 256, 1, 4, 2), (dt, 256, 1, 4, 1), (dt, 128, 2, 4, 2), (dt, 128, 2, 4, 1), (dt, 256, 1, 3, 2)]


def wgmma_fn(dt: str, n: int) -> str:
    ctype, wt, k, _ = DTYPES[dt]
    nreg = n // 2
    regs = ", ".join(f"%{i}" for i in range(nreg))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    a, b, sc = nreg, nreg + 1, nreg + 2
    tail = f"p, 1, 1" if dt == "tf32" else "p, 1, 1, 0, 0"
    return f"""
__device__ __forceinline__ void wgmma_{dt}_n{n}(float *d, uint64_t da, uint64_t db, int scale_d) {{
  asm volatile(
    "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{sc}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{wt}.{wt} {{{regs}}}, %{a}, %{b}, {tail};\\n}}\\n"
    : {outs}
    : "l"(da), "l"(db), "r"(scale_d));
}}"""


HEADER = r"""
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile("{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n"
               :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t *bar, uint32_t cta) {
  asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
               "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n"
               :: "r"(smem_u32(bar)), "r"(cta) : "memory");
}
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
               :: "r"(smem_u32(dst)), "l"(map), "r"(smem_u32(bar)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_load_mc(void *dst, const CUtensorMap *map, int c0, int c1, uint64_t *bar, uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%4, %5}], [%2], %3;"
               :: "r"(smem_u32(dst)), "l"(map), "r"(smem_u32(bar)), "h"(mask), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r;
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
// K-major operand, 128-byte swizzle: 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
"""

KERNEL = r"""
template <int DT, int BN, int MI, int S, int CL>
struct Cfg {
  static constexpr int BM = 128 * MI;                 // two consumer warpgroups of 64 * MI rows
  static constexpr int ESZ = DT == 0 ? 4 : 2;
  static constexpr int BK = 128 / ESZ;                // one 128-byte swizzle row of K
  static constexpr int KSTEP = DT == 0 ? 8 : 16;
  static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int SMEM = S * STAGE_BYTES + 2 * S * 8 + 1024;
};

template <int DT, int BN> __device__ __forceinline__ void wgmma(float *d, uint64_t da, uint64_t db, int scale_d);
WGMMA_DISPATCH

template <int DT, int BN, int MI, int S, int CL>
__global__ void __launch_bounds__(384, 1)
gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, float *C,
            int M, int N, int K, int group)
{
  using G = Cfg<DT, BN, MI, S, CL>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t pad = (1024u - (smem_u32(smem_raw) & 1023u)) & 1023u;
  uint8_t *smem = smem_raw + pad;
  uint8_t *As = smem, *Bs = smem + S * G::A_BYTES;
  uint64_t *full = (uint64_t *)(smem + S * G::STAGE_BYTES), *empty = full + S;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t rank = CL > 1 ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) { mbar_init(&full[s], 1); mbar_init(&empty[s], 2 * CL); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (CL > 1) cluster_sync(); else __syncthreads();
  const int num_m = M / (G::BM * CL), num_n = N / BN, tasks = num_m * num_n, nk = K / G::BK;
  const int cluster_id = blockIdx.x / CL, nclusters = gridDim.x / CL;
  if (warp < 4) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (warp == 0 && lane == 0) {
      uint32_t it = 0;
      for (int t = cluster_id; t < tasks; t += nclusters) {
        const int per_group = group * num_n, g0 = t / per_group * group;
        const int gs = min(group, num_m - g0), r = t % per_group;
        const int tm = g0 + r % gs, tn = r / gs;
        const int m0 = (tm * CL + rank) * G::BM, n0 = tn * BN;
        for (int kb = 0; kb < nk; ++kb, ++it) {
          const uint32_t s = it % S, ph = (it / S) & 1;
          mbar_wait(&empty[s], ph ^ 1);
          mbar_arrive_expect_tx(&full[s], G::STAGE_BYTES);
          tma_load(As + s * G::A_BYTES, &tmA, kb * G::BK, m0, &full[s]);
          if (CL == 1) tma_load(Bs + s * G::B_BYTES, &tmB, kb * G::BK, n0, &full[s]);
          else tma_load_mc(Bs + s * G::B_BYTES + rank * (G::B_BYTES / CL), &tmB, kb * G::BK, n0 + rank * (BN / CL),
                           &full[s], (uint16_t)((1 << CL) - 1));
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int wg = warp / 4 - 1, t128 = threadIdx.x % 128;
    uint32_t it = 0;
    float acc[MI][BN / 2];
    for (int t = cluster_id; t < tasks; t += nclusters) {
      const int per_group = group * num_n, g0 = t / per_group * group;
      const int gs = min(group, num_m - g0), r = t % per_group;
      const int tm = g0 + r % gs, tn = r / gs;
      const int m0 = (tm * CL + rank) * G::BM, n0 = tn * BN;
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) acc[i][j] = 0.0f;
      for (int kb = 0; kb < nk; ++kb, ++it) {
        const uint32_t s = it % S, ph = (it / S) & 1;
        mbar_wait(&full[s], ph);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        const uint32_t a_base = smem_u32(As + s * G::A_BYTES) + wg * MI * 64 * 128;
        const uint32_t b_base = smem_u32(Bs + s * G::B_BYTES);
#pragma unroll
        for (int kk = 0; kk < G::BK / G::KSTEP; ++kk)
#pragma unroll
          for (int i = 0; i < MI; ++i)
            wgmma<DT, BN>(acc[i], desc_sw128(a_base + i * 64 * 128 + kk * 32), desc_sw128(b_base + kk * 32), 1);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (kb > 0 && t128 == 0)
          for (int c = 0; c < CL; ++c) mbar_arrive_cluster(&empty[(it - 1) % S], c);
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      if (t128 == 0)
        for (int c = 0; c < CL; ++c) mbar_arrive_cluster(&empty[(it - 1) % S], c);
      const int w = (threadIdx.x / 32) % 4;
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int row = m0 + wg * MI * 64 + i * 64 + 16 * w + lane / 4;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int col = n0 + 8 * j + 2 * (lane % 4);
          *(float2 *)&C[(size_t)row * N + col] = make_float2(acc[i][4 * j], acc[i][4 * j + 1]);
          *(float2 *)&C[(size_t)(row + 8) * N + col] = make_float2(acc[i][4 * j + 2], acc[i][4 * j + 3]);
        }
      }
    }
  }
  if (CL > 1) cluster_sync();
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult q;
    void *p = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
  }
  return fn;
}

static int make_map(CUtensorMap *m, CUtensorMapDataType dt, int esz, void *ptr, int rows, int cols, int box_rows, int box_cols) {
  auto fn = encode_fn();
  if (!fn) return -1;
  cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  cuuint64_t strides[1] = {(cuuint64_t)cols * esz};
  cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = fn(m, dt, 2, ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : 1000 + (int)r;
}

template <int DT, int BN, int MI, int S, int CL>
static int launch(const void *A, const void *B, float *C, int M, int N, int K, int group, cudaStream_t stream, int *grid_out) {
  using G = Cfg<DT, BN, MI, S, CL>;
  if (M % (G::BM * CL) || N % BN || K % G::BK) return -2;
  const CUtensorMapDataType dt = DT == 0 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : DT == 1 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                                     : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  CUtensorMap ta, tb;
  int e = make_map(&ta, dt, G::ESZ, (void *)A, M, K, G::BM, G::BK);
  if (!e) e = make_map(&tb, dt, G::ESZ, (void *)B, N, K, BN / CL, G::BK);
  if (e) return e;
  auto kern = gemm_kernel<DT, BN, MI, S, CL>;
  cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, G::SMEM);
  if (err) return (int)err;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CL; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr; cfg.numAttrs = 1;
  cfg.blockDim = dim3(384);
  cfg.dynamicSmemBytes = G::SMEM;
  cfg.stream = stream;
  int clusters = 0;
  cfg.gridDim = dim3(CL);
  err = cudaOccupancyMaxActiveClusters(&clusters, kern, &cfg);
  if (err) return (int)err;
  const int tasks = (M / (G::BM * CL)) * (N / BN);
  if (clusters > tasks) clusters = tasks;
  cfg.gridDim = dim3(clusters * CL);
  *grid_out = clusters * CL;
  err = cudaLaunchKernelEx(&cfg, kern, ta, tb, C, M, N, K, group);
  if (!err) err = cudaGetLastError();
  return (int)err;
}

extern "C" int n_configs() { return NCONFIGS; }
extern "C" const char *config_name(int i) { static const char *names[] = {CONFIG_NAMES}; return names[i]; }
extern "C" int run_config(int i, const void *A, const void *B, float *C, int M, int N, int K, int group, void *stream, int *grid) {
  switch (i) {
CONFIG_CASES
  }
  return -3;
}
"""


def main() -> None:
    dts = {"tf32": 0, "f16": 1, "bf16": 2}
    fns, dispatch = [], []
    for dt in dts:
        for n in sorted({c[1] for c in CONFIGS if c[0] == dt}):
            fns.append(wgmma_fn(dt, n))
            dispatch.append(
                f"template <> __device__ __forceinline__ void wgmma<{dts[dt]}, {n}>(float *d, uint64_t da, uint64_t db, int s)"
                f" {{ wgmma_{dt}_n{n}(d, da, db, s); }}"
            )
    names = [f'"{dt} BN={bn} MI={mi} S={s} CL={cl}"' for dt, bn, mi, s, cl in CONFIGS]
    cases = [
        f"    case {i}: return launch<{dts[dt]}, {bn}, {mi}, {s}, {cl}>(A, B, C, M, N, K, group, (cudaStream_t)stream, grid);"
        for i, (dt, bn, mi, s, cl) in enumerate(CONFIGS)
    ]
    text = HEADER + "".join(fns) + KERNEL
    text = text.replace("WGMMA_DISPATCH", "\n".join(dispatch))
    text = text.replace("NCONFIGS", str(len(CONFIGS))).replace("CONFIG_NAMES", ", ".join(names))
    text = text.replace("CONFIG_CASES", "\n".join(cases))
    Path(__file__).with_name("gemm_hand.cu").write_text(text)


if __name__ == "__main__":
    main()
