"""A proc's sequential meaning, run on the CPU: what `sync_check` promises the GPU computes.

`sequential(p)` is p with every GPU annotation erased: loops `seq`, `with`
blocks 1-iteration loops, instrs inlined to their semantics bodies, sync
statements and barriers dropped, memories DRAM. `run_cpu(p, ...)` builds that
plain exo proc with gcc through exo's C generator (cached by a hash of the C
and the compiler) and calls it on copies of NumPy arrays, so a kernel's numbers
can be checked on a machine without a GPU, and a GPU run against them.
"""

from __future__ import annotations

import ctypes
import numbers
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
from exo.API import Procedure
from exo.core.LoopIR import LoopIR, LoopIR_Rewrite
from exo.core.memory import DRAM

from ..codegen import compile_procs_to_strings
from ..core.build_cache import build_once, cache_dir, content_key
from ..core.cache import ProcCache
from ..core.ir import operation_count, sizes_text, walk_stmts
from ..core.memories import CudaMemory
from ..core.sync_stmts import is_barrier_alloc, sync_spec_of
from ..errors import ArgumentError, BuildError, SporkTypeError, user_facing, user_frame
from ..scheduling import inline, inline_window
from ._args import check_args, proc_spec

# Assignments a run may make: about 10 s of gcc -O1 code. A C call cannot be interrupted (in a notebook, only a
# kernel restart stops it), so larger runs need an explicit max_ops=.
MAX_OPS = 4 * 10**9
_SEQUENTIAL = ProcCache()  # proc -> its sequential proc
_BUILT = ProcCache()  # sequential proc -> (its C function, int_fast32_t's ctypes type)


def _first(p: Procedure, kind: type):
    """The first statement of `kind` (calls: not sync statements), or None."""

    def walk(cursors):
        for c in cursors:
            node = c._impl._node
            if isinstance(node, kind) and sync_spec_of(node) is None:
                return c
            if isinstance(node, (LoopIR.For, LoopIR.If)):
                found = walk(c.body()) or (walk(c.orelse()) if isinstance(node, LoopIR.If) and node.orelse else None)
                if found is not None:
                    return found
        return None

    return walk(p.body())


def _device_memory(mem) -> bool:
    return isinstance(mem, type) and issubclass(mem, CudaMemory)


class _Erase(LoopIR_Rewrite):
    """Loops `seq`, memories DRAM, sync statements and barriers gone."""

    def __init__(self, barriers: set):
        self.barriers = barriers  # an inlined TMA load's write of its trailing barrier goes with the barrier

    def map_s(self, s):
        if sync_spec_of(s) is not None or is_barrier_alloc(s):
            return []
        if isinstance(s, LoopIR.Assign) and s.name in self.barriers:
            return []
        if isinstance(s, LoopIR.Alloc) and _device_memory(s.mem):
            return [s.update(mem=DRAM)]
        if isinstance(s, LoopIR.For):
            body = self.map_stmts(s.body)
            body = s.body if body is None else body
            return [s.update(loop_mode=LoopIR.Seq(), body=body or [LoopIR.Pass(s.srcinfo)])]
        if isinstance(s, LoopIR.If):
            body, orelse = self.map_stmts(s.body), self.map_stmts(s.orelse)
            body = s.body if body is None else body
            orelse = s.orelse if orelse is None else orelse
            return [s.update(body=body or [LoopIR.Pass(s.srcinfo)], orelse=orelse)]
        return super().map_s(s)


def _erase(p: Procedure) -> Procedure:
    while (call := _first(p, LoopIR.Call)) is not None:
        p = inline(p, call)
    while (window := _first(p, LoopIR.WindowStmt)) is not None:
        p = inline_window(p, window)
    ir = p._loopir_proc
    args = [a.update(mem=DRAM) if _device_memory(a.mem) else a for a in ir.args]
    barriers = {s.name for s in walk_stmts(ir.body) if is_barrier_alloc(s)}
    body = _Erase(barriers).map_stmts(ir.body) or ir.body
    return Procedure(ir.update(args=args, body=body))


@user_facing
def sequential(p: Procedure) -> Procedure:
    """p's sequential meaning as a plain exo proc that runs on the CPU (see the module docstring)."""
    if not isinstance(p, Procedure):
        raise SporkTypeError(f"sequential takes a proc (made with @proc or a scheduling op), not {type(p).__name__}",
                             user_frame())
    return _SEQUENTIAL.get(p._loopir_proc, lambda _: _erase(p))


# -ffp-contract=off: every operation rounds, as the program says. gcc's default (fast) fuses `a * b + c` into one
# fma wherever the target has one (aarch64; x86 with -mfma in CC), and the sequential meaning would be the host's.
_CC_FLAGS = ("-O1", "-ffp-contract=off", "-shared", "-fPIC")


def _library(c: str, h: str, name: str) -> Path:
    """gcc's shared library of the sequential program's C (with a probe of int_fast32_t's width), cached by the
    sources, the compiler (its command and version) and its flags."""
    cc = os.environ.get("CC") or "gcc"
    if not shutil.which(cc):
        raise BuildError("run_cpu builds the sequential program with gcc, and no gcc was found: install gcc "
                         "(e.g. apt-get install gcc) or set CC")
    c += f"\nint {name}_sizeof_int_fast32(void) {{ return (int) sizeof(int_fast32_t); }}\n"
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    lib = cache_dir() / "cpu" / content_key(c, h, name, cc, version, *_CC_FLAGS) / f"lib{name}.so"
    failed = build_once(lib, {f"{name}.c": c, f"{name}.h": h}, [[cc, *_CC_FLAGS, "-o", lib.name, f"{name}.c"]])
    if failed:
        raise BuildError(f"{cc} failed on the sequential program ({failed[0]}) in {failed[2]}:\n{failed[1]}")
    return lib


def _load(seq: Procedure) -> tuple:
    """(the C function, the ctypes type of int_fast32_t) of a sequential proc, built and loaded."""
    name = seq.name()
    c, h, _, _ = compile_procs_to_strings([seq], name)
    lib = ctypes.CDLL(str(_library(c, h, name)))
    fn = getattr(lib, name)
    fn.restype = None
    return fn, {4: ctypes.c_int32, 8: ctypes.c_int64}[getattr(lib, f"{name}_sizeof_int_fast32")()]


@user_facing
def run_cpu(p: Procedure, *args, max_ops: int = MAX_OPS, **kwargs) -> dict:
    """Run p's sequential meaning on the CPU: sizes as ints, tensors as NumPy arrays (also for CudaGmemLinear
    parameters), in p's argument order or by name. The arrays passed are not changed: returns a dict from each
    tensor parameter's name to its array after the call. Sizes at which it would make more than `max_ops`
    assignments are refused (a running C call cannot be interrupted)."""
    if not isinstance(max_ops, numbers.Integral) or isinstance(max_ops, bool) or max_ops < 0:
        raise SporkTypeError(f"run_cpu(max_ops={max_ops!r}): give an int >= 0", user_frame())
    seq = sequential(p)
    spec = proc_spec(seq._loopir_proc)
    names = [a.name for a in spec.args]
    where = f"run_cpu({p.name()})"
    if len(args) > len(names):
        raise ArgumentError(f"{where} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}", user_frame())
    given = dict(zip(names, args))
    for name, value in kwargs.items():
        if name not in names:
            raise ArgumentError(f"{where}: {p.name()} has no parameter {name!r}; its parameters are {', '.join(names)}",
                                user_frame())
        if name in given:
            raise ArgumentError(f"{where}: {name} is given twice (in order and by name)", user_frame())
        given[name] = value
    missing = [name for name in names if name not in given]
    if missing:
        raise ArgumentError(f"{where} needs {', '.join(missing)}: run_cpu(p, {', '.join(f'{n}=...' for n in names)})",
                            user_frame())
    on_gpu = [name for name in names if hasattr(given[name], "__cuda_array_interface__")]
    if on_gpu:
        raise ArgumentError(f"{where} runs on the CPU: pass NumPy arrays ({', '.join(on_gpu)}: a GPU array, copy it "
                            "with .get())", user_frame())
    values = [given[name].copy() if isinstance(given[name], np.ndarray) else given[name] for name in names]
    try:
        raw = check_args(spec, values, None)
    except (TypeError, ValueError) as e:  # said at the user's call, without our frames
        raise ArgumentError(str(e).replace(f"{seq.name()}()", where, 1), user_frame()) from None
    sizes = {a.name: v for a, v in zip(spec.args, values) if a.kind == "int"}
    ops = operation_count(seq._loopir_proc.body, sizes)
    if ops > max_ops:
        raise ArgumentError(f"{where}: at {sizes_text(sizes)} the sequential program "
                            f"makes about {ops:.1e} assignments, more than max_ops={max_ops:.0e}: minutes or hours on "
                            "the CPU, and a running call cannot be interrupted; check at smaller sizes (or pass a "
                            "larger max_ops=)", user_frame())
    fn, int_type = _BUILT.get(seq._loopir_proc, lambda _: _load(seq))
    fn(None, *(int_type(v) if a.kind in ("int", "bool") else ctypes.c_void_p(v) for a, v in zip(spec.args, raw)))
    return {a.name: v for a, v in zip(spec.args, values) if isinstance(v, np.ndarray)}
