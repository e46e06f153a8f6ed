"""bf16 on exo 1.0 (spork_lab.core.dtypes) and 2-byte floats in CUDA code: parse, print, type, lower, build."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from exo.core.LoopIR import LoopIR, T
from test_codegen_args import FakeCuda

import spork_lab as sl
from spork_lab import proc
from spork_lab.core.dtypes import BF16, bf16
from spork_lab.core.ir import walk_stmts
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.runtime._args import bf16_bits, check_args, proc_spec


def _reverse(dtype: str):
    """x reversed in 128-element tiles through shared memory, in y (same type) and z (f32)."""
    src = f"""
def reverse_{dtype}(n: size, x: {dtype}[n] @ CudaGmemLinear, y: {dtype}[n] @ CudaGmemLinear, z: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            t_s: {dtype}[128] @ CudaSmemLinear
            for tid in cuda_threads(0, 128):
                t_s[tid] = x[task * 128 + tid]
            Fence(cuda_in_order, cuda_in_order)
            for tid in cuda_threads(0, 128):
                y[task * 128 + tid] = t_s[127 - tid]
                z[task * 128 + tid] = t_s[127 - tid]
"""
    return sl.parse_source(src.strip("\n"), filename=__file__)


reverse_bf16, reverse_f16 = _reverse("bf16"), _reverse("f16")


def test_bf16_is_its_own_type_and_a_16_bit_float_to_exo():
    ir = reverse_bf16._loopir_proc
    x = ir.args[1]
    assert isinstance(x.type.basetype(), BF16) and x.type.basetype() is bf16
    assert bf16 != T.f16 and T.f16 != bf16 and bf16.is_real_scalar()
    assert str(bf16) == "bf16" and bf16.ctype() == "spork_bf16"
    assert reverse_f16._loopir_proc.args[1].type.basetype() == T.f16  # f16 stays exo's own


def test_bf16_prints_and_parses_back():
    text = str(reverse_bf16)
    assert "x: bf16[n] @ CudaGmemLinear" in text and "t_s: bf16[128] @ CudaSmemLinear" in text
    again = sl.parse_source(text)
    assert str(again) == text
    assert again._loopir_proc.body[0].body[0].body[0].type.basetype() is bf16  # the shared-memory tile


def test_instr_signatures_print_bf16_windows():
    assert "A: [bf16][16, 16] @ Sm80_RmemMatrixA" in str(Sm80_mma_bf16)
    assert "A: [f16][16, 16] @ Sm80_RmemMatrixA" in str(Sm80_mma_f16)


def test_bf16_tile_does_not_fit_an_f16_instr():
    """exo checks shapes only; the analysis rejects the bits an f16 mma would misread."""

    @proc
    def wrong(A: bf16[16, 16] @ CudaGmemLinear):
        with CudaDeviceFunction(blockDim=32):
            for task in cuda_tasks(0, 1):
                A_s: bf16[16, 16] @ CudaSmemLinear
                A_r: bf16[16, 16] @ Sm80_RmemMatrixA
                Sm80_mma_load_a_f16(A_r, A_s)

    with pytest.raises(sl.SporkError, match=r"test_dtypes.py:\d+: Sm80_mma_load_a_f16: argument rmem takes f16 elements, "
                       "but the argument given holds bf16") as e:
        sl.analyze(wrong)
    assert type(e.value).__name__ == "DataTypeError"


def _sources(p, tmp_path):
    c, h, cu, cuh = sl.compile_procs_to_strings([p], p.name())
    for ext, text in zip(("c", "h", "cu", "cuh"), (c, h, cu, cuh)):
        (tmp_path / f"{p.name()}.{ext}").write_text(text)
    return c, h, cu, cuh


def test_cuda_spells_f16_half_and_bf16_nv_bfloat16(tmp_path):
    c, h, cu, cuh = _sources(reverse_f16, tmp_path)
    assert "_Float16" not in cu and "const __half *x" in cu and "_Float16" in c  # nvcc cannot compile _Float16
    c, h, cu, cuh = _sources(reverse_bf16, tmp_path)
    assert "typedef __nv_bfloat16 spork_bf16;" in cuh and "const spork_bf16 *x" in cu
    assert "typedef struct spork_bf16" in h  # host C holds the bits and converts them (test_bf16_in_cpu_code_...)


def test_set_precision_takes_bf16():
    """exo's set_precision knows only its own type names: "bf16" was refused (audit E)."""
    from spork_lab.scheduling import set_precision

    staged = set_precision(reverse_f16, "t_s", "bf16")
    assert "t_s: bf16[128] @ CudaSmemLinear" in str(staged)
    tile = staged.find("t_s : _")._impl._node
    reads = [s.rhs for s in walk_stmts(staged._loopir_proc.body) if isinstance(s, LoopIR.Assign) and s.rhs.name == tile.name]
    assert tile.type.basetype() is bf16 and reads and all(r.type is bf16 for r in reads)


def test_bf16_in_cpu_code_converts_and_rounds():
    """Host C held a bf16 as a struct it could only copy: gcc failed on anything else (audit E, B3), and it was
    refused at the statement. It now computes in float and rounds each bf16 result (to nearest even)."""
    @proc
    def cpu_bf16(x: bf16[4] @ DRAM, y: bf16[4] @ DRAM, h: f16[4] @ DRAM, z: bf16[4] @ DRAM, c: bf16[4] @ DRAM,
                 d: f64[4] @ DRAM):
        for i in seq(0, 4):
            y[i] += x[i]
            h[i] = x[i]
            z[i] = 0.1
            c[i] = x[i]
            x[i] = d[i]

    x = np.array([1.0, 2.0 ** -8, -3.0, 256.0])
    y = np.array([1.0, 1.0, 2.0 ** -8, 1.0])
    d = np.array([1 + 2.0 ** -8 + 2.0 ** -40, 1 + 2.0 ** -8, 3.0, 0.0])  # in f32, d[0] would be d[1]: a tie
    out = sl.run_cpu(cpu_bf16, bf16_bits(x), bf16_bits(y), np.zeros(4, np.float16), np.zeros(4, np.uint16),
                     np.zeros(4, np.uint16), d)
    np.testing.assert_array_equal(bf16_values(out["x"]), [1 + 2.0 ** -7, 1.0, 3.0, 0.0])  # one rounding from f64
    np.testing.assert_array_equal(bf16_values(out["y"]), [2.0, 1.0, -3.0, 256.0])  # 1 + 2^-8, 256 + 1: ties, to even
    np.testing.assert_array_equal(out["h"], x.astype(np.float16))
    assert bf16_values(out["z"])[0] == bf16_round(0.1) == 0.10009765625
    np.testing.assert_array_equal(out["c"], bf16_bits(x))


def bf16_round(x):
    """The bf16 nearest each x (to nearest even, normal range), from frexp: a model independent of the C's bits."""
    mantissa, exponent = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.round(mantissa * 256), exponent - 8)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def test_mixed_precisions_are_a_data_type_error_at_the_statement():
    """exo checks its precision rules only in its C generator: a build or run_cpu raised exo's TypeError."""
    @proc
    def mixed(a: f16[4] @ DRAM, b: f16[4] @ DRAM, y: f32[4] @ DRAM):
        for i in seq(0, 4):
            y[i] = a[i] * b[i] + y[i]

    line = mixed._loopir_proc.body[0].body[0].srcinfo.lineno
    arrays = (np.zeros(4, np.float16), np.zeros(4, np.float16), np.zeros(4, np.float32))
    for call in (lambda: sl.analyze(mixed), lambda: sl.compile_procs_to_strings([mixed], "k"),
                 lambda: sl.run_cpu(mixed, *arrays)):
        with pytest.raises(sl.DataTypeError, match=r"`y\[i\] = a\[i\] \* b\[i\] \+ y\[i\]`: cannot compute operation "
                                                   r"'\+' between inconsistent precision types: f16 and f32") as e:
            call()
        assert (e.value.filename, e.value.lineno) == (__file__, line)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("p", [reverse_f16, reverse_bf16], ids=lambda p: p.name())
def test_two_byte_floats_build(p, tmp_path):
    _sources(p, tmp_path)
    n = p.name()
    res = subprocess.run(["nvcc", "-c", "-std=c++17", "-arch=sm_80", f"{n}.cu", f"{n}.c"], cwd=tmp_path,
                         capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr


def test_bf16_arguments_take_bits_or_bfloat16():
    spec = proc_spec(reverse_bf16._loopir_proc)
    f32 = FakeCuda((256,), "<f4", ptr=12288)
    assert check_args(spec, (256, FakeCuda((256,), "<u2", ptr=4096), FakeCuda((256,), "<i2", ptr=8192), f32), 0) == [256, 4096, 8192, 12288]
    with pytest.raises(TypeError, match="bf16"):
        check_args(spec, (256, FakeCuda((256,), "<f2"), FakeCuda((256,), "<u2"), f32), 0)
    assert np.dtype(spec.args[1].dtype) == np.uint16


def _arithmetic(dtype: str):
    """Products, sums and an f32 accumulated into a 16-bit element, one element per thread."""
    src = f"""
def {dtype}_arithmetic(n: size, a: {dtype}[n] @ CudaGmemLinear, b: {dtype}[n] @ CudaGmemLinear,
                       c: {dtype}[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear, z: {dtype}[n] @ CudaGmemLinear,
                       w: {dtype}[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                y[task * 128 + t] = a[task * 128 + t] * b[task * 128 + t]
                z[task * 128 + t] = a[task * 128 + t] + b[task * 128 + t] + c[task * 128 + t]
                w[task * 128 + t] += y[task * 128 + t]
"""
    return sl.parse_source(src.strip("\n"), filename=__file__)


ARITHMETIC = {dtype: _arithmetic(dtype) for dtype in ("f16", "bf16")}


def rounded(dtype: str, x) -> np.ndarray:
    """The nearest values of a 16-bit type (to nearest even), as float64."""
    return bf16_round(x) if dtype == "bf16" else np.asarray(x).astype(np.float16).astype(np.float64)


def as_array(dtype: str, values) -> np.ndarray:
    """NumPy's array of values exact in the 16-bit type (a bf16 array as its bits)."""
    return bf16_bits(values) if dtype == "bf16" else np.asarray(values).astype(np.float16)


def as_values(dtype: str, array: np.ndarray) -> np.ndarray:
    return bf16_values(array) if dtype == "bf16" else array.astype(np.float64)


def _arithmetic_inputs(dtype: str, n: int) -> dict:
    rng = np.random.default_rng()
    a, b, c, w = (as_array(dtype, rounded(dtype, rng.standard_normal(n))) for _ in range(4))
    return dict(n=n, a=a, b=b, c=c, y=np.zeros(n, np.float32), z=np.zeros_like(a), w=w)


@pytest.mark.parametrize("dtype", ARITHMETIC)
def test_16_bit_arithmetic_on_the_cpu_rounds_every_operation(dtype):
    """As CUDA's __half and __nv_bfloat16 operators do. gcc's _Float16 kept excess precision up to the assignment:
    run_cpu's `y = a * b` was the exact product (4073 of 4096 elements unlike the GPU's, audit D); and run_cpu
    refused bf16 arithmetic."""
    args = _arithmetic_inputs(dtype, 4096)
    out = sl.run_cpu(ARITHMETIC[dtype], **args)
    a, b, c, w = (as_values(dtype, args[k]) for k in "abcw")  # sums and products of two are exact in f64
    np.testing.assert_array_equal(out["y"], rounded(dtype, a * b))
    np.testing.assert_array_equal(as_values(dtype, out["z"]), rounded(dtype, rounded(dtype, a + b) + c))
    np.testing.assert_array_equal(as_values(dtype, out["w"]), rounded(dtype, w + rounded(dtype, a * b)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ARITHMETIC)
def test_16_bit_arithmetic_on_the_gpu_is_the_cpus(dtype):
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    assert_gpu_matches_cpu(ARITHMETIC[dtype], **_arithmetic_inputs(dtype, 128 * 64))


@proc
def bf16_from_ints_and_tiny_constants(n: size, xi: i32[n] @ CudaGmemLinear, yb: bf16[n] @ CudaGmemLinear,
                                      yb2: bf16[n] @ CudaGmemLinear, x: bf16[n] @ CudaGmemLinear,
                                      z: bf16[n] @ CudaGmemLinear, c: bf16[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                yb[task * 128 + t] = xi[task * 128 + t]
                yb2[task * 128 + t] += xi[task * 128 + t]
                z[task * 128 + t] = x[task * 128 + t] * 1e-40
                c[task * 128 + t] = -1e-40


def _ints_and_tiny_inputs(n: int) -> dict:
    rng = np.random.default_rng()
    xi = rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    xi[:3] = [16842753, -16842753, 2**24 + 2**16 + 3]  # float rounds them to a bf16 tie first
    x = bf16_bits(2.0 ** rng.integers(0, 40, n))  # powers of two: x * 2^-133 is exact
    return dict(n=n, xi=xi, yb=np.zeros(n, np.uint16), yb2=np.zeros(n, np.uint16), x=x, z=np.zeros(n, np.uint16),
                c=np.zeros(n, np.uint16))


def test_bf16_from_ints_rounds_once_and_tiny_constants_are_bf16_subnormals():
    """An i32 went to bf16 through float: two roundings (16842753 became 2^24, not 2^24 + 2^17); a constant below
    bf16's normal range kept 8 significant bits (1e-40 was 1.0000e-40, not bf16's 2^-133)."""
    args = _ints_and_tiny_inputs(512)
    out = sl.run_cpu(bf16_from_ints_and_tiny_constants, **args)
    want = bf16_round(args["xi"].astype(np.float64))
    assert want[0] == 2**24 + 2**17
    np.testing.assert_array_equal(bf16_values(out["yb"]), want)
    np.testing.assert_array_equal(bf16_values(out["yb2"]), want)  # 0 + xi
    np.testing.assert_array_equal(bf16_values(out["z"]), bf16_values(args["x"]) * 2.0**-133)
    np.testing.assert_array_equal(out["c"], 0x8001)  # -2^-133


@pytest.mark.gpu
def test_bf16_from_ints_and_tiny_constants_on_the_gpu_are_the_cpus():
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    assert_gpu_matches_cpu(bf16_from_ints_and_tiny_constants, **_ints_and_tiny_inputs(128 * 16))


def _float_to_ints(dtype: str):
    """x (a float type) stored into each integer type exo has, and added to an i32."""
    src = f"""
def float_to_ints_{dtype}(n: size, x: {dtype}[n] @ CudaGmemLinear, a: i8[n] @ CudaGmemLinear, b: ui8[n] @ CudaGmemLinear,
                    c: ui16[n] @ CudaGmemLinear, d: i32[n] @ CudaGmemLinear, e: i32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                a[task * 128 + t] = x[task * 128 + t]
                b[task * 128 + t] = x[task * 128 + t]
                c[task * 128 + t] = x[task * 128 + t]
                d[task * 128 + t] = x[task * 128 + t]
                e[task * 128 + t] += x[task * 128 + t]
"""
    return sl.parse_source(src.strip("\n"), filename=__file__)


FLOAT_TO_INTS = {dtype: _float_to_ints(dtype) for dtype in ("f32", "f64", "f16", "bf16")}
_INT_OUTPUTS = {"a": np.int8, "b": np.uint8, "c": np.uint16, "d": np.int32, "e": np.int32}


def _float_to_ints_inputs(dtype: str, n: int) -> dict:
    """Values in and out of every integer range, NaN and infinities, exact in `dtype`."""
    rng = np.random.default_rng()
    edges = [np.nan, np.inf, -np.inf, 3e9, -3e9, 1e10, 300.0, -1.0, -0.5, 0.5, 255.5, 127.9, -128.9, 65535.5, 70000.0]
    x = np.concatenate([edges, rng.standard_normal(n - len(edges)) * 10.0 ** rng.integers(0, 11, n - len(edges))])
    with np.errstate(over="ignore"):  # to f16's infinity
        x = rounded(dtype, x) if dtype in ("f16", "bf16") else x.astype(np.float32 if dtype == "f32" else np.float64)
    arrays = {"x": as_array(dtype, x) if dtype in ("f16", "bf16") else x}
    return dict(n=n, **arrays, **{k: np.zeros(n, t) for k, t in _INT_OUTPUTS.items()})


@pytest.mark.parametrize("dtype", FLOAT_TO_INTS)
def test_floats_stored_into_integers_saturate_on_the_cpu(dtype):
    """C leaves a float outside the integer's range (or NaN) undefined: gcc on x86 gave INT_MIN for 3e9 and NaN and
    wrapped 300.0 into a ui8 as 44, where the GPU saturated (audit of session 31). Both now truncate toward zero,
    saturate and give 0 for NaN."""
    args = _float_to_ints_inputs(dtype, 1024)
    out = sl.run_cpu(FLOAT_TO_INTS[dtype], **args)
    x = as_values(dtype, args["x"]) if dtype in ("f16", "bf16") else args["x"].astype(np.float64)
    for k, t in _INT_OUTPUTS.items():
        info = np.iinfo(t)
        want = np.clip(np.trunc(np.nan_to_num(x, nan=0.0)), info.min, info.max).astype(t)
        np.testing.assert_array_equal(out[k], want, err_msg=f"{dtype} -> {t.__name__}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOAT_TO_INTS)
def test_floats_stored_into_integers_on_the_gpu_are_the_cpus(dtype):
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    assert_gpu_matches_cpu(FLOAT_TO_INTS[dtype], **_float_to_ints_inputs(dtype, 128 * 16))


@proc
def generic_real_tile(x: f32[32] @ CudaGmemLinear, y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: R[32] @ CudaSmemLinear
            for t in cuda_threads(0, 32):
                buf[t] = x[t]
            Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 32):
                y[t] = buf[31 - t]
            Fence(cuda_in_order, cuda_in_order)


def test_a_tile_of_exos_generic_real_type_is_f32_in_shared_memory():
    """`R` (exo makes it f32 when it prints C) had no element size: sync_check and bank_conflicts raised exo's
    "Don't ask for ctype of Num" (red-team audit of session 39)."""
    assert sl.sync_check(generic_real_tile).ok
    assert "0 of 2 accesses conflict" in str(sl.bank_conflicts(generic_real_tile))
    cu = sl.compile_procs_to_strings([generic_real_tile], "real")[2]
    assert "float *buf = reinterpret_cast<float*>(exo_smem + 0);" in cu
