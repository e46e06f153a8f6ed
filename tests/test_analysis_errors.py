"""sl.analyze rejects misuse: one case per check, asserting the error family, message and line."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import procs_analysis as P
import pytest
from conftest import EXAMPLES_DIR

from spork_lab.analysis import analyze
from spork_lab.errors import (
    CollectiveError,
    DataTypeError,
    DeviceScopeError,
    MemoryMismatchError,
    SporkError,
    SporkTypeError,
    SyncError,
    TimelineError,
)
from spork_lab.sync.checker import sync_check

CASES = [
    # structure and device scopes
    ("df_two_children", DeviceScopeError, ["only child", "line", "must be a nest of cuda_tasks loops", "tmp"]),
    ("df_not_perfect", DeviceScopeError, ["for j in cuda_tasks(0, 2)", "perfectly nested"]),
    ("tasks_on_cpu", DeviceScopeError, ["is CPU code", "directly inside a CudaDeviceFunction"]),
    ("threads_on_cpu", DeviceScopeError, ["for t in cuda_threads(0, 32)", "only inside a CudaDeviceFunction"]),
    ("async_on_cpu", DeviceScopeError, ["CudaAsync blocks appear only inside a CudaDeviceFunction"]),
    ("warps_on_cpu", DeviceScopeError, ["CudaWarps blocks appear only inside a CudaDeviceFunction"]),
    ("par_in_cuda", DeviceScopeError, ["for i in par(0, 32)", "use cuda_threads"]),
    ("nested_device_functions", DeviceScopeError, ["CudaDeviceFunction(blockDim=64)", "do not nest"]),
    # cuda_threads loops and collectives
    ("threads_lo_nonzero", CollectiveError, ["starts at 0, not at 1"]),
    ("threads_hi_not_constant", CollectiveError, ["compile-time constant bound, not n"]),
    ("threads_hi_folds_to_a_constant", CollectiveError, ["constant bound, not 32 - 0 (it is 32: simplify(p) folds it)"]),
    ("too_many_threads", CollectiveError, ["10 x 4 = 40 threads > 32 threads", "cuda_warp"]),
    ("mma_by_thread", CollectiveError, ["Sm80_mma_zero_d_tf32", "unit cuda_warp", "cuda_thread (1 thread)"]),
    ("cp_async_by_warp", CollectiveError, ["Sm80_cp_async_f32 must", "unit cuda_thread", "cuda_warp (32 threads)"]),
    ("wgmma_zero_by_misaligned_warps", CollectiveError,
     ["unit cuda_warpgroup", "threads [32, 160) are as many as a cuda_warpgroup but not one", "multiple of 128"]),
    # a unit larger than the whole CTA: the same error, at the instr's line (was one without a line)
    ("wgmma_zero_in_a_64_thread_cta", CollectiveError,
     ["Sm90_zero_scale_d_f32 must be executed by a collective of unit cuda_warpgroup", "cuda_cta_in_cluster (64 threads)"]),
    # layouts: instrs address contiguous rows (cp.async writes 16 adjacent bytes), a column is not one
    ("cp_async_misaligned", MemoryMismatchError,
     ["Sm80_cp_async_f32 needs each row of dst aligned to 16 bytes", "`A_smem[4 * t + 2:4 * t + 6]` starts 8 bytes past"]),
    ("ldmatrix_rows_misaligned", MemoryMismatchError,
     ["Sm80_mma_load_a_f16 needs each row of smem aligned to 16 bytes", "pad A_s's rows to a multiple of 8 elements"]),
    ("cp_async_to_a_column", MemoryMismatchError,
     ["Sm80_cp_async_f32 takes dst as contiguous rows", "`A_smem[0:4, t]` is not A_smem's last"]),
    # through a window alias: checked on the buffer's own dimensions
    ("cp_async_from_a_column_alias", MemoryMismatchError,
     ["Sm80_cp_async_f32 takes src as contiguous rows", "`src[4 * t:4 * t + 4, 4]` is not src's last"]),
    ("cp_async_misaligned_through_alias", MemoryMismatchError,
     ["Sm80_cp_async_f32 needs each row of src aligned to 16 bytes"]),
    ("mma_store_to_a_bare_alias", MemoryMismatchError, ["pass gmem as a window of Cw, `Cw[:, :]`"]),
    # fragments: scalar code would index a lane's registers as if they held the fragment's row-major elements
    ("fragment_scalar_read", MemoryMismatchError,
     ["`y[t] = D[0, 1]`", "D @ Sm80_RmemMatrixD", "spread over the lanes", "pass windows of D to the instrs"]),
    ("fragment_scalar_write", MemoryMismatchError, ["`D[0, 3] = x[0]`", "D @ Sm80_RmemMatrixD"]),
    ("wgmma_accumulator_scalar_read", MemoryMismatchError, ["D @ Sm90_RmemMatrixD", "spread over the lanes"]),
    ("fragment_to_plain_proc", MemoryMismatchError, ["D @ Sm80_RmemMatrixD", "zero_fragment_elements's body, scalar code"]),
    ("fragment_window_not_adjacent", MemoryMismatchError,
     ["`B_r[0:2, 1, 0:8, 0:8]` takes several tiles of dimension 0", "whole fragments that follow each other in B_r", "dimension 1"]),
    ("fragment_tiles_of_two_shapes", MemoryMismatchError,
     ["`D[0:8, 0:16]` takes 8 x 16 of D's 16 x 16 tiles", "Sm80_RmemMatrixD registers are laid out for the shape",
      "an allocation of its own"]),
    ("fragment_alias", MemoryMismatchError,
     ["`Dw = D[1, 0:16, 0:8]`", "D @ Sm80_RmemMatrixD", "pass `D[1, 0:16, 0:8]` to the instrs directly"]),
    ("scalar_write_by_cta", CollectiveError, ["y[0] = 1.0", "cuda_warp (32 threads)", "single thread"]),
    # said "scalar writes need a single thread", where code generation then said "inline it": inlining comes first
    ("plain_call_by_warp", CollectiveError, ["`zero4(y[0, 0:4])` calls the plain proc zero4 in device code",
                                             'inline it (p = inline(p, "zero4(_)"))', "cuda_warp (32 threads)"]),
    ("plain_call_with_thread_loops_by_warps", CollectiveError,
     ["`rows_by_lanes(y, w)` calls the plain proc rows_by_lanes in device code", "inline it"]),
    # launch configuration
    ("block_dim_not_warps", CollectiveError, ["blockDim=100", "multiple of 32"]),
    ("cluster_dim_not_pow2", CollectiveError, ["clusterDim=3", "power of 2"]),
    ("block_dim_too_big", CollectiveError, ["blockDim=2048", "more than the 1024 threads a CUDA block may have"]),
    ("cluster_dim_too_big", CollectiveError, ["clusterDim=16", "more than the 8 CTAs of a portable cluster"]),
    ("warp_name_not_identifier", CollectiveError, ["'1st'", "C identifier"]),
    ("warp_name_twice", CollectiveError, ["'a' is used twice"]),
    ("setmaxnreg_bad_value", CollectiveError, ["setmaxnreg=30", "multiple of 8 in [24, 256]"]),
    ("setmaxnreg_mixed", CollectiveError, ["warpgroup 0", "producer=40, consumer=232"]),
    ("setmaxnreg_partial_warpgroup", CollectiveError, ["multiple of 128", "2 warps (64 threads)"]),
    ("setmaxnreg_too_many_threads", CollectiveError, ["blockDim=1408", "more than the 1024 threads"]),
    ("ctas_past_the_cluster", CollectiveError, ["needs 4 x 32 = 128 threads > 64 threads in the enclosing collective "
                                                "(the enclosing collective is cuda_cluster (the whole cluster))"]),
    ("arrive_on_a_slice_without_a_cluster", SyncError, ["`Arrive(cuda_in_order, 1) >> bar[0:2]` arrives on a slice",
                                                        "this device function has none (clusterDim=1)"]),
    # CudaWarps
    ("unknown_warp_name", CollectiveError, ["'consumr'", "'producer', 'consumer'"]),
    ("warp_name_without_config", CollectiveError, ["warp_config", "blockDim=64"]),
    ("named_range_too_wide", CollectiveError, ["[0, 3)", "2 warps named 'consumer'"]),
    ("nested_name_change", CollectiveError, ["CudaWarps(name='consumer')", "cannot change the warp name"]),
    ("numbered_outside_named", CollectiveError, ["numbered CudaWarps blocks go inside a named one"]),
    ("warps_out_of_range", CollectiveError, ["CudaWarps(2, 5)", "4 warps"]),
    # instruction timelines
    (
        "cp_async_outside_async",
        TimelineError,
        ["wrong instr-tl", "Sm80_cp_async_f32 runs on Sm80_cp_async_instr", "on cuda_in_order_instr",
         "with CudaAsync(Sm80_cp_async_instr)"],
    ),
    ("mma_inside_async", TimelineError, ["Sm80_mma_zero_d_tf32 runs on cuda_in_order_instr", "on Sm80_cp_async_instr"]),
    ("scalar_code_in_async", TimelineError, ["y[t] = 0.0", "scalar code", "CudaAsync(Sm80_cp_async_instr)"]),
    ("async_on_cpu_timeline", TimelineError, ["cpu_in_order_instr is not a CUDA instr-tl"]),
    ("exo_instr_in_cuda", TimelineError, ["exo_cpu_zero runs on cpu_in_order_instr", "CPU instruction"]),
    ("dram_in_cuda", TimelineError, ["x @ DRAM is read on cuda_in_order_instr", "only on cpu_in_order_instr"]),
    ("gmem_on_cpu", TimelineError, ["y @ CudaGmemLinear is read on cpu_in_order_instr", "only by CUDA code"]),
    ("plain_call_writes_gmem_on_cpu", TimelineError, ["y @ CudaGmemLinear is written on cpu_in_order_instr"]),
    (
        "smem_lifted_to_cpu",
        TimelineError,
        ["tile @ CudaSmemLinear is allocated on cpu_in_order_instr", "lifted out of the device function"],
    ),
    ("gmem_alloc_in_cuda", TimelineError, ["tmp @ CudaGmemLinear is allocated on cuda_in_order_instr", "CPU code"]),
    # a tensor map is encoded by the host before the launch (made in CUDA code it lowered to a plain window)
    ("tensor_map_in_cuda", TimelineError, ["A_tm is a tensor map made in CUDA code", "make it in CPU code"]),
    # was lowered to __syncthreads() without a word
    ("cpu_fence_in_cuda", SyncError, ["Fence(cpu_in_order, cpu_in_order) is inside a CudaDeviceFunction",
                                      "write cuda_in_order"]),
    ("scalar_in_cuda", TimelineError, ["a @ DRAM is read on cuda_in_order_instr", "device code takes no scalar "
                                       "data yet: pass `a: f32` as a tensor of one element, `a: f32[1] @ "
                                       "CudaGmemLinear`, and use a[0]"]),
    # launch arguments (were refused only by codegen, as "not yet supported")
    ("smem_argument", MemoryMismatchError, ["`x[0] = 1.0` uses x", "as a launch argument",
                                            "x is @ CudaSmemLinear, which exists only inside a device function"]),
    ("gmem_scalar_in_cuda", MemoryMismatchError, ["a is one f32 value", "`a: f32[1] @ CudaGmemLinear`"]),
    ("window_argument_in_cuda", MemoryMismatchError, ["x is a window: pass the whole tensor"]),
    ("cpu_window_in_cuda", MemoryMismatchError, ["`xw[0] = 2.0` uses xw", "xw is a window"]),
    # exo's checks at C generation: were exo's TypeErrors from inside exo when building
    ("mixed_precisions", DataTypeError, ["`y[i] = a[i] * a[i] + y[i]`: cannot compute operation '+' between "
                                         "inconsistent precision types: f16 and f32", "exo's precision rules"]),
    ("racy_par_loop", SporkTypeError, ["`for i in par(0, 8):`: parallel loop's body is not parallelizable"]),
    ("window_for_tensor", SporkTypeError, ["`zero_four(y[0:4])`: expected a non-window tensor",
                                           "a window argument needs a window parameter"]),
]


def marked_line(proc_name: str) -> int:
    """The line of `# error here` in the proc's source."""
    lines = inspect.getsource(P).splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"def {proc_name}(")))
    return 1 + next(i for i in range(start, len(lines)) if "# error here" in lines[i])


@pytest.mark.parametrize("name, family, fragments", CASES, ids=[c[0] for c in CASES])
def test_rejected(name, family, fragments):
    with pytest.raises(family) as info:
        analyze(getattr(P, name))
    err = info.value
    for fragment in fragments:
        assert fragment in err.message
    assert err.lineno == marked_line(name)
    assert err.filename.endswith("procs_analysis.py")
    assert str(err).startswith(f"{err.filename}:{err.lineno}: ")


def test_every_rejected_proc_has_a_case():
    chunks = inspect.getsource(P).split("\ndef ")[1:]
    marked = {chunk.split("(")[0] for chunk in chunks if "# error here" in chunk.split("\n@")[0]}
    assert marked == {c[0] for c in CASES}


def test_errors_are_spork_errors_with_json():
    with pytest.raises(SporkError) as info:
        analyze(P.too_many_threads)
    data = info.value.to_json()
    assert data["kind"] == "CollectiveError" and data["line"] == marked_line("too_many_threads")


def test_errors_leave_the_api_with_the_users_frames_only():
    import traceback

    with pytest.raises(SporkError) as info:
        analyze(P.too_many_threads)
    files = [f.filename for f in traceback.extract_tb(info.value.__traceback__)]
    internal = [f for f in files if "/spork_lab/" in f or "/exo/" in f]
    assert internal == [f for f in files if f.endswith("spork_lab/errors.py")] and len(internal) == 1


@pytest.mark.parametrize("call, family, message", [
    (lambda: analyze(None), SporkTypeError, "analyze takes a proc (made with @proc or a scheduling op), not NoneType"),
    (lambda: sync_check("seed_threads"), SporkTypeError,
     "sync_check takes a proc (made with @proc or a scheduling op), not str"),
    (lambda: sync_check(P.seed_threads, engine="c"), SyncError, "sync_check(engine='c'): use 'compiled' or 'python'"),
    (lambda: sync_check(P.seed_threads, max_hazards="all"), SporkTypeError,
     "sync_check(max_hazards='all'): give an int >= 0"),
    (lambda: sync_check(), SporkTypeError, "sync_check: missing a required argument: 'p'; it takes (p, "
     "max_hazards=50, max_events=10000, engine='compiled', max_elements=4194304, max_ops=500000000, **sizes)"),
])  # fmt: skip
def test_entry_points_given_the_wrong_things_name_the_users_line(call, family, message):
    """Were a TypeError or ValueError raised in spork_lab's frames, naming no line; sync_check("p") said "analyze
    takes a proc". They stay TypeErrors where they were."""
    with pytest.raises(family) as info:
        call()
    err = info.value
    assert (err.filename, err.lineno, err.message) == (__file__, call.__code__.co_firstlineno, message)


def test_a_barrier_used_above_its_allocation_is_an_error_at_the_use():
    """A sync statement moved above its barrier's allocation (the mutation helpers move statements without exo's
    checks) reached exo's C passes, which failed with a KeyError from inside exo (the random schedule fuzz)."""
    from spork_lab.errors import SporkTypeError
    from spork_lab.sync.mutants import with_sync_moved, without_syncs

    sys.path.insert(0, str(EXAMPLES_DIR))
    from cp_async_double_buffer import cp_async_double_buffer

    p = with_sync_moved(with_sync_moved(without_syncs(cp_async_double_buffer, [1]), 0, -1), 0, -1)
    with pytest.raises(SporkTypeError, match="uses cg, which is not defined before it in its scope") as e:
        analyze(p)
    assert "Arrive(Sm80_cp_async, 1) >> cg" in Path(e.value.filename).read_text().splitlines()[e.value.lineno - 1]


def test_a_fragment_buffer_of_one_dimension_is_refused_at_the_instr():
    """A 1-D buffer in Sm80_RmemMatrixA given to an instr raised a bare ValueError (unpacking its last two
    dimensions) out of sl.analyze (audit 33, P)."""
    from spork_lab import proc
    from spork_lab.platforms.cuda import CudaAsync, CudaDeviceFunction, CudaGmemLinear, cuda_tasks, cuda_threads  # noqa: F401
    from spork_lab.platforms.Sm80 import Sm80_cp_async_f32, Sm80_cp_async_instr, Sm80_RmemMatrixA  # noqa: F401

    @proc
    def fragment_of_one_dimension(src: f32[128] @ CudaGmemLinear):
        with CudaDeviceFunction(blockDim=128):
            for task in cuda_tasks(0, 1):
                buf: f32[128] @ Sm80_RmemMatrixA
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[t:t + 1], src[t:t + 1], size=4)

    with pytest.raises(MemoryMismatchError, match="buf @ Sm80_RmemMatrixA has 1 dimension, but") as e:
        analyze(fragment_of_one_dimension)
    assert e.value.filename == __file__
