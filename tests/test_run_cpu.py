"""sl.run_cpu and sl.sequential: a proc's sequential meaning on the CPU, without a GPU."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

import spork_lab as sl
from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.runtime._args import bf16_bits
from spork_lab.scheduling import divide_loop, set_loop_mode, wrap_with_context

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import dist_gemm  # noqa: E402


@proc
def add(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    for i in seq(0, n):
        y[i] += x[i]


@proc
def widen(n: size, x: bf16[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    for i in seq(0, n):
        y[i] = x[i]


def gpu_add():
    """The README's first kernel."""
    p = divide_loop(add, "i", 128, ["task", "tid"], perfect=True)
    p = set_loop_mode(p, "task", cuda_tasks)
    p = set_loop_mode(p, "tid", cuda_threads)
    return wrap_with_context(p, p.find_loop("task"), CudaDeviceFunction(blockDim=128))


def test_the_readme_kernel_adds_and_leaves_its_arguments_alone():
    rng = np.random.default_rng()
    x, y = rng.random(1024, dtype=np.float32), rng.random(1024, dtype=np.float32)
    before = y.copy()
    p = gpu_add()
    out = sl.run_cpu(p, 1024, x, y=y)  # in order, then by name
    np.testing.assert_array_equal(out["y"], before + x)
    np.testing.assert_array_equal(out["x"], x)
    np.testing.assert_array_equal(y, before)  # the caller's arrays are copied, not written
    np.testing.assert_array_equal(sl.run_cpu(p, n=1024, x=x, y=y)["y"], before + x)  # built once, called again


def test_sequential_is_a_plain_cpu_proc():
    text = str(sl.sequential(gpu_add()))
    assert "seq(0, 128)" in text and "DRAM" in text
    for gpu in ("cuda_threads", "cuda_tasks", "CudaDeviceFunction", "CudaGmemLinear"):
        assert gpu not in text, text


@pytest.mark.parametrize("p", dist_gemm.PROCS, ids=lambda p: p.name())
def test_distributed_memory_gemms_compute_the_product(p):
    """The seed's GEMMs (register tile, mma at CTA scope: instrs inlined to their semantics) against float64,
    at a non-square shape; entries exact in tf32, so the sums are exact."""
    args = dist_gemm.make_args(np.random.default_rng(), shape=(128, 256, 48))
    np.testing.assert_array_equal(sl.run_cpu(p, **args)["C"], dist_gemm.reference(**args)["C"])


def test_wrong_arguments_are_said_at_the_call():
    x, y = np.zeros(256, np.float32), np.zeros(256, np.float32)
    p = gpu_add()
    cases = [
        (lambda: sl.run_cpu(p, 200, x, y), "run_cpu(add): assertion `n % 128 == 0` does not hold for n=200"),
        (lambda: sl.run_cpu(p, 256, x.astype(np.float64), y), "x must have dtype float32, got float64"),
        (lambda: sl.run_cpu(p, 256, x[:128], y), "x must have shape (256,), got (128,)"),
        (lambda: sl.run_cpu(p, n=256, x=x), "run_cpu(add) needs y: run_cpu(p, n=..., x=..., y=...)"),
        (lambda: sl.run_cpu(p, n=256, x=x, y=y, z=x), "add has no parameter 'z'; its parameters are n, x, y"),
        (lambda: sl.run_cpu(p, 256, x, y, n=256), "n is given twice"),
        (lambda: sl.run_cpu(p, 256, x, y, y), "takes 3 arguments (n, x, y), got 4"),
        (lambda: sl.run_cpu(p, 256, _OnGpu(), y), "runs on the CPU: pass NumPy arrays (x: a GPU array"),
        # x is declared CudaGmemLinear: "x lives in host memory (DRAM)" said what the user had not written
        (lambda: sl.run_cpu(p, 256, list(x), y), "x is read in host memory, so it must be a NumPy array (run_cpu takes "
                                                 "one for CudaGmemLinear parameters too), got list"),
    ]
    for call, text in cases:
        line = inspect.getsourcelines(call)[1]
        with pytest.raises(sl.ArgumentError) as e:
            call()
        assert text in e.value.message, e.value.message
        assert (e.value.filename, e.value.lineno) == (__file__, line)


def test_sizes_too_large_for_the_cpu_are_refused_before_the_call():
    """A C call cannot be interrupted: a GPU-sized GEMM would have held a notebook's kernel for hours."""
    x = np.zeros(1024, np.float32)
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(sl.ArgumentError) as e:
        sl.run_cpu(gpu_add(), 1024, x, x.copy(), max_ops=1000)
    assert e.value.message.startswith("run_cpu(add): at n=1024 the sequential program makes about 1.0e+03 "
                                      "assignments, more than max_ops=1e+03"), e.value.message
    assert (e.value.filename, e.value.lineno) == (__file__, line)
    args = dist_gemm.make_args(np.random.default_rng(), n=2048)  # 2048^3 multiply-adds: above the default
    with pytest.raises(sl.ArgumentError, match="about 8.6e\\+09 assignments, more than max_ops=4e\\+09"):
        sl.run_cpu(dist_gemm.PROCS[0], **args)


@pytest.mark.parametrize("max_ops", ["1e9", 1e9, True, -1])
def test_max_ops_is_an_int(max_ops):
    """max_ops="1e9" (a string) was a TypeError comparing it, from inside run_cpu."""
    x = np.zeros(256, np.float32)
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(sl.SporkTypeError) as e:
        sl.run_cpu(gpu_add(), 256, x, x.copy(), max_ops=max_ops)
    assert e.value.message == f"run_cpu(max_ops={max_ops!r}): give an int >= 0"
    assert (e.value.filename, e.value.lineno) == (__file__, line)


class _OnGpu:
    __cuda_array_interface__ = {"shape": (256,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_bf16_widens_exactly():
    out = sl.run_cpu(widen, 16, bf16_bits(np.arange(-8, 8) * 0.375), np.zeros(16, np.float32))  # exact in bf16
    np.testing.assert_array_equal(out["y"], np.arange(-8, 8, dtype=np.float32) * 0.375)


def test_no_compiler_is_a_build_error(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/gcc")
    p = gpu_add()  # a new proc: nothing built for it yet
    with pytest.raises(sl.BuildError, match="no gcc was found"):
        sl.run_cpu(p, 128, np.zeros(128, np.float32), np.zeros(128, np.float32))


@proc
def multiply_add(n: size, a: f32[n], b: f32[n], c: f32[n], y: f32[n], z: f32[n]):
    for i in seq(0, n):
        y[i] = a[i] * b[i] + c[i]
        z[i] += a[i] * b[i]


def test_a_product_under_a_sum_rounds_twice_whatever_the_cpu(tmp_path, monkeypatch):
    """gcc -O2 fuses `a * b + c` into one fma wherever the target has one (aarch64; here a CC adding -O2 -mfma): the
    sequential meaning was the host's. Built with -ffp-contract=off, every operation rounds as the program says."""
    cc = tmp_path / "gcc-fma"
    cc.write_text('#!/bin/sh\nexec gcc "$@" -O2 -mfma\n')
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path / "cache"))  # nothing built with another compiler or flags
    rng = np.random.default_rng()
    a, b = (np.float32(1) + rng.integers(1, 2**12, 4096).astype(np.float32) * np.float32(2**-12) for _ in range(2))
    c = -(a * b)  # rounded: a fused a * b + c is the product's rounding error, not 0
    z = c.copy()
    out = sl.run_cpu(multiply_add, 4096, a, b, c, np.zeros(4096, np.float32), z)
    np.testing.assert_array_equal(out["y"], np.zeros(4096, np.float32))
    np.testing.assert_array_equal(out["z"], np.zeros(4096, np.float32))


def test_not_a_proc_is_a_type_error():
    with pytest.raises(sl.SporkTypeError, match="sequential takes a proc"):
        sl.sequential(add.name())


@pytest.mark.parametrize("gemm", ["sm80", "sm90"])
def test_bf16_tensor_core_gemms_run_on_the_cpu(gemm):
    """run_cpu refused bf16 arithmetic, so the bf16 GEMMs had no CPU reference. Their instrs inline to products
    rounded to bf16 (exo's precision of `a * b`): exact on small integers, as the soundness fuzz runs them."""
    from test_dtypes import bf16_values

    from spork_lab.lab._bench import make_args
    from spork_lab.runtime._args import proc_spec

    if gemm == "sm80":
        import sm80_gemm

        p, sizes, b_nk = sm80_gemm.sync_check_kernel("bf16"), {"M": 256, "N": 256, "K": 128}, False
    else:
        import sm90_gemm

        p, sizes, b_nk = sm90_gemm.make_gemm("bf16", CL=1, G=1), {"M": 128, "N": 256, "K": 128}, True
    spec = proc_spec(p._loopir_proc)
    args = dict(zip((a.name for a in spec.args), make_args(spec, sizes, np.random.default_rng(), small_integers=True)))
    a, b = bf16_values(args["A"]), bf16_values(args["B"])
    want = a @ (b.T if b_nk else b)
    assert np.abs(want).max() > 4  # not zeros
    np.testing.assert_array_equal(sl.run_cpu(p, **args)["C"], want)
