"""Every example, built with nvcc and run on the local GPU, against its NumPy reference."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from conftest import runnable_examples

from spork_lab.runtime import example_case
from spork_lab.runtime._args import check_args, proc_spec

EXAMPLES = runnable_examples()
# An example's SHAPES (make_args' `shape`, or its `n`) run each proc at several sizes; others run at make_args' default.
CASES = [
    (m, i, shape)
    for m in EXAMPLES
    for i in range(len(importlib.import_module(m).PROCS))
    for shape in getattr(importlib.import_module(m), "SHAPES", [None])
]


def _case(mod, shape, p) -> tuple:
    """Fresh random inputs for p (at one of the example's SHAPES) and the outputs its reference expects."""
    size = {} if shape is None else {"shape": shape} if isinstance(shape, tuple) else {"n": shape}
    return example_case(mod, p, np.random.default_rng(), **size)


class _OnDevice:
    """A NumPy array shown as a GPU array (CUDA array interface), to check arguments where there is no GPU."""

    def __init__(self, a: np.ndarray):
        self.__cuda_array_interface__ = {**a.__array_interface__, "version": 3}


@pytest.mark.parametrize(
    "module_name,index,shape", CASES, ids=[f"{m}-{i}-{'x'.join(map(str, np.atleast_1d(s))) if s else 'default'}" for m, i, s in CASES]
)
def test_example_inputs_are_what_the_proc_takes(module_name, index, shape):
    """Without a GPU: each proc accepts the inputs its example makes for it (dtypes, shapes, assertions), and the
    reference's outputs are arguments of the same shapes."""
    mod = importlib.import_module(module_name)
    p = mod.PROCS[index]
    args, expected = _case(mod, shape, p)
    spec = proc_spec(p._loopir_proc)
    kinds = {a.name: a.kind for a in spec.args}
    check_args(spec, [_OnDevice(v) if kinds[k] == "cuda" else v for k, v in args.items()], None)
    assert expected and all(np.shape(want) == args[k].shape for k, want in expected.items())


@pytest.mark.gpu
@pytest.mark.parametrize(
    "module_name,index,shape", CASES, ids=[f"{m}-{i}-{'x'.join(map(str, np.atleast_1d(s))) if s else 'default'}" for m, i, s in CASES]
)
def test_example_matches_numpy(module_name, index, shape):
    cupy = pytest.importorskip("cupy")
    import spork_lab as sl

    mod = importlib.import_module(module_name)
    p = mod.PROCS[index]
    built = getattr(sl.build([p]), p.name())
    args, expected = _case(mod, shape, p)
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


def test_sanitizer_sweep_covers_every_example():
    """benchmarks/sanitize_examples.py runs racecheck and synccheck on the examples listed in its SMALL table."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "sanitize_examples.py"
    spec = importlib.util.spec_from_file_location("sanitize_examples", path)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    assert sorted(sweep.SMALL) == sorted(EXAMPLES)
