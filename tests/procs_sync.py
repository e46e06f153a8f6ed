"""Procs for the sync tests: correct programs, and variants with synchronization removed or changed.

The variants are derived from a correct proc with `spork_lab.sync.mutants`; a
variant keeps its original's source lines, which tests find with `line_of`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from exo.API import Procedure

from spork_lab import parse_source, proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.scheduling import (
    divide_loop,
    insert_arrive,
    insert_await,
    insert_barrier_alloc,
    insert_fence,
    rename,
    reorder_loops,
    set_loop_mode,
    set_memory,
    simplify,
    stage_mem,
    wrap_with_context,
)
from spork_lab.sync.mutants import with_await_n, without_syncs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from reverse_tiles import reverse_tiles  # noqa: E402
from sync_ring import ring_copy  # noqa: E402


def line_of(p: Procedure, text: str) -> int:
    """The line of p's source file holding `text`, which must occur exactly once in p's definition."""
    info = p._loopir_proc.srcinfo
    lines = Path(info.filename).read_text().splitlines()
    end = info.lineno  # one past the last line of the definition: stop at the next unindented line
    while end < len(lines) and (not lines[end].strip() or lines[end][0].isspace()):
        end += 1
    (line,) = [i + 1 for i in range(info.lineno - 1, end) if text in lines[i]]
    return line


# ---- tile reverse (LANGUAGE.md; examples/reverse_tiles.py) ----

# reverse_tiles's syncs: #0 the Fence before the reversed read, #1 the Fence before the task's end.
reverse_tiles_no_fence1 = rename(without_syncs(reverse_tiles, [0]), "reverse_tiles_no_fence1")
reverse_tiles_no_fence2 = rename(without_syncs(reverse_tiles, [1]), "reverse_tiles_no_fence2")


# A persistent kernel whose tile lives outside the task loop: the reuse is a WAR.
@proc
def reverse_tiles_shared_tile(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            tile: f32[256] @ CudaSmemLinear
            for it in seq(0, n / 256):
                for tid in cuda_threads(0, 256):
                    tile[tid] = x[it * 256 + tid]
                Fence(cuda_in_order, cuda_in_order)
                for tid in cuda_threads(0, 256):
                    y[it * 256 + tid] = tile[255 - tid]
            Fence(cuda_in_order, cuda_in_order)


# ---- cp.async double buffer on commit groups ----


@proc
def cp_async_double_buffer(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    assert n >= 256
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 128] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[0, t : t + 1], src[t : t + 1], size=4)
            Arrive(Sm80_cp_async, 1) >> cg
            for it in seq(0, n / 128 - 1):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[(it + 1) % 2, t : t + 1], src[(it + 1) * 128 + t : (it + 1) * 128 + t + 1], size=4)
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 1)
                for t in cuda_threads(0, 128):
                    dst[it * 128 + t] = buf[it % 2, t]
            Await(cg, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                dst[n - 128 + t] = buf[(n / 128 - 1) % 2, t]
            Fence(cuda_in_order, cuda_in_order)


# Sync #2 is the Await(cg, cuda_in_order, 1) before each tile is read.
cp_async_double_buffer_no_await = rename(without_syncs(cp_async_double_buffer, [2]), "cp_async_double_buffer_no_await")


# Each thread reads what another thread copied: the commit group is per thread, so it needs a fence.
@proc
def cp_async_cross_thread(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n == 128
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            buf: f32[128] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[t : t + 1], src[t : t + 1], size=4)
            Arrive(Sm80_cp_async, 1) >> cg
            Await(cg, cuda_in_order, 0)
            for t in cuda_threads(0, 128):
                dst[t] = buf[127 - t]
            Fence(cuda_in_order, cuda_in_order)


# ---- warp-specialized ring on an mbarrier with reverse barriers (examples/sync_ring.py) ----

# ring_copy's syncs: #0 ReverseAwait, #1 Arrive, #2 Await, #3 ReverseArrive, #4 Fence.
ring_copy_no_forward = rename(without_syncs(ring_copy, [1, 2]), "ring_copy_no_forward")
ring_copy_no_reverse = rename(without_syncs(ring_copy, [0, 3]), "ring_copy_no_reverse")
ring_copy_lag3 = rename(with_await_n(ring_copy, 0, ~3), "ring_copy_lag3")

ring_warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]


# The consumer warp's block comes first, so its Await waits for an Arrive that never comes.
@proc
def ring_copy_deadlock(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, n / 32):
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = buf[it % 2, t]
                    ReverseArrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="producer"):
                    ReverseAwait(bar, cuda_in_order, ~1)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar
            Fence(cuda_in_order, cuda_in_order)


# The consumer runs one turn behind the producer (Await ~1, reading the slot filled the turn before) and the producer
# waits for the release of two turns before (ReverseAwait ~2): three slots of data. Before arrive i the producer
# knows only that the consumer finished turn i - 2, whose Await took arrive i - 3, so the forward ring needs
# 1 + 2 = 3 mbarriers (it had 2, and the check reported a DEADLOCK).
@proc
def ring_copy_consumer_lags(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[3, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, n / 32 + 1):
                with CudaWarps(name="producer"):
                    ReverseAwait(bar, cuda_in_order, ~2)
                    if it < n / 32:
                        for t in cuda_threads(0, 32):
                            buf[it % 3, t] = src[it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~1)
                    if it >= 1:
                        for t in cuda_threads(0, 32):
                            dst[(it - 1) * 32 + t] = buf[(it - 1) % 3, t]
                    ReverseArrive(cuda_in_order, 1) >> bar
            Fence(cuda_in_order, cuda_in_order)


# Two slots of data are one too few for that ring: the producer refills slot (i % 2) while the consumer may still read it.
ring_copy_consumer_lags_two_slots = rename(
    parse_source(str(ring_copy_consumer_lags).replace("% 3", "% 2").replace("f32[3, 32]", "f32[2, 32]")),
    "ring_copy_consumer_lags_two_slots")


def _release_only_if(p: Procedure, cond: str, name: str) -> Procedure:
    """p with `if cond:` around its ReverseArrive."""
    lines = str(p).splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("ReverseArrive"))
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at : at + 1] = [f"{indent}if {cond}:", f"    {lines[at]}"]
    return rename(parse_source("\n".join(lines)), name)


# The consumer skips its last release. The producer's first ReverseAwait (lag 1) passes, so its n / 32 awaits pair
# with releases 0 .. n / 32 - 2, all sent; but the generated scope end drains the skipped phase (release n / 32 - 1)
# so that the next task starts even, and that phase never completes: a deadlock on the GPU.
ring_copy_last_release_skipped = _release_only_if(ring_copy, "it < n / 32 - 1", "ring_copy_last_release_skipped")

# The consumer releases only the first two slots: the producer's ReverseAwait of iteration 3 waits forever, and so
# does the consumer's Await of the arrive the producer would make next.
ring_copy_releases_stop = _release_only_if(ring_copy, "it < 2", "ring_copy_releases_stop")


# ---- warp-level reduction, fenced per warp ----


@proc
def warp_sums(x: f32[256] @ CudaGmemLinear, y: f32[8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            vals: f32[8, 32] @ CudaSmemLinear
            for w in cuda_threads(0, 8, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    vals[w, t] = x[w * 32 + t]
                Fence(cuda_in_order, cuda_in_order)
                for t in cuda_threads(0, 1):
                    acc: f32 @ CudaRmem
                    acc = 0.0
                    for i in seq(0, 32):
                        acc += vals[w, i]
                    y[w] = acc
            Fence(cuda_in_order, cuda_in_order)


# Sync #0 is the per-warp Fence.
warp_sums_no_fence = rename(without_syncs(warp_sums, [0]), "warp_sums_no_fence")


# ---- a write after many readers: the report names the most recent reader that cannot see it ----


@proc
def war_after_many_readers(x: f32[64] @ CudaGmemLinear, y: f32[64] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            tile: f32[1] @ CudaSmemLinear
            for t in cuda_threads(0, 64):
                if t == 0:
                    tile[0] = x[0]
            Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 64):
                y[t] = tile[0]
            for t in cuda_threads(0, 64):
                if t == 63:
                    tile[0] = x[1]
            Fence(cuda_in_order, cuda_in_order)


# ---- reads of memory nothing wrote (UNINIT): undefined on the GPU and in run_cpu alike ----


@proc
def half_loaded_tile(x: f32[128] @ CudaGmemLinear, y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            tile: f32[128] @ CudaSmemLinear
            for t in cuda_threads(0, 128):
                if t < 64:
                    tile[t] = x[t]
            Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 128):
                y[t] = tile[127 - t]
            Fence(cuda_in_order, cuda_in_order)


@proc
def unzeroed_sum(x: f32[32, 8] @ CudaGmemLinear, y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 32):
                acc: f32 @ CudaRmem
                for k in seq(0, 8):
                    acc += x[t, k]
                y[t] = acc


# ---- barrier misuse (static errors) ----


@proc
def err_missing_await(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            Arrive(Sm80_cp_async, 1) >> cg


@proc
def staged_transpose(n: size, x: f32[n, 32] @ CudaGmemLinear, y: f32[32, n] @ CudaGmemLinear):
    assert n % 32 == 0
    for j in seq(0, 32):
        for i in seq(0, n):
            y[j, i] = x[i, j]


def _staged_on_the_gpu(p: Procedure) -> Procedure:
    """x's tiles staged in shared memory by stage_mem, with no Fence between the copy and its use."""
    p = divide_loop(p, "i", 32, ["bi", "ii"], perfect=True)
    p = reorder_loops(p, "j bi")
    p = simplify(stage_mem(p, p.find_loop("j"), "x[32 * bi:32 * bi + 32, 0:32]", "tile"))
    p = set_memory(p, "tile", CudaSmemLinear)
    p = set_loop_mode(set_loop_mode(set_loop_mode(p, "bi", cuda_tasks), "i0", cuda_threads), "j", cuda_threads)
    return wrap_with_context(p, p.find_loop("bi"), CudaDeviceFunction(blockDim=32))


staged_transpose_no_fence = _staged_on_the_gpu(staged_transpose)


# Two commit groups, one Await: the second group is completed only by the Fence, which does not pair with it.
@proc
def cp_async_second_group_drained(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 256):
            s: f32[2, 128] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for h in seq(0, 2):
                for t in cuda_threads(0, 128):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(s[h, t:t + 1], x[256 * task + 128 * h + t:256 * task + 128 * h + t + 1], size=4)
                Arrive(Sm80_cp_async, 1) >> cg
            Await(cg, cuda_in_order, 1)
            for t in cuda_threads(0, 128):
                y[256 * task + t] = s[0, t]
            Fence(Sm80_generic, cuda_in_order)


@proc
def err_missing_arrive(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            Await(bar, cuda_in_order, ~0)


@proc
def err_mixed_tls(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            Arrive(cuda_in_order, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            Arrive(Sm80_cp_async, 1) >> bar
            Await(bar, cuda_in_order, ~0)


@proc
def err_commit_group_in_order(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            Arrive(cuda_in_order, 1) >> cg
            Await(cg, cuda_in_order, 0)


@proc
def err_mbarrier_wait_group(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            Arrive(cuda_in_order, 1) >> bar
            Await(bar, cuda_in_order, 0)


@proc
def err_commit_group_units(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            Arrive(Sm80_cp_async, 1) >> cg
            for t in cuda_threads(0, 32):
                Await(cg, cuda_in_order, 0)


@proc
def err_mbarrier_other_threads(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            bar: barrier[2] @ CudaMbarrier
            for w in cuda_threads(0, 4, unit=cuda_warp):
                Arrive(cuda_in_order, 1) >> bar[w / 2]  # two warps per barrier: seen only when run
            Await(bar[0], cuda_in_order, ~0)
            Await(bar[1], cuda_in_order, ~0)


@proc
def err_mbarrier_two_warp_ranges(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            with CudaWarps(0, 1):
                Arrive(cuda_in_order, 1) >> bar
            with CudaWarps(1, 2):
                Arrive(cuda_in_order, 1) >> bar  # other threads
            Await(bar, cuda_in_order, ~0)
            Await(bar, cuda_in_order, ~0)


@proc
def err_mbarrier_arrive_per_warp(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            for w in cuda_threads(0, 2, unit=cuda_warp):
                Arrive(cuda_in_order, 1) >> bar
            Await(bar, cuda_in_order, ~0)


@proc
def err_mbarrier_await_per_thread(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            bar: barrier[2] @ CudaMbarrier
            Arrive(cuda_in_order, 1) >> bar[0]
            for t in cuda_threads(0, 64):
                Await(bar[0], cuda_in_order, ~0)


@proc
def err_mbarrier_alloc_per_thread(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            for t in cuda_threads(0, 64):
                bar: barrier @ CudaMbarrier
                Arrive(cuda_in_order, 1) >> bar
                Await(bar, cuda_in_order, ~0)


# Each thread its own barrier of an array: one collective per barrier (the static check allows it).
@proc
def mbarrier_per_thread_array(n: size, x: f32[n] @ CudaGmemLinear):
    assert n == 64
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
            bar: barrier[64] @ CudaMbarrier
            for t in cuda_threads(0, 64):
                x[t] = 1.0
                Arrive(cuda_in_order, 1) >> bar[t]
            for t in cuda_threads(0, 64):
                Await(bar[t], cuda_in_order, ~0)
                x[t] = 2.0 * x[t]


@proc
def err_commit_group_lag(n: size, x: f32[n] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 32):
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, ~1)


@proc
def err_event_count(n: size, x: f32[n] @ CudaGmemLinear):
    done: barrier @ CudaEvent
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            for t in cuda_threads(0, 32):
                x[task * 32 + t] = 0.0
    Arrive(cuda_in_order, 1) >> done
    Await(done, cpu_in_order, 1)


# ---- ring slots reused in execution order (tests/test_sync_barriers.py) ----


# The producer never waits for the consumer: with one mbarrier it can complete phases 0 to 3 before the
# consumer's first try_wait.parity, which then waits for a phase that never comes (the data, not reused, has
# no WAR to catch it): a DEADLOCK at the producer's second Arrive.
@proc
def mbar_phase_overrun(src: f32[128] @ CudaGmemLinear, dst: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, 1):
            buf: f32[4, 32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, 4):
                with CudaWarps(name="producer"):
                    for t in cuda_threads(0, 32):
                        buf[it, t] = src[it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(name="consumer"):
                    Await(bar, cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        dst[it * 32 + t] = buf[it, t]
            Fence(cuda_in_order, cuda_in_order)



# The CTA's next task reuses the mbarriers, and each thread's phase counts go on: task t + 1's first Arrive
# takes over the slot of task t's last. Nothing orders the producer after the consumer's last Await, so it can
# run two phases ahead and the consumer's parity wait then waits for a phase that never completes: a DEADLOCK at
# the end of the barrier's scope (sync_check passed it, session 19's audit). With a CTA Fence closing each task
# (mbar_next_task_fenced) the producer waits for the consumer.
@proc
def mbar_next_task_overrun(n: size, x: f32[n, 32] @ CudaGmemLinear, y: f32[n, 32] @ CudaGmemLinear,
                           z: f32[n, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, n):
            bar: barrier @ CudaMbarrier
            with CudaWarps(name="producer"):
                for t in cuda_threads(0, 32):
                    y[task, t] = x[task, t]
                Arrive(cuda_in_order, 1) >> bar
            with CudaWarps(name="consumer"):
                Await(bar, cuda_in_order, ~0)
                for t in cuda_threads(0, 32):
                    z[task, t] = y[task, 31 - t]



# Only odd tasks fence, at their start and their end: each of the checker's task pairs (t, t + 1) has a Fence
# between them, but with two CTAs per SM the grid is even and a CTA runs tasks of one parity, so even CTAs never
# fence (audit of session 19). A task answers for the obligations of every earlier task.
@proc
def mbar_fenced_odd_tasks(n: size, x: f32[n, 32] @ CudaGmemLinear, y: f32[n, 32] @ CudaGmemLinear,
                          z: f32[n, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=ring_warps, blocks_per_sm=2):
        for task in cuda_tasks(0, n):
            if task % 2 == 1:
                Fence(cuda_in_order, cuda_in_order)
            bar: barrier @ CudaMbarrier
            with CudaWarps(name="producer"):
                for t in cuda_threads(0, 32):
                    y[task, t] = x[task, t]
                Arrive(cuda_in_order, 1) >> bar
            with CudaWarps(name="consumer"):
                Await(bar, cuda_in_order, ~0)
                for t in cuda_threads(0, 32):
                    z[task, t] = y[task, 31 - t]
            if task % 2 == 1:
                Fence(cuda_in_order, cuda_in_order)

# Warps 0 and 1 swap roles between tasks: in task t + n, warp 0 awaits with its own phase count still 0, though
# the mbarrier completed phase 0 in task t, so its wait returns at once and it reads y before warp 1 wrote it
# (on the H200: 25% of z wrong). Each thread counts the phases it sees: the same threads must arrive (await)
# on a barrier in every scope of it.
@proc
def mbar_roles_swap_between_tasks(n: size, x: f32[2 * n, 2, 32] @ CudaGmemLinear, y: f32[2 * n, 2, 32] @ CudaGmemLinear,
                                  z: f32[2 * n, 2, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 2 * n):
            bar: barrier[1] @ CudaMbarrier
            for w in cuda_threads(0, 2, unit=cuda_warp):
                if (w == 0 and task < n) or (w == 1 and task >= n):
                    for t in cuda_threads(0, 32):
                        y[task, w, t] += x[task, w, t]
                    Arrive(cuda_in_order, 1) >> bar[w % 1]  # other threads in task n
            for w in cuda_threads(0, 2, unit=cuda_warp):
                if (w == 1 and task < n) or (w == 0 and task >= n):
                    Await(bar[w % 1], cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        z[task, w, t] = y[task, 1 - w, 31 - t]
            Fence(cuda_in_order, cuda_in_order)


# Two warps commit cp.async groups on one barrier; warp 0's `Await(cg, cuda_in_order, 1)` is cp.async.wait_group 1
# in warp 0's threads, which committed one group: it waits for nothing, and warp 0 read copies still in flight (on
# the H200: 47% of dst wrong). sync_check paired it with the queue's arrive #1, warp 0's own (session 19's audit).
@proc
def commit_groups_of_two_warps(n: size, src: f32[n, 2, 32] @ CudaGmemLinear, dst: f32[n, 2, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, n):
            buf: f32[2, 32] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for w in cuda_threads(0, 2, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[w, t:t + 1], src[task, w, t:t + 1], size=4)
            with CudaWarps(0, 1):
                Arrive(Sm80_cp_async, 1) >> cg
            with CudaWarps(1, 2):
                Arrive(Sm80_cp_async, 1) >> cg  # the other warp's group
            with CudaWarps(0, 1):
                Await(cg, cuda_in_order, 1)
                for t in cuda_threads(0, 32):
                    dst[task, 0, t] = buf[0, t]
            with CudaWarps(1, 2):
                Await(cg, cuda_in_order, 0)
                for t in cuda_threads(0, 32):
                    dst[task, 1, t] = buf[1, t]
            Fence(cuda_in_order, cuda_in_order)


# Each warp copies its part through a commit group of its own (allocated in the warp loop): the machine counts the
# commit groups of each warp apart (refused until session 35: "every arrive ... must be executed by the same threads").
@proc
def cp_async_per_warp(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            buf: f32[4, 32] @ CudaSmemLinear
            for w in cuda_threads(0, 4, unit=cuda_warp):
                cg: barrier @ CudaCommitGroup
                for t in cuda_threads(0, 32):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[w, t:t + 1], src[128 * task + 32 * w + t:128 * task + 32 * w + t + 1],
                                          size=4)
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
                for t in cuda_threads(0, 32):
                    dst[128 * task + 32 * w + t] = buf[w, t]
            Fence(cuda_in_order, cuda_in_order)


# Each warp reads the next warp's copies after awaiting its own group only.
cp_async_per_warp_reads_across = rename(parse_source(str(cp_async_per_warp).replace("= buf[w, t]", "= buf[(w + 1) % 4, t]")),
                                        "cp_async_per_warp_reads_across")


# Warps 0-1 and warps 2-3 each commit a group on one barrier and await it: each pair of warps gets a queue of its
# own (refused until session 36, when queues were per thread, warp or warpgroup only: "... the same threads").
@proc
def cp_async_per_warp_pair(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            buf: f32[4, 32] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[w, t:t + 1], src[128 * task + 32 * w + t:128 * task + 32 * w + t + 1],
                                          size=4)
            with CudaWarps(0, 2):
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            with CudaWarps(2, 4):
                Arrive(Sm80_cp_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    dst[128 * task + 32 * w + t] = buf[w, t]
            Fence(cuda_in_order, cuda_in_order)


# Warps 0-1, then warps 1-2: no aligned group smaller than the CTA holds both, and on one queue warp 0's thread
# would count warps 1-2's group as its own.
cp_async_overlapping_pairs = rename(
    parse_source(str(cp_async_per_warp_pair).replace("CudaWarps(2, 4)", "CudaWarps(1, 3)")), "cp_async_overlapping_pairs"
)


# Its correct counterparts, the producer ordered after the consumer's Await through syncs whose sync-tls
# order none of the ring's data: the consumer hands each slot back on a second mbarrier (a cp.async arrive)
# that the producer awaits, or the CTA meets at a cuda_temporal Fence each iteration.
def _mbar_handed_back() -> Procedure:
    p = mbar_phase_overrun
    p = insert_barrier_alloc(p, p.find_loop("it").before(), "back", [], CudaMbarrier)
    p = insert_arrive(p, p.find_loop("t #1").after(), Sm80_cp_async, "back")
    p = insert_await(p, p.find_loop("t").before(), "back", cuda_in_order, ~1)
    return rename(p, "mbar_handed_back")


mbar_handed_back = _mbar_handed_back()
mbar_fenced_each_iteration = rename(
    insert_fence(mbar_phase_overrun, mbar_phase_overrun.find_loop("t #1").parent().after(), cuda_temporal,
                 cuda_temporal),
    "mbar_fenced_each_iteration",
)
mbar_next_task_fenced = rename(
    insert_fence(mbar_next_task_overrun, mbar_next_task_overrun.find_loop("task").body()[-1].after(), cuda_in_order,
                 cuda_in_order),
    "mbar_next_task_fenced",
)


# An mbarrier arrived on and awaited by the same threads, as a split barrier (arrive, then wait): each thread
# arrives for the next phase after its own wait, and the phase completes only when all have arrived, so no thread
# can fall two phases behind and the slot may be taken over without a Fence (sync_check called it a DEADLOCK:
# "not ordered after the Await", session 38). Every warp writes what another reads: the ring of `slots` buffers
# must be 2 deep (one buffer is a WAR: a thread refills it while another still reads it).
def split_barrier_copy(slots: int) -> Procedure:
    @proc
    def mbar_split_barrier(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
        assert n % 1024 == 0
        with CudaDeviceFunction(blockDim=128):
            for task in cuda_tasks(0, n / 1024):
                buf: f32[slots, 128] @ CudaSmemLinear
                bar: barrier @ CudaMbarrier
                for it in seq(0, 8):
                    for t in cuda_threads(0, 128):
                        buf[it % slots, t] = src[task * 1024 + it * 128 + t]
                    Arrive(cuda_in_order, 1) >> bar
                    Await(bar, cuda_in_order, ~0)
                    for t in cuda_threads(0, 128):
                        dst[task * 1024 + it * 128 + t] = buf[it % slots, 127 - t]
                Fence(cuda_in_order, cuda_in_order)  # the CTA's next task refills buf

    return rename(mbar_split_barrier, f"mbar_split_barrier_{slots}")


mbar_split_barrier_2 = split_barrier_copy(2)


# The same barrier use, arrived on by the first `arrive_warps` warps and awaited by the first `await_warps`: only
# equal sets may take the slot over unordered. With more arriving warps, one that did not wait can arrive for the
# next phase before this one completes (its arrive counts in this phase); with more awaiting warps, the arriving
# ones can complete the next phase before a slow waiter has seen this one (its parity wait then hangs).
def split_barrier_warps(arrive_warps: int, await_warps: int) -> Procedure:
    @proc
    def mbar_split_warps(x: f32[128] @ CudaGmemLinear):
        with CudaDeviceFunction(blockDim=128):
            for task in cuda_tasks(0, 1):
                bar: barrier @ CudaMbarrier
                for it in seq(0, 4):
                    with CudaWarps(0, arrive_warps):
                        Arrive(cuda_in_order, 1) >> bar
                    with CudaWarps(0, await_warps):
                        Await(bar, cuda_in_order, ~0)
                Fence(cuda_in_order, cuda_in_order)

    return rename(mbar_split_warps, f"mbar_split_warps_{arrive_warps}_{await_warps}")


# ---- data handed between the CTAs of a cluster ----


# Global data handed from one CTA of a cluster to the other through a remote mbarrier arrive: the arrive
# (mbarrier.arrive.shared::cluster) releases at .cta scope by default and the wait acquires at .cta scope, so
# under the PTX memory model the other CTA's writes are not ordered before these reads (a RAW on y).
@proc
def remote_arrive_hands_over_global(x: f32[128] @ CudaGmemLinear, y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, blockDim=32):
        for task in cuda_tasks(0, 1):
            ring: barrier[2] @ CudaMbarrier
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 32):
                    y[64 * cta + t] = x[64 * cta + t]
                Arrive(cuda_in_order, 1) >> ring[:]
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                Await(ring[cta], cuda_in_order, ~0)
                for t in cuda_threads(0, 32):
                    x[64 * cta + 32 + t] = y[64 * (1 - cta) + t]
            Fence(cuda_in_order, cuda_in_order)


# A cp.async arrive multicast to the cluster's barriers: cp.async.mbarrier.arrive has no remote form.
@proc
def err_multicast_cp_async_arrive(x: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[2, 32] @ CudaSmemLinear
            ring: barrier[2] @ CudaMbarrier
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 32):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[cta, t : t + 1], x[64 * cta + t : 64 * cta + t + 1], size=4)
                Arrive(Sm80_cp_async, 1) >> ring[:]
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                Await(ring[cta], cuda_in_order, ~0)
                for t in cuda_threads(0, 32):
                    x[64 * cta + 32 + t] = buf[cta, t]
            Fence(cuda_in_order, cuda_in_order)


# The same handover through a Fence by the whole cluster (barrier.cluster.arrive.release / wait.acquire): ordered.
@proc
def cluster_fence_hands_over_global(x: f32[128] @ CudaGmemLinear, y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, blockDim=32):
        for task in cuda_tasks(0, 1):
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 32):
                    y[64 * cta + t] = x[64 * cta + t]
            Fence(cuda_in_order, cuda_in_order)
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 32):
                    x[64 * cta + 32 + t] = y[64 * (1 - cta) + t]


# cp.async of 16 bytes whose window starts 4 t + k elements in: aligned only for k = 0. The analysis cannot tell
# (k is a loop's iterator); sync_check runs the loop and must stop at k = 1 (the GPU faults on the address).
@proc
def err_cp_async_misaligned_in_loop(n: size, src: f32[n, 132] @ CudaGmemLinear, dst: f32[n, 4, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            buf: f32[132] @ CudaSmemLinear
            for k in seq(0, 4):
                for t in cuda_threads(0, 32):
                    with CudaAsync(Sm80_cp_async_instr):
                        Sm80_cp_async_f32(buf[4 * t + k : 4 * t + k + 4], src[task, 4 * t + k : 4 * t + k + 4], size=16)
                Fence(Sm80_generic, cuda_in_order)
                for t in cuda_threads(0, 32):
                    for j in seq(0, 4):
                        dst[task, k, 32 * j + t] = buf[32 * j + t + k]
                Fence(cuda_in_order, cuda_in_order)


# ldmatrix (16-byte rows) of A_s[:, 4 kk : 4 kk + 16]: the second k-step's rows start 8 bytes in.
@proc
def err_ldmatrix_misaligned_in_loop(n: size, A: f16[n, 16, 32] @ CudaGmemLinear, B: f16[n, 16, 8] @ CudaGmemLinear,
                                    C: f32[n, 2, 16, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n):
            A_s: f16[16, 32] @ CudaSmemLinear
            B_s: f16[16, 8] @ CudaSmemLinear
            for l in cuda_threads(0, 32):
                for r in seq(0, 16):
                    A_s[r, l] = A[task, r, l]
                for r in seq(0, 4):
                    B_s[4 * r + l / 8, l % 8] = B[task, 4 * r + l / 8, l % 8]
            Fence(cuda_in_order, cuda_in_order)
            for kk in seq(0, 2):
                D: f32[16, 8] @ Sm80_RmemMatrixD
                A_r: f16[16, 16] @ Sm80_RmemMatrixA
                B_r: f16[16, 8] @ Sm80_RmemMatrixB
                Sm80_mma_zero_d_tf32(D)
                Sm80_mma_load_a_f16(A_r, A_s[:, 4 * kk : 4 * kk + 16])
                Sm80_mma_load_b_f16(B_r, B_s[:, :])
                Sm80_mma_f16(D, A_r, B_r)
                Sm80_mma_store_d_tf32(C[task, kk, :, :], D)
            Fence(cuda_in_order, cuda_in_order)


# The callee's cp.async window dst[1:5] of a window parameter: the analysis cannot see the buffer's layout there;
# the run finds the offset constant (buf[0, :] in one thread) and misaligned.
@proc
def copy_from_one(dst: [f32][8] @ CudaSmemLinear, src: [f32][8] @ CudaGmemLinear):
    with CudaAsync(Sm80_cp_async_instr):
        Sm80_cp_async_f32(dst[1:5], src[1:5], size=16)


@proc
def err_cp_async_misaligned_in_callee(x: f32[32, 8] @ CudaGmemLinear, y: f32[32, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[32, 8] @ CudaSmemLinear
            for t in cuda_threads(0, 1):
                copy_from_one(buf[0, :], x[0, :])
            Fence(Sm80_generic, cuda_in_order)
            for t in cuda_threads(0, 32):
                for j in seq(0, 8):
                    y[t, j] = buf[t, j]
            Fence(cuda_in_order, cuda_in_order)


# A barrier array indexed by a loop iterator named k: the generated await declared its own `k` (the pairing arrive
# count) and read it in the index (`const unsigned k = bar_fw[k]`: uninitialised; audit E, session 20).
@proc
def await_indexed_by_k(n: size, x: f32[n, 4, 32] @ CudaGmemLinear, y: f32[n, 4, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]):
        for task in cuda_tasks(0, n):
            s: f32[4, 32] @ CudaSmemLinear
            bar: barrier[4] @ CudaMbarrier
            with CudaWarps(name="producer"):
                for k in seq(0, 4):
                    for t in cuda_threads(0, 32):
                        s[k, t] = x[task, k, t]
                    Arrive(cuda_in_order, 1) >> bar[k]
            with CudaWarps(name="consumer"):
                for k in seq(0, 4):
                    Await(bar[k], cuda_in_order, ~0)
                    for t in cuda_threads(0, 32):
                        y[task, k, t] = s[k, t]
            Fence(cuda_in_order, cuda_in_order)


# Both tasks add into y[0]: no Fence orders threads of different tasks.
@proc
def tasks_share_an_element(x: f32[2, 32] @ CudaGmemLinear, y: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 2):
            for t in cuda_threads(0, 32):
                y[t] += x[task, t]


# Warps 1 and 2 await the producer's tile; only warp 1 reads it, and the slot is handed back by a Fence of warps 0
# and 1, which warp 2 is not in. The producer's next arrive then is not ordered after warp 2's wait: a slow warp 2
# waits on a parity the barrier has passed twice and hangs (on an H200, audit of session 27). The machine used to
# count an await as done by all its threads once any one of them was ordered; now it waits for a sync of them all.
@proc
def ring_released_by_part_of_its_awaiters(n: size, x: f32[n, 4, 32] @ CudaGmemLinear, z: f32[n, 4, 32] @ CudaGmemLinear,
                                          w: f32[n, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=96):
        for task in cuda_tasks(0, n):
            buf: f32[32] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for it in seq(0, 4):
                with CudaWarps(0, 1):
                    for t in cuda_threads(0, 32):
                        buf[t] = 2.0 * x[task, it, t]
                    Arrive(cuda_in_order, 1) >> bar
                with CudaWarps(1, 3):
                    Await(bar, cuda_in_order, ~0)
                    with CudaWarps(0, 1):
                        for t in cuda_threads(0, 32):
                            z[task, it, t] = buf[t]
                    with CudaWarps(1, 2):
                        for t in cuda_threads(0, 32):
                            w[task, t] += 1.0
                with CudaWarps(0, 2):
                    Fence(cuda_in_order, cuda_in_order)
            Fence(cuda_in_order, cuda_in_order)


# The same with the hand-back Fence by all three warps: every awaiting warp has waited before the next arrive.
ring_released_by_all_its_awaiters = rename(parse_source(str(ring_released_by_part_of_its_awaiters).replace(
    "with CudaWarps(0, 2):\n                    Fence(cuda_in_order, cuda_in_order)",
    "Fence(cuda_in_order, cuda_in_order)")), "ring_released_by_all_its_awaiters")


@proc
def repeated_increments(n: size, x: f32[128] @ CudaGmemLinear):
    # n only counts trips: the arguments stay small at any n
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, 1):
            for it in seq(0, n):
                for t in cuda_threads(0, 128):
                    x[t] += 1.0
                Fence(cuda_in_order, cuda_in_order)


@proc
def increments_if(n: size, twice: bool, x: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                x[task * 128 + t] += 1.0
                if twice:
                    x[task * 128 + t] += 1.0


# A lag-1 queue whose awaiting threads skip a scope (audit of session 32): tasks with task % 5 == 0 make one Arrive
# and no Await. The count check let it pass (one arrive is within a lag of 1) and the model drained it at the scope's
# end, but the generated end drains only the phases the awaits skipped: the consumer's phase count stays one behind,
# and in its CTA's next task its second Await passes on this old phase, before buf[0] is written.
@proc
def lag_scope_skips_its_await(n: size, src: f32[n, 32] @ CudaGmemLinear, dst: f32[n, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=ring_warps):
        for task in cuda_tasks(0, n):
            buf: f32[2, 32] @ CudaSmemLinear
            for one in seq(0, 1):
                bar: barrier @ CudaMbarrier
                if task % 5 == 0:
                    with CudaWarps(name="producer"):
                        Arrive(cuda_in_order, 1) >> bar  # no Await counts it
                else:
                    with CudaWarps(name="producer"):
                        for t in cuda_threads(0, 32):
                            buf[0, t] = src[task, t]
                        Arrive(cuda_in_order, 1) >> bar
                        for t in cuda_threads(0, 32):
                            buf[1, t] = src[task, t]
                        Arrive(cuda_in_order, 1) >> bar
                    with CudaWarps(name="consumer"):
                        Await(bar, cuda_in_order, ~1)
                        Await(bar, cuda_in_order, ~1)  # the second
                        for t in cuda_threads(0, 32):
                            dst[task, t] = buf[0, t]
            Fence(cuda_in_order, cuda_in_order)
