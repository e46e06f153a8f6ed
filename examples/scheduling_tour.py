"""From a sequential loop to a CUDA kernel, one scheduling step at a time.

`spork-lab demo` prints every step; the tests check that each one parses back.
"""

from __future__ import annotations

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *


@proc
def saxpy(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    for i in seq(0, n):
        y[i] = 2.0 * x[i] + y[i]


def schedule_saxpy() -> list:
    """The steps, as (description, proc) pairs."""
    steps = [("sequential", saxpy)]
    p = divide_loop(saxpy, "i", 256, ["task", "tid"], perfect=True)
    steps.append(("divide_loop i by 256 -> task, tid", p))
    p = set_loop_mode(p, "task", cuda_tasks)
    p = set_loop_mode(p, "tid", cuda_threads)
    steps.append(("set_loop_mode: task -> cuda_tasks, tid -> cuda_threads", p))
    p = wrap_with_context(p, p.find_loop("task"), CudaDeviceFunction(blockDim=256))
    steps.append(("wrap_with_context: a 256-thread kernel", p))
    p = divide_loop(p, "tid", 32, ["warp", "lane"], perfect=True)
    p = set_loop_mode(p, "warp", cuda_threads(unit=cuda_warp))
    steps.append(("divide tid into warps of 32 lanes", rename(simplify(p), "saxpy_gpu")))
    return steps


saxpy_gpu = schedule_saxpy()[-1][1]
