"""mbarriers in clusters, TMA's shared-memory boxes, global memory allocated by CPU code and Fences of named warps
in clusters (found by the session-17 soundness audit; the procs and what went wrong are in procs_cluster_tma.py).

Each wrong program is refused at its line, by the analysis where the program's text decides it, by sync_check
where only its sizes do; the correct forms pass, and on a GPU compute what the program says.
"""

from __future__ import annotations

import ctypes
import inspect
import re
import shutil

import numpy as np
import procs_cluster_tma as P
import pytest
from gpu_vs_cpu import assert_gpu_matches_cpu

import spork_lab as sl
from spork_lab.codegen import compile_procs_to_strings


def marked_line(p) -> int:
    """The line of `# error here` in the proc's source."""
    lines = inspect.getsource(P).splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"def {p.name()}(")))
    return 1 + next(i for i in range(start, len(lines)) if "# error here" in lines[i])


@pytest.mark.parametrize("p", [P.mbarrier_straddles_ctas, P.mbarrier_whole_cluster], ids=lambda p: p.name())
def test_an_mbarrier_is_used_by_the_threads_of_one_cta(p):
    with pytest.raises(sl.SyncError) as info:
        sl.sync_check(p, n=2)
    err = info.value
    assert err.filename.endswith("procs_cluster_tma.py") and err.lineno == marked_line(p), str(err)
    assert "lie in CTAs 0 to 1 of the cluster" in err.message and "one per CTA" in err.message
    assert "bar[cta]" in err.message


@pytest.mark.parametrize("p", [P.tma_load_padded_rows, P.tma_store_padded_rows], ids=lambda p: p.name())
def test_a_tma_box_in_shared_memory_is_whole_rows(p):
    with pytest.raises(sl.MemoryMismatchError) as info:
        sl.sync_check(p, n=2)
    err = info.value
    assert err.filename.endswith("procs_cluster_tma.py") and err.lineno == marked_line(p), str(err)
    assert "rows of" in err.message and "are 12 elements apart" in err.message


def test_a_tma_box_through_a_window_alias_is_whole_rows():
    """The analysis sees a window through its aliases (on the buffer's own dimensions): the run refused it before."""
    p = P.tma_load_through_padded_alias
    with pytest.raises(sl.MemoryMismatchError) as info:
        sl.analyze(p)
    err = info.value
    assert err.lineno == marked_line(p) and "the rows of `tile[0:8, 32:40]` are 40 elements apart" in err.message, str(err)


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_what_only_the_run_decides_is_refused_by_sync_check(engine):
    p = P.tma_row_per_thread
    sl.analyze(p)  # the program's text does not decide it
    with pytest.raises(sl.SyncError) as info:
        sl.sync_check(p, n=2, engine=engine)
    err = info.value
    assert err.lineno == marked_line(p) and "a TMA copy's shared-memory box at 128 bytes" in err.message, str(err)


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_a_multicast_load_landing_on_a_slot_still_open_is_reported(engine):
    """The load of tile 2 signals slot 0 of both CTAs; CTA 0's issuing thread is not ordered after CTA 1's Await of
    phase 1 (nothing hands CTA 1's slot back to CTA 0), so its bytes can land in CTA 1's open phase 1."""
    p = P.multicast_lands_on_open_slot
    report = sl.sync_check(p, engine=engine)
    h = report.hazards[0]
    assert h.kind == "DEADLOCK" and h.access.stmt.line == marked_line(p), h
    assert "this TMA load completes on phase #3 of ring[1], ring slot 0 (depth 2)" in h.message
    assert h.access.threads == ((0, 1),) and h.other.stmt.line == marked_line(p) + 10  # CTA 1's Await


def test_a_multicast_load_on_one_ctas_barrier_is_refused_at_its_line():
    """`>> ring[cta]`: the load writes both CTAs' tiles, so it completes on both CTAs' barriers; sync_check said it
    with the instr's generated name, and analyze passed it (audit of session 38)."""
    src = str(P.multicast_lands_on_open_slot).replace("box=(32, 32)) >> ring[:]", "box=(32, 32)) >> ring[cta]")
    assert src != str(P.multicast_lands_on_open_slot)
    with pytest.raises(sl.SyncError) as info:
        sl.analyze(sl.parse_source(src))
    assert info.value.lineno == next(i for i, line in enumerate(src.splitlines(), 1) if "Sm90_multicast" in line)
    assert str(info.value).endswith("Sm90_multicast_copy_tensor_to_smem_swizzled_2f32 writes tile in the 2 CTAs of "
                                    "its first dimension, so it completes on the barrier of each: write "
                                    "`>> ring[...]` with a slice of 2 barriers (e.g. `ring[:]` over the cluster's "
                                    "CTAs), not 1")


@pytest.mark.parametrize("p", [P.mbarrier_per_cta, P.tma_load_whole_rows, P.scratch_between_kernels,
                               P.consumer_warps_fence], ids=lambda p: p.name())
def test_the_correct_forms_pass(p):
    assert sl.sync_check(p, n=3).ok


def test_each_arrive_expects_the_loads_on_its_own_barrier():
    """`>> bar[0]` and `>> bar[1]`, then an Arrive on each: the first Arrive expected both loads' bytes (512), the
    second none, and sync_check reported TX hazards for a correct program (the GPU would have hung)."""
    for engine in ("python", "compiled"):
        assert sl.sync_check(P.two_barriers_two_phases, n=2, engine=engine).ok
    cu = compile_procs_to_strings([P.two_barriers_two_phases], "two_bars", "sm_90a")[2]
    assert re.findall(r"spork_mbar_arrive_expect_tx\(&spork_bar_f\[\((\d)\)[^;]*, (\d+)u\);", cu) == [("0", "256"), ("1", "256")]


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_cp_async_alignment_is_checked_in_the_shard(engine):
    """Each CTA's shard of cluster-distributed shared memory is an allocation of its own: a cp.async's window must
    be aligned where it lies in the shard, whatever its offset in the logical tile."""
    with pytest.raises(sl.SyncError) as info:
        sl.sync_check(P.cp_async_into_shard_misaligned, n=2, engine=engine)
    err = info.value
    assert err.lineno == marked_line(P.cp_async_into_shard_misaligned) and "misaligned" in err.message, str(err)
    assert sl.sync_check(P.cp_async_into_shard_aligned, n=2, engine=engine).ok


def test_cpu_allocated_global_memory_has_an_allocator():
    c = compile_procs_to_strings([P.scratch_between_kernels], "scratch")[0]
    assert "static void *spork_cuda_malloc(" in c and "static void spork_cuda_free(" in c
    assert "cudaMallocAsync(&ptr, bytes, (cudaStream_t) scratch_stream())" in c


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_library_allocating_global_memory_loads():
    from spork_lab.runtime import build_library

    basename = "spork_scratch_between_kernels"
    lib = build_library(compile_procs_to_strings([P.scratch_between_kernels], basename, "sm_90a"), basename, "sm_90a")
    ctypes.CDLL(str(lib))  # an undefined allocator was an OSError here


@pytest.mark.gpu
@pytest.mark.parametrize("p, arch", [(P.mbarrier_per_cta, "sm_90a"), (P.tma_load_whole_rows, "sm_90a"),
                                     (P.scratch_between_kernels, None), (P.two_barriers_two_phases, "sm_90a"),
                                     (P.consumer_warps_fence, None), (P.cp_async_into_shard_aligned, "sm_90a")],
                         ids=["per_cta", "tma_rows", "scratch", "two_barriers", "consumer_fence", "shard_aligned"])
def test_the_gpu_computes_what_the_program_says(p, arch):
    pytest.importorskip("cupy")
    rng = np.random.default_rng()  # fresh inputs every run
    for n in (3, 500):
        args = {}
        for a in p._loopir_proc.args:
            if a.type.is_tensor_or_window():
                shape = [int(eval(str(d), {"n": n})) for d in a.type.shape()]
                args[str(a.name)] = rng.integers(-8, 9, size=shape).astype(np.float32)
            else:
                args[str(a.name)] = n
        assert_gpu_matches_cpu(p, arch, **args)
