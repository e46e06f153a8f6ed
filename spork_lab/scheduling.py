"""exo's scheduling operations plus the Exo-GPU ones: `from spork_lab.scheduling import *`.

Every operation exported here is exo's (or ours) wrapped so that a failure is
a `SporkSchedulingError` at the user's line that says what exists instead (see
`lang/sched_errors.py`); successful calls are exactly exo's.
"""

import functools as _functools
import types as _types

import exo.stdlib.scheduling as _exo_scheduling
from exo.API import Procedure as _Procedure
from exo.API_scheduling import AtomicSchedulingOp as _AtomicSchedulingOp
from exo.API_scheduling import ForCursorA as _ForCursorA
from exo.API_scheduling import NestedForCursorA as _NestedForCursorA
from exo.core.LoopIR import T as _T
from exo.core.LoopIR import LoopIR as _LoopIR
from exo.core.internal_cursors import forward_identity as _forward_identity
from exo.stdlib.scheduling import *  # noqa: F401,F403 -- the re-export is the point of this module

from .lang import gpu_ops as _gpu_ops
from .lang import pipeline as _pipeline
from .core.ir import constant_value as _constant_value
from .core.ir import own_index_lists as _own_index_lists
from .core.ir import unshared as _unshared_ir
from .core.loop_modes import CudaThreads as _CudaThreads
from .core.loop_modes import WithBlock as _WithBlock
from .core.sync_stmts import BarrierMemory as _BarrierMemory
from .errors import SporkSchedulingError as _SporkSchedulingError
from .lang.printer import head_text as _head_text
from .lang.sched_errors import explain, passed_through_exo, raised_in_exo, scope_error, user_frame


class _UserFacingOp(_AtomicSchedulingOp):
    """An exo scheduling op whose failures name the user's line and what the proc has."""

    def __call__(self, *args, **kwargs):
        try:
            given = self.sig.bind(*args, **kwargs).arguments
        except TypeError as e:  # exo's own bind would raise it from inside exo and inspect
            params = ", ".join(str(p.replace(annotation=p.empty)) for p in self.sig.parameters.values())
            raise _SporkSchedulingError(f"{self.__name__}: {e}; it takes ({params})", user_frame()) from None
        if self.__name__ == "set_memory":
            _check_not_a_barrier(given)
        self._check_loops_not_blocks(given)
        fused = _fused_thread_loop(given) if self.__name__ == "mult_loops" else None
        divided = _thread_loop_mode(given) if self.__name__ == "divide_loop" else None
        if self.__name__ == "mult_dim" and isinstance(given.get("proc"), _Procedure):  # it edits its input in place
            given["proc"] = _with_own_index_lists(given["proc"])
            args, kwargs = (), given
        if self.__name__ == "reuse_buffer" and self._prepared_reuse(given):
            args, kwargs = (), given
        try:
            result = _AtomicSchedulingOp.__call__(self, *args, **kwargs)
        except (SchedulingError, TypeError, ValueError, AssertionError, NotImplementedError) as e:  # noqa: F405
            if not isinstance(e, SchedulingError) and not raised_in_exo(e):  # noqa: F405
                raise  # a plain Python call error (wrong argument count): already at the user's line
            failure = e
        except Exception as e:  # noqa: BLE001 -- from a library exo calls (z3): explained, if exo called it
            if not passed_through_exo(e):
                raise
            failure = e
        else:
            if self.__name__ in _MOVES_OUT:
                self._check_nest(given, result)
            if divided is not None:
                result = _keep_threads(result, result.forward(divided[1]), divided[0])
            elif fused:
                count, mode, outer = fused
                result = _make_thread_loop(result, result.forward(outer), count, mode)
            return _unshared(result)
        proc = given.get("proc")
        raise explain(failure, self.__name__, proc if isinstance(proc, _Procedure) else None, user_frame(),
                      given).with_traceback(None) from None

    def _check_loops_not_blocks(self, given: dict) -> None:
        """A `with` block is a loop of one iteration to exo, and exo's loop ops take it: cut_loop made one that runs
        zero times, which every later pass printed, checked and compiled as a block that runs (audit E, S1)."""
        for name, arg_proc in zip(self.sig.parameters, self.arg_procs):
            if not isinstance(arg_proc, _ForCursorA) or name not in given:
                continue
            try:
                node = arg_proc(given[name], given)._impl._node
            except Exception:  # noqa: BLE001 -- no such loop: exo's own call says so
                continue
            if isinstance(node.loop_mode, _WithBlock):
                raise _SporkSchedulingError(f"{self.__name__}: `{_head_text(node)}` is a block, not a loop: "
                                            f"{self.__name__} works on loops (for ... in seq/cuda_threads/...)",
                                            user_frame()).with_traceback(None) from None

    def _prepared_reuse(self, given: dict) -> bool:
        """reuse_buffer's checks that exo lacks, and the type exo compares wrongly. exo renamed the replaced
        buffer's uses even where the reused one is allocated after it (uses before the allocation, found by the
        next pass at another line). And it asserts that the two allocations have equal types, comparing their
        dimensions with their source positions: `a: f32[16]` and `b: f32[16]` on two lines differ, so it refused
        every tensor with an assertion and no message; where the types read the same, the replaced allocation
        takes the reused one's type (True: `given` changed)."""
        try:
            buf, rep = (self.arg_procs[i](given[name], given) for i, name in ((1, "buf_cursor"), (2, "replace_cursor")))
            bnode, rnode = buf._impl._node, rep._impl._node
        except Exception:  # noqa: BLE001 -- no such buffer, or not a cursor: exo's own call says so
            return False
        scope, at = buf._impl._path[:-1], buf._impl._path[-1]
        later = rep._impl._path[: len(scope)] == scope and rep._impl._path[len(scope)] > at
        if not later:
            raise _SporkSchedulingError(f"reuse_buffer: {bnode.name} can be reused for {rnode.name} only if it is "
                                        f"allocated before {rnode.name} (line {rnode.srcinfo.lineno}), in the same "
                                        "block or one around it", user_frame()).with_traceback(None) from None
        if str(bnode.type) != str(rnode.type):
            raise _SporkSchedulingError(f"reuse_buffer: {rnode.name} is {rnode.type} and {bnode.name} is "
                                        f"{bnode.type}: a buffer is reused only for one of the same type and shape",
                                        user_frame()).with_traceback(None) from None
        if bnode.type == rnode.type:
            return False
        ir, fwd = rep._impl._replace([_LoopIR.Alloc(rnode.name, bnode.type, rnode.mem, rnode.srcinfo)])
        given["proc"] = _Procedure(ir, _provenance_eq_Procedure=given["proc"], _forward=fwd)
        for name in ("buf_cursor", "replace_cursor"):
            if not isinstance(given[name], str):
                given[name] = given["proc"].forward(given[name])
        return True

    def _check_nest(self, given: dict, result: _Procedure) -> None:
        """Refuse a move that breaks the analysis' structural rules (cuda_tasks loops directly in the device
        function, everything else inside them; collective tilings that fit) in a proc that kept them: exo allows
        it, and the next analysis named the device function's line, not this call. Mid-schedule procs that
        break the rules already (CUDA loops before their device function exists) are left to the analysis."""
        broken = scope_error(result)
        if broken is None or scope_error(given["proc"]) is not None:
            return
        moved = self.arg_procs[1](given[list(self.sig.parameters)[1]], given)._impl  # the op's cursor, as exo finds it
        inner, outer = (moved.body()[0], moved) if self.__name__ == "reorder_loops" else (moved, moved.parent())
        raise _SporkSchedulingError(f"{self.__name__}: this moves `{_head_text(inner._node)}` out of `"
                                    f"{_head_text(outer._node)}`, which breaks a rule of the analysis: "
                                    f"{broken.message}", user_frame()).with_traceback(None) from None


def _fused_thread_loop(given: dict):
    """mult_loops of two cuda_threads loops: exo's product loop keeps the outer loop's mode (`cuda_threads(0, 4 * 32,
    unit=cuda_warp)`, 128 warps where the two loops had 4 warps of 32 threads). When the outer loop's unit is the
    inner loop's threads (inner bound x inner unit), the product runs each (outer, inner) pair on the thread the
    two loops gave it with the inner loop's unit: (its iteration count, that mode, the outer loop's cursor, which
    forwards to the product loop: a loop found by name was the first of that name, another branch's; session 32).
    Other loop modes mixed with cuda_threads have no such loop: refused."""
    try:
        cursor = _NestedForCursorA()(given["nested_loops"], given)
    except Exception:  # noqa: BLE001 -- no such loop nest: exo's own call says so
        return None
    outer = cursor._impl._node
    inner = outer.body[0] if len(outer.body) == 1 else None
    modes = (outer.loop_mode, getattr(inner, "loop_mode", None))
    if not any(isinstance(m, _CudaThreads) for m in modes):
        return None
    text = f"`{_head_text(outer)}` and `{_head_text(inner)}`"
    if not all(isinstance(m, _CudaThreads) for m in modes):
        raise _SporkSchedulingError(f"mult_loops: {text} are not both cuda_threads loops, so no loop of one mode "
                                    "runs their iterations where they run", user_frame())
    if not (isinstance(outer.hi, _LoopIR.Const) and isinstance(inner.hi, _LoopIR.Const)
            and outer.loop_mode.unit == inner.hi.val * inner.loop_mode.unit):
        raise _SporkSchedulingError(f"mult_loops: {text}: the outer loop's unit is not the inner loop's threads "
                                    f"({inner.hi} x {inner.loop_mode.unit}), so one cuda_threads loop cannot run "
                                    "their iterations where they run", user_frame())
    return outer.hi.val * inner.hi.val, inner.loop_mode, cursor


def _thread_loop_mode(given: dict):
    """(the mode, the cursor) of the loop divide_loop divides, if it is a cuda_threads loop."""
    try:
        loop = _ForCursorA()(given["loop_cursor"], given)
    except Exception:  # noqa: BLE001 -- no such loop: exo's own call says so
        return None
    return (loop._impl._node.loop_mode, loop) if isinstance(loop._impl._node.loop_mode, _CudaThreads) else None


def _keep_threads(proc: _Procedure, outer, mode) -> _Procedure:
    """divide_loop of a cuda_threads loop: exo gives both loops its mode, so each outer iteration was one `unit`
    where its inner loop needs `inner bound` of them. The outer loop's unit becomes the inner loop's threads, so
    every iteration stays on the threads it had (as mult_loops joins them back), and its bound a constant (exo
    leaves `(128 + 47) / 48`). `outer` is the op's own loop (a cursor: a loop found by name was the first of
    that name, another branch's; audit of session 31)."""
    node = outer._impl._node
    inner = node.body[0] if len(node.body) == 1 and isinstance(node.body[0], _LoopIR.For) else None
    count = _constant_value(node.hi)
    if inner is None or not isinstance(inner.hi, _LoopIR.Const) or inner.loop_mode != mode or count is None:
        return proc
    return _make_thread_loop(proc, outer, count, _CudaThreads(inner.hi.val * mode.unit))


def _make_thread_loop(proc: _Procedure, loop, count: int, mode) -> _Procedure:
    """The loop at the cursor `loop` with the constant bound `count` and the cuda_threads `mode` (mult_loops'
    product loop, divide_loop's outer loop)."""
    bound = _LoopIR.Const(count, _T.index, loop._impl._node.hi.srcinfo)
    ir, fwd = loop._impl._child_node("hi")._replace(bound)
    with_bound = _Procedure(ir, _provenance_eq_Procedure=proc, _forward=fwd)
    return _gpu_ops.set_loop_mode(with_bound, with_bound.forward(loop), mode)


def _check_not_a_barrier(given: dict) -> None:
    """set_memory moves data: a barrier's memory is its mechanism (exo would make it a byte array that no sync
    statement then finds), and a barrier memory holds no data."""
    proc, cursor, memory = given["proc"], given["cursor"], given["memory_type"]
    try:
        node = (proc.find_alloc_or_arg(cursor) if isinstance(cursor, str) else cursor)._impl._node
    except Exception:  # noqa: BLE001 -- no such buffer, or not a cursor: exo's own call says so
        return
    if getattr(node, "mem", None) is not None and issubclass(node.mem, _BarrierMemory):
        raise _SporkSchedulingError(f"set_memory: {node.name} is a barrier @ {node.mem.name()}: a barrier's memory is "
                                    "its mechanism; allocate another barrier in the memory wanted", user_frame())
    if isinstance(memory, type) and issubclass(memory, _BarrierMemory):
        raise _SporkSchedulingError(f"set_memory: {memory.name()} holds barriers, not data such as {node.name}",
                                    user_frame())


def _with_own_index_lists(proc: _Procedure) -> _Procedure:
    """The same proc for exo's ops, whose edits of its index lists in place leave the user's proc as it was
    (`core.ir.own_index_lists`)."""
    ir = _own_index_lists(proc._loopir_proc)
    return _Procedure(ir, _provenance_eq_Procedure=proc, _forward=_forward_identity(ir))


def _unshared(result):
    """The op's proc with every statement a distinct object (`core.ir.unshared`): the analysis answers per object."""
    if not isinstance(result, _Procedure):
        return result
    ir = _unshared_ir(result._loopir_proc)
    if ir is None:
        return result
    return _Procedure(ir, _provenance_eq_Procedure=result, _forward=_forward_identity(ir))


def _user_facing(op):
    if isinstance(op, _AtomicSchedulingOp):
        return _functools.wraps(op)(_UserFacingOp(op.sig, op.arg_procs, op.func))
    if not callable(op) or isinstance(op, type):
        return op

    @_functools.wraps(op)
    def composite(*args, **kwargs):  # exo's ops made of others (tile_loops): theirs are exo's own, unwrapped
        return _unshared(op(*args, **kwargs))

    return composite


_MOVES_OUT = ("reorder_loops", "lift_scope")  # exo's ops that move a loop (or an if) out of the statement around it
_GPU_OPS = ["set_loop_mode", "wrap_with_context", "insert_fence", "insert_barrier_alloc", "insert_arrive",
            "insert_await", "find_blocks", "single_thread", "make_tensor_map", "complete_on"]  # fmt: skip
_EXO_NAMES = [
    name
    for name in dir(_exo_scheduling)
    if not name.startswith("_") and not isinstance(getattr(_exo_scheduling, name), _types.ModuleType)
]
for _name in _EXO_NAMES:
    globals()[_name] = _user_facing(getattr(_exo_scheduling, _name))
for _name in _GPU_OPS:
    globals()[_name] = _user_facing(getattr(_gpu_ops, _name))
pipeline_loop = _user_facing(_pipeline.pipeline_loop)

__all__ = _EXO_NAMES + _GPU_OPS + ["pipeline_loop"]
