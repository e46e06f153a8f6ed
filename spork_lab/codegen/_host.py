"""Host side: replace each CudaDeviceFunction block by a call of a generated launch instr.

The launch instr's `c_instr` calls the kernel launcher and records its CUDA
error; its body is the original block, so exo's const and effect analyses of
the caller's arguments stay right. exo's own C backend then writes the host C.

Barriers that live in host code (`BarrierMemory.lives_on_device` False: CUDA
events) have their allocation, Arrive and Await replaced by calls of generated
instrs whose C text comes from their `BarrierText` (cudaEventRecord /
cudaStreamWaitEvent / cudaEventSynchronize on the library's stream), and are
destroyed where the allocation's block ends.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from typing import Optional

from exo.core.LoopIR import LoopIR, T
from exo.core.prelude import Sym

from ..analysis import analyze
from ..core.blocks import CudaDeviceFunction
from ..core.ir import free_syms, type_syms
from ..core.loop_modes import WithBlock
from ..core.sync_stmts import is_barrier_alloc, sync_spec_of
from ..core.tensor_maps import tensor_map_spec
from ..errors import CodegenError
from ._device import DeviceCode, DeviceFunction, compile_device_function
from ._sync import position_expr
from .barrier_text import lowering

_POSITION = "SPORK_POSITION"  # stands for the instr's `p` argument until the text becomes an exo template


def is_device_function(s) -> bool:
    return isinstance(s, LoopIR.For) and isinstance(s.loop_mode, WithBlock) and isinstance(s.loop_mode.ctx, CudaDeviceFunction)


def device_function_name(proc: str, k: int) -> str:
    """The kernel of a proc's k-th device function; its launcher is this name + `_launch`."""
    return f"{proc}_device{k}"


def device_function_owner(name: str) -> Optional[str]:
    """The proc whose kernel or launcher `name` would be (see `device_function_name`), else None."""
    generated = re.fullmatch(r"(\w+)_device\d+(?:_launch)?", name)
    return generated.group(1) if generated else None


def _launch_arg(a: LoopIR.fnarg) -> str:
    """The launcher's C arguments for one device-function argument (a tensor map: its window's pointer and strides)."""
    name = "{" + str(a.name) + "}"
    if tensor_map_spec(a.name) is None:
        return name
    return ", ".join([f"{name}.data", *(f"{name}.strides[{i}]" for i in range(len(a.type.shape())))])


def _whole(a: LoopIR.fnarg, srcinfo):
    """The launch call's argument for `a`: the variable, or for a window variable the window of all of it."""
    if not (a.type.is_tensor_or_window() and a.type.is_win()):
        return LoopIR.Read(a.name, [], a.type, srcinfo)
    idx = [LoopIR.Interval(LoopIR.Const(0, T.index, srcinfo), hi, srcinfo) for hi in a.type.shape()]
    return LoopIR.WindowExpr(a.name, idx, T.Window(a.type, a.type, a.name, idx), srcinfo)


class HostRewriter:
    """Rewrites the procs of one library; collects their device functions' CUDA code."""

    def __init__(self, lib: str):
        self.lib = lib
        self.device_code: list[DeviceCode] = []
        self._done: dict = {}
        self._proc = None
        self._count = self._n_instrs = 0
        self._analysis = None  # of the proc being rewritten
        self._events: dict = {}  # Sym -> BarrierInfo (named for C) of its host barriers

    def rewrite(self, p: LoopIR.proc) -> LoopIR.proc:
        if p.instr is not None:
            return p
        if id(p) not in self._done:
            caller = (self._proc, self._analysis, self._count, self._n_instrs, self._events)  # callees first
            env = {a.name: (a.type, a.mem) for a in p.args}
            self._count = self._n_instrs = 0
            self._proc, self._analysis = p, analyze(p)
            self._events = {s: i for s, i in self._analysis.barriers.items() if not i.mem.lives_on_device}
            body = self._stmts(p.body, env)
            self._done[id(p)] = p.update(body=body)
            self._proc, self._analysis, self._count, self._n_instrs, self._events = caller
        return self._done[id(p)]

    def _stmts(self, stmts, env) -> list:
        out, destroy = [], []
        for s in stmts:
            if is_barrier_alloc(s) and s.name in self._events:
                info = self._events[s.name] = replace(self._events[s.name], name=self._event_name(s.name))
                text = lowering(info.mem)
                decl = text.decl_lines(info, self._record_error)
                out.append(self._host_instr(decl, s.srcinfo, c_global=self._event_globals))
                destroy.append(self._host_instr(text.destroy_lines(info), s.srcinfo))
            elif sync_spec_of(s) is not None and s.args[0].name in self._events:
                out.append(self._event_sync(s, sync_spec_of(s), self._events[s.args[0].name]))
            elif is_device_function(s):
                out.append(self._launch(s, env))
            elif isinstance(s, LoopIR.For):
                out.append(s.update(body=self._stmts(s.body, {**env, s.iter: (T.index, None)})))
            elif isinstance(s, LoopIR.If):
                out.append(s.update(body=self._stmts(s.body, env), orelse=self._stmts(s.orelse, env)))
            elif isinstance(s, LoopIR.Call):
                out.append(s.update(f=self.rewrite(s.f)))
            else:
                if isinstance(s, LoopIR.Alloc):
                    env[s.name] = (s.type, s.mem)
                elif isinstance(s, LoopIR.WindowStmt):  # a window (tensor map) of a buffer: its memory
                    env[s.name] = (s.rhs.type.as_tensor, env.get(s.rhs.name, (None, None))[1])
                out.append(s)
        return out + destroy

    def _event_name(self, sym) -> str:
        """The C name of an event array, `proc_ev`: distinct from the proc's other events' even where exo's names
        are not (two allocations `ev` in one block were two `cudaEvent_t proc_ev[1]` in one C scope)."""
        taken = {i.name for i in self._events.values()}
        name = f"{self._proc.name}_{sym}"
        return next(n for n in itertools.chain([name], (f"{name}_{k}" for k in itertools.count(1))) if n not in taken)

    @property
    def _record_error(self) -> str:
        return f"{self.lib}_record_error"

    @property
    def _event_globals(self) -> str:
        """Declarations the event calls need; every event call lies in its declaring instr's scope."""
        lines = ["#include <cuda_runtime.h>", f"void *{self.lib}_stream(void);", f"void {self._record_error}(int err);"]
        return "\n".join(lines)

    def _host_instr(self, lines: list, srcinfo, position=None, c_global: str = "") -> LoopIR.Call:
        """A call of a generated instr whose C text is `lines`; `position` (an index expr) replaces _POSITION."""
        name = f"{self._proc.name}_event{self._n_instrs}"
        self._n_instrs += 1
        text = "\n".join(lines).replace("{", "{{").replace("}", "}}").replace(_POSITION, "{p}")
        args = [] if position is None else [LoopIR.fnarg(Sym("p"), T.index, None, srcinfo)]
        instr = LoopIR.proc(name, args, [], [LoopIR.Pass(srcinfo)], LoopIR.instr(text, c_global), srcinfo)
        return LoopIR.Call(instr, [] if position is None else [position], srcinfo)

    def _event_sync(self, s: LoopIR.Call, spec, info) -> LoopIR.Call:
        """Arrive/Await on a CudaEvent, on the stream the library's launches use."""
        position = position_expr(info, s.args[0], s.srcinfo)
        p = "0" if position is None else _POSITION
        stream = f"(cudaStream_t) {self.lib}_stream()"
        text = lowering(info.mem)
        lines_of = text.arrive_lines if spec.is_arrive else text.await_lines
        lines = lines_of(info, spec, p, stream=stream, record_error=self._record_error)
        return self._host_instr(lines, s.srcinfo, position)

    def _launch(self, block: LoopIR.For, env: dict) -> LoopIR.Call:
        syms = free_syms([block])
        for sym in list(syms):
            type_syms(env[sym][0], syms)
        arg_order = {a.name: k for k, a in enumerate(self._proc.args)}
        syms = sorted(dict.fromkeys(syms), key=lambda x: arg_order.get(x, len(arg_order)))
        args = []
        for sym in syms:
            if sym not in env:
                raise CodegenError(f"internal: {sym} is used by a device function but not defined", block.srcinfo)
            typ, mem = env[sym]
            args.append(LoopIR.fnarg(sym, typ, mem if typ.is_numeric() else None, block.srcinfo))
        name = device_function_name(self._proc.name, self._count)
        self._count += 1
        code = compile_device_function(DeviceFunction(name, block, args, self._analysis))
        self.device_code.append(code)
        c_args = ", ".join(_launch_arg(a) for a in args)
        c_instr = f"{self.lib}_record_error({name}_launch({c_args}));"
        c_global = "\n".join(
            [
                code.launcher_decl.replace('extern "C" ', ""),
                f"void {self.lib}_record_error(int err);",
            ]
        )
        launch = LoopIR.proc(f"{name}_launch", args, [], [block], LoopIR.instr(c_instr, c_global), block.srcinfo)
        call_args = [_whole(a, block.srcinfo) for a in args]
        return LoopIR.Call(launch, call_args, block.srcinfo)
