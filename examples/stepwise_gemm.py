"""A naive GEMM, C += A @ B, scheduled step by step into a tiled CUDA kernel with shared-memory staging.

The schedule below is the one `notebooks/02_stepwise_gemm.ipynb` walks through:
`notebooks/make_tutorials.py` turns each `# ## title` comment block into a
markdown cell and the `p = op(p, ...)` lines under it into one code cell of
`wb.apply(op, ...)` calls, so the notebook's steps are this file's steps
(tests/test_lab_notebooks.py checks that they agree). Run
`python examples/stepwise_gemm.py` to sync-check the result.

Each CTA (256 threads, 16 x 16) computes a 64 x 64 tile of C, each thread a
4 x 4 block of it in registers; K advances in tiles of 16 staged through
shared memory, with a CTA Fence after the copies (RAW) and one before the
tiles are freed for the next K tile (the free is a write by the whole CTA).
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *


@proc
def gemm(M: size, N: size, K: size, A: f32[M, K] @ CudaGmemLinear, B: f32[K, N] @ CudaGmemLinear,
         C: f32[M, N] @ CudaGmemLinear):
    assert M % 64 == 0
    assert N % 64 == 0
    assert K % 16 == 0
    for i in seq(0, M):
        for j in seq(0, N):
            for k in seq(0, K):
                C[i, j] += A[i, k] * B[k, j]


SIZES = {"M": 64, "N": 64, "K": 32}  # where the notebook's workbench runs the sync check: one task, two K tiles

p = gemm

# ## Step 1 — one 64 × 64 tile of C per task
# `divide_loop` splits `i` and `j` into tiles of 64 and `reorder_loops` brings the two tile loops
# (`mt`, `nt`) outside. Still sequential code: only the loop structure changed (open **Steps** to see the diff).
p = divide_loop(p, "i", 64, ["mt", "mi"], perfect=True)
p = divide_loop(p, "j", 64, ["nt", "nj"], perfect=True)
p = reorder_loops(p, "mi nt")

# ## Step 2 — a device function whose tasks are the tiles
# The tile loops become the `cuda_tasks` of a kernel of 256-thread CTAs. The analysis objects, and the
# **Code** view marks where: the whole CTA would run the scalar update of `C`. Threads come next.
p = wrap_with_context(p, p.find_loop("mt"), CudaDeviceFunction(blockDim=256))
p = set_loop_mode(p, "mt", cuda_tasks)
p = set_loop_mode(p, "nt", cuda_tasks)

# ## Step 3 — 16 × 16 threads, each computing a 4 × 4 block of the tile
# `ti` becomes a loop over groups of 16 threads and `tj` over the threads of a group. The **Tiling** view
# lays the statement's collectives out by `ti` (rows) and `tj` (columns): a 16 × 16 grid of single threads,
# coloured by warp: every thread of the CTA has its own cell.
p = divide_loop(p, "mi", 4, ["ti", "ri"], perfect=True)
p = divide_loop(p, "nj", 4, ["tj", "rj"], perfect=True)
p = reorder_loops(p, "ri tj")
p = set_loop_mode(p, "ti", cuda_threads(unit=16 * cuda_thread))
p = set_loop_mode(p, "tj", cuda_threads)

# ## Step 4 — K in tiles of 16, outside the thread loops
# Every CTA will copy one 64 × 16 tile of `A` and one 16 × 64 tile of `B` per K tile, so the K-tile loop
# `ko` must enclose the thread loops.
p = divide_loop(p, "k", 16, ["ko", "ki"], perfect=True)
p = reorder_loops(p, "rj ko")
p = reorder_loops(p, "ri ko")
p = reorder_loops(p, "tj ko")
p = reorder_loops(p, "ti ko")

# ## Step 5 — stage the tiles of A and B in shared memory
# `stage_mem` copies a window into a new buffer before the block and reads it there. The copies are still
# sequential loops run by the whole CTA: the analysis says so at their lines.
p = stage_mem(p, p.find_loop("ti"), "A[64 * mt:64 * mt + 64, 16 * ko:16 * ko + 16]", "A_s")
p = stage_mem(p, p.find_loop("ti"), "B[16 * ko:16 * ko + 16, 64 * nt:64 * nt + 64]", "B_s")
p = simplify(p)
p = set_memory(p, "A_s", CudaSmemLinear)
p = set_memory(p, "B_s", CudaSmemLinear)

# ## Step 6 — every thread copies its share (and the hazards appear)
# Each copy now runs on 16 × 16 threads, four rows (or column blocks) each. The kernel is valid, but
# **broken**: a thread reads elements of `A_s` and `B_s` that other threads wrote, with nothing ordering the
# writes first (RAW), and the tiles are freed at the end of the K tile while threads may still read them
# (FREE). Open **Hazards**: each card marks the two scheduled statements involved, and says which Fence
# would order them, as a scheduling call.
p = divide_loop(p, "i0", 16, ["r0", "ry"], perfect=True)
p = set_loop_mode(p, "ry", cuda_threads(unit=16 * cuda_thread))
p = set_loop_mode(p, "i1", cuda_threads)
p = divide_loop(p, "i1 #1", 16, ["c0", "cy"], perfect=True)
p = reorder_loops(p, "i0 c0")
p = set_loop_mode(p, "i0", cuda_threads(unit=16 * cuda_thread))
p = set_loop_mode(p, "cy", cuda_threads)

# ## Step 7 — the Fences the hazard cards ask for
# A CTA-scope `Fence(cuda_in_order, cuda_in_order)` (a `__syncthreads()`) between the copies and the
# multiply, and one at the end of the K tile, before the tiles are freed and overwritten.
p = insert_fence(p, p.find_loop("ti").before(), cuda_in_order, cuda_in_order)
p = insert_fence(p, p.find_loop("ti").after(), cuda_in_order, cuda_in_order)

# ## Step 8 — accumulate in registers
# Each thread's 4 × 4 block of `C` is loaded into registers (`CudaRmem`) once per K tile instead of being
# read and written in global memory at every multiply-add.
p = stage_mem(p, p.find_loop("ri"), "C[4 * ti + 64 * mt:4 * ti + 64 * mt + 4, 4 * tj + 64 * nt:4 * tj + 64 * nt + 4]", "C_r")
p = simplify(p)
p = set_memory(p, "C_r", CudaRmem)

gemm_smem = rename(p, "gemm_smem")

PROCS = [gemm_smem]


def reference(M: int, N: int, K: int, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict:
    return {"C": (C.astype(np.float64) + A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)}


def make_args(rng: np.random.Generator, n: int = 512) -> dict:
    """M = N = K = n, C zeros."""
    A, B = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    return {"M": n, "N": n, "K": n, "A": A, "B": B, "C": np.zeros((n, n), dtype=np.float32)}


if __name__ == "__main__":
    import spork_lab as sl

    print(gemm_smem)
    print(sl.sync_check(gemm_smem, **SIZES))
