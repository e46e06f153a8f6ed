"""Run an Exo-GPU proc's sequential meaning on the CPU: every GPU annotation erased, built with gcc.

`sl.sync_check` passing means the GPU computes what the proc computes
sequentially; `sequential(p)` is that sequential program as a plain exo proc
(loops `seq`, `with` blocks 1-iteration loops, instrs inlined to their
semantics bodies, sync statements and barriers dropped, memories DRAM), and
`run_cpu` compiles it through the host C generator and runs it on NumPy arrays.
Tests compare a scheduled proc with the one it was scheduled from this way.
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from exo.API import Procedure
from exo.core.LoopIR import LoopIR, LoopIR_Rewrite
from exo.core.memory import DRAM

import spork_lab as sl
from spork_lab.core.ir import walk_stmts
from spork_lab.core.memories import CudaMemory
from spork_lab.core.sync_stmts import is_barrier_alloc, sync_spec_of
from spork_lab.scheduling import inline, inline_window


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


def _device_mem(mem) -> bool:
    return isinstance(mem, type) and issubclass(mem, CudaMemory)


class _Erase(LoopIR_Rewrite):
    def __init__(self, barriers: set):
        self.barriers = barriers  # an inlined TMA load's write of its trailing barrier goes with the barrier

    def map_s(self, s):
        if sync_spec_of(s) is not None or is_barrier_alloc(s):
            return []
        if isinstance(s, LoopIR.Assign) and s.name in self.barriers:
            return []
        if isinstance(s, LoopIR.Alloc) and _device_mem(s.mem):
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


def sequential(p: Procedure) -> Procedure:
    """p's sequential meaning as a plain exo proc that runs on the CPU."""
    while (call := _first(p, LoopIR.Call)) is not None:
        p = inline(p, call)
    while (window := _first(p, LoopIR.WindowStmt)) is not None:
        p = inline_window(p, window)
    ir = p._loopir_proc
    args = [a.update(mem=DRAM) if _device_mem(a.mem) else a for a in ir.args]
    barriers = {s.name for s in walk_stmts(ir.body) if is_barrier_alloc(s)}
    body = _Erase(barriers).map_stmts(ir.body) or ir.body
    return Procedure(ir.update(args=args, body=body))


def run_cpu(p: Procedure, **args) -> dict:
    """Run `sequential(p)` built by gcc; `args`: sizes (ints) and NumPy arrays. Returns the arrays after the call."""
    seq = sequential(p)
    name = seq.name()
    directory = Path(tempfile.mkdtemp(prefix="spork_seq_"))
    c, h, _, _ = sl.compile_procs_to_strings([seq], name)
    (directory / f"{name}.c").write_text(c)
    (directory / f"{name}.h").write_text(h)
    lib = directory / f"{name}.so"
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", lib, directory / f"{name}.c"], check=True, cwd=directory)
    fn = getattr(ctypes.CDLL(str(lib)), name)
    arrays = {k: np.ascontiguousarray(v).copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    names = [str(a.name) for a in seq._loopir_proc.args]
    call = [None] + [arrays[key].ctypes.data if key in arrays else ctypes.c_long(args[key]) for key in names]
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_void_p if key in arrays else ctypes.c_long for key in names]
    fn(*call)
    return arrays


def assert_gpu_matches_cpu(p: Procedure, arch=None, **args) -> None:
    """Build p for the local GPU (or `arch`), run it on copies of `args` (sizes and NumPy arrays, in p's argument
    order) and check that CUDA reported no error and every array ends exactly as run_cpu leaves it."""
    import cupy

    built = getattr(sl.build([p], arch=arch), p.name())
    want = run_cpu(p, **args)
    dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    built(*dev.values())
    cupy.cuda.runtime.deviceSynchronize()
    assert getattr(built.module.lib, f"{built.module.lib_name}_last_error")() == 0, f"{p.name()}: CUDA error"
    for k, v in want.items():
        np.testing.assert_array_equal(dev[k].get(), v, err_msg=f"{p.name()}: {k}")
