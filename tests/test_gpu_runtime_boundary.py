"""Programs sync_check passes whose built library once ran them wrongly at the host/device boundary (audit F,
session 20, each seen on an H200): arguments that overlap or start unaligned, and accumulator stores whose rows
are not pair-aligned. Each test asserts the sequential meaning, or the ArgumentError that refuses the call.
Cases that could end the CUDA context run in a child process (`python test_gpu_runtime_boundary.py CASE`).
(Sizes of 2^31 and more, and false bool assertions, are refused before any launch: test_codegen_args.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import spork_lab as sl
from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.platforms.Sm90 import *

# ---- f2: overlapping arguments (exo's meaning, and sync_check's, takes a proc's arguments to be distinct memory) ----


@proc
def copy_tiles(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                y[128 * task + t] = x[128 * task + t]


# ---- f4: a CuPy view that starts 4 bytes past a 16-byte boundary, given to a 16-byte cp.async ----


@proc
def cp16_copy(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 512 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 512):
            buf: f32[512] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[4 * t:4 * t + 4], src[512 * task + 4 * t:512 * task + 4 * t + 4], size=16)
            Arrive(Sm80_cp_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                for i in seq(0, 4):
                    dst[512 * task + 4 * t + i] = buf[4 * t + i]
            Fence(cuda_in_order, cuda_in_order)


# ---- f5: Sm90_mma_store_d_row_major_* into rows that are not pair-aligned (float2 / __half2 stores faulted) ----


@proc
def store_d_odd_pitch(C: f32[64, 9] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            D: f32[64, 8] @ Sm90_RmemMatrixD
            Sm90_zero_scale_d_f32(D, N=8)
            Sm90_mma_store_d_row_major_f32(C[:, 0:8], D, N=8)
            Fence(cuda_in_order, cuda_in_order)


@proc
def store_d_odd_column(C: f16[64, 16] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            D: f32[64, 8] @ Sm90_RmemMatrixD
            Sm90_zero_scale_d_f32(D, N=8)
            Sm90_mma_store_d_row_major_f16(C[:, 1:9], D, N=8)
            Fence(cuda_in_order, cuda_in_order)


# ---- a tensor map over rows whose pitch the caller's sizes choose (TMA needs a multiple of 16 bytes) ----


@proc
def tma_rows(n: size, m: size, src: f32[n, m] @ CudaGmemLinear, dst: f32[n, 8] @ CudaGmemLinear):
    assert n % 8 == 0
    assert m >= 8
    src_tm = src[:, 0:8] @ Sm90_tensorMap(0, 8, 8)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 8):
            tile: f32[8, 8] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(tile, src_tm[8 * task:8 * task + 8, :], box=(8, 8)) >> bar
                Arrive(tma_to_smem_async, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            for t in cuda_threads(0, 8):
                for j in seq(0, 8):
                    dst[8 * task + t, j] = tile[t, j]
            Fence(cuda_in_order, cuda_in_order)


# ---- a 16-byte cp.async of src[task, start:start + 4], src an f32[n, k m]: the start moves by a row of k m floats
# per task. With k = 1, aligned only when m % 4 == 0, which neither the analysis (no sizes) nor a sync_check at m = 8
# could say of the call's m ----


def cp_row(k: int, start: int):
    @proc
    def cp_row_per_task(n: size, m: size, src: f32[n, k * m] @ CudaGmemLinear, dst: f32[n, 4] @ CudaGmemLinear):
        assert k * m >= start + 4
        with CudaDeviceFunction(blockDim=32):
            for task in cuda_tasks(0, n):
                buf: f32[4] @ CudaSmemLinear
                cg: barrier @ CudaCommitGroup
                for t in cuda_threads(0, 1):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[0:4], src[task, start:start + 4], size=16)
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
                Fence(cuda_in_order, cuda_in_order)  # the copying thread's wait, then the other three
                for t in cuda_threads(0, 4):
                    dst[task, t] = buf[t]
                Fence(cuda_in_order, cuda_in_order)

    return cp_row_per_task


cp_row_per_task = cp_row(1, 0)


@proc
def cp_row_per_task_wrapped(n: size, m: size, src: f32[n, m + 2] @ CudaGmemLinear, dst: f32[n, 4] @ CudaGmemLinear):
    assert m >= 2
    cp_row_per_task(n, m + 2, src, dst)


PROCS = {p.name(): p for p in (copy_tiles, cp16_copy, store_d_odd_pitch, store_d_odd_column, tma_rows,
                               cp_row_per_task)}
SIZES = {"copy_tiles": {"n": 1024}, "cp16_copy": {"n": 2048}, "store_d_odd_pitch": {}, "store_d_odd_column": {},
         "tma_rows": {"n": 16, "m": 12}, "cp_row_per_task": {"n": 4, "m": 8}}


def test_a_start_the_sizes_cannot_change_is_decided_without_them():
    """Every size keeps src[task, 4:8] of an f32[n, 4 m] aligned, and none src[task, 2:6]: the analysis says so
    (no check is left to the call), and refuses the second at its line. The offset 4 m task + start is a product
    of variables, which the analysis took for undecidable (and left to sync_check) before it read offsets as
    polynomials."""
    from spork_lab.runtime import built_spec

    assert built_spec(cp_row(4, 4)).alignment == ()
    with pytest.raises(sl.MemoryMismatchError, match="`src\\[task, 2:2 \\+ 4\\]` starts 8 bytes past a 16-byte boundary"):
        sl.analyze(cp_row(4, 2))


@pytest.mark.parametrize("p,offset", [(cp_row_per_task, 0), (cp_row_per_task_wrapped, 2)])
def test_a_window_misaligned_by_the_calls_sizes_is_refused_before_the_launch(p, offset):
    """sync_check passes cp_row_per_task at m = 8, and refuses the misaligned start at m = 6 (in the run, with a
    message that did not say which window or why; now before it, in these words); a built proc called
    with m = 6 launched, and the GPU faulted on the address (a CUDA error that ends the process's context). The
    call now refuses those sizes, naming the instr's line; a CPU caller's sizes reach its callee's need."""
    from test_codegen_args import FakeCuda

    from spork_lab.runtime import built_spec
    from spork_lab.runtime._args import check_args

    spec = built_spec(p)
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.strip().startswith("Sm80_cp_async_f32(buf[0:4], src[task"))
    n = 4
    for m, ok in [(8, True), (6, False), (12, True), (5, False)]:
        call = lambda: check_args(spec, (n, m - offset, FakeCuda((n, m)), FakeCuda((n, 4), ptr=1 << 20)), 0)  # noqa: E731
        if ok:
            assert call()[:2] == [n, m - offset]
            continue
        with pytest.raises(ValueError) as e:
            call()
        assert (f"at n={n}, m={m - offset}, `Sm80_cp_async_f32(buf[0:4], src[task, 0:0 + 4], size=16)` "
                f"({__file__}:{line}): Sm80_cp_async_f32 needs each row of src aligned to 16 bytes, but "
                f"`src[task, 0:0 + 4]` moves by {4 * m} bytes, not a multiple of 16, with each step of task; the GPU "
                f"would fault on the misaligned address: give sizes that keep it aligned "
                f"({'an assertion' if offset else '`assert m % 4 == 0`'} in the proc says which)") in str(e.value)
    assert sl.sync_check(cp_row_per_task, n=2, m=8).ok
    with pytest.raises(sl.SyncError) as e:  # before the run, in the call's words
        sl.sync_check(cp_row_per_task, n=2, m=6)
    assert e.value.lineno == line and e.value.message.endswith(
        "moves by 24 bytes, not a multiple of 16, with each step of task; the GPU would fault on the misaligned "
        "address: give sizes that keep it aligned (`assert m % 4 == 0` in the proc says which)")


# ---- the same copy where the sizes decide the start through a loop's trips or an opaque term (red-team audit,
# session 39: each launched at sizes sync_check had not run at, and faulted on the H200) ----


@proc
def cp_from_loop(n: size, m: size, src: f32[m + 2 * n + 4] @ CudaGmemLinear, dst: f32[4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[4] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for i in seq(m / 2, m / 2 + n):  # n trips: at n = 1 the one value m / 2 decides the start
                for t in cuda_threads(0, 1):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[0:4], src[2 * i:2 * i + 4], size=16)
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)  # the copying thread's waits, then the other three
            for t in cuda_threads(0, 4):
                dst[t] = buf[t]
            Fence(cuda_in_order, cuda_in_order)


@proc
def cp_half_size(m: size, src: f32[m + 4] @ CudaGmemLinear, dst: f32[4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[4] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 1):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[0:4], src[2 * (m / 2):2 * (m / 2) + 4], size=16)
            Arrive(Sm80_cp_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 4):
                dst[t] = buf[t]
            Fence(cuda_in_order, cuda_in_order)


@pytest.mark.parametrize("p,sizes,why", [
    (cp_from_loop, {"n": 1, "m": 4}, None),  # i = 2 only: src[4:8]
    (cp_from_loop, {"n": 1, "m": 6}, "starts 8 bytes past a 16-byte boundary"),  # i = 3 only: src[6:10]
    (cp_from_loop, {"n": 1, "m": 5}, None),  # i = 2 only
    (cp_from_loop, {"n": 2, "m": 4}, "moves by 8 bytes, not a multiple of 16, with each step of i"),  # src[4:8], src[6:10]
    (cp_half_size, {"m": 4}, None),
    (cp_half_size, {"m": 5}, None),
    (cp_half_size, {"m": 6}, "starts 8 bytes past a 16-byte boundary"),
    (cp_row_per_task, {"n": 1, "m": 6}, None),  # one task: its row's step of 24 bytes is never taken
    (cp_row_per_task, {"n": 2, "m": 6}, "moves by 24 bytes, not a multiple of 16, with each step of task"),
])
def test_a_start_sizes_decide_through_trips_or_a_division_is_checked_at_the_call(p, sizes, why):
    """The call's check and sync_check agree at every size: a start decided by a loop whose trips the sizes set (one
    trip: its value adds to the start; more: each step must keep it aligned), or by a term such as `m / 2`. The
    call did not check either (they were the iterators', sync_check's, which decides only the sizes it runs at),
    and refused a loop of one trip (cp_row_per_task at n = 1) for the step it never takes."""
    from spork_lab.runtime import built_spec
    from spork_lab.runtime._args import size_refusal

    refusal = size_refusal(built_spec(p), sizes)
    if why is None:
        assert refusal is None and sl.sync_check(p, **sizes).ok
        return
    assert refusal is not None and why in refusal
    with pytest.raises(sl.SyncError, match=why):
        sl.sync_check(p, **sizes)


RANDOM_WINDOW = """
def random_window(n: size, m: size, src: f32[32 + 8 * n + 8 * m, 32 + 8 * n + 8 * m] @ CudaGmemLinear,
                  dst: f32[2 * n + 2, 4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, {tasks}):
            buf: f32[4] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for i in seq({lo}, {hi}):
                for t in cuda_threads(0, 1):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[0:4], src[{row}, {col}:{col} + 4], size=16)
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 4):
                dst[task, t] = buf[t]
            Fence(cuda_in_order, cuda_in_order)
"""


@pytest.mark.parametrize("seed", range(32))
def test_the_calls_alignment_check_agrees_with_sync_checks_run(seed):
    """Random window offsets (iterators, sizes, tasks, divisions of sizes) under loops whose bounds the sizes set: at
    every size, the call refuses exactly where sync_check's run meets a misaligned address (the run's check is
    exact; the call's is what guards the sizes nobody checked). A loop of no trips leaves buf unwritten: UNINIT,
    and nothing for the call to refuse."""
    import itertools
    import random

    from spork_lab.runtime import built_spec
    from spork_lab.runtime._args import size_refusal

    rng = random.Random(seed)

    def offset(coefficients: list) -> str:
        terms = ["i", "n", "m", "(m / 2)", "(n / 3)", "task", "1"]
        return " + ".join(f"{rng.choice(coefficients)} * {rng.choice(terms)}" for _ in range(rng.randint(1, 2)))

    lo = rng.choice(["0", "1", "n", "(m / 2)", "n - 1"])
    text = RANDOM_WINDOW.format(tasks=rng.choice(["1", "2", "n"]), lo=lo,
                                hi=rng.choice([f"{lo} + 1", f"{lo} + n", f"{lo} + 2", "n", "m"]),
                                row=offset([1, 2]), col=offset([1, 2, 3, 4]))
    try:
        p = sl.parse_source(text)
    except sl.SporkTypeError as e:  # exo: a loop whose trips may be negative (`seq(m / 2, n)`)
        assert "to always be non-negative" in e.message
        return
    try:
        spec = built_spec(p)
    except sl.MemoryMismatchError as e:  # misaligned at every size: refused by the analysis
        assert "aligned to 16 bytes" in e.message
        return
    for n, m in itertools.product([1, 2, 3, 5], [1, 2, 4, 6]):
        refusal = size_refusal(spec, {"n": n, "m": m})
        try:
            report = sl.sync_check(p, n=n, m=m)
            misaligned = False
            assert report.ok or {h.kind for h in report.hazards} == {"UNINIT"}, str(report)
        except sl.SyncError as e:
            misaligned = "aligned to 16 bytes" in e.message
            assert misaligned, e.message
        assert (refusal is not None) == misaligned, (text, n, m, refusal)


@pytest.mark.parametrize("name", list(PROCS))
def test_sync_check_passes(name):
    assert sl.sync_check(PROCS[name], **SIZES[name]).ok


# ---- the GPU cases ----


def _case_cp16_copy(cp, k):
    """src = base[1:n + 1]: contiguous, right shape and dtype, address 4 mod 16 (the H200: misaligned address, which
    ends the process's CUDA context). Refused before the launch."""
    from spork_lab.errors import ArgumentError

    n = 512 * 264
    base = cp.arange(n + 1, dtype=cp.float32)
    try:
        k.cp16_copy(n, base[1:], cp.zeros(n, dtype=cp.float32))
    except ArgumentError as e:
        assert "16-byte boundary" in str(e)
        return
    cp.cuda.runtime.deviceSynchronize()
    raise AssertionError("cp16_copy: an unaligned src was accepted")


def _case_store_d_odd_pitch(cp, k):
    C = cp.full((64, 9), 5.0, dtype=cp.float32)
    k.store_d_odd_pitch(C)
    cp.cuda.runtime.deviceSynchronize()  # a misaligned float2 store raises here
    want = np.full((64, 9), 5.0, np.float32)
    want[:, :8] = 0.0
    np.testing.assert_array_equal(C.get(), want)


def _case_store_d_odd_column(cp, k):
    C = cp.full((64, 16), 5.0, dtype=cp.float16)
    k.store_d_odd_column(C)
    cp.cuda.runtime.deviceSynchronize()  # a misaligned __half2 store raises here
    want = np.full((64, 16), 5.0, np.float16)
    want[:, 1:9] = 0.0
    np.testing.assert_array_equal(C.get(), want)


def _case_cp_row_per_task(cp, k):
    """m = 6: refused at the call (before, the GPU faulted on the misaligned address); then m = 8 runs in the same
    context and copies each task's first four floats."""
    from spork_lab.errors import ArgumentError

    n = 264
    try:
        k.cp_row_per_task(n, 6, cp.zeros((n, 6), dtype=cp.float32), cp.zeros((n, 4), dtype=cp.float32))
    except ArgumentError as e:
        assert "moves by 24 bytes, not a multiple of 16, with each step of task" in str(e), str(e)
    else:
        cp.cuda.runtime.deviceSynchronize()
        raise AssertionError("cp_row_per_task: m = 6 was accepted")
    src = cp.asarray(np.random.default_rng().standard_normal((n, 8)).astype(np.float32))
    dst = cp.zeros((n, 4), dtype=cp.float32)
    k.cp_row_per_task(n, 8, src, dst)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(dst.get(), src.get()[:, :4])


CASES = {"cp16_copy": _case_cp16_copy, "store_d_odd_pitch": _case_store_d_odd_pitch,
         "store_d_odd_column": _case_store_d_odd_column, "cp_row_per_task": _case_cp_row_per_task}  # fmt: skip


def _run(name: str) -> None:
    import cupy

    CASES[name](cupy, sl.build([PROCS[name]]))


def _run_in_child(name: str, timeout: float = 60.0) -> None:
    sl.build([PROCS[name]])  # nvcc here; the child finds the library in the cache
    try:
        done = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: did not finish in {timeout} s")
    assert done.returncode == 0, f"{name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _need_sm90():
    cupy = pytest.importorskip("cupy")
    if int(cupy.cuda.Device().compute_capability) < 90:
        pytest.skip("needs sm_90a")


@pytest.mark.gpu
def test_f2_overlapping_arguments_are_refused():
    """x = buf[0:n], y = buf[128:128 + n]: sequentially y[i] = x[i] in order, so buf[j] = j % 128 for every j; the
    H200 copied the tiles concurrently, mostly from the original values (135040 of 135296 elements differed)."""
    cupy = pytest.importorskip("cupy")
    from spork_lab.errors import ArgumentError

    k = sl.build([copy_tiles])
    n = 128 * 132 * 8
    buf = cupy.arange(n + 128, dtype=cupy.float32)
    with pytest.raises(ArgumentError, match="overlap"):
        k.copy_tiles(n, buf[:n], buf[128:])
    x = cupy.arange(n, dtype=cupy.float32)
    y = cupy.zeros(n, dtype=cupy.float32)
    k.copy_tiles(n, x, y)  # distinct arrays: copied
    assert bool((y == x).all())


@pytest.mark.gpu
def test_f4_unaligned_view_is_refused():
    pytest.importorskip("cupy")
    _run_in_child("cp16_copy")


@pytest.mark.gpu
def test_sizes_that_misalign_a_window_are_refused_and_the_context_lives_on():
    pytest.importorskip("cupy")
    _run_in_child("cp_row_per_task")


@pytest.mark.gpu
def test_f5_store_d_odd_row_pitch():
    _need_sm90()
    _run_in_child("store_d_odd_pitch")


@pytest.mark.gpu
def test_f5_store_d_odd_column_start():
    _need_sm90()
    _run_in_child("store_d_odd_column")


@pytest.mark.gpu
def test_a_tensor_map_pitch_tma_cannot_copy_is_explained_at_the_call():
    """Rows 40 bytes apart (m = 10): cuTensorMapEncodeTiled refuses them; the call said only "CUDA error 1: invalid
    argument", without the user's line (audit 33). Refused before the launch, so the context lives on."""
    _need_sm90()
    import cupy

    from spork_lab.runtime import CudaError

    k = sl.build([tma_rows])
    n = 64
    with pytest.raises(CudaError) as e:
        k.tma_rows(n, 10, cupy.zeros((n, 10), dtype=cupy.float32), cupy.zeros((n, 8), dtype=cupy.float32))
    assert e.value.filename == __file__ and "rows a multiple of 16 bytes apart" in e.value.message
    src = cupy.arange(n * 12, dtype=cupy.float32).reshape(n, 12)
    dst = cupy.zeros((n, 8), dtype=cupy.float32)
    k.tma_rows(n, 12, src, dst)  # 48-byte rows: copied
    np.testing.assert_array_equal(dst.get(), src.get()[:, :8])


if __name__ == "__main__":  # the child of _run_in_child
    _run(sys.argv[1])
    print("ok")
