"""Procs for tests/test_dist*.py: distributed memory (seed 000, rules 1-4).

Each proc the deduction rejects marks its faulty line with `# error here`.
"""

from __future__ import annotations

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *

# ---------------------------------------------------------------- rejected procs: rule 3


# Written as acc[ty, tx], read as acc[tx, ty]: thread (ty, tx) would read registers of thread (tx, ty).
@proc
def transposed_read(x: f32[256] @ CudaGmemLinear, y: f32[256] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            acc: f32[16, 16] @ CudaRmem
            for ty in cuda_threads(0, 16, unit=16 * cuda_thread):
                for tx in cuda_threads(0, 16):
                    acc[ty, tx] = x[ty * 16 + tx]
            Fence(cuda_in_order, cuda_in_order)
            for ty in cuda_threads(0, 16, unit=16 * cuda_thread):
                for tx in cuda_threads(0, 16):
                    y[ty * 16 + tx] = acc[tx, ty]  # error here
