"""Front end: every construct parses, prints as Exo-GPU syntax, re-parses to an equal proc,
and survives exo's scheduling operations."""

from __future__ import annotations

import importlib
import pathlib
import sys

import pytest
from conftest import ir_equal
from exo.core.LoopIR import LoopIR

import spork_lab as sl
from spork_lab.cli import module_procs
from spork_lab.core.ir import walk_stmts
from spork_lab.core.loop_modes import CudaTasks, CudaThreads, WithBlock
from spork_lab.core.sync_stmts import sync_spec_of
from spork_lab.lang.frontend import default_namespace
from spork_lab.lang.printer import EXO_PRINT_CURSOR, EXO_PROC_STR
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.scheduling import *

TESTS = pathlib.Path(__file__).parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
import procs_frontend as P  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
from reverse_tiles import reverse_tiles  # noqa: E402
from vec_add import vec_add  # noqa: E402


def _proc_modules():
    """Every module of procs in the test suite and the examples."""
    files = sorted(TESTS.glob("procs_*.py")) + sorted((ROOT / "examples").glob("*.py"))
    return [importlib.import_module(f.stem) for f in files]


def _all_procs():
    found = []
    for module in _proc_modules():
        for name, value in sorted(module_procs(module).items()):
            if value.name() == name:
                found.append(pytest.param(module, value, id=f"{module.__name__}.{name}"))
    return found


def _modes(p):
    return [s.loop_mode for s in walk_stmts(p._loopir_proc.body) if isinstance(s, LoopIR.For)]


@pytest.mark.parametrize("module, p", _all_procs())
def test_print_then_parse_gives_an_equal_proc(module, p):
    text = str(p)
    again = sl.parse_source(text, func_globals={**default_namespace(), **vars(module)})
    assert ir_equal(p._loopir_proc, again._loopir_proc), text
    assert str(again) == text


def test_round_trip_finds_the_example_and_test_programs():
    ids = {param.id for param in _all_procs()}
    assert {"procs_frontend.barriers_everywhere", "reverse_tiles.reverse_tiles"} <= ids


def test_loop_modes_and_blocks_are_attached():
    modes = _modes(P.units_and_blocks)
    ctx = modes[0].ctx
    assert isinstance(ctx, CudaDeviceFunction) and (ctx.blockDim, ctx.clusterDim, ctx.blocks_per_sm) == (256, 2, 2)
    assert modes[1:3] == [CudaTasks(), CudaTasks()]
    assert modes[3] == CudaThreads(cuda_warpgroup)
    assert modes[4] == WithBlock(CudaWarps(3, 4))
    assert CudaThreads(16 * cuda_thread) in modes
    assert CudaThreads(P.my_unit) in modes


def test_warp_config_and_named_warps():
    ctx = _modes(P.barriers_everywhere)[0].ctx
    assert [w.name for w in ctx.warp_config] == ["producer", "consumer"]
    assert ctx.threads_per_cta == 160 and ctx.warp_range("consumer") == (1, 5)
    assert WithBlock(CudaWarps(0, 1, name="consumer")) in _modes(P.barriers_everywhere)


def test_sync_statements_carry_their_specs():
    specs = [sync_spec_of(s) for s in walk_stmts(P.barriers_everywhere._loopir_proc.body)]
    specs = [s for s in specs if s is not None]
    assert [s.kind for s in specs] == ["ReverseAwait", "Arrive", "Await", "Arrive", "Await", "ReverseArrive", "Fence"]
    assert specs[0].N == ~1 and specs[0].barrier_mem is CudaMbarrier and specs[0].barrier_ndim == 0
    assert specs[3].first_tl is Sm80_cp_async and specs[3].barrier_mem is CudaCommitGroup
    assert specs[3].barrier_ndim == 2
    assert specs[6].second_tl is cuda_generic_and_async_proxy


def test_plain_exo_procs_print_exactly_as_exo_prints_them():
    for p in (P.plain_scale, P.calls_plain_exo):
        assert str(p) == EXO_PROC_STR(p._loopir_proc)
    assert "par(0, 4)" in str(P.calls_plain_exo)


def test_procs_defined_in_a_function_scope_see_local_names(tmp_path):
    def make(k):
        unit = k * cuda_thread

        @sl.proc
        def local(x: f32[64] @ CudaGmemLinear):
            with CudaDeviceFunction(blockDim=64):
                for task in cuda_tasks(0, 1):
                    for t in cuda_threads(0, 32, unit=unit):
                        x[t] = 0.0

        return local

    assert "unit=2 * cuda_thread" in str(make(2))


def _gpu_vec_add():
    p = divide_loop(P_seq_add, "i", 128, ["task", "tid"], perfect=True)
    p = set_loop_mode(p, "task", cuda_tasks)
    p = set_loop_mode(p, "tid", cuda_threads(unit=cuda_thread))
    return wrap_with_context(p, p.find_loop("task"), CudaDeviceFunction(blockDim=128))


@sl.proc
def P_seq_add(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    for i in seq(0, n):
        y[i] += x[i]


def test_scheduling_a_sequential_loop_into_a_kernel():
    p = _gpu_vec_add()
    assert ir_equal(p._loopir_proc.body, vec_add._loopir_proc.body) is False  # index order differs
    assert _modes(p) == [WithBlock(CudaDeviceFunction(blockDim=128)), CudaTasks(), CudaThreads(cuda_thread)]
    assert "for tid in cuda_threads(0, 128):" in str(p)


@sl.proc
def two_phase(x: f32[4, 64] @ CudaGmemLinear, y: f32[4, 2] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 4):
            for a in cuda_threads(0, 64):
                x[task, a] = 0.0
            for b in cuda_threads(0, 2, unit=cuda_warp):
                y[task, b] = 1.0


def test_exo_ops_keep_annotations():
    p = _gpu_vec_add()
    p = divide_loop(p, "tid", 32, ["w", "lane"], perfect=True)  # each iteration stays on its thread: w over warps
    assert _modes(p)[2:] == [CudaThreads(cuda_warp), CudaThreads(cuda_thread)]
    p = set_loop_mode(p, "lane", "seq")
    p = reorder_loops(p, "w lane")  # a seq loop may go outside a thread loop (a lane loop outside w is refused)
    assert _modes(p)[2:] == [LoopIR.Seq(), CudaThreads(cuda_warp)]
    p = simplify(p)
    assert len(_modes(p)) == 4

    q = reverse_tiles
    q = cut_loop(q, q.find_loop("tid"), 128)
    assert _modes(q).count(CudaThreads(cuda_thread)) == 3
    r = fission(two_phase, two_phase.find_loop("a").after())
    assert _modes(r) == [WithBlock(CudaDeviceFunction(blockDim=64)), CudaTasks(), CudaThreads(cuda_thread),
                         CudaTasks(), CudaThreads(cuda_warp)]
    q = expand_dim(reverse_tiles, "tile", 2, "0")
    assert "tile: f32[2, 256] @ CudaSmemLinear" in str(q)


def test_stage_mem_gives_seq_loops_that_set_loop_mode_fixes():
    p = simplify(stage_mem(vec_add, vec_add.find_loop("tid"), "x[128 * task:128 * task + 128]", "x_smem"))
    p = set_memory(p, "x_smem", CudaSmemLinear)
    copy_loop = p.find_loop("i0")
    assert isinstance(copy_loop._impl._node.loop_mode, LoopIR.Seq)
    p = set_loop_mode(p, copy_loop, cuda_threads)
    assert "for i0 in cuda_threads(0, 128):" in str(p)


def test_lift_alloc_and_replace_keep_modes():
    p = lift_alloc(P.mma_tile, "A_rmem")
    assert CudaThreads(cuda_warp) in _modes(p)

    @sl.proc
    def uses_zero(D: f32[16, 8] @ CudaGmemLinear):
        with CudaDeviceFunction(blockDim=32):
            for task in cuda_tasks(0, 1):
                for w in cuda_threads(0, 1, unit=cuda_warp):
                    acc: f32[16, 8] @ Sm80_RmemMatrixD
                    for m in seq(0, 16):
                        for n in seq(0, 8):
                            acc[m, n] = 0.0

    r = replace(uses_zero, uses_zero.find_loop("m"), Sm80_mma_zero_d_tf32)
    assert "Sm80_mma_zero_d_tf32(acc[0:16, 0:8])" in str(r) and CudaThreads(cuda_warp) in _modes(r)


def test_gpu_ops_insert_sync_statements_that_print_and_reparse():
    p = simplify(divide_loop(_gpu_vec_add(), "tid", 32, ["w", "lane"], perfect=True))
    p = insert_barrier_alloc(p, p.find_loop("w").before(), "bar", [4], CudaMbarrier)
    p = insert_arrive(p, p.find_loop("lane").before(), cuda_in_order, "bar[w]", 1)
    p = insert_await(p, p.find_loop("lane").after(), "bar[w]", cuda_in_order, ~0)
    p = insert_fence(p, p.find_loop("w").after(), cuda_in_order, cuda_in_order)
    text = str(p)
    for line in ("bar: barrier[4] @ CudaMbarrier", "Arrive(cuda_in_order, 1) >> bar[w]",
                 "Await(bar[w], cuda_in_order, ~0)", "Fence(cuda_in_order, cuda_in_order)"):
        assert line in text
    again = sl.parse_source(text)
    assert ir_equal(p._loopir_proc, again._loopir_proc)


@sl.proc
def two_barriers(x: f32[32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            bar: barrier @ CudaMbarrier
            other: barrier @ CudaMbarrier
            Arrive(cuda_in_order, 1) >> bar
            Await(bar, cuda_in_order, ~0)
            Arrive(cuda_in_order, 1) >> other
            Await(bar, cuda_in_order, ~0)


def test_syncs_on_one_barrier_are_not_reordered():
    p = two_barriers
    stmts = p.find_loop("task").body()
    with pytest.raises(SchedulingError):
        reorder_stmts(p, stmts[2].expand(0, 1))  # Arrive >> bar, Await(bar)
    swapped = reorder_stmts(p, stmts[4].expand(0, 1))  # Arrive >> other, Await(bar): independent
    assert str(swapped).index("Await(bar") < str(swapped).index(">> other")


def test_find_blocks_by_context_type():
    assert len(find_blocks(P.barriers_everywhere, CudaWarps)) == 3
    assert len(find_blocks(P.barriers_everywhere, CudaAsync)) == 1
    (dev,) = find_blocks(reverse_tiles, CudaDeviceFunction)
    assert isinstance(dev._impl._node.loop_mode.ctx, CudaDeviceFunction)


def test_cursors_print_exo_gpu_syntax_with_exo_markers():
    p = reverse_tiles
    node = str(p.find_loop("tid"))
    assert "for tid in cuda_threads(0, 256):  # <-- NODE" in node
    assert "with CudaDeviceFunction(blockDim=256):" in node
    block = str(p.find_loop("task").body()[1:3]).splitlines()
    start = block.index("            # BLOCK START")
    assert block[start + 3].strip() == "Fence(cuda_in_order, cuda_in_order)"
    assert block[start + 4].strip() == "# BLOCK END"
    assert "[GAP - After]" in str(p.find_loop("tid").after())
    c = P.plain_scale.find_loop("i")
    assert str(c) == EXO_PRINT_CURSOR(c._impl)


def test_procs_defined_in_ipython_cells(tmp_path):
    """Jupyter runs cells through IPython, which keeps cell source where inspect finds it."""
    interactive = pytest.importorskip("IPython.core.interactiveshell")
    shell = interactive.InteractiveShell.instance()
    cell = (
        "from __future__ import annotations\n"
        "from spork_lab import proc\n"
        "from spork_lab.platforms.cuda import *\n"
        "@proc\n"
        "def in_cell(x: f32[32] @ CudaGmemLinear):\n"
        "    with CudaDeviceFunction(blockDim=32):\n"
        "        for task in cuda_tasks(0, 1):\n"
        "            for t in cuda_threads(0, 32):\n"
        "                x[t] = 0.0\n"
    )
    result = shell.run_cell(cell)
    assert result.success, result.error_in_exec
    assert "for t in cuda_threads(0, 32):" in str(shell.user_ns["in_cell"])
    bad = shell.run_cell(cell.replace("cuda_threads(0, 32)", "cuda_thread(0, 32)"), store_history=True)
    assert isinstance(bad.error_in_exec, sl.SporkSyntaxError)
    assert bad.error_in_exec.lineno == 8
    assert str(bad.error_in_exec).startswith(f"Cell In[{bad.execution_count}]:8: unknown loop mode 'cuda_thread'")
