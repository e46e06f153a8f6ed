"""Generated index arithmetic means what the program says (issue 15).

Differential tests: random integer expressions over loop iterators and sizes
(+, -, *, floor division and modulo by constants, nesting, negative
intermediate values) are compiled by our host C generator and built with gcc
(and, on a GPU, by the CUDA generator and nvcc), run, and compared value by
value with the language's meaning (Python's // and %) and with the sync
checker's evaluation of the same LoopIR expression.
"""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_exprs import random_expr, source, value, value_range

import spork_lab as sl
from spork_lab.sync import program as P
from spork_lab.sync.lower import index_expr
from spork_lab.sync.reference import python_function

SIZES = {"n": 7, "m": 3}
HOST_DOMAINS = {"i": range(6), "j": range(5), "n": [SIZES["n"]], "m": [SIZES["m"]]}


def guarded_copy(exprs: list, domains: dict, index: str) -> tuple:
    """Statements `out[k, <point>] = src[e_k + off_k]` guarded by their bounds, and (src size, offsets)."""
    ranges = [value_range(e, domains) for e in exprs]
    offsets = [-lo for lo, _ in ranges]
    size = max(hi - lo for lo, hi in ranges) + 1
    lines = []
    for k, (e, off) in enumerate(zip(exprs, offsets)):
        at = f"{source(e)} + {off}"
        lines += [f"if {at} >= 0 and {at} < {size}:", f"    out[{k}, {index}] = src[{at}]"]
    return lines, size, offsets


def host_proc(exprs: list):
    lines, size, offsets = guarded_copy(exprs, HOST_DOMAINS, "i, j")
    body = "\n".join(" " * 12 + line for line in lines)
    text = (
        f"def exprs(n: size, m: size, out: i32[{len(exprs)}, 6, 5] @ DRAM, src: i32[{size}] @ DRAM):\n"
        "    assert n <= 9\n    assert m <= 9\n"
        "    for i in seq(0, 6):\n        for j in seq(0, 5):\n" + body + "\n"
    )
    return sl.parse_source(text), size, offsets


def build_host(p, directory):
    """The proc's host C built by gcc and loaded (each build in a fresh directory: dlopen caches by path)."""
    directory = Path(tempfile.mkdtemp(dir=directory))
    c, h, _, _ = sl.compile_procs_to_strings([p], "exprs")
    (directory / "exprs.c").write_text(c)
    (directory / "exprs.h").write_text(h)
    lib = directory / "exprs.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", lib, directory / "exprs.c"], check=True, cwd=directory)
    exprs = ctypes.CDLL(str(lib)).exprs
    size_t = ctypes.c_long  # int_fast32_t on LP64 glibc
    exprs.argtypes = [ctypes.c_void_p, size_t, size_t, ctypes.c_void_p, ctypes.c_void_p]
    return exprs, c


def checker_values(p, k: int, points: list) -> list:
    """The sync checker's value of statement k's index expression at each point: lowered once for both
    engines, evaluated as the reference engine prints it."""
    loop_i = p._loopir_proc.body[0]
    guard = loop_i.body[0].body[k]  # For i / For j / If k
    syms = [s.iter for s in (loop_i, loop_i.body[0])] + [a.name for a in p._loopir_proc.args]
    lowered = index_expr(guard.body[0].rhs.idx[0], {sym: P.Var(v) for v, sym in enumerate(syms)})
    fn = python_function(lowered)
    return [fn([point.get(str(sym), 0) for sym in syms]) for point in points]


def check_host_c_and_checker(exprs: list, directory) -> None:
    """Each expression, compiled to host C by gcc and lowered for the checker, has the program's values."""
    p, size, offsets = host_proc(exprs)
    run, c_text = build_host(p, directory)
    out = np.full((len(exprs), 6, 5), -(2**31), dtype=np.int32)  # poison: a skipped guard shows
    src = np.arange(size, dtype=np.int32)
    run(None, SIZES["n"], SIZES["m"], out.ctypes.data, src.ctypes.data)
    points = [{"i": i, "j": j, **SIZES} for i in range(6) for j in range(5)]
    for k, e in enumerate(exprs):
        want = [value(e, pt) for pt in points]
        got = [int(out[k, pt["i"], pt["j"]]) - offsets[k] for pt in points]
        assert got == want, f"generated C disagrees on {source(e)}:\n{c_text}"
        seen = [v - offsets[k] for v in checker_values(p, k, points)]
        assert seen == want, f"the checker disagrees on {source(e)}"


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


@needs_gcc
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.randoms(use_true_random=False), st.integers(1, 4))
def test_host_c_and_checker_compute_what_the_program_says(tmp_path, rng, count):
    check_host_c_and_checker([random_expr(rng, ("i", "j", "n", "m")) for _ in range(count)], tmp_path)


@needs_gcc
def test_a_product_with_a_modulo_on_its_right_keeps_its_parentheses(tmp_path):
    """Found by the test above: `6 * (i % 5 * -2)` was printed `6 * i % 5 * -2`, which C reads as `((6 * i) % 5) * -2`."""
    mod_times = ("*", ("%", ("var", "i"), 5), ("const", -2))
    check_host_c_and_checker([("+", ("var", "i"), ("*", ("const", 6), mod_times))], tmp_path)


def test_the_issue_programs_keep_their_parentheses():
    import index_arithmetic

    cu = sl.compile_procs_to_strings(index_arithmetic.PROCS, "index_arithmetic")[2]
    assert "4 * (t % 8) + 32 * (t / 8)" in cu
    assert "2 * ((t + 1) % 8)" in cu
    assert "64 * spork_floor_mod(t - 8, 4)" in cu  # t - 8 can be negative: floor modulo, not C's %


def test_readable_output_keeps_only_needed_parentheses():
    p = sl.parse_source(
        "def f(n: size, x: f32[n] @ DRAM):\n"
        "    assert n >= 128\n"
        "    for i in seq(0, 8):\n"
        "        x[(i + 1) * 2 + (i - (i - 3)) + 4 * (i * 3)] = 0.0\n"
    )
    c = sl.compile_procs_to_strings([p], "f")[0]
    assert "x[(i + 1) * 2 + i - (i - 3) + 4 * (i * 3)] = 0.0f;" in c


CUDA_COUNT = 96


def cuda_proc(seed: int):
    """One device function evaluating CUDA_COUNT random expressions over (task, t, n) in every thread."""
    rng = random.Random(seed)
    exprs = [random_expr(rng, ("task", "t", "n")) for _ in range(CUDA_COUNT)]
    domains = {"task": range(4), "t": range(32), "n": [SIZES["n"]]}
    lines, size, offsets = guarded_copy(exprs, domains, "task, t")
    body = "\n".join(" " * 16 + line for line in lines)
    text = (
        f"def cuda_exprs(n: size, out: i32[{CUDA_COUNT}, 4, 32] @ CudaGmemLinear, src: i32[{size}] @ CudaGmemLinear):\n"
        "    assert n <= 9\n"
        "    with CudaDeviceFunction(blockDim=32):\n"
        "        for task in cuda_tasks(0, 4):\n"
        "            for t in cuda_threads(0, 32):\n" + body + "\n"
    )
    return sl.parse_source(text), exprs, size, offsets


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(4))
def test_cuda_computes_what_the_program_says(seed):
    cupy = pytest.importorskip("cupy")
    p, exprs, size, offsets = cuda_proc(seed)
    built = sl.build([p]).cuda_exprs
    out = cupy.full((CUDA_COUNT, 4, 32), -(2**31), dtype=cupy.int32)
    built(SIZES["n"], out, cupy.arange(size, dtype=cupy.int32))
    cupy.cuda.runtime.deviceSynchronize()
    assert getattr(built.module.lib, f"{built.module.lib_name}_last_error")() == 0
    got = out.get()
    for k, e in enumerate(exprs):
        want = [[value(e, {"task": task, "t": t, **SIZES}) for t in range(32)] for task in range(4)]
        assert (got[k] - offsets[k]).tolist() == want, f"CUDA disagrees on {source(e)}"


WIDE_PRODUCTS = """
def wide_products(n: size, x: f32[1000] @ CudaGmemLinear, x2: f32[6144] @ CudaGmemLinear,
                  y: f32[n] @ CudaGmemLinear, z: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    assert n <= 4096
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                y[128 * task + t] = x[(1000003 * (128 * task + t)) % 1000]
                z[128 * task + t] = x2[(3000000 * (128 * task + t)) / 2000000]
"""


def test_index_products_that_may_pass_2_to_the_31_are_computed_in_64_bits():
    """Device indices are 32-bit: `1000003 * i` overflowed from i = 2148 (audit of session 27: 1948 of 4096
    elements of y wrong on an H200). An offset made only of non-negative sums and products stays 32-bit."""
    cu = sl.compile_procs_to_strings([sl.parse_source(WIDE_PRODUCTS)], "wide", "sm_80")[2]
    assert "x[(long long) 1000003 * (128 * task + t) % 1000]" in cu
    assert "x2[(long long) 3000000 * (128 * task + t) / 2000000]" in cu
    assert "y[128 * task + t] =" in cu


@pytest.mark.gpu
def test_the_gpu_indexes_through_products_past_2_to_the_31():
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    rng = np.random.default_rng()  # fresh inputs every run
    n = 4096
    x, x2 = (rng.standard_normal(k).astype(np.float32) for k in (1000, 6144))
    y, z = (np.full(n, np.nan, np.float32) for _ in range(2))
    assert_gpu_matches_cpu(sl.parse_source(WIDE_PRODUCTS), None, n=n, x=x, x2=x2, y=y, z=z)


BIG_SEQ = """
def big_seq_counter(n: size, x: f32[32, 4] @ CudaGmemLinear, y: f32[32, 4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                for i in seq(n, n + 4):
                    y[t, i - n] = x[t, i - n] + 1.0
"""

BIG_TASKS = """
def big_task_iter(n: size, x: f32[4, 32] @ CudaGmemLinear, y: f32[4, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for a in cuda_tasks(n, n + 4):
            for t in cuda_threads(0, 32):
                y[a - n, t] = x[a - n, t] + 1.0
"""

SMALL_BOUNDS = """
def small_bounds(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for a in cuda_tasks(0, n):
            for t in cuda_threads(0, 1):
                for i in seq(0, n):
                    y[a] += x[i]
"""


def test_counters_whose_bounds_may_pass_2_to_the_31_are_64_bit():
    """Sizes are below 2^31 each, but `n + 4` need not be: at n = 2^31 - 2 an `int` counter of seq(n, n + 4) and
    the `int` task iterator of cuda_tasks(n, n + 4) wrapped (audit of session 33: illegal addresses on an H200).
    Where exo's range analysis bounds them within 32 bits (a counter stops at its loop's end: n at most), `int`."""
    procs = [sl.parse_source(src) for src in (BIG_SEQ, BIG_TASKS, SMALL_BOUNDS)]
    cu = sl.compile_procs_to_strings(procs, "bounds", "sm_80")[2]
    assert "for (long long i = n; i < (long long) n + 4; i++) {" in cu
    assert "const long long a = (long long) n + exo_task;" in cu
    assert "for (int i = 0; i < n; i++) {" in cu
    assert "const int a = exo_task;" in cu


@pytest.mark.gpu
@pytest.mark.parametrize("src, shape", [(BIG_SEQ, (32, 4)), (BIG_TASKS, (4, 32))], ids=["seq", "tasks"])
def test_the_gpu_counts_past_2_to_the_31(src, shape):
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    x = np.random.default_rng().standard_normal(shape).astype(np.float32)  # fresh inputs every run
    assert_gpu_matches_cpu(sl.parse_source(src), None, n=2**31 - 2, x=x, y=np.full(shape, np.nan, np.float32))


MANY_TASKS = """
def many_tasks(n: size, y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            for t in cuda_threads(0, 32):
                if task == 0:
                    y[t] = 1.0
"""


@pytest.mark.gpu
def test_task_counts_the_task_loop_would_overflow_at_are_refused():
    """The persistent loop's `int` task counter steps by the grid past the last task: with more than 2^31 - 1 - grid
    tasks it wrapped (audit of session 33). The launcher refuses such counts: a CudaError at the call."""
    cupy = pytest.importorskip("cupy")
    from spork_lab.runtime import CudaError

    built = sl.build([sl.parse_source(MANY_TASKS)]).many_tasks
    y = cupy.zeros(32, dtype=cupy.float32)
    with pytest.raises(CudaError, match="invalid argument"):
        built(2**31 - 1, y)
    built(4096, y)
    assert (y.get() == 1).all()


WRITTEN_ALIAS = """
def written_alias(n: size, y: f32[n] @ CudaGmemLinear, z: f32[8] @ DRAM):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            for t in cuda_threads(0, 32):
                r: f32[4] @ CudaRmem
                mine = r[:]
                mine[0] = 1.0
                y[task * 32 + t] = r[0]
    h: f32[4] @ DRAM
    also = h[1:3]
    also[0] = 2.0
    z[0] = h[1]
"""


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nvcc") is None, reason="needs gcc and nvcc")
def test_a_window_written_through_its_alias_compiles_in_c_and_cuda(tmp_path):
    """exo typed such aliases const and built them with compound literals nvcc rejects in device code."""
    from spork_lab.runtime import find_nvcc

    p = sl.parse_source(WRITTEN_ALIAS)
    paths = sl.compile_procs([p], tmp_path, "alias")
    assert "struct exo_win_1f32 mine = { &r[0], { 1 } };" in paths[2].read_text()
    subprocess.run(["gcc", "-c", "-o", tmp_path / "alias.o", paths[0]], check=True, cwd=tmp_path)
    subprocess.run([find_nvcc(), "-c", "-arch=sm_80", "-o", tmp_path / "alias_cu.o", paths[2]], check=True, cwd=tmp_path)


FUSED = """
def fused(n: size, x: f32[n, 32] @ CudaGmemLinear, z: f32[n, 32] @ CudaGmemLinear, w: f32[n, 32] @ CudaGmemLinear,
          y: f32[n, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            for t in cuda_threads(0, 32):
                y[task, t] = x[task, t] * z[task, t] + w[task, t]
"""


@pytest.mark.gpu
def test_floating_point_rounds_as_the_cpu_does_unless_contraction_is_asked_for():
    """docs/language.md: sl.build passes -fmad=false, so the GPU rounds a * b + c twice, as the sequential C does;
    nvcc's default (-fmad=true, which a user may ask for) fuses it, one rounding."""
    cupy = pytest.importorskip("cupy")
    from spork_lab import run_cpu

    p = sl.parse_source(FUSED)
    rng = np.random.default_rng()
    n = 300
    x, z, w = (rng.standard_normal((n, 32)).astype(np.float32) for _ in range(3))
    want = run_cpu(p, n=n, x=x, z=z, w=w, y=np.zeros_like(x))["y"]
    for flags, exact in (((), True), (("-fmad=true",), False)):
        built = sl.build([p], flags=flags).fused
        y = cupy.zeros((n, 32), dtype=cupy.float32)
        built(n, cupy.asarray(x), cupy.asarray(z), cupy.asarray(w), y)
        cupy.cuda.runtime.deviceSynchronize()
        assert getattr(built.module.lib, f"{built.module.lib_name}_last_error")() == 0
        if exact:
            np.testing.assert_array_equal(y.get(), want)
        else:  # one rounding fewer: within an ulp of the operands' magnitude (not of a cancelled result's)
            bound = np.float32(2**-23) * (np.abs(x * z) + np.abs(w))
            assert (np.abs(y.get() - want) <= bound).all()
