"""exo's externs in CPU and CUDA code (spork_lab.codegen._externs): a call inside another's arguments, externs in
device functions, and 16-bit types computed in float and rounded once."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from exo.libs.externs import expf, fmaxf, relu, select, sigmoid, sin, sqrt  # noqa: F401 (the kernels name them)
from test_dtypes import as_values, bf16_round

import spork_lab as sl
from spork_lab.platforms.cuda import *
from spork_lab.runtime._args import bf16_bits

DTYPES = ("f32", "f16", "bf16", "f64")
# NumPy arrays of each type (bf16 as its bits), and the values they hold
_NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "f64": np.float64}


def _kernel(name: str, dtype: str, body: str):
    """y = body(X) elementwise (X: x's element), in a device function of 128 threads per task."""
    src = f"""
def {name}_{dtype}(n: size, x: {dtype}[n] @ CudaGmemLinear, y: {dtype}[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                y[task * 128 + t] = {body.replace("X", "x[task * 128 + t]")}
"""
    return sl.parse_source(src.strip("\n"), filename=__file__, func_globals=globals())


# exact in every type: a selection, a comparison, one rounded product
_EXACT = "select(X, 0.0, fmaxf(X, -1.0), relu(X * 3.0))"
_ALL = "select(X, 0.0, sigmoid(X), expf(X)) + sin(X) + sqrt(relu(X))"


def _inputs(dtype: str, n: int = 128 * 8) -> dict:
    x = np.random.default_rng().standard_normal(n) * 4
    x = bf16_bits(bf16_round(x)) if dtype == "bf16" else x.astype(_NUMPY[dtype])
    return dict(n=n, x=x, y=np.zeros(n, _NUMPY[dtype]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_nested_externs_run_on_the_cpu(dtype):
    """exo's LoopIR_FindExterns missed relu inside select's arguments: `_relu_float` was undefined (ctypes'
    OSError from run_cpu, gcc's from a build)."""
    args = _inputs(dtype)
    out = sl.run_cpu(_kernel("exact", dtype, _EXACT), **args)
    x = as_values(dtype, args["x"])
    tripled = bf16_round(x * 3.0) if dtype == "bf16" else (x * 3.0).astype(_NUMPY[dtype])  # x * 3 rounded
    maxed = np.maximum(x.astype(np.float32) if dtype == "f64" else x, -1.0)  # exo's fmaxf is C's: f64 goes through float
    np.testing.assert_array_equal(as_values(dtype, out["y"]), np.where(x < 0, maxed, np.maximum(tripled, 0)))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_externs_compile_in_device_code(tmp_path):
    """Nothing defined exo's extern helpers in the .cu (nvcc: `_relu_float` is undefined), and for __half and
    __nv_bfloat16 their C (`x > 0.0`) would not compile: every extern, in each type."""
    procs = [_kernel("all", dtype, _ALL) for dtype in DTYPES]
    procs.append(_kernel("ints", "i32", "relu(X) + sin(X)"))  # nvcc: no sin(int) in device code, a host _relu_int32_t
    c, h, cu, cuh = sl.compile_procs_to_strings(procs, "ext")
    assert "static __device__ inline float _relu_float(float x)" in cu and "_relu___half" not in cu
    for ext, text in zip(("c", "h", "cu", "cuh"), (c, h, cu, cuh)):
        (tmp_path / f"ext.{ext}").write_text(text)
    res = subprocess.run(["nvcc", "-c", "-std=c++17", "-arch=sm_80", "ext.cu", "ext.c"], cwd=tmp_path,
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_externs_on_the_gpu_are_the_cpus(dtype):
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    assert_gpu_matches_cpu(_kernel("exact", dtype, _EXACT), **_inputs(dtype))


def test_sigmoid_in_f32_and_f64_in_one_c_file():
    """exo names its helper `sigmoid` in every type: C refused a proc that calls it on f32 and f64 (gcc: conflicting
    types for 'sigmoid')."""
    src = """
def sigmoids(n: size, x: f32[n] @ DRAM, y: f64[n] @ DRAM):
    for i in seq(0, n):
        x[i] = sigmoid(x[i])
        y[i] = sigmoid(y[i])
"""
    p = sl.parse_source(src.strip("\n"), filename=__file__, func_globals=globals())
    rng = np.random.default_rng()
    x, y = rng.standard_normal(64).astype(np.float32) * 4, rng.standard_normal(64) * 4
    out = sl.run_cpu(p, n=64, x=x, y=y)
    np.testing.assert_allclose(out["x"], 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-7)  # exp in double
    np.testing.assert_allclose(out["y"], 1 / (1 + np.exp(-y)), rtol=1e-15)


# C's sqrt, sin and exp compute in double: the call's result is rounded to its type before the sum (the host added
# `sqrt(x) + x` in double), and the GPU calls them on a double too (CUDA C++ picked sinf and expf)
_IN_DOUBLE = "sqrt(relu(X)) + X + sin(X) + sigmoid(X)"


def test_an_extern_call_is_rounded_to_its_type_on_the_cpu():
    args = _inputs("f32")
    x = args["x"].astype(np.float64)
    out = sl.run_cpu(_kernel("in_double", "f32", _IN_DOUBLE), **args)
    f32 = np.float32
    want = (f32(np.sqrt(np.maximum(x, 0))) + args["x"]) + f32(np.sin(x))  # in float, each call rounded first
    np.testing.assert_allclose(out["y"], want + f32(1 / (1 + np.exp(-x))), rtol=2e-7)
    exact = sl.run_cpu(_kernel("sqrt_sum", "f32", "sqrt(relu(X)) + X"), **args)["y"]
    np.testing.assert_array_equal(exact, f32(np.sqrt(np.maximum(x, 0))) + args["x"])


@pytest.mark.gpu
def test_double_externs_on_the_gpu_are_the_cpus():
    """57 of 4096 `sqrt(x) + x`, and sin and sigmoid in f32, differed (audit of session 31)."""
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    assert_gpu_matches_cpu(_kernel("in_double", "f32", _IN_DOUBLE), **_inputs("f32"))


# Externs of integer values: exo's helpers return a float (fmaxf, sqrt), which C's cast made an int with no defined
# value out of range or for NaN (gcc: INT_MIN; the GPU's cvt: INT_MAX and 0): audit of session 33
_INT_INPUTS = np.array([2147483647, 2147483600, -2147483648, -3, -1, 0, 7, 100] * 16, dtype=np.int32)


@pytest.mark.parametrize("body, real", [
    ("fmaxf(X, X)", _INT_INPUTS.astype(np.float32).astype(np.float64)),  # 2147483600 is 2^31 as a float
    ("sqrt(X)", np.sqrt(_INT_INPUTS.astype(np.float64))),  # NaN below 0
])
def test_an_integer_extern_saturates_like_a_store(body, real):
    """Through the saturating helper of a float stored into an int: truncated in range, NaN 0, past the range its
    end."""
    p = _kernel("int_" + body[:4], "i32", body)
    out = sl.run_cpu(p, n=128, x=_INT_INPUTS.copy(), y=np.zeros(128, np.int32))["y"]
    want = np.nan_to_num(np.clip(np.trunc(real), -2.0**31, 2.0**31 - 1), nan=0).astype(np.int32)
    np.testing.assert_array_equal(out, want)
    assert "_float_to_int_int32_t(" in sl.compile_procs_to_strings([p], "k")[2]


@pytest.mark.gpu
@pytest.mark.parametrize("body", ["fmaxf(X, X)", "sqrt(X)"])
def test_integer_externs_on_the_gpu_are_the_cpus(body):
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    assert_gpu_matches_cpu(_kernel("int_" + body[:4], "i32", body), n=128, x=_INT_INPUTS.copy(),
                           y=np.zeros(128, np.int32))
