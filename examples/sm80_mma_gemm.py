"""tf32 GEMM C = A @ B on Sm80 tensor cores (mma.sync m16n8k8), A, B and C row-major.

One CTA (4 warps) per 64 x 64 tile of C; warp (wm, wn) owns the 32 x 32 warp tile
(wm, wn): 2 x 4 accumulator fragments of 16 x 8. The fragments live inside the
per-warp loop (distributed memory is not implemented), so the K loop runs inside
it too and each warp stages its own 32 x 32 slices of A and B through its own
shared-memory region with cp.async: a Fence(Sm80_generic, cuda_in_order) waits for
the copies and a Fence(cuda_in_order, Sm80_generic) ends the reads before the next
copies overwrite the region; both are warp-scope. A CTA Fence ends each task,
since the CTA's next task reuses the shared memory. The rows are padded (36 and 40
floats) so the fragment loads hit distinct banks.

Run `python examples/sm80_mma_gemm.py` to see sync_check pass on it, and
`CUPY_TF32=1 python examples/sm80_mma_gemm.py bench 4096` on a GPU to time it at
M = N = K = 4096 against CuPy's matmul (cuBLAS; CUPY_TF32=1 lets it use TF32 tensor cores).
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *


@proc
def sm80_mma_gemm(
    M: size, N: size, K: size, A: f32[M, K] @ CudaGmemLinear, B: f32[K, N] @ CudaGmemLinear, C: f32[M, N] @ CudaGmemLinear
):
    assert M % 64 == 0
    assert N % 64 == 0
    assert K % 32 == 0
    with CudaDeviceFunction(blockDim=128):
        for mt in cuda_tasks(0, M / 64):
            for nt in cuda_tasks(0, N / 64):
                A_s: f32[2, 2, 32, 36] @ CudaSmemLinear
                B_s: f32[2, 2, 32, 40] @ CudaSmemLinear
                for wm in cuda_threads(0, 2, unit=2 * cuda_warp):
                    for wn in cuda_threads(0, 2, unit=cuda_warp):
                        D_r: f32[2, 4, 16, 8] @ Sm80_RmemMatrixD
                        for i in seq(0, 2):
                            for j in seq(0, 4):
                                Sm80_mma_zero_d_tf32(D_r[i, j, :, :])
                        for kt in seq(0, K / 32):
                            for r in cuda_threads(0, 4, unit=8 * cuda_thread):
                                for c in cuda_threads(0, 8):
                                    with CudaAsync(Sm80_cp_async_instr):
                                        for q in seq(0, 8):
                                            Sm80_cp_async_f32(
                                                A_s[wm, wn, 4 * q + r, 4 * c : 4 * c + 4],
                                                A[mt * 64 + wm * 32 + 4 * q + r, kt * 32 + 4 * c : kt * 32 + 4 * c + 4],
                                                size=16,
                                            )
                                            Sm80_cp_async_f32(
                                                B_s[wm, wn, 4 * q + r, 4 * c : 4 * c + 4],
                                                B[kt * 32 + 4 * q + r, nt * 64 + wn * 32 + 4 * c : nt * 64 + wn * 32 + 4 * c + 4],
                                                size=16,
                                            )
                            Fence(Sm80_generic, cuda_in_order)
                            for kk in seq(0, 4):
                                A_r: f32[2, 16, 8] @ Sm80_RmemMatrixA
                                B_r: f32[4, 8, 8] @ Sm80_RmemMatrixB
                                for i in seq(0, 2):
                                    Sm80_mma_load_a_tf32(A_r[i, :, :], A_s[wm, wn, 16 * i : 16 * i + 16, 8 * kk : 8 * kk + 8])
                                for j in seq(0, 4):
                                    Sm80_mma_load_b_tf32(B_r[j, :, :], B_s[wm, wn, 8 * kk : 8 * kk + 8, 8 * j : 8 * j + 8])
                                for i in seq(0, 2):
                                    for j in seq(0, 4):
                                        Sm80_mma_tf32(D_r[i, j, :, :], A_r[i, :, :], B_r[j, :, :])
                            Fence(cuda_in_order, Sm80_generic)
                        for i in seq(0, 2):
                            for j in seq(0, 4):
                                Sm80_mma_store_d_tf32(
                                    C[
                                        mt * 64 + wm * 32 + 16 * i : mt * 64 + wm * 32 + 16 * i + 16,
                                        nt * 64 + wn * 32 + 8 * j : nt * 64 + wn * 32 + 8 * j + 8,
                                    ],
                                    D_r[i, j, :, :],
                                )
                Fence(cuda_in_order, cuda_in_order)  # the CTA's next task reuses A_s and B_s


PROCS = [sm80_mma_gemm]

# make_args' inputs are tf32 values, so their products are exact: what is left is fp32 accumulation.
TOLERANCE = dict(rtol=1e-3, atol=1e-3)


def to_tf32(x: np.ndarray) -> np.ndarray:
    """x rounded to the nearest tf32 value (10 mantissa bits), ties away from zero, as float32."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def reference(M: int, N: int, K: int, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}


def make_args(rng: np.random.Generator, n: int = 512) -> dict:
    """M = N = K = n; A and B hold tf32 values (what the kernel multiplies), C zeros."""
    A = to_tf32(rng.standard_normal((n, n), dtype=np.float32))
    B = to_tf32(rng.standard_normal((n, n), dtype=np.float32))
    return {"M": n, "N": n, "K": n, "A": A, "B": B, "C": np.zeros((n, n), dtype=np.float32)}


def bench(n: int) -> str:
    """Median time (sl.benchmark: CUDA events, L2 flushed) of the kernel and of CuPy's matmul at M = N = K = n."""
    import os

    import cupy

    import spork_lab as sl

    built = sl.build(PROCS).sm80_mma_gemm
    A, B = (cupy.asarray(to_tf32(np.random.default_rng(s).standard_normal((n, n), dtype=np.float32))) for s in (0, 1))
    C, C_cupy = cupy.zeros((n, n), dtype=cupy.float32), cupy.zeros((n, n), dtype=cupy.float32)
    r = sl.benchmark(built, (n, n, n, A, B, C), reference=lambda *_: cupy.matmul(A, B, out=C_cupy))
    want = cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64))
    err = lambda X: float(cupy.max(cupy.abs(X - want)) / cupy.max(cupy.abs(want)))  # noqa: E731
    tflops = lambda ms: 2 * n**3 / ms / 1e9  # noqa: E731
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return (
        f"{name}, M=N=K={n}: sm80_mma_gemm {r.median_ms:.3f} ms ({tflops(r.median_ms):.1f} TFLOP/s, p20-p80 "
        f"{r.p20_ms:.3f}-{r.p80_ms:.3f} ms, max|err|/max|C| {err(C):.1e}); cupy.matmul (CUPY_TF32="
        f"{os.environ.get('CUPY_TF32', '0')}) {r.reference_median_ms:.3f} ms ({tflops(r.reference_median_ms):.1f} TFLOP/s, "
        f"max|err|/max|C| {err(C_cupy):.1e})"
    )


if __name__ == "__main__":
    import sys

    import spork_lab as sl

    if sys.argv[1:2] == ["bench"]:
        print(bench(int(sys.argv[2])))
    else:
        print(sl.sync_check(sm80_mma_gemm, M=128, N=128, K=64))
