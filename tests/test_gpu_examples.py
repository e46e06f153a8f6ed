"""Every example, built with nvcc and run on the local GPU, against its NumPy reference."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest
from conftest import runnable_examples

EXAMPLES = runnable_examples()
CASES = [(m, i) for m in EXAMPLES for i in range(len(importlib.import_module(m).PROCS))]


@pytest.mark.gpu
@pytest.mark.parametrize("module_name,index", CASES)
def test_example_matches_numpy(module_name, index):
    cupy = pytest.importorskip("cupy")
    import spork_lab as sl

    mod = importlib.import_module(module_name)
    p = mod.PROCS[index]
    built = getattr(sl.build([p]), p.name())
    # an example with several procs of different signatures takes the proc (e.g. sm80_gemm: tf32, f16, bf16)
    takes_proc = "proc" in inspect.signature(mod.make_args).parameters
    args = mod.make_args(np.random.default_rng(), **({"proc": p} if takes_proc else {}))
    expected = mod.reference(**{k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()})
    dev = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    built(*dev.values())
    cupy.cuda.runtime.deviceSynchronize()
    module = built.module  # its CUDA runtime (linked into the library) launched the kernels
    assert getattr(module.lib, f"{module.lib_name}_last_error")() == 0, f"{p.name()}: CUDA error after the run"
    tolerance = getattr(mod, "TOLERANCE", dict(rtol=1e-5, atol=1e-4))  # e.g. looser for tf32 tensor cores
    for name, want in expected.items():
        np.testing.assert_allclose(dev[name].get(), want, **tolerance, err_msg=f"{p.name()}: {name}")


@pytest.mark.gpu
def test_bad_arguments_raise_before_launch():
    cupy = pytest.importorskip("cupy")
    from vec_add import vec_add

    import spork_lab as sl

    built = sl.build([vec_add]).vec_add
    x = cupy.ones(256, dtype=cupy.float32)
    with pytest.raises(TypeError, match="dtype float32"):
        built(256, x, cupy.ones(256, dtype=cupy.float64))
    with pytest.raises(ValueError, match="assertion"):
        built(100, x[:100], x[:100])
    with pytest.raises(TypeError, match="CuPy array"):
        built(256, x, np.ones(256, dtype=np.float32))
