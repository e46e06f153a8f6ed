"""GPU tests' check against the CPU: a built proc's arrays must end exactly as `sl.run_cpu` leaves them."""

from __future__ import annotations

import numpy as np
from exo.API import Procedure

import spork_lab as sl


def assert_gpu_matches_cpu(p: Procedure, arch=None, cpu: dict | None = None, **args) -> None:
    """Build p for the local GPU (or `arch`), run it on copies of `args` (sizes and NumPy arrays, in p's argument
    order) and check that CUDA reported no error and every array ends exactly as run_cpu leaves it (`cpu`: those
    arrays, where the caller has run it)."""
    import cupy

    built = getattr(sl.build([p], arch=arch), p.name())
    want = sl.run_cpu(p, **args) if cpu is None else cpu
    dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    built(*dev.values())
    cupy.cuda.runtime.deviceSynchronize()
    assert getattr(built.module.lib, f"{built.module.lib_name}_last_error")() == 0, f"{p.name()}: CUDA error"
    for k, v in want.items():
        np.testing.assert_array_equal(dev[k].get(), v, err_msg=f"{p.name()}: {k}")
