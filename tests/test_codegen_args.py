"""The Python-side argument checker of built procs, with fake device arrays (no GPU needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.runtime._args import check_args, proc_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from block_reduce import block_reduce  # noqa: E402


class FakeDevice:
    def __init__(self, id):
        self.id = id


class FakeCuda:
    """Just enough of a CuPy array: __cuda_array_interface__ and .device."""

    def __init__(self, shape, typestr="<f4", strides=None, readonly=False, device=0, ptr=4096):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, readonly),
                                         "strides": strides, "version": 3}  # fmt: skip
        self.device = FakeDevice(device)


SPEC = proc_spec(block_reduce._loopir_proc)


def test_good_arguments_give_raw_values():
    assert check_args(SPEC, (512, FakeCuda((512,), ptr=4096), FakeCuda((2,), ptr=8192)), 0) == [512, 4096, 8192]


@pytest.mark.parametrize(
    "args,error,match",
    [
        ((512, FakeCuda((512,))), TypeError, "takes 3 arguments"),
        ((512.0, FakeCuda((512,)), FakeCuda((2,))), TypeError, "n must be a Python int"),
        ((True, FakeCuda((512,)), FakeCuda((2,))), TypeError, "n must be a Python int"),
        ((0, FakeCuda((0,)), FakeCuda((0,))), ValueError, "must be positive"),
        ((500, FakeCuda((500,)), FakeCuda((1,))), ValueError, r"assertion `n % 256 == 0`"),
        ((512, np.zeros(512, np.float32), FakeCuda((2,))), TypeError, "cupy.asarray"),
        ((512, FakeCuda((512,), "<f8"), FakeCuda((2,))), TypeError, "dtype float32"),
        ((512, FakeCuda((256,)), FakeCuda((2,))), ValueError, r"shape \(512,\)"),
        ((512, FakeCuda((512,), strides=(8,)), FakeCuda((2,))), ValueError, "C-contiguous"),
        ((512, FakeCuda((512,)), FakeCuda((2,), readonly=True)), ValueError, "read-only"),
        ((512, FakeCuda((512,), device=1), FakeCuda((2,))), ValueError, "on GPU 1"),
    ],
)
def test_bad_arguments(args, error, match):
    with pytest.raises(error, match=match):
        check_args(SPEC, args, 0)


@proc
def host_scale(n: size, a: f32[n, 4] @ DRAM):
    for i in seq(0, n):
        for j in seq(0, 4):
            a[i, j] = 2.0 * a[i, j]


def test_host_arrays_are_numpy():
    spec = proc_spec(host_scale._loopir_proc)
    a = np.zeros((3, 4), np.float32)
    assert check_args(spec, (3, a), None) == [3, a.ctypes.data]
    with pytest.raises(ValueError, match="C-contiguous"):
        check_args(spec, (3, np.zeros((4, 3), np.float32).T), None)
    with pytest.raises(TypeError, match=r"\.get\(\)"):
        check_args(spec, (3, FakeCuda((3, 4))), None)


def _built(p):
    """A built proc of `p` whose library call does nothing: what a call checks before it reaches the GPU."""
    from types import SimpleNamespace

    from spork_lab.runtime import BuiltProc

    spec = proc_spec(p._loopir_proc)
    return BuiltProc(SimpleNamespace(lib=SimpleNamespace(**{spec.name: lambda *args: None}), cupy=None), spec)


@pytest.mark.parametrize("args, kwargs, fragment", [
    ((512, FakeCuda((256,)), FakeCuda((2,))), {}, "block_reduce(): x must have shape (512,), got (256,)"),
    ((512, FakeCuda((512,), "<f8"), FakeCuda((2,))), {}, "block_reduce(): x must have dtype float32, got float64"),
    ((500, FakeCuda((500,)), FakeCuda((1,))), {}, "block_reduce(): assertion `n % 256 == 0` does not hold for n=500"),
    ((), {"n": 512}, "block_reduce() takes its arguments in order, without keywords: block_reduce(n, x, y)"),
])  # fmt: skip
def test_a_built_proc_called_wrongly_names_the_users_line(args, kwargs, fragment):
    """Were a TypeError or ValueError raised from spork_lab's frames, naming no line (keywords: Python's
    "__call__() got an unexpected keyword argument")."""
    import inspect
    import traceback

    from spork_lab.errors import ArgumentError

    built = _built(block_reduce)
    with pytest.raises(ArgumentError) as info:
        built(*args, **kwargs)
    line = inspect.currentframe().f_lineno - 1
    assert (info.value.filename, info.value.lineno) == (__file__, line) and info.value.message == fragment
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)  # as the checks raised before
    assert not [f for f in traceback.extract_tb(info.value.__traceback__) if "/spork_lab/runtime/" in f.filename]


def test_build_and_benchmark_given_the_wrong_things_say_what_to_write():
    """sl.build(p) was `'Procedure' object is not iterable`, and a proc's name in the list an AttributeError inside it;
    flags="-O2" reached nvcc as `- O 2`; benchmark of an unbuilt proc failed inside it (importing CuPy, or calling the
    Procedure), and with reps=0 in statistics.median."""
    import spork_lab as sl
    from spork_lab.errors import SporkTypeError

    for call, message in [(lambda: sl.build(block_reduce, arch="sm_90a"),
                           "build takes a list of procs: write sl.build([p], ...)"),
                          (lambda: sl.build([block_reduce, "block_reduce_wide"], arch="sm_90a"),
                           "build takes a list of procs (made with @proc), and 'block_reduce_wide' is a str: give the "
                           "proc itself"),
                          (lambda: sl.build([block_reduce], arch="sm_90a", flags="-O2"),
                           "build(flags=...) takes a list of nvcc flags, e.g. flags=['-O2'], not a string"),
                          (lambda: sl.benchmark(block_reduce, [512]), "benchmark times a proc of a built module, not "
                           "Procedure: k = sl.build([p]); sl.benchmark(k.p, args)"),
                          (lambda: sl.benchmark(_built(block_reduce), [512], reps=0),
                           "benchmark(reps=0): give an int >= 1"),
                          (lambda: sl.benchmark(_built(block_reduce), [512], warmup="5"),
                           "benchmark(warmup='5'): give an int >= 0")]:
        with pytest.raises(SporkTypeError) as info:
            call()
        assert (info.value.filename, info.value.message) == (__file__, message)


def test_a_failed_build_names_the_users_call():
    """nvcc refusing a flag the user gave was a BuildError without a place: the user's `sl.build` line is it."""
    import inspect

    import spork_lab as sl
    from spork_lab.errors import BuildError

    with pytest.raises(BuildError) as info:
        sl.build([block_reduce], arch="sm_90a", flags=["--no-such-flag"])
    assert (info.value.filename, info.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)
    assert "nvcc failed" in info.value.message and "no-such-flag" in info.value.message


def test_a_basename_with_a_folder_says_where_the_folder_goes(tmp_path):
    """compile_procs(procs, out, "sub/kernels") failed writing out/sub/kernels.c (no such folder), and its .c would
    have included "sub/kernels.h" from beside it."""
    import spork_lab as sl
    from spork_lab.errors import SporkTypeError

    with pytest.raises(SporkTypeError) as info:
        sl.compile_procs([block_reduce], tmp_path, "sub/kernels")
    assert info.value.filename == __file__ and "without a folder, got 'sub/kernels'" in info.value.message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args,match",
    [
        # the result would overwrite inputs the other tiles still read (audit F, f2: 135040 of 135296 wrong on an H200)
        ((512, FakeCuda((512,), ptr=4096), FakeCuda((2,), ptr=4096 + 512)), "x and y overlap in memory"),
        ((512, FakeCuda((512,), ptr=4096), FakeCuda((2,), ptr=4096)), "x and y overlap in memory"),
        # a view one float into an array reached a 16-byte cp.async (f4: misaligned address on an H200)
        ((512, FakeCuda((512,), ptr=4100), FakeCuda((2,), ptr=8192)), "4 bytes past a 16-byte boundary"),
        ((2**31, FakeCuda((2**31,), ptr=4096), FakeCuda((2**23,), ptr=8192)), "below 2\\^31"),
    ],
)
def test_arguments_the_gpu_code_cannot_take(args, match):
    with pytest.raises(ValueError, match=match):
        check_args(SPEC, args, 0)


def test_read_only_arguments_may_share_memory():
    spec = proc_spec(copy_rows._loopir_proc)
    same = FakeCuda((4, 16), ptr=4096)
    assert check_args(spec, (4, same, same, FakeCuda((4, 16), ptr=1 << 20)), 0)[1:3] == [4096, 4096]
    with pytest.raises(ValueError, match="z and x overlap|x and z overlap"):
        check_args(spec, (4, same, FakeCuda((4, 16), ptr=8192), FakeCuda((4, 16), ptr=4096 + 64)), 0)


@proc
def copy_rows(n: size, x: f32[n, 16] @ CudaGmemLinear, y: f32[n, 16] @ CudaGmemLinear, z: f32[n, 16] @ CudaGmemLinear):
    # z written through a window of it, which exo's list of writes names by the window
    for i in seq(0, n):
        row = z[i, :]
        for j in seq(0, 16):
            row[j] = x[i, j] + y[i, j]


@proc
def flagged(n: size, full: bool, x: f32[n] @ CudaGmemLinear):
    assert full
    for i in seq(0, n):
        x[i] = 0.0


@pytest.mark.parametrize("full,ok", [(True, True), (False, False), (np.bool_(False), False)])
def test_an_assertion_on_a_bool_argument_is_checked(full, ok):
    # a False passed here was stored as 0, which `is False` missed; the host C then assumed the flag true (audit F, f3)
    call = lambda: check_args(proc_spec(flagged._loopir_proc), (8, full, FakeCuda((8,))), 0)  # noqa: E731
    if ok:
        assert call()[1] == 1
    else:
        with pytest.raises(ValueError, match="assertion `full`"):
            call()


@proc
def window_writer(n: size, x: f32[n, 4] @ CudaGmemLinear, y: f32[n, 4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            for t in cuda_threads(0, 4):
                row = y[task, :]
                row[t] = x[task, t] + 1.0
                row[t] = row[t] * x[task, t]


@proc
def wraps_window_writer(n: size, x: f32[n, 4] @ CudaGmemLinear, y: f32[n, 4] @ CudaGmemLinear):
    window_writer(n, x, y)


def test_a_callees_writes_through_a_window_are_the_callers():
    """exo's write set names the callee's window `row`, not its parameter `y`: the wrapper's y passed as read-only,
    so `wraps_window_writer(n, a, a)` reached the GPU (audit 33: 7 of 8 elements wrong) and a read-only array was
    written."""
    spec = proc_spec(wraps_window_writer._loopir_proc)
    assert [a.writes for a in spec.args] == [False, False, True]
    same = FakeCuda((2, 4), ptr=4096)
    with pytest.raises(ValueError, match="x and y overlap in memory, and the proc writes y"):
        check_args(spec, (2, same, same), 0)
    with pytest.raises(ValueError, match="y is written by the proc but the array is read-only"):
        check_args(spec, (2, FakeCuda((2, 4), ptr=8192), FakeCuda((2, 4), readonly=True)), 0)


@proc
def index_arg(n: size, i: index, y: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 1):
                if i > 0:
                    y[0] = 1.0


def test_an_index_argument_of_the_smallest_int64_is_out_of_range():
    """abs(np.int64(-2**63)) is itself, negative: the range check passed it."""
    spec = proc_spec(index_arg._loopir_proc)
    with pytest.raises(ValueError, match="out of range"):
        check_args(spec, (8, np.int64(-2**63), FakeCuda((8,))), 0)


def test_a_parameter_of_exos_generic_real_is_refused_at_its_line():
    """`x: R[n]` raised a bare KeyError (LoopIR.Num) from sl.build and sl.run_cpu (audit 33)."""
    import spork_lab as sl

    @proc
    def generic_real(n: size, x: R[n] @ DRAM):
        for i in seq(0, n):
            x[i] = 0.0

    with pytest.raises(sl.BuildError, match="x : R\\[n\\] has no element type of its own") as e:
        sl.run_cpu(generic_real, n=4, x=np.zeros(4, np.float32))
    assert e.value.filename == __file__


class TorchLikeDevice:
    def __init__(self, index):
        self.type, self.index = "cuda", index


class TorchLike:
    """What torch's CUDA tensors show the checker: a device with .index, an interface that may raise."""

    def __init__(self, shape, device=0, requires_grad=False):
        self.shape, self.device, self._grad = shape, TorchLikeDevice(device), requires_grad

    @property
    def __cuda_array_interface__(self):
        if self._grad:
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad.")
        return {"shape": self.shape, "typestr": "<f4", "data": (4096, False), "strides": None, "version": 3}


def test_torch_tensors_are_checked_like_cupy_arrays():
    """A tensor that requires grad raised torch's RuntimeError out of the call, and the device check read CuPy's
    `.id`, which torch's device lacks (audit 33)."""
    with pytest.raises(TypeError, match="t.detach()"):
        check_args(SPEC, (512, TorchLike((512,), requires_grad=True), FakeCuda((2,), ptr=8192)), 0)
    with pytest.raises(ValueError, match="x is on GPU 1"):
        check_args(SPEC, (512, TorchLike((512,), device=1), FakeCuda((2,), ptr=8192)), 0)
