"""Scheduling errors a user can act on: the user's line, the op, and a "did you mean" over what exists."""

from __future__ import annotations

import inspect
import re

import pytest
from conftest import ir_equal
from exo.rewrite.LoopIR_scheduling import SchedulingError
from exo.stdlib import scheduling as exo_ops

import spork_lab as sl
from spork_lab import proc
from spork_lab.errors import SporkSchedulingError
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *


@proc
def add_rows(n: size, x: f32[n, 16] @ CudaGmemLinear, y: f32[n, 16] @ CudaGmemLinear):
    assert n % 4 == 0
    for row in seq(0, n):
        for col in seq(0, 16):
            y[row, col] += x[row, col]


def _raises_here(call, *fragments: str) -> SporkSchedulingError:
    """Run `call` (a lambda written on the caller's line); its error must name that line and contain `fragments`."""
    line = inspect.currentframe().f_back.f_lineno
    with pytest.raises(SporkSchedulingError) as e:
        call()
    assert isinstance(e.value, SchedulingError)  # `except SchedulingError` still catches it
    assert (e.value.filename, e.value.lineno) == (__file__, line), str(e.value)
    for f in fragments:
        assert f in e.value.message, e.value.message
    assert "<<<unknown directive>>>" not in str(e.value) and "find:" not in str(e.value)
    return e.value


def test_a_loop_pattern_that_matches_nothing_lists_the_loops():
    _raises_here(lambda: divide_loop(add_rows, "rows", 4, ["a", "b"]),
                 "divide_loop: no loop matches 'rows'", "did you mean 'row'?", "its loops are: row, col")


@pytest.mark.parametrize("find, fragments", [
    (lambda: add_rows.find_loop("rows"), ["find_loop: no loop matches 'rows'", "did you mean 'row'?"]),
    (lambda: add_rows.find_loop("col #1"), ["no loop matches 'col #1'", "did you mean 'col'?"]),
    (lambda: add_rows.find("y[_] = _"), ["find: no statement matches 'y[_] = _'", "did you mean 'y[_] += _'?"]),
    (lambda: add_rows.find_alloc_or_arg("z"), ["find_alloc_or_arg: no buffer named 'z'", "its buffers are: x, y"]),
    (lambda: add_rows.find("for row in"), ["exo cannot parse the pattern 'for row in'"]),
])  # fmt: skip
def test_finding_what_a_proc_lacks_is_reported_like_the_ops(find, fragments):
    """exo's proc.find* raised `find: failed to find matches` (or a SyntaxError for a pattern it cannot parse)
    from its own frames."""
    with pytest.raises(SporkSchedulingError) as e:
        find()
    assert (e.value.filename, e.value.lineno) == (__file__, find.__code__.co_firstlineno)
    assert all(f in e.value.message for f in fragments), e.value.message
    assert add_rows.find_loop("col").name() == "col"


def test_reorder_of_loops_that_are_not_directly_nested_lists_the_pairs():
    _raises_here(lambda: reorder_loops(add_rows, "col row"), "no loop 'row' directly inside a loop 'col'",
                 "did you mean 'row col'?")


def test_a_statement_pattern_that_matches_nothing_lists_the_statements():
    _raises_here(lambda: fold_into_reduce(add_rows, "y[_] = _"),
                 "no statement matches 'y[_] = _'", "did you mean 'y[_] += _'?")


def test_an_unknown_buffer_lists_the_buffers():
    _raises_here(lambda: set_memory(add_rows, "z", CudaSmemLinear), "no buffer named 'z'", "its buffers are: x, y")


def test_stage_mem_of_a_buffer_that_does_not_exist_lists_the_buffers():
    # exo asserts inside the op that the buffer exists: an AssertionError with exo's frames, before
    _raises_here(lambda: stage_mem(add_rows, "for col in _: _", "yy[row, 0:16]", "y_s"),
                 "stage_mem: no buffer named 'yy'", "did you mean 'y'?", "its buffers are: x, y")


def test_a_cursor_of_another_proc_is_named_as_such():
    other = rename(add_rows, "other")
    _raises_here(lambda: divide_loop(add_rows, other.find_loop("row"), 4, ["a", "b"]),
                 "divide_loop: a cursor argument is a cursor of another proc")


def test_find_blocks_takes_a_block_class():
    _raises_here(lambda: find_blocks(add_rows, "CudaAsync"), "find_blocks: ctx_type is a block class", "not 'CudaAsync'")


def test_exo_errors_raised_outside_a_proc_method_lose_the_unknown_directive_prefix():
    _raises_here(lambda: divide_loop(add_rows, "col", 7, ["a", "b"], perfect=True), "divide_loop: cannot perfectly divide")


def test_a_pattern_exo_cannot_parse_is_named():
    """Was "exo failed inside this op (SyntaxError ...), a limit of exo's implementation"."""
    _raises_here(lambda: divide_loop(add_rows, "for row in", 4, ["a", "b"]),
                 "divide_loop: exo cannot parse the pattern 'for row in' (invalid syntax)")


def test_argument_type_errors_from_exo_become_errors_at_the_users_line():
    _raises_here(lambda: divide_loop(add_rows, "col", 4, "ab"), "expected a list or tuple")


def test_a_missing_or_unknown_argument_names_the_ops_parameters():
    """Was a TypeError from inside exo's and inspect's frames."""
    _raises_here(lambda: set_loop_mode(add_rows, "col"), "set_loop_mode: missing a required argument: 'mode'; "
                 "it takes (proc, loop, mode)")
    _raises_here(lambda: divide_loop(add_rows, "col", 4, ["a", "b"], perfct=True),
                 "divide_loop: got an unexpected keyword argument 'perfct'", "perfect=False")


def test_an_unknown_name_in_an_expression_argument_is_the_users_not_a_limit_of_exo():
    _raises_here(lambda: stage_mem(add_rows, add_rows.find_loop("col"), "x[roww, 0:16]", "x_s"),
                 "stage_mem: unknown name 'roww' in an expression argument")


def test_set_memory_refuses_barriers():
    """A barrier moved to a data memory became a byte array that its sync statements no longer found ("bar ...
    not allocated", at a later line)."""
    from procs_sync import ring_copy

    _raises_here(lambda: set_memory(ring_copy, "bar", CudaSmemLinear), "set_memory: bar is a barrier @ CudaMbarrier")
    _raises_here(lambda: set_memory(add_rows, "x", CudaMbarrier), "set_memory: CudaMbarrier holds barriers, not data")
    _raises_here(lambda: set_memory(add_rows, "xx", CudaSmemLinear), "set_memory", "'xx'")  # exo's own error, as before


def test_an_instr_template_is_found_by_the_name_the_printer_writes():
    """`print(p)` shows `Sm80_cp_async_f32(..., size=16)`; exo knows only the instance `Sm80_cp_async_f32_16`."""
    from cp_async_double_buffer import cp_async_double_buffer as p

    first = p.find("Sm80_cp_async_f32(_)")
    assert first._impl._node is p.find("Sm80_cp_async_f32_4(_)")._impl._node
    assert len(p.find("Sm80_cp_async_f32(_)", many=True)) == 2


def test_a_tma_load_is_found_by_its_instr_name_after_complete_on():
    """complete_on turns `Sm90_copy_...(...)` into a call of a generated wrapper (`..._128x32__trail_CudaMbarrier_1`)
    that the printer still shows as `Sm90_copy_...(...) >> ring[cta]`: p.find matched neither the template's nor the
    instance's name any more, and the "did you mean" list offered the wrapper's."""
    import sm90_gemm as g

    cfg = g.Config("tf32")
    p = g.schedule(g.naive(cfg), cfg, upto=g.STEPS.index(g.use_tma) + 1)
    instance = g.Sm90_copy_tensor_to_smem_swizzled_2f32.instantiate(box=(128, 32)).name()
    wrapper = p.find(f"{instance}(_)")._impl._node
    assert "__trail_" in str(wrapper.f.name)
    assert p.find("Sm90_copy_tensor_to_smem_swizzled_2f32(_)")._impl._node is wrapper
    with pytest.raises(SporkSchedulingError) as e:
        p.find("Sm90_copy_tensor_to_smem_swizzled_2f33(_)")
    assert "did you mean 'Sm90_copy_tensor_to_smem_swizzled_2f32(_)'" in str(e.value) and "__trail_" not in str(e.value)


@proc
def three_buffers(n: size, x: f32[n] @ DRAM, y: f32[n] @ DRAM):
    assert n >= 8
    a: f32[n] @ DRAM
    for i in seq(0, n):
        a[i] = x[i]
    c: f32[n] @ DRAM
    for i in seq(0, n):
        c[i] = a[i] * 2.0
    b: f32[n] @ DRAM
    for i in seq(0, n):
        b[i] = c[i] + 1.0
    h: f32[8] @ DRAM
    for i in seq(0, 8):
        h[i] = b[i]
    for i in seq(0, n):
        y[i] = b[i]


def test_reuse_buffer_reuses_a_dead_buffer_of_the_same_type():
    """exo's reuse_buffer compared the allocations' types with their source positions: `a: f32[n]` and `b: f32[n]`
    were different types to it, and every tensor was refused by an assertion without a message. Reusing a buffer
    allocated after the replaced one renamed uses before its allocation (found at another line by the next pass)."""
    import numpy as np

    p = reuse_buffer(three_buffers, "a", "b")  # a is dead once c is computed
    assert "b: f32" not in str(p) and "a[i] = c[i] + 1.0" in str(p)
    x = np.random.default_rng().standard_normal(16).astype(np.float32)
    want = sl.run_cpu(three_buffers, n=16, x=x, y=np.zeros(16, np.float32))["y"]
    np.testing.assert_array_equal(sl.run_cpu(p, n=16, x=x, y=np.zeros(16, np.float32))["y"], want)
    _raises_here(lambda: reuse_buffer(three_buffers, "a", "c"), "The variable a can potentially be used after")
    _raises_here(lambda: reuse_buffer(three_buffers, "b", "a"), "b can be reused for a only if it is allocated before a")
    _raises_here(lambda: reuse_buffer(three_buffers, "a", "h"), "h is f32[8] and a is f32[n]: a buffer is reused only")


def test_a_block_argument_given_an_expression_says_what_a_block_is():
    _raises_here(lambda: wrap_with_context(add_rows, "row", CudaDeviceFunction(blockDim=32)),
                 "wrap_with_context: block takes a block of statements, not a read cursor: a loop (p.find_loop(...))")


def test_a_block_made_with_wrong_arguments_names_the_users_line():
    """A block built outside a proc (for wrap_with_context) raised a plain TypeError from inside spork_lab (audit G)."""
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(sl.SporkTypeError) as e:
        CudaAsync(Sm80_cp_async)
    assert (e.value.filename, e.value.lineno) == (__file__, line)
    assert e.value.message == ("CudaAsync takes an instr-tl, and Sm80_cp_async is a sync-tl: write "
                               "CudaAsync(Sm80_cp_async_instr)")


def test_a_cursor_of_the_wrong_kind_says_what_to_pass():
    """Were exo's "expected a GapCursor" (naming neither what was given nor how to get a gap) and "expected a
    ForCursor, not <class 'exo.API_cursors.ReduceCursor'>"."""
    _raises_here(lambda: insert_fence(add_rows, add_rows.find_loop("col"), cuda_in_order, cuda_in_order),
                 "insert_fence: gap takes a gap between statements, not a for cursor: a statement's cursor .before() "
                 "or .after(), e.g. p.find_loop(\"i\").before()")
    _raises_here(lambda: set_loop_mode(add_rows, add_rows.find("y[_] += _"), cuda_threads),
                 "set_loop_mode: loop takes a loop, not a reduce cursor: p.find_loop(\"i\"), or a loop's name \"i\"")
    _raises_here(lambda: complete_on(add_rows, add_rows.find("y[_] += _"), "bar"),
                 "complete_on: call takes the cursor of an instr's call, not a reduce cursor: p.find(\"name(_)\")")


def test_our_gpu_ops_report_the_same_way():
    _raises_here(lambda: set_loop_mode(add_rows, "cols", cuda_threads), "set_loop_mode: no loop matches 'cols'",
                 "did you mean 'col'?")


def test_successful_ops_are_exos():
    ours = divide_loop(add_rows, "row", 4, ["ro", "ri"], perfect=True)
    theirs = exo_ops.divide_loop(add_rows, "row", 4, ["ro", "ri"], perfect=True)
    assert ir_equal(ours.INTERNAL_proc().body, theirs.INTERNAL_proc().body)
    assert divide_loop.__name__ == "divide_loop" and "Divide a loop" in (divide_loop.__doc__ or exo_ops.divide_loop.__doc__)


def test_make_tensor_map_errors():
    _raises_here(lambda: make_tensor_map(add_rows, "z", "z_tm", 128, (4, 16)), "no tensor argument named 'z'",
                 "the proc's tensors are x, y")
    _raises_here(lambda: make_tensor_map(add_rows, "x", "x_tm", 100, (4, 16)), "swizzle must be one of 0, 32, 64, 128")
    _raises_here(lambda: make_tensor_map(add_rows, "x", "y", 128, (4, 16)), "'y' is already a name in add_rows")
    _raises_here(lambda: make_tensor_map(add_rows, "x", "x_tm", 128, (4,)), "x has 2 dimensions, the box [4] has 1")


def test_a_barrier_takes_a_new_name():
    """A barrier `x` beside the argument `x` printed as `x_1`, and "x" in a later insert_arrive named the argument.
    A barrier named like a loop's iterator was taken: the user's loop `row` printed as `row_1` (audit G)."""
    _raises_here(lambda: insert_barrier_alloc(add_rows, add_rows.find_loop("row").before(), "x", [], CudaMbarrier),
                 "insert_barrier_alloc: 'x' is already a name in add_rows")
    _raises_here(lambda: insert_barrier_alloc(add_rows, add_rows.find_loop("row").before(), "row", [], CudaMbarrier),
                 "insert_barrier_alloc: 'row' is already a name in add_rows")


def test_make_tensor_map_renames_the_reads():
    text = str(make_tensor_map(add_rows, "x", "x_tm", 128, (4, 16)))
    assert "x_tm = x[0:n, 0:16] @ Sm90_tensorMap(128, 4, 16)" in text and "y[row, col] += x_tm[row, col]" in text


from spork_lab.platforms.Sm80 import Sm80_cp_async_f32, Sm80_cp_async_instr  # noqa: E402
from spork_lab.platforms.Sm90 import Sm90_copy_tensor_to_smem_linear_2f32, Sm90_tensorMap  # noqa: E402


@proc
def one_copy(src: f32[4] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[4] @ CudaSmemLinear
            bar: barrier @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[0:4], src[0:4], size=16)


def test_complete_on_errors():
    copy = one_copy.find("Sm80_cp_async_f32_16(_)")
    _raises_here(lambda: complete_on(one_copy, copy, "nope"), "'nope' is not a barrier of this proc")
    _raises_here(lambda: complete_on(one_copy, copy, "bar[0]"), "barrier 'bar' has 0 indices, got 1")
    _raises_here(lambda: complete_on(one_copy, copy, "bar"), "does not complete on a barrier",
                 "only TMA loads (Sm90_copy_tensor_to_smem_*, Sm90_multicast_copy_tensor_to_smem_*) take `>> bar`")


@proc
def one_tma_load(src: f32[8, 4] @ CudaGmemLinear):
    src_tm = src[:, :] @ Sm90_tensorMap(0, 8, 4)
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            buf: f32[8, 4] @ CudaSmemLinear
            ring: barrier[2] @ CudaMbarrier
            for t in cuda_threads(0, 1):
                with CudaAsync(tma_to_smem_async_instr):
                    Sm90_copy_tensor_to_smem_linear_2f32(buf, src_tm[0:8, :], box=(8, 4))


def test_complete_on_refuses_a_constant_barrier_index_past_the_array():
    """`complete_on(p, copy, "ring[5]")` on a barrier[2] was accepted, where insert_arrive refuses it (audit 33, P)."""
    copy = one_tma_load.find("Sm90_copy_tensor_to_smem_linear_2f32_8x4(_)")
    _raises_here(lambda: complete_on(one_tma_load, copy, "ring[5]"), "index 0 of ring[5] is 5, outside ring: barrier[2]")
    assert ">> ring[1]" in str(complete_on(one_tma_load, copy, "ring[1]"))


@proc
def arrive_to_insert(x: f32[128] @ CudaGmemLinear, y: f32[128] @ CudaGmemLinear):
    with CudaDeviceFunction(clusterDim=2, blockDim=32):
        for task in cuda_tasks(0, 1):
            ring: barrier[2] @ CudaMbarrier
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                for t in cuda_threads(0, 32):
                    y[64 * cta + t] = x[64 * cta + t]
            for cta in cuda_threads(0, 2, unit=cuda_cta_in_cluster):
                Await(ring[cta], cuda_in_order, ~0)
                for t in cuda_threads(0, 32):
                    x[64 * cta + 32 + t] = y[64 * (1 - cta) + t]
            Fence(cuda_in_order, cuda_in_order)


def test_insert_arrive_multicasts_to_a_whole_dimension():
    """insert_arrive(..., "ring[:]") was refused ("ring[:]" parsed as an index), though complete_on and the front
    end take a multicast barrier: it builds what the front end parses from `Arrive(cuda_in_order, 1) >> ring[:]`."""
    from procs_sync import remote_arrive_hands_over_global

    from spork_lab.core.sync_stmts import sync_spec_of

    p = insert_arrive(arrive_to_insert, arrive_to_insert.find_loop("t").after(), cuda_in_order, "ring[:]")
    assert ir_equal(p._loopir_proc.body, remote_arrive_hands_over_global._loopir_proc.body)
    arrive, parsed = (sync_spec_of(q.find("Arrive(_)")._impl._node) for q in (p, remote_arrive_hands_over_global))
    assert arrive == parsed and arrive.window_shape == (2,)


def test_single_thread_refuses_a_name_in_use_where_the_block_is():
    """A loop named like an enclosing one printed as `col_1`, and the next sl.analyze refused `col` at the new
    loop's line: "iterator 'col' is already used by an enclosing cuda_threads loop"."""
    _raises_here(lambda: single_thread(add_rows, add_rows.find("y[_] += _").as_block(), "col"),
                 "single_thread: 'col' is already a name in add_rows (an argument, a buffer or a loop's iterator): "
                 "give the loop another")
    _raises_here(lambda: single_thread(add_rows, add_rows.find("y[_] += _").as_block(), "x"), "'x' is already a name")


def test_single_thread_wraps_in_one_thread_loop():
    text = str(single_thread(add_rows, add_rows.find_loop("col").expand(0, 0), "t"))
    assert "for t in cuda_threads(0, 1):\n            for col in seq(0, 16):" in text


def test_a_failure_inside_exos_solver_is_an_error_at_the_users_line():
    """cut_loop at 0 of the Sm80 GEMM's K-tile loop breaks inside exo (z3 raises Z3Exception while exo checks
    the cut, on the GEMM without its first sync; found by test_schedule_fuzz): the user gets a SchedulingError at their line, not z3's traceback."""
    import sm80_gemm

    from spork_lab.sync.mutants import without_syncs

    p = without_syncs(sm80_gemm.sm80_gemm_f16, [0])  # the fuzzer's start: the GEMM without its first sync
    with pytest.raises(SporkSchedulingError) as info:
        cut_loop(p, p.find_loop("kt #2"), 0)  # the third kt loop
    assert "exo failed inside this op" in info.value.message and "Z3Exception" in info.value.message
    assert info.value.filename == __file__


def _ring():
    from conftest import runnable_examples

    runnable_examples()  # puts examples/ on sys.path
    from mbarrier_ring_tasks import mbarrier_ring_tasks

    return mbarrier_ring_tasks


@pytest.mark.parametrize("pattern, count, first", [
    ("Fence(cuda_in_order, cuda_in_order)", 1, "Fence(cuda_in_order, cuda_in_order)"),
    ("Fence(_)", 1, "Fence(cuda_in_order, cuda_in_order)"),
    ("Await(bar[_], _, ~0)", 1, "Await(bar[it % 2], cuda_in_order, ~0)"),
    ("Arrive(_)", 1, "Arrive(cuda_in_order, 1) >> bar[it % 2]"),  # not ReverseArrive: the text's start counts
    ("ReverseArrive(cuda_in_order, 1) >> bar[it % 2]", 1, "ReverseArrive(cuda_in_order, 1) >> bar[it % 2]"),
    ("Await(_) #0", 1, "Await(bar[it % 2], cuda_in_order, ~0)"),
])  # fmt: skip
def test_sync_statements_are_found_by_the_text_the_user_reads(pattern, count, first):
    """exo matches a call by its proc's name, and a sync statement calls a generated proc (`spork_Fence_...`): find
    takes the statement's own text instead, `_` for any part, and so do the ops given such a pattern."""
    from spork_lab.lang.printer import print_stmt

    ring = _ring()
    found = ring.find(pattern, many=True)
    assert len(found) == count and " ".join(print_stmt(found[0]._impl._node).split()) == first
    moved = reorder_stmts(ring, ring.find("Fence(_)").expand(1, 0))  # an op given the cursor: exo's own checks run
    assert "Fence(cuda_in_order, cuda_in_order)" in str(moved)


def test_a_sync_pattern_that_matches_nothing_lists_the_sync_statements():
    ring = _ring()
    with pytest.raises(SporkSchedulingError) as e:
        ring.find("Fence(cuda_in_order, wgmma_fence_2)")
    assert (e.value.filename, e.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)
    assert "find: no sync statement matches 'Fence(cuda_in_order, wgmma_fence_2)'" in e.value.message
    assert "did you mean 'Fence(cuda_in_order, cuda_in_order)'?" in e.value.message
    assert "its sync statements are: ReverseAwait(bar[it % 2], cuda_in_order, ~1), " in e.value.message


@proc
def add_warps(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for t in cuda_threads(0, 32):
                    y[task * 128 + w * 32 + t] += x[task * 128 + w * 32 + t]


def test_moving_a_loop_out_of_the_nest_the_analysis_needs_is_refused_at_the_call():
    """exo accepted it, and the next sl.analyze (or sync_check, or compile) named the device function's line."""
    _raises_here(lambda: reorder_loops(add_warps, "task w"), "reorder_loops: this moves `for w in cuda_threads(0, 4, "
                 "unit=cuda_warp):` out of `for task in cuda_tasks(0, n / 128):`", "must be a nest of cuda_tasks loops")
    _raises_here(lambda: lift_scope(add_warps, "w"), "lift_scope: this moves `for w in")
    _raises_here(lambda: reorder_loops(add_warps, "w t"), "this moves `for t in cuda_threads(0, 32):` out of `for w",
                 "needs 4 x 32 = 128 threads > 1 threads")
    assert "for t in seq(0, 32):\n                for w in cuda_threads" in str(
        reorder_loops(set_loop_mode(add_warps, "t", "seq"), "w t"))  # a nest the analysis takes stays allowed


def test_a_proc_that_breaks_the_nest_before_the_move_is_left_to_the_analysis():
    """Mid-schedule, before the device function around them exists, CUDA loops break the analysis' rules anyway."""
    p = set_loop_mode(set_loop_mode(add_rows, "row", cuda_tasks), "col", cuda_threads)
    assert "for col in cuda_threads(0, 16):\n        for row in cuda_tasks(0, n):" in str(reorder_loops(p, "row col"))


@proc
def through_buffer(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 64 == 0
    buf: f32[2, 32] @ CudaSmemLinear
    for k in seq(0, 1):
        for it in seq(0, n / 32):
            for t in seq(0, 32):
                buf[it % 2, t] = src[it * 32 + t]
            for t in seq(0, 32):
                dst[it * 32 + t] = buf[it % 2, t]


def test_remove_loop_says_what_it_needs():
    """z3 cannot decide whether this loop is idempotent (it is): exo raised TypeError("unknown result from z3")."""
    line = through_buffer.find_loop("k")._impl._node.srcinfo.lineno
    _raises_here(lambda: remove_loop(through_buffer, "k"), "remove_loop: exo's solver (z3) could not decide whether "
                 f"`for k in seq(0, 1):` (line {line}) is idempotent", "needs a body that does not use the loop's "
                 "iterator", "remove_loop(..., unsafe_disable_check=True) skips the proof")
    # exo's "Cannot remove loop, t is not free in the loop body" meant the opposite
    _raises_here(lambda: remove_loop(through_buffer, "t"), "remove_loop: the loop's body uses its iterator t")


@proc
def add_in_warp(n: size, x: f32[n, 32] @ CudaGmemLinear, y: f32[n, 32] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, n):
            with CudaWarps(0, 1):
                for t in cuda_threads(0, 32):
                    y[task, t] += x[task, t]


def test_loop_ops_refuse_a_with_block():
    """A `with` block is a loop of one iteration to exo: cut_loop at 0 made a half that runs zero times, which every
    later pass printed, checked and compiled as a block that runs (the kernel added twice; audit E, S1)."""
    block = find_blocks(add_in_warp, CudaWarps)[0]
    _raises_here(lambda: cut_loop(add_in_warp, block, 0), "cut_loop: `with CudaWarps(0, 1):` is a block, not a loop")
    _raises_here(lambda: unroll_loop(add_in_warp, block), "unroll_loop: `with CudaWarps(0, 1):` is a block")
    cut = exo_ops.cut_loop(add_in_warp, block, 0)  # exo's own op, unguarded: the analysis refuses what it made
    with pytest.raises(sl.DeviceScopeError, match="became a loop from 0 to 0"):
        sl.sync_check(cut, n=2)


def test_a_constant_barrier_index_past_its_array_is_refused_at_the_insert():
    """insert_arrive(..., "bar[5]") on a barrier[2]: the generated code arrived past the array's end; only
    sync_check said so, without naming the barrier (audit E, S3)."""
    from procs_sync import mbarrier_per_thread_array as p

    gap = p.find_loop("t").before()
    _raises_here(lambda: insert_arrive(p, gap, cuda_in_order, "bar[64]"),
                 "insert_arrive: index 0 of bar[64] is 64, outside bar: barrier[64]")


def test_a_wrong_argument_names_its_parameter_and_value_once():
    """exo's "divide_loop: argument 2, 'div_const' to divide_loop: expected a positive integer" named the op twice
    and not the value given (session 38's workbench walkthrough)."""
    _raises_here(lambda: divide_loop(add_rows, "row", "4", ["ro", "ri"]),
                 "divide_loop: div_const (argument 2): expected a positive integer, not '4'")
    _raises_here(lambda: divide_loop(add_rows, "row", 4, "ro"),
                 "divide_loop: new_iters (argument 3): expected a list or tuple, not 'ro'")


def test_a_fission_exo_refuses_says_why():
    """exo said only "Cannot fission loop over it at <line>": a split between an Arrive and its Await reorders the
    sync statements of one barrier, which exo keeps in order; else what exo had to prove."""
    from procs_sync import mbar_split_barrier_2, split_barrier_copy

    body = mbar_split_barrier_2.find_loop("it").body()
    _raises_here(lambda: fission(mbar_split_barrier_2, body[1].after()), "Cannot fission loop over it at",
                 "Both halves synchronize on bar: exo keeps the order of sync statements on one barrier")
    one_buffer = split_barrier_copy(1)  # the second half reads buf, which the next iteration's first half refills
    _raises_here(lambda: fission(one_buffer, one_buffer.find_loop("it").body()[2].after()),
                 "exo could not prove that the statements after the gap, run after all iterations of those before it")


def test_an_arrive_count_other_than_one_is_refused_at_the_insert():
    """insert_arrive(..., N=0) was accepted, and the next sl.analyze refused `Arrive(..., 0)` at the line of the
    loop it was inserted after, not at the insert (audit G, 41)."""
    from procs_sync import mbarrier_per_thread_array as p

    gap = p.find_loop("t").before()
    for n in (0, 2, ~1, True, 1.0):
        _raises_here(lambda: insert_arrive(p, gap, cuda_in_order, "bar[0]", N=n), "insert_arrive: N (argument 4): ",
                     f"an Arrive's count N must be 1, got {n!r}")
    assert "Arrive(cuda_in_order, 1) >> bar[0]" in str(insert_arrive(p, gap, cuda_in_order, "bar[0]"))


def test_an_await_count_the_barrier_cannot_take_is_refused_at_the_insert():
    """insert_await(..., N) with an N its barrier's memory refuses (a count on an mbarrier, a lag on a commit group,
    a lag other than the barrier's other Awaits') was accepted, and the next sl.analyze refused the inserted
    Await at the line of the statement it was inserted beside, not at the insert."""
    from procs_sync import cp_async_double_buffer as cg_proc
    from procs_sync import mbarrier_per_thread_array as mbar_proc

    gap = mbar_proc.find_loop("t").after()
    _raises_here(lambda: insert_await(mbar_proc, gap, "bar[0]", cuda_in_order, 3), "takes N = ~lag, not 3")
    _raises_here(lambda: insert_await(mbar_proc, gap, "bar[0]", cuda_in_order, ~2),
                 "the Awaits on bar wait with N = ~0", "not ~2")
    sl.analyze(insert_await(mbar_proc, gap, "bar[0]", cuda_in_order, ~0))
    cg_gap = cg_proc.find_loop("task").body()[-1].before()
    _raises_here(lambda: insert_await(cg_proc, cg_gap, "cg", cuda_in_order, ~1), "needs N >= 0 (wait_group N)")
    sl.analyze(insert_await(cg_proc, cg_gap, "cg", cuda_in_order, 0))


def test_a_loop_mode_given_bounds_or_a_string_unit_says_what_it_takes():
    """Were Python's TypeError from LoopModeSyntax.__call__, at no line of the user's."""
    for make, message in [(lambda: cuda_threads(0, 4), "cuda_threads as a loop mode takes unit=..., not bounds"),
                          (lambda: cuda_threads(unit="cuda_warp"), "cuda_threads(unit=...) needs a collective unit")]:
        with pytest.raises(sl.SporkTypeError, match=re.escape(message)) as e:
            make()
        assert (e.value.filename, e.value.lineno) == (__file__, make.__code__.co_firstlineno)
    _raises_here(lambda: find_blocks("add_rows"), "find_blocks takes a proc (made with @proc), not str")


@pytest.mark.parametrize("pattern", [0, None, "", "  "])
def test_a_pattern_that_is_not_a_string_is_named(pattern):
    _raises_here(lambda: add_rows.find_loop(pattern), "find_loop takes a pattern string", repr(pattern))
    _raises_here(lambda: add_rows.find_alloc_or_arg(pattern), "find_alloc_or_arg takes a pattern string")


def test_find_checks_its_pattern_like_find_loop():
    _raises_here(lambda: add_rows.find(42), "find takes a pattern string", "got 42")


def test_find_loop_returns_loops_only():
    """exo's find_loop falls back to a plain find for what is not a loop name, and finds a `with` block by its
    internal iterator: the user got a statement, an expression or a block where they asked for a loop."""
    _raises_here(lambda: add_rows.find_loop("y[_] += _"), "find_loop: 'y[_] += _' found `y[row, col] += x[row, col]`",
                 "which is not a loop", "its loops are: row, col")
    _raises_here(lambda: add_rows.find_loop("row #x"), "'row #x' found an expression, which is not a loop")
    _raises_here(lambda: add_in_warp.find_loop("_with"), "`with CudaDeviceFunction(blockDim=64):` (line",
                 "is a block, not a loop: find blocks with find_blocks(p, CudaDeviceFunction)")
    _raises_here(lambda: add_in_warp.find_loop("_with #1"), "`with CudaWarps(0, 1):`", "find_blocks(p, CudaWarps)")
    assert [str(c._impl._node.iter) for c in add_in_warp.find_loop("t", many=True)] == ["t"]


def test_an_index_past_a_blocks_end_lists_the_block():
    _raises_here(lambda: add_rows.body()[5], "index 5 is past the end of a block of 1 statement(s): [0] `for row in")
    assert add_rows.body()[0] == add_rows.find_loop("row") and len(list(add_rows.body())) == 1


def test_forward_from_a_later_proc_says_which_way_forward_goes():
    later = divide_loop(add_rows, "row", 4, ["ro", "ri"], perfect=True)
    _raises_here(lambda: add_rows.forward(later.find_loop("ro")), "forward: the cursor is of a proc that is neither "
                 "this one nor one it was scheduled from", "forward moves cursors only from a proc to the procs")
    assert later.forward(add_rows.find_loop("col")) == later.find_loop("col")


def test_an_expression_cursor_prints_with_its_statement():
    text = str(add_rows.find("y[_] += _").rhs())
    assert text.splitlines()[0] == "# the expression `x[row, col]` of the statement marked below", text
    assert "y[row, col] += x[row, col]  # <-- NODE" in text, text


@proc
def copy_by_warps(n: size, x: f32[n, 128] @ CudaGmemLinear, y: f32[n, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n):
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for lane in cuda_threads(0, 32):
                    y[task, 32 * w + lane] = x[task, 32 * w + lane]
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for half in cuda_threads(0, 16):
                    y[task, 32 * w + half] = 0.0
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for k in seq(0, 32):
                    if k == 0:
                        for lane in cuda_threads(0, 32):
                            y[task, 32 * w + lane] += 1.0


def test_mult_loops_of_thread_loops_makes_the_loop_of_their_threads():
    """exo's product loop kept the outer loop's mode: `cuda_threads(0, 4 * 32, unit=cuda_warp)`, 128 warps, which
    the analysis then refused with a wrong claim ("needs a compile-time constant bound, not 4 * 32"; audit E, P6)."""
    fused = mult_loops(copy_by_warps, "w lane", "t")
    assert "for t in cuda_threads(0, 128):" in str(fused), str(fused)
    sl.sync_check(fused, n=2)
    _raises_here(lambda: mult_loops(copy_by_warps, copy_by_warps.find_loop("w #1"), "t"),
                 "mult_loops: `for w in cuda_threads(0, 4, unit=cuda_warp):` and `for half in cuda_threads(0, 16):`: "
                 "the outer loop's unit is not the inner loop's threads (16 x cuda_thread)")
    _raises_here(lambda: mult_loops(copy_by_warps, copy_by_warps.find_loop("w #2"), "t"), "are not both cuda_threads loops")


def test_divide_loop_of_a_thread_loop_keeps_each_iteration_on_its_threads():
    """exo gave both loops the divided loop's mode, `for a in cuda_threads(0, 4): for b in cuda_threads(0, 32)`,
    which the analysis refused at the original loop's line, naming the inner loop (audit H, E2). The outer unit is
    now the inner loop's threads; mult_loops joins the two back."""
    fused = mult_loops(copy_by_warps, "w lane", "t")
    divided = divide_loop(fused, "t", 32, ["w", "lane"], perfect=True)
    text = str(divided)
    assert "for w in cuda_threads(0, 4, unit=cuda_warp):\n                for lane in cuda_threads(0, 32):" in text, text
    sl.sync_check(divided, n=2)
    assert "for t in cuda_threads(0, 128):" in str(mult_loops(divided, "w lane", "t"))
    guarded = divide_loop(fused, "t", 48, ["a", "b"])  # not exact: ceil(128 / 48) = 3 outer iterations, guarded
    assert "for a in cuda_threads(0, 3, unit=48 * cuda_thread):" in str(guarded), str(guarded)
    with pytest.raises(sl.CollectiveError, match=r"needs 3 x 48 = 144 threads > 128 threads in the enclosing "
                       r"collective \(the whole CTA, blockDim=128: give the CudaDeviceFunction a larger blockDim"):
        sl.analyze(guarded)


def test_divide_loop_fixes_the_loop_it_made_not_a_namesake():
    """The outer loop's unit was fixed on the first loop of its name: after one branch of a specialize was divided
    into wo/wi, dividing the other left its wo with exo's unit, refused at the user's line ("128 threads > 32";
    audit of session 31)."""
    p = specialize(copy_by_warps, copy_by_warps.find_loop("w"), ["task % 2 == 0"])
    p = divide_loop(p, p.find_loop("w #0"), 2, ["wo", "wi"], perfect=True)
    p = divide_loop(p, p.find_loop("w"), 4, ["wo", "wi"], perfect=True)
    text = str(p)
    assert "for wo in cuda_threads(0, 2, unit=2 * cuda_warp):" in text and "for wo in cuda_threads(0, 1, unit=cuda_warpgroup):" in text, text
    assert sl.sync_check(p, n=2).ok


@proc
def reversed_rows(n: size, x: f32[n, 128] @ CudaGmemLinear, y: f32[n, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n):
            buf: f32[4, 32] @ CudaSmemLinear
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for l in cuda_threads(0, 32):
                    buf[w, l] = x[task, 32 * w + l]
            Fence(cuda_in_order, cuda_in_order)
            for w in cuda_threads(0, 4, unit=cuda_warp):
                for l in cuda_threads(0, 32):
                    y[task, 32 * w + l] = buf[3 - w, l]
            Fence(cuda_in_order, cuda_in_order)


@pytest.mark.parametrize("buffer", ["buf", "cursor"])
def test_mult_dim_leaves_the_proc_it_was_given_as_it_was(buffer):
    """exo 1.0's mult_dim rewrites the index lists of its input in place: the user's proc (and a schedule's or the
    workbench's earlier steps) came to read `buf[32 * w + l]` of `buf: f32[4, 32]`, which sync_check called out of
    bounds at a line that was right as written (audit of session 32)."""
    before = str(reversed_rows)
    p = mult_dim(reversed_rows, "buf" if buffer == "buf" else reversed_rows.find("buf : _"), 0, 1)
    assert str(reversed_rows) == before and sl.sync_check(reversed_rows, n=2).ok
    assert "buf[32 * (3 - w) + l]" in str(p) and sl.sync_check(p, n=2).ok


def test_mult_loops_fixes_the_loop_it_made_not_a_namesake():
    """The product loop was found by its name afterwards: after one branch of a specialize was fused into `t`,
    fusing the other fixed the first branch's `t` again and left its own with exo's `cuda_threads(0, 4 * 32,
    unit=cuda_warp)`, which the analysis refused (session 32)."""
    p = specialize(copy_by_warps, copy_by_warps.find_loop("w"), ["task % 2 == 0"])
    p = mult_loops(p, p.find_loop("w #0"), "t")
    p = mult_loops(p, p.find_loop("w"), "t")
    assert str(p).count("for t in cuda_threads(0, 128):") == 2, str(p)
    assert sl.sync_check(p, n=2).ok


def test_a_cursor_an_earlier_op_removed_and_an_instr_that_does_not_match_say_so():
    """Both said "exo failed inside this op (...), a limit of exo's implementation" (audit 33, P): a stale cursor
    (exo's InvalidCursorError) and replace's UnificationError are the user's to fix."""
    from cp_async_double_buffer import cp_async_double_buffer  # the example: its loop's bounds are constants
    from procs_pipeline import three_stages

    from spork_lab.platforms.Sm80 import Sm80_cp_async_f32

    loop = cp_async_double_buffer.find_loop("it")
    unrolled = unroll_loop(cp_async_double_buffer, loop)
    _raises_here(lambda: insert_fence(unrolled, loop.before(), cuda_in_order, cuda_in_order),
                 "a cursor argument points at a statement that an earlier op changed or removed",
                 "find it again in the proc that op returned")
    copy = Sm80_cp_async_f32.instantiate(size=4)
    _raises_here(lambda: replace(three_stages, three_stages.find_loop("t #1"), copy),
                 "the statements do not compute what the instr's body computes")
