"""exo's ops keep a statement they copy unchanged (a Fence, an instr with constant arguments) as one object at each
place it lands, and the analysis answers per object: every copy of a cuda_threads loop whose body begins with such
a statement ran the last copy's thread mapping, which sync_check passed and the GPU computed wrong (audit of
session 31). spork_lab.scheduling's ops give each place its own object; the analysis refuses a proc made otherwise."""

from __future__ import annotations

import exo.stdlib.scheduling as exo_scheduling
import numpy as np
import pytest

import spork_lab as sl
from spork_lab import proc
from spork_lab.core.ir import walk_stmts
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import cut_loop, divide_loop, inline, shift_loop, simplify, specialize


@proc
def warp_rows(n: size, x: f32[n, 8, 32] @ CudaGmemLinear, y: f32[n, 8, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n):
            for w in cuda_threads(0, 6, unit=cuda_warp):
                Fence(cuda_in_order, cuda_in_order)
                for l in cuda_threads(0, 32):
                    y[task, w, l] = x[task, w, l] * 2.0


@proc
def warp_row(n: size, task: index, r: index, x: f32[n, 8, 32] @ CudaGmemLinear, y: f32[n, 8, 32] @ CudaGmemLinear):
    assert task >= 0 and task < n
    assert r >= 0 and r < 8
    Fence(cuda_in_order, cuda_in_order)
    for l in cuda_threads(0, 32):
        y[task, r, l] = x[task, r, l] * 2.0


@proc
def two_sites(n: size, x: f32[n, 8, 32] @ CudaGmemLinear, y: f32[n, 8, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                warp_row(n, task, w, x, y)
            for h in cuda_threads(0, 2, unit=cuda_warp):
                warp_row(n, task, 4 + h, x, y)


def _cut() -> object:
    return simplify(divide_loop(warp_rows, "w", 4, ["wo", "wi"], tail="cut"))


def _cut_and_shifted() -> object:
    p = cut_loop(warp_rows, "w", 4)
    return simplify(shift_loop(p, p.find_loop("w #1"), 0))


def _specialized() -> object:
    p = specialize(warp_rows, warp_rows.find_loop("w"), ["task % 2 == 0"])
    return simplify(divide_loop(p, p.find_loop("w"), 2, ["vo", "vi"], perfect=True))


def _inlined() -> object:
    return simplify(inline(inline(two_sites, "warp_row(_) #0"), "warp_row(_) #0"))


SCHEDULES = {"divide_loop_cut": _cut, "cut_loop_shift_loop": _cut_and_shifted, "specialize": _specialized,
             "inline_twice": _inlined}


@pytest.mark.parametrize("make", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_every_statement_of_a_scheduled_proc_is_its_own_object(make):
    p = make()
    stmts = list(walk_stmts(p._loopir_proc.body))
    assert len({id(s) for s in stmts}) == len(stmts)
    assert sl.sync_check(p, n=2).ok


def test_the_cut_loops_run_on_their_own_threads():
    """The main nest ran the tail loop's mapping: `wi = 0` and `l` over threads 0-127 (rows 1-3 never written)."""
    cu = sl.compile_procs_to_strings([_cut()], "cut", arch="sm_80")[2]
    main, tail = cu.split("if (exo_thread / 32 < 2)")
    assert "if (exo_thread / 128 < 1)" in main and "const int wi = __shfl_sync(0xffffffffu, exo_thread / 32 % 4, 0)" in main
    assert "const int wi = __shfl_sync(0xffffffffu, exo_thread / 32, 0)" in tail


def test_a_proc_sharing_a_statement_between_thread_mappings_is_refused():
    """A proc made by exo's own op (not spork_lab.scheduling's) keeps the shared Fence: refused, not miscompiled."""
    p = exo_scheduling.cut_loop(warp_rows, "w", 4)
    p = exo_scheduling.simplify(exo_scheduling.shift_loop(p, p.find_loop("w #1"), 0))
    with pytest.raises(sl.SporkSchedulingError, match="`Fence\\(cuda_in_order, cuda_in_order\\)` is one statement "
                                                      "object at two places of the proc") as e:
        sl.analyze(p)
    assert e.value.lineno == warp_rows._loopir_proc.body[0].body[0].body[0].body[0].srcinfo.lineno


@pytest.mark.gpu
@pytest.mark.parametrize("make", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_scheduled_copies_on_the_gpu_are_the_cpus(make):
    pytest.importorskip("cupy")
    from gpu_vs_cpu import assert_gpu_matches_cpu

    rng = np.random.default_rng()
    n = 64
    assert_gpu_matches_cpu(make(), n=n, x=rng.integers(1, 8, (n, 8, 32)).astype(np.float32),
                           y=np.zeros((n, 8, 32), np.float32))
