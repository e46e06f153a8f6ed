"""Swizzle-style index arithmetic: the programs of issue 15, whose CUDA once meant something else.

exo 1.0's printer wrote `4 * (t % 8)` as `4 * t % 8` (C reads `(4 * t) % 8`) and
printed the language's floor modulo as C's truncating `%`, so `(t - 8) % 4`
went negative for t < 8. spork_lab prints both faithfully (codegen/_c_exprs.py);
these procs run on the GPU against NumPy in tests/test_gpu_examples.py.
"""

from __future__ import annotations

import numpy as np

from spork_lab import proc
from spork_lab.platforms.cuda import *


@proc
def index_arithmetic(
    tasks: size,
    x: f32[tasks, 64] @ CudaGmemLinear,
    swizzled: f32[tasks, 256] @ CudaGmemLinear,
    rotated: f32[tasks, 128] @ CudaGmemLinear,
    wrapped: f32[tasks, 256] @ CudaGmemLinear,
):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, tasks):
            for t in cuda_threads(0, 64):
                swizzled[task, 4 * (t % 8) + 32 * (t / 8)] = x[task, t]
                rotated[task, 2 * ((t + 1) % 8) + 16 * (t / 8)] = x[task, t]
                wrapped[task, 64 * ((t - 8) % 4) + t / 4] = x[task, t]


PROCS = [index_arithmetic]

# The same columns in NumPy: Python's // and % are the language's floor division and modulo.
_T = np.arange(64)
_COLUMNS = {
    "swizzled": 4 * (_T % 8) + 32 * (_T // 8),
    "rotated": 2 * ((_T + 1) % 8) + 16 * (_T // 8),
    "wrapped": 64 * ((_T - 8) % 4) + _T // 4,
}


def reference(tasks: int, x: np.ndarray, **outputs: np.ndarray) -> dict:
    result = {}
    for name, out in outputs.items():
        out = out.copy()
        out[:, _COLUMNS[name]] = x
        result[name] = out
    return result


def make_args(rng: np.random.Generator, n: int = 300) -> dict:
    """n tasks; outputs start random, so a store to a wrong column shows twice: there and where it was due."""
    normal = lambda *shape: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    return {"tasks": n, "x": normal(n, 64), "swizzled": normal(n, 256), "rotated": normal(n, 128), "wrapped": normal(n, 256)}
