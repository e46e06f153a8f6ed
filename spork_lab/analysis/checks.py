"""Per-statement checks once every statement has its scope: collectives and instruction timelines.

* Collective unit: an Exo-GPU instr runs only with the collective it declares
  (mma needs a warp, cp.async a thread); scalar writes and reductions, and
  calls of plain procs that write, are made by one thread (such a call made
  by more is told to inline the proc, as code generation tells one by one).
* Instruction timeline: an instr's declared instr-tl is the scope's; scalar
  code runs only in-order; every allocation, read and write is allowed on the
  scope's instr-tl by its memory (DRAM and other exo memories: CPU only).
Synchronization statements and barriers are the sync checker's business.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Callable, Optional

from exo.backend.parallel_analysis import ParallelAnalysis
from exo.backend.prec_analysis import PrecisionAnalysis
from exo.backend.win_analysis import WindowAnalysis
from exo.core.LoopIR import LoopIR, T
from exo.core.memory import Memory

from ..core.blocks import CudaDeviceFunction
from ..core.instrs import instr_info, multicast_dst
from ..core.ir import (INDEX_OPS, bound_sym, constant_remainder, constant_value, evaluate, expr_syms, free_syms,
                       interval_width, own_syms, polynomial, remainder, walk_stmts, whole_interval)
from ..core.loop_modes import WithBlock
from ..core.memories import CudaMemory, elem_bytes
from ..core.sync_stmts import BarrierMemory, is_barrier_alloc, sync_spec_of, trailing_of, written_name
from ..core.tensor_maps import tensor_map_spec
from ..core.timelines import InstrTl, cpu_in_order_instr
from ..errors import CollectiveError, DataTypeError, MemoryMismatchError, SporkTypeError, SyncError, TimelineError
from ..lang.printer import head_text
from .result import StmtInfo


def run(ctx) -> tuple:
    """The `checks` pass (after `scopes`): raises at the first statement that breaks a rule. Value: the
    `AlignmentNeed`s that only the sizes of a call decide."""
    scopes = ctx.results["scopes"]
    _check_defined_before_use(ctx.proc.body, {a.name for a in ctx.proc.args})
    needs = check_statements(ctx.proc, scopes.stmts, ctx.analyze)
    _check_kernel_args(ctx.proc, scopes)
    _check_exo_c_rules(ctx.proc, scopes.stmts)
    return needs


def _check_defined_before_use(stmts: list, defined: set) -> None:
    """Every name a statement uses is a parameter, or bound before it in its block or one around it. exo's parser
    sees to that; a proc edited otherwise (a sync statement moved above its barrier's allocation, as the mutation
    tests do) reached exo's C passes, which failed with a KeyError from inside exo (random schedule fuzz)."""
    defined = set(defined)
    for s in stmts:
        used: list = []
        own_syms(s, used)
        missing = next((sym for sym in used if sym not in defined), None)
        if missing is not None:
            raise SporkTypeError(f"`{head_text(s)}` uses {missing}, which is not defined before it in its scope "
                                 "(an allocation or window statement after it, or in a block it is not in)", s.srcinfo)
        if isinstance(s, LoopIR.For):
            _check_defined_before_use(s.body, defined | {s.iter})
        elif isinstance(s, LoopIR.If):
            _check_defined_before_use(s.body, defined)
            _check_defined_before_use(s.orelse, defined)
        elif bound_sym(s) is not None:
            defined = defined | {bound_sym(s)}


# exo runs these passes only when it generates C, and raises a TypeError from inside them: (run, error, rule)
_EXO_C_CHECKS = (
    (lambda p: ParallelAnalysis().run(p), SporkTypeError, "exo's check that a par loop has no races"),
    (lambda p: PrecisionAnalysis().run(p), DataTypeError, "exo's precision rules: the operands of an operation, "
                                                          "and the arguments of an extern, have one type"),
    (lambda p: WindowAnalysis().apply_proc(p), SporkTypeError, "a window argument needs a window parameter, "
                                                               "written [f32][n]"),
)


def _check_exo_c_rules(proc_ir: LoopIR.proc, stmts: tuple) -> None:
    """exo's checks at C generation, said here at the statement instead of as exo's TypeError from a build."""
    for run_pass, error, rule in _EXO_C_CHECKS:
        try:
            run_pass(proc_ir)
        except TypeError as e:
            first = re.search(r"^(.+):(\d+):\d+: (.+)$", str(e), re.MULTILINE)
            place = first and (first.group(1), int(first.group(2)))
            at = place and next((s for s, _ in stmts if (s.srcinfo.filename, s.srcinfo.lineno) == place), None)
            if at is None:
                raise
            raise error(f"`{head_text(at)}`: {first.group(3)} ({rule})", at.srcinfo) from None


def check_statements(proc_ir: LoopIR.proc, stmts: tuple, analyze_callee: Callable) -> tuple:
    """Run every check on every (stmt, StmtInfo), in source order; return the `AlignmentNeed`s left to a call's
    sizes.

    `analyze_callee(proc)` analyses a CPU callee that opens device functions of its own.
    """
    memories, shapes = _memories(proc_ir), _shapes(proc_ir)
    sizes = {a.name for a in proc_ir.args if a.type in (T.size, T.index)}
    needs: list = []
    aliases = {s.name: s.rhs for s in walk_stmts(proc_ir.body) if isinstance(s, LoopIR.WindowStmt)}
    for s, info in stmts:
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            _check_scalar_code(s, info, writes=True)
            _check_scalar_access(s, memories, s.name)
            scalar = None if s.idx else s.type
            _check_access(s, info, memories, s.name, "write", scalar=scalar)
            if isinstance(s, LoopIR.Reduce):
                _check_access(s, info, memories, s.name, "read", scalar=scalar)
            for e in [*s.idx, s.rhs]:
                _check_reads(s, info, memories, e)
        elif isinstance(s, LoopIR.Alloc) and not is_barrier_alloc(s):
            _check_access(s, info, memories, s.name, "alloc")
        elif isinstance(s, LoopIR.WindowStmt) and _opaque(memories.get(s.rhs.name)):
            _refuse_fragment_alias(s, memories[s.rhs.name])
        elif isinstance(s, LoopIR.WindowStmt) and tensor_map_spec(s.name) is not None and info.device_scope == "cuda":
            raise TimelineError(f"{s.name} is a tensor map made in CUDA code: the host encodes a tensor map before "
                                "the launch, so make it in CPU code, before the `with CudaDeviceFunction`", s.srcinfo)
        elif isinstance(s, LoopIR.Call) and sync_spec_of(s) is None:
            _check_tma(s, info)  # first: a tensor map where another operand goes has no layout to check
            needs += _check_call(s, info, memories, shapes, sizes, aliases, analyze_callee)
    return tuple(needs)


def _check_tma(s: LoopIR.Call, info: StmtInfo) -> None:
    """TMA: loads complete on an mbarrier (`>> bar`), and tensor maps are what TMA's global operand takes."""
    gpu = instr_info(s)
    trailing = trailing_of(s)
    name = written_name(s)
    if gpu is not None and gpu.trailing_barrier and trailing is None:
        raise SyncError(f"{name} completes on an mbarrier: write `{name}(...) >> bar[...]`, and close the phase with "
                        "`Arrive(tma_to_smem_async, 1) >> bar[...]`", s.srcinfo)
    params = gpu.tensor_map_params if gpu is not None else ()
    n = trailing[1] if trailing else len(s.args)
    if trailing and gpu.multicast:
        _check_multicast_barriers(s, s.args[n])
    for param, arg in zip(s.f.args[:n], s.args[:n]):
        spec = tensor_map_spec(arg.name) if isinstance(arg, (LoopIR.Read, LoopIR.WindowExpr)) else None
        is_map = spec is not None
        if str(param.name) in params and not is_map:
            raise TimelineError(
                f"{name}'s {param.name} must be a window of a tensor map, `T = A[...] @ Sm90_tensorMap(swizzle, *box)` "
                f"made in CPU code, not `{arg}`", s.srcinfo)
        if is_map and str(param.name) not in params and info.device_scope == "cuda":
            raise TimelineError(
                f"{arg.name} is a tensor map: only TMA instrs (Sm90_copy_tensor_*) take it in CUDA code, not {name}",
                s.srcinfo)
        rank = len(arg.idx) if isinstance(arg, LoopIR.WindowExpr) else len(arg.type.shape()) if is_map else 0
        if is_map and gpu.tensor_map and rank != len(gpu.tensor_map[1]):
            raise MemoryMismatchError(
                f"{name} copies a box of a {len(gpu.tensor_map[1])}-D tensor map, but {arg.name} maps {rank} "
                f"dimensions: TMA of more is not built; map a {len(gpu.tensor_map[1])}-D window instead (points for "
                f"the other dimensions, fixed in the CPU code that makes the map)", s.srcinfo)
        if is_map and gpu.tensor_map and (spec.swizzle, tuple(spec.box)) != gpu.tensor_map:
            swizzle, box = gpu.tensor_map  # the copy moves the map's box; the expect-tx bytes count the instr's
            tile = "a linear" if not swizzle else f"a {swizzle}-byte swizzled"
            raise MemoryMismatchError(
                f"{name}(..., box={box}) with {tile} shared tile needs a tensor map made with "
                f"Sm90_tensorMap({swizzle}, {', '.join(map(str, box))}), not {spec.source()}", s.srcinfo)


def _check_multicast_barriers(s: LoopIR.Call, bar: LoopIR.WindowExpr) -> None:
    """A multicast load completes on the barrier of each CTA it writes: as many barriers as dst's first dimension
    spans CTAs (said here where both are constants; sync_check checks the rest)."""
    dst = multicast_dst(s)
    widths = [interval_width(w) for w in bar.idx if isinstance(w, LoopIR.Interval)]
    ctas = interval_width(dst.idx[0]) if isinstance(dst, LoopIR.WindowExpr) and isinstance(dst.idx[0], LoopIR.Interval) else None
    if ctas is None or None in widths:
        return
    barriers = math.prod(widths)
    if barriers != ctas:
        raise SyncError(f"{written_name(s)} writes {dst.name} in the {ctas} CTAs of its first dimension, so it "
                        f"completes on the barrier of each: write `>> {bar.name}[...]` with a slice of {ctas} barriers "
                        f"(e.g. `{bar.name}[:]` over the cluster's CTAs), not {barriers}", s.srcinfo)


def _memories(proc_ir: LoopIR.proc) -> dict:
    """Memory of every data variable of the proc (arguments, allocations, windows) by Sym."""
    memories = {a.name: a.mem for a in proc_ir.args if a.type.is_numeric()}
    for s in walk_stmts(proc_ir.body):
        if isinstance(s, LoopIR.Alloc):
            memories[s.name] = s.mem
        elif isinstance(s, LoopIR.WindowStmt) and s.rhs.name in memories:
            memories[s.name] = memories[s.rhs.name]
    return memories


def _shapes(proc_ir: LoopIR.proc) -> dict:
    """Declared shape of every argument and allocation of the proc, by Sym. A window expression's own type can
    be stale: exo's expand_dim adds a dimension to the allocation but not to the windows' source types."""
    shapes = {a.name: a.type.shape() for a in proc_ir.args if a.type.is_tensor_or_window() and not a.type.is_win()}
    shapes.update({s.name: s.type.shape() for s in walk_stmts(proc_ir.body)
                   if isinstance(s, LoopIR.Alloc) and s.type.is_tensor_or_window()})
    return shapes


def _check_kernel_args(proc_ir: LoopIR.proc, scopes) -> None:
    """A device function gets the data it uses from outside it as its kernel's launch arguments: sizes, indices,
    bools, whole CudaGmemLinear tensors and tensor maps. (CPU memory is refused earlier, at its first access.)"""
    outside = {a.name: (a.type, a.mem) for a in proc_ir.args}
    for s, info in scopes.stmts:
        if info.device_scope != "cpu":
            continue
        if isinstance(s, LoopIR.Alloc):
            outside[s.name] = (s.type, s.mem)
        elif isinstance(s, LoopIR.WindowStmt):
            outside[s.name] = (s.rhs.type, outside.get(s.rhs.name, (None, None))[1])
    for fn in scopes.device_functions:
        for sym in free_syms([fn.block]):
            typ, mem = outside.get(sym, (None, None))
            if typ is None or (isinstance(mem, type) and issubclass(mem, BarrierMemory)):
                continue
            problem = _kernel_arg_problem(sym, typ, mem)
            if problem is not None:
                use = next(u for u in walk_stmts(fn.block.body)
                           if not isinstance(u, (LoopIR.For, LoopIR.If)) and sym in free_syms([u]))
                raise MemoryMismatchError(
                    f"`{head_text(use)}` uses {sym}, which the device function gets from outside it, as a launch "
                    f"argument; a launch passes sizes, indices, bools, whole CudaGmemLinear tensors and tensor "
                    f"maps, and {problem}", use.srcinfo)


def _kernel_arg_problem(sym, typ, mem) -> Optional[str]:
    """Why `sym : typ @ mem` cannot be a kernel's launch argument, or None where it can."""
    if tensor_map_spec(sym) is not None or typ in (T.size, T.index, T.stride, T.bool):
        return None
    if not typ.is_tensor_or_window():
        return (f"{sym} is one {typ} value: pass it as a tensor of one element, `{sym}: {typ}[1] @ CudaGmemLinear`, "
                f"and read {sym}[0]")
    if typ.is_win():
        return f"{sym} is a window: pass the whole tensor and index it in the device function"
    if isinstance(mem, type) and issubclass(mem, CudaMemory) and mem.device_allocated:
        return (f"{sym} is @ {mem.name()}, which exists only inside a device function: allocate {sym} inside "
                f"the cuda_tasks loop, or make it @ CudaGmemLinear")
    if not (isinstance(mem, type) and issubclass(mem, CudaMemory)):
        return f"{sym} is @ {mem.name() if mem else 'DRAM'}, CPU memory: give device code CudaGmemLinear data"
    return None


# -- collectives --------------------------------------------------------------


def _check_scalar_code(s: LoopIR.stmt, info: StmtInfo, writes: bool) -> None:
    """Scalar code runs in order, and a write by a collective of many threads would race with itself."""
    if info.device_scope != "cuda":
        return
    if info.instr_tl.is_async:
        raise TimelineError(
            f"wrong instr-tl: `{head_text(s)}` is scalar code, which runs on cuda_in_order_instr, but this "
            f"statement is inside CudaAsync({info.instr_tl.name}); only {info.instr_tl.name} instrs go there",
            s.srcinfo,
        )
    if writes and info.tiling.thread_count != 1:
        raise CollectiveError(
            f"`{head_text(s)}` writes memory but is executed by {info.coll_unit_text} "
            f"({_threads(info.tiling.thread_count)}); scalar writes and reductions need a single thread: "
            f"put them in cuda_threads loops down to unit=cuda_thread",
            s.srcinfo,
        )


def _check_instr_unit(s: LoopIR.Call, info: StmtInfo, unit) -> None:
    if info.tiling.matches(unit):
        return
    tiling = info.tiling
    n = tiling.thread_count
    who = info.coll_unit_text if info.coll_unit_text.endswith(")") else f"{info.coll_unit_text} ({_threads(n)})"
    try:
        size = unit.substitute(tiling.blockDim, tiling.clusterDim).thread_count
    except CollectiveError:  # a unit larger than the launch (a warpgroup in 64 threads): not the right size
        size = None
    if size == n:  # the right size, not aligned
        first = tiling.threads({name: 0 for name, _ in tiling.iters})[0][0]
        who += (f": threads [{first}, {first + n}) are as many as a {unit} but not one (a {unit}'s threads start "
                f"at a multiple of {n})")
    raise CollectiveError(f"{written_name(s)} must be executed by a collective of unit {unit}, but here it is executed "
                          f"by {who}", s.srcinfo)


def _threads(n: int) -> str:
    return "1 thread" if n == 1 else f"{n} threads"


# -- timelines ----------------------------------------------------------------


def _check_call(s: LoopIR.Call, info: StmtInfo, memories: dict, shapes: dict, sizes: set, aliases: dict,
                analyze_callee: Callable) -> list:
    """The call's checks; returns the `AlignmentNeed`s its arguments leave to a call's sizes (a CPU callee's
    own, bound to this call's arguments)."""
    effects = _param_effects(s.f)
    needs: list = []
    gpu = instr_info(s)
    if gpu is not None:
        _check_instr_arg_types(s)
        _refuse_bare_alias(s, aliases)
        on_buffers = s.update(args=[_through_aliases(arg, aliases) for arg in s.args])
        _check_unit_stride(on_buffers)
        _check_fragment_windows(on_buffers, memories, shapes)
        _check_arg_memories(s, memories)  # before the layout checks, which take each window's memory as given
        needs = _check_alignment(on_buffers, gpu.aligned, shapes, sizes, info.iters)
        _check_smem_box(on_buffers, gpu.smem_box, shapes)
        _check_smem_desc(on_buffers, gpu.smem_desc, shapes)
        tl = gpu.instr_tl
        _check_instr_tl(s, info, tl)
        if info.device_scope == "cuda":
            _check_instr_unit(s, info, gpu.coll_unit)
    elif s.f.instr is not None:
        tl = cpu_in_order_instr  # exo's own instrs are CPU instructions
        _check_instr_tl(s, info, tl)
    elif info.device_scope == "cpu" and _launches_kernels(s.f):
        # the callee opens its own device functions: check it as a proc of its own
        return [need.within(s) for need in analyze_callee(s.f).result("checks")]
    else:
        tl = info.instr_tl  # a plain proc's body is scalar code run by the caller's collective
        writes = any("write" in e for e in effects.values())
        if writes and info.device_scope == "cuda" and info.tiling.thread_count != 1:
            raise CollectiveError(f"{plain_call_in_device_code(s)}; left a call, its body is scalar code executed by "
                                  f"{info.coll_unit_text} ({_threads(info.tiling.thread_count)}), and scalar writes "
                                  "need a single thread", s.srcinfo)
        _check_scalar_code(s, info, writes)
        for arg in s.args:
            if isinstance(arg, (LoopIR.Read, LoopIR.WindowExpr)):
                _check_scalar_access(s, memories, arg.name, f"{s.f.name}'s body, scalar code,")
    if gpu is None:  # an Exo-GPU instr's were checked before its layout checks
        _check_arg_memories(s, memories)
    for param, arg in zip(s.f.args, s.args):
        if isinstance(arg, (LoopIR.Read, LoopIR.WindowExpr)) and arg.name in memories:
            for action in sorted(effects.get(param.name, ())):
                _check_access(s, info, memories, arg.name, action, tl)
    return needs


def plain_call_in_device_code(s: LoopIR.Call) -> str:
    """Why a call of a plain proc in device code goes, and how: said first by the analysis (where many threads make
    the call, whose "scalar writes need a single thread" sent the user to cuda_threads loops before code
    generation refused the call anyway) and by code generation (where one thread does)."""
    return (f"`{head_text(s)}` calls the plain proc {s.f.name} in device code, where the generated CUDA calls only "
            f"instrs: inline it (p = inline(p, \"{s.f.name}(_)\"))")


def _check_instr_arg_types(s: LoopIR.Call) -> None:
    """Each data argument of an Exo-GPU instr has its parameter's element type exactly.

    exo checks shapes only, but these instrs reinterpret bits: a bf16 tile passed
    to an f16 mma (or f32 to tf32's f32 operands as f16) would compute garbage.
    """
    for param, arg in zip(s.f.args, s.args):
        if param.type.is_numeric() and arg.type.is_numeric() and arg.type.basetype() != param.type.basetype():
            raise DataTypeError(
                f"{written_name(s)}: argument {param.name} takes {param.type.basetype()} elements, "
                f"but the argument given holds {arg.type.basetype()}",
                s.srcinfo,
            )


def _through_aliases(arg, aliases: dict):
    """Window `arg` as a window of the buffer under its aliases: with `col = src[:, 4]`, `col[0:4]` is
    `src[0:4, 4]`. The layout checks below need the buffer's own dimensions (an alias's last dimension need not
    be its buffer's: a column passed through an alias was copied as a row; audit of session 31)."""
    while isinstance(arg, LoopIR.WindowExpr) and arg.name in aliases:
        outer, inner, idx = aliases[arg.name], iter(arg.idx), []
        for w in outer.idx:
            if isinstance(w, LoopIR.Point):
                idx.append(w)
                continue
            v = next(inner)
            if isinstance(v, LoopIR.Point):
                idx.append(LoopIR.Point(_plus(w.lo, v.pt), v.srcinfo))
            else:
                idx.append(LoopIR.Interval(_plus(w.lo, v.lo), _plus(w.lo, v.hi), v.srcinfo))
        arg = LoopIR.WindowExpr(outer.name, idx, arg.type, arg.srcinfo)
    return arg


def _plus(a, b):
    """`a + b`, folded where both are constants (errors then quote `tile[0:8, 32:40]`)."""
    va, vb = constant_value(a), constant_value(b)
    if va is not None and vb is not None:
        return LoopIR.Const(va + vb, T.index, b.srcinfo)
    return b if va == 0 else a if vb == 0 else LoopIR.BinOp("+", a, b, T.index, b.srcinfo)


def _refuse_bare_alias(s: LoopIR.Call, aliases: dict) -> None:
    """exo's instr templates take windows written as windows: a bare alias (`Cw` for `Cw = C[:, :]`) failed an
    assertion inside exo's code generator."""
    for param, arg in zip(s.f.args, s.args):
        if isinstance(arg, LoopIR.Read) and not arg.idx and arg.name in aliases:
            whole = ", ".join(":" for w in aliases[arg.name].idx if isinstance(w, LoopIR.Interval))
            raise MemoryMismatchError(f"`{head_text(s)}`: pass {param.name} as a window of {arg.name}, "
                                      f"`{arg.name}[{whole}]`: instrs take windows, not a window's name", s.srcinfo)


def _check_unit_stride(s: LoopIR.Call) -> None:
    """Each window argument of an Exo-GPU instr is contiguous in its last dimension.

    The instrs address rows (`&dst[0]` for 16 bytes of cp.async, a row stride for
    ldmatrix and the mma stores), so a window whose last dimension is not the
    buffer's (`s[0:4, i]`, a column) would be read or written as a row: the
    program says one thing and the CUDA does another.
    """
    for param, arg in zip(s.f.args, s.args):
        if not isinstance(arg, LoopIR.WindowExpr) or (isinstance(param.mem, type) and issubclass(param.mem, BarrierMemory)):
            continue
        if isinstance(arg.idx[-1], LoopIR.Point):
            raise MemoryMismatchError(
                f"`{head_text(s)}`: {written_name(s)} takes {param.name} as contiguous rows, but the last dimension of "
                f"`{arg}` is not {arg.name}'s last (it is indexed by `{arg.idx[-1].pt}`): its elements are not "
                "adjacent in memory. Lay the buffer out so that the window is a slice of its last dimension",
                s.srcinfo,
            )


def _opaque(mem) -> bool:
    """Whether the instrs' layout, not the index, decides which lane holds an element of memory `mem`."""
    return isinstance(mem, type) and issubclass(mem, CudaMemory) and not mem.scalar_access


def _check_scalar_access(s: LoopIR.stmt, memories: dict, sym, who: str = "scalar code") -> None:
    """Scalar code names an element by its index; a fragment's element sits in the registers of the lane the
    instruction's layout gives it, which is not the one (nor the register) that index would name."""
    mem = memories.get(sym)
    if _opaque(mem):
        raise MemoryMismatchError(
            f"`{head_text(s)}`: {sym} @ {mem.name()} holds fragments whose elements are spread over the lanes in the "
            f"instructions' layout, so {who} cannot read or write one of them by its index; pass windows of {sym} "
            f"to the instrs that take {mem.name()}", s.srcinfo)


def _check_fragment_windows(s: LoopIR.Call, memories: dict, shapes: dict) -> None:
    """An instr takes a window of several fragments as consecutive registers from the window's first tile on,
    so the tiles must follow each other in the buffer: after the window's first dimension of several tiles,
    every tile dimension (all but the last two) is whole. In a memory of `whole_tiles` the last two are whole too:
    registers laid out for one shape of tile read other elements as another."""
    for param, arg in zip(s.f.args, s.args):
        mem = memories.get(arg.name) if isinstance(arg, LoopIR.WindowExpr) else None
        if not _opaque(mem):
            continue
        shape = shapes.get(arg.name)
        if shape is None or len(shape) != len(arg.idx):
            continue
        _check_whole_tiles(s, arg, mem, shape)
        several = None  # the first dimension the window takes several tiles of
        for dim, (w, extent) in enumerate(zip(arg.idx[:-2], shape[:-2])):
            if several is not None and not whole_interval(w, extent):
                raise MemoryMismatchError(
                    f"`{head_text(s)}`: {written_name(s)} takes {param.name} as whole fragments that follow each "
                    f"other in {arg.name}'s registers, but `{arg}` takes several tiles of dimension {several} and "
                    f"not all of dimension {dim}: its tiles are not adjacent. Lay {arg.name} out so that the "
                    f"window's tiles are its innermost tile dimension", s.srcinfo)
            if isinstance(w, LoopIR.Interval) and interval_width(w) != 1:
                several = dim if several is None else several


def _check_whole_tiles(s: LoopIR.stmt, arg: LoopIR.WindowExpr, mem: type, shape: list) -> None:
    """In a memory of `whole_tiles`, window `arg` (of a buffer of `shape`) covers the last two dimensions."""
    if mem.whole_tiles and len(shape) < 2:
        raise MemoryMismatchError(
            f"`{head_text(s)}`: {arg.name} @ {mem.name()} has {len(shape)} dimension{'' if len(shape) == 1 else 's'}, but {mem.name()} holds tiles of "
            f"an instr's fragment: its buffers' last two dimensions are the tile's (e.g. [2, 16, 8]), and only the "
            f"fragment instrs take them", s.srcinfo)
    if not mem.whole_tiles or all(whole_interval(w, extent) for w, extent in zip(arg.idx[-2:], shape[-2:])):
        return
    rows, cols = (interval_width(w) if isinstance(w, LoopIR.Interval) else 1 for w in arg.idx[-2:])
    raise MemoryMismatchError(
        f"`{head_text(s)}`: `{arg}` takes {rows} x {cols} of {arg.name}'s {shape[-2]} x {shape[-1]} tiles: "
        f"{mem.name()} registers are laid out for the shape of tile an instr makes, and another shape would read "
        f"other elements in them; windows take whole tiles, so give each shape of tile an allocation of its own "
        f"(here: last two dimensions {rows}, {cols})", s.srcinfo)


def _refuse_fragment_alias(s: LoopIR.WindowStmt, mem: type) -> None:
    """A name for a window of fragment registers: the instrs place a fragment window's registers from the window
    itself (its tile offsets), which an alias hides (exo's instr templates and the code generator took it as an
    array and failed to compile; audit of session 27)."""
    raise MemoryMismatchError(
        f"`{head_text(s)}`: {s.name} names a window of {s.rhs.name} @ {mem.name()}, whose registers hold fragments "
        f"in the instructions' layout; such windows have no name of their own: pass `{s.rhs}` to the instrs "
        f"directly", s.srcinfo)


def _check_alignment(s: LoopIR.Call, aligned: tuple, shapes: dict, sizes: set, iters: tuple) -> list:
    """Each row of a window an instr needs aligned (cp.async of 16 bytes, ldmatrix's 16-byte rows) starts at
    a multiple of its bytes, where the window's offset and strides decide it (buffers start aligned; a
    misaligned address faults at run time). Where the proc's sizes (`sizes`: their Syms) decide it, directly or
    through the trips of the loops around the call (`iters`: its `IterInfo`s), returns the `AlignmentNeed`s a
    call checks at its sizes; what the iterators alone decide is sync_check's (sync/lower.py)."""
    needs = []
    for param, arg, shape, nbytes in _windows_of_known_layout(s, aligned, shapes):
        elem = elem_bytes(arg.type.basetype())
        offset, strides = _window_layout(arg, shape)
        rows = [st for w, st in zip(arg.idx[:-1], strides) if isinstance(w, LoopIR.Interval) and interval_width(w) != 1]
        for what, elements in (("start", offset), *(("rows", st) for st in rows)):
            form = polynomial(elements)
            rem = remainder({m: c * elem for m, c in form.items()}, nbytes)
            terms, loops = _size_terms(form, sizes, iters) if rem is None else ((), ())
            if rem == 0 or (rem is None and not terms):  # aligned, or the iterators decide it: nothing to keep
                continue  # (the need's texts cost a printing of the window: most windows are aligned)
            need = AlignmentNeed(head_text(s), s.srcinfo, written_name(s), str(param.name), str(arg), str(arg.name),
                                 elem, nbytes, what, terms, loops)
            if rem:
                raise MemoryMismatchError(f"`{head_text(s)}`: {need.misaligned(rem)}; the GPU would fault on the "
                                          "misaligned address", s.srcinfo)
            needs.append(need)
    return needs


def _size_terms(form: dict, sizes: set, iters: tuple) -> tuple:
    """(`AlignmentNeed.terms`, `AlignmentNeed.loops`) of an offset's `polynomial` (in elements), given the proc's
    size Syms and the loops around the call: ((), ()) if neither a size nor a loop whose trips a size decides
    is in it."""
    loop_of = {it.sym: it for it in iters}

    def size_factor(v) -> bool:  # a size, or an opaque term of sizes alone (`n / 2`): a number at a call
        return v in sizes or (isinstance(v, tuple) and all(size_factor(x) for x in v[1:] if not isinstance(x, int)))

    def sized_loop(v) -> bool:  # an iterator whose bounds a size decides
        bounds = [b for b in (loop_of[v].lo, loop_of[v].hi) if not isinstance(b, int)] if v in loop_of else []
        syms: list = []
        for b in bounds:
            expr_syms(b, syms)
        return bool(syms) and all(sym in sizes for sym in syms)

    groups: dict = {}
    for monomial, c in form.items():
        others = tuple(v for v in monomial if not size_factor(v))
        groups.setdefault(others, []).append((tuple(_factor_key(v) for v in monomial if size_factor(v)), c))
    if not any(factors for products in groups.values() for factors, _ in products) and not any(
            sized_loop(v) for others in groups for v in others):
        return (), ()
    terms = tuple((tuple(map(_variable_text, others)),
                   tuple(map(str, others)) if all(v in loop_of for v in others) else None,  # iterators alone
                   tuple(products))
                  for others, products in groups.items()
                  if all(v in loop_of for v in others) or any(factors for factors, _ in products))
    used = {v for others in groups for v in others if v in loop_of}
    return terms, tuple((str(it.sym), it.lo, it.hi) for it in iters if it.sym in used)


def _factor_key(v) -> object:
    """A polynomial variable made of sizes, as `_factor_value` evaluates it: a size's name, or an opaque term's
    (op, operands...) with names for Syms."""
    if isinstance(v, tuple):
        return (v[0], *(x if isinstance(x, int) else _factor_key(x) for x in v[1:]))
    return str(v)


def _factor_value(key, sizes: dict) -> Optional[int]:
    """The value of a `_factor_key` at a call's sizes (floor division and modulo, as exo's index arithmetic), or
    None where a size is not given."""
    if isinstance(key, int):
        return key
    if isinstance(key, str):
        return sizes.get(key)
    values = [_factor_value(x, sizes) for x in key[1:]]
    if any(v is None for v in values) or (key[0] in "/%" and values[1] == 0):
        return None
    return -values[0] if len(values) == 1 else INDEX_OPS[key[0]](*values)


@dataclass(frozen=True)
class AlignmentNeed:
    """A window an instr needs aligned whose start or row pitch depends on the proc's sizes (`A[i, 0:4]` of an
    `f32[M, K]` is 16-byte aligned for every i only if K % 4 == 0), or on an iterator whose trips they decide
    (`src[2 * i:2 * i + 4]`, i in `seq(0, n)`, is aligned at n = 1 only): a built proc checks it at the sizes of
    each call, before the launch, where a misaligned address would fault and end the process's CUDA context.

    `terms`: the window's offset (or row pitch) in elements, grouped by the product of other variables
    (iterators, or opaque terms such as `t / 8`) each group multiplies, as (their text, their iterators' names
    where they are iterators alone (else None), ((size factors, coefficient), ...)); a size factor is a size's
    name or an opaque term of sizes (`n / 2`, as `_factor_key`). Kept are the groups with sizes in them, those
    of iterators whose trips a size decides, and the constant one, which a call's sizes make numbers. Groups of
    iterators alone are decided by sync_check, run by run. `loops`: (name, lo, hi) of the iterators in the
    groups. `bindings`: for a need of a CPU callee, per call on the way (outermost first), the callee's size
    parameters as the caller's expressions."""

    stmt: str
    srcinfo: object
    instr: str
    param: str
    window: str
    buffer: str
    elem: int  # bytes per element
    nbytes: int
    what: str  # "start" | "rows"
    terms: tuple
    loops: tuple = ()
    bindings: tuple = ()

    def within(self, call: LoopIR.Call) -> "AlignmentNeed":
        """This need of a callee, as its caller's at `call`."""
        layer = tuple((str(param.name), arg) for param, arg in zip(call.f.args, call.args) if param.type in (T.size, T.index))
        return replace(self, bindings=(layer, *self.bindings))

    def misaligned(self, amount: int, step: str = "") -> str:
        """What is wrong: rows apart by other than a multiple of the bytes, or the start `amount` bytes past a
        boundary, or moving by `amount` with each unit of `step`."""
        if self.what == "rows":
            where = (f"has rows that are not a multiple of {self.nbytes} bytes apart (pad {self.buffer}'s rows to a "
                     f"multiple of {self.nbytes // self.elem} elements)")
        elif step:
            where = f"moves by {amount} bytes, not a multiple of {self.nbytes}, with each step of {step}"
        else:
            where = f"starts {amount} bytes past a {self.nbytes}-byte boundary"
        return f"{self.instr} needs each row of {self.param} aligned to {self.nbytes} bytes, but `{self.window}` {where}"

    def broken(self, sizes: dict) -> Optional[str]:
        """What is misaligned at these sizes (name -> value), and the assertion that would rule such sizes out
        where one size decides it; None if aligned, if the call does not run at these sizes (a loop around it
        of no trips), or if a caller's iterators decide it (sync_check's). An iterator of one trip adds its
        value to the start; one of more must step by whole multiples of the bytes."""
        for layer in self.bindings:
            sizes = {name: evaluate(e, sizes) for name, e in layer}
        trips = {}
        for name, lo, hi in self.loops:
            first, end = evaluate(lo, sizes), evaluate(hi, sizes)
            if first is not None and end is not None:
                if end <= first:
                    return None
                trips[name] = (first, end - first)
        start = 0
        for others, iters, products in self.terms:
            values = [(c, [_factor_value(f, sizes) for f in factors]) for factors, c in products]
            if any(v is None for _, vs in values for v in vs):
                return None
            amount = sum(c * math.prod(vs) for c, vs in values) * self.elem
            if iters is not None and all(trips.get(i, (0, 0))[1] == 1 for i in iters):  # the constant group too
                start += amount * math.prod(trips[i][0] for i in iters)  # one value each: part of the start
            elif amount % self.nbytes:
                return self._refusal(self.misaligned(amount, " * ".join(others)), products)
        if start % self.nbytes:
            return self._refusal(self.misaligned(start % self.nbytes), next(
                (products for others, _, products in self.terms if not others), ()))
        return None

    def _refusal(self, why: str, products: tuple) -> str:
        """The call's refusal: what is misaligned, and the assertion that would rule such sizes out where one size
        decides it."""
        sized = [(factors, c) for factors, c in products if factors]
        if len(sized) == 1 and len(sized[0][0]) == 1 and isinstance(sized[0][0][0], str) and len(products) == 1 \
                and not self.bindings:  # c n
            ((name,), c), = sized
            hint = f"`assert {name} % {self.nbytes // math.gcd(c * self.elem, self.nbytes)} == 0` in the proc"
        else:
            hint = "an assertion in the proc"
        return (f"{why}; the GPU would fault on the misaligned address: give sizes that keep it aligned "
                f"({hint} says which)")


def misaligned_need(needs: tuple, sizes: dict) -> Optional[tuple]:
    """(the first `AlignmentNeed` these sizes break, what `broken` says of it), or None."""
    return next(((need, why) for need in needs if (why := need.broken(sizes)) is not None), None)


def _variable_text(v) -> str:
    """A polynomial's variable as the program writes it: a Sym's name, or an opaque term's expression."""
    if isinstance(v, tuple) and len(v) == 3:
        return f"({_variable_text(v[1])} {v[0]} {_variable_text(v[2])})"
    if isinstance(v, tuple):
        return f"-{_variable_text(v[1])}"
    return str(v)


def _windows_of_known_layout(s: LoopIR.Call, params: tuple, shapes: dict):
    """(parameter, window argument, its buffer's shape, bytes) for each (parameter name, bytes) of `params` whose
    argument windows a buffer of known shape (of a window argument, the layout is the caller's: unknown here)."""
    args = {str(param.name): (param, arg) for param, arg in zip(s.f.args, s.args)}
    for name, nbytes in params:
        param, arg = args[name]
        shape = shapes.get(arg.name) if isinstance(arg, LoopIR.WindowExpr) else None
        if shape is not None and len(shape) == len(arg.idx):
            yield param, arg, shape, nbytes


def _window_layout(arg: LoopIR.WindowExpr, shape: list) -> tuple:
    """(offset of the window's first element, row-major stride of each buffer dimension), in elements, as index
    expressions of the window's bounds and the buffer's shape."""
    srcinfo = arg.srcinfo
    strides = [LoopIR.Const(1, T.int, srcinfo)]
    for extent in reversed(shape[1:]):
        strides.insert(0, LoopIR.BinOp("*", extent, strides[0], T.index, srcinfo))
    offset = LoopIR.Const(0, T.index, srcinfo)
    for w, stride in zip(arg.idx, strides):
        first = w.pt if isinstance(w, LoopIR.Point) else w.lo
        offset = LoopIR.BinOp("+", offset, LoopIR.BinOp("*", first, stride, T.index, srcinfo), T.index, srcinfo)
    return offset, strides


def _check_smem_box(s: LoopIR.Call, boxes: tuple, shapes: dict) -> None:
    """TMA moves a shared-memory window as one box: its rows one after another from the window's first element,
    which must be aligned (128 bytes). A window whose rows are not adjacent in its buffer (a slice of wider rows)
    would be read or written elsewhere than the program says; a misaligned one faults. Said here where the
    window's buffer and bounds decide it; sync_check decides the rest at its sizes (sync/lower.py)."""
    for param, arg, shape, nbytes in _windows_of_known_layout(s, boxes, shapes):
        rows, cols = (constant_value(d) for d in param.type.shape()[-2:])
        if rows != 1:
            _check_row_pitch(s, arg, shape, cols,
                             f"{written_name(s)} moves {param.name} as one {rows} x {cols} box whose rows follow each "
                             f"other in shared memory",
                             f"give it whole rows of a buffer {cols} elements wide (e.g. a [{rows}, {cols}] tile)")
        _check_start(s, param, arg, shape, nbytes, "the GPU would fault on the misaligned address")


def _check_smem_desc(s: LoopIR.Call, operands: tuple, shapes: dict) -> None:
    """wgmma finds a shared-memory operand through a descriptor that holds only its first element's address, in
    16-byte units, and the swizzle: it reads the operand's rows as its buffer's consecutive swizzle rows (in 8-row
    atoms). A window of rows further apart (the first row of each of several tiles) or a start between two 16-byte
    units computes on other elements than the program names (on an H200, 407 of 512 elements of C: audit of
    session 33). The window may start at any row, and at any 16-byte K offset inside a row (both correct on an
    H200). The rows' pitch is decided here (a swizzled buffer's shape is a constant); a start that depends on an
    iterator, by sync_check (sync/lower.py)."""
    for param, arg, shape, nbytes in _windows_of_known_layout(s, operands, shapes):
        rows, cols = (constant_value(d) for d in param.type.shape()[-2:])
        row = constant_value(shape[-1])
        _check_row_pitch(s, arg, shape, row,
                         f"{written_name(s)} reads {param.name} through a wgmma descriptor, which takes its rows to be "
                         f"consecutive rows of {arg.name}, {row} elements (one {row * elem_bytes(arg.type.basetype())}-byte swizzle "
                         f"row) apart",
                         f"take its rows from {arg.name}'s second-to-last dimension, each dimension before it at one "
                         f"index (as {arg.name}[i, 0:{rows}, 0:{cols}] of an [n, {rows}, {row}] buffer)")
        _check_start(s, param, arg, shape, nbytes,
                     "the descriptor holds the address in 16-byte units: wgmma would read from the unit's start")


def _check_row_pitch(s: LoopIR.Call, arg: LoopIR.WindowExpr, shape: list, pitch: Optional[int], needs: str,
                     fix: str) -> None:
    """The rows of the window `arg` (its second-to-last sliced dimension) are `pitch` elements apart in its buffer
    of shape `shape`, as the instr `needs`, where both are constants."""
    row_dim = [k for k, w in enumerate(arg.idx) if isinstance(w, LoopIR.Interval)][-2]
    apart = constant_value(_window_layout(arg, shape)[1][row_dim])
    if pitch is not None and apart is not None and apart != pitch:
        raise MemoryMismatchError(
            f"`{head_text(s)}`: {needs}, but the rows of `{arg}` are {apart} elements apart in {arg.name}: {fix}",
            s.srcinfo,
        )


def _check_start(s: LoopIR.Call, param, arg: LoopIR.WindowExpr, shape: list, nbytes: int, why: str) -> None:
    """The window `arg` starts at a multiple of `nbytes` bytes of its buffer of shape `shape`, where its bounds
    decide it; `why`: what happens otherwise."""
    offset = _window_layout(arg, shape)[0]
    size = LoopIR.Const(elem_bytes(arg.type.basetype()), T.int, arg.srcinfo)
    rem = constant_remainder(LoopIR.BinOp("*", size, offset, T.index, arg.srcinfo), nbytes)
    if rem:
        raise MemoryMismatchError(
            f"`{head_text(s)}`: {written_name(s)} needs {param.name} to start at a multiple of {nbytes} bytes, but "
            f"`{arg}` starts {rem} bytes past one; {why}",
            s.srcinfo,
        )


def _check_arg_memories(s: LoopIR.Call, memories: dict) -> None:
    """Each buffer argument is in its parameter's memory (exo checks this only when generating code,
    with a TypeError); tensor maps and barriers have their own checks."""
    for param, arg in zip(s.f.args, s.args):
        mem = memories.get(getattr(arg, "name", None))
        if (not param.type.is_numeric() or mem is None or issubclass(mem, BarrierMemory)
                or tensor_map_spec(arg.name) is not None or issubclass(mem, param.mem)):
            continue
        raise MemoryMismatchError(
            f"`{head_text(s)}`: {arg.name} is in {mem.name()}, but {written_name(s)} takes "
            f"{param.name} in {param.mem.name()}",
            s.srcinfo,
        )


def _launches_kernels(proc_ir: LoopIR.proc) -> bool:
    """Whether a proc's body holds a `with CudaDeviceFunction` block (at any depth)."""
    return any(
        isinstance(s, LoopIR.For) and isinstance(s.loop_mode, WithBlock) and isinstance(s.loop_mode.ctx, CudaDeviceFunction)
        for s in walk_stmts(proc_ir.body)
    )


def _check_instr_tl(s: LoopIR.Call, info: StmtInfo, tl: InstrTl) -> None:
    if tl == info.instr_tl:
        return
    if tl == cpu_in_order_instr:
        hint = "it is a CPU instruction: call it outside the CudaDeviceFunction"
    elif info.device_scope == "cpu":
        hint = "it is a CUDA instruction: call it inside a CudaDeviceFunction"
    elif tl.is_async:
        hint = f"put it inside `with CudaAsync({tl.name}):`"
    else:
        hint = f"move it out of the CudaAsync({info.instr_tl.name}) block"
    raise TimelineError(
        f"wrong instr-tl: {written_name(s)} runs on {tl.name}, but this statement is on {info.instr_tl.name}; {hint}",
        s.srcinfo,
    )


_VERB = {"alloc": "allocated", "read": "read", "write": "written"}


def _check_access(s: LoopIR.stmt, info: StmtInfo, memories: dict, sym, action: str,
                  tl: Optional[InstrTl] = None, scalar=None) -> None:
    """May `sym`'s memory be allocated/read/written on instr-tl `tl` (default: the scope's)? `scalar`: sym's type where
    it is one value (`a: f32`), not a tensor."""
    tl = tl or info.instr_tl
    mem = memories.get(sym)
    if mem is None or issubclass(mem, BarrierMemory):
        return
    allowed = _allowed_tls(mem, action)
    if tl in allowed:
        return
    names = ", ".join(sorted(t.name for t in allowed)) or "no instr-tl"
    hint = _memory_hint(mem, action, info, sym, scalar)
    raise TimelineError(
        f"wrong instr-tl: `{head_text(s)}`: {sym} @ {mem.name()} is {_VERB[action]} on {tl.name}, but "
        f"{mem.name()} may be {_VERB[action]} only on {names}{hint}",
        s.srcinfo,
    )


def _allowed_tls(mem: type[Memory], action: str) -> frozenset:
    if issubclass(mem, CudaMemory):
        return getattr(mem, f"{action}_tls")
    return frozenset({cpu_in_order_instr})


def _memory_hint(mem: type[Memory], action: str, info: StmtInfo, sym, scalar=None) -> str:
    """What to do instead; `scalar`: sym's type where the access is of that one value."""
    if not issubclass(mem, CudaMemory) and scalar is not None and info.device_scope == "cuda":
        return (f"; {mem.name()} is CPU memory, and device code takes no scalar data yet: pass `{sym}: {scalar}` as a "
                f"tensor of one element, `{sym}: {scalar}[1] @ CudaGmemLinear`, and use {sym}[0]")
    if not issubclass(mem, CudaMemory) and action == "alloc":
        return (f"; {mem.name()} is CPU memory: allocate it @ CudaSmemLinear (shared by the CTA) or @ CudaRmem "
                "(registers), e.g. with set_memory")
    if not issubclass(mem, CudaMemory):
        return f"; {mem.name()} is CPU memory: give device code CudaGmemLinear data"
    if action == "alloc" and info.device_scope == "cpu":
        return (
            f"; {mem.name()} is allocated inside a CudaDeviceFunction, within its cuda_tasks loops "
            f"(was the allocation lifted out of the device function?)"
        )
    if action == "alloc" and not mem.device_allocated:
        return f"; {mem.name()} is allocated by CPU code: allocate it outside the CudaDeviceFunction"
    if info.device_scope == "cpu":
        return f"; {mem.name()} is accessed only by CUDA code, inside a CudaDeviceFunction"
    return ""


def _check_reads(s: LoopIR.stmt, info: StmtInfo, memories: dict, e: LoopIR.expr) -> None:
    if isinstance(e, (LoopIR.Read, LoopIR.WindowExpr)) and tensor_map_spec(e.name) is not None and info.device_scope == "cuda":
        raise TimelineError(f"{e.name} is a tensor map: CUDA code reads it only through TMA instrs "
                            "(Sm90_copy_tensor_to_smem_*), not as data", s.srcinfo)
    if isinstance(e, (LoopIR.Read, LoopIR.WindowExpr)) and e.name in memories:
        _check_access(s, info, memories, e.name, "read", scalar=None if e.type.is_tensor_or_window() else e.type)
        _check_scalar_access(s, memories, e.name)
    for child in _subexprs(e):
        _check_reads(s, info, memories, child)


def _subexprs(e: LoopIR.expr) -> list:
    if isinstance(e, LoopIR.Read):
        return list(e.idx)
    if isinstance(e, LoopIR.USub):
        return [e.arg]
    if isinstance(e, LoopIR.BinOp):
        return [e.lhs, e.rhs]
    if isinstance(e, LoopIR.Extern):
        return list(e.args)
    return []


def _param_effects(proc_ir: LoopIR.proc) -> dict:
    """For each parameter of a callee, which of "read"/"write" its body does to it (through calls too)."""
    effects: dict = {}
    aliases: dict = {}

    def base(sym):
        return aliases.get(sym, sym)

    def note(sym, action: str) -> None:
        effects.setdefault(base(sym), set()).add(action)

    def reads(e: LoopIR.expr) -> None:
        if isinstance(e, (LoopIR.Read, LoopIR.WindowExpr)):
            note(e.name, "read")
        for child in _subexprs(e):
            reads(child)

    for s in walk_stmts(proc_ir.body):
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
            note(s.name, "write")
            if isinstance(s, LoopIR.Reduce):
                note(s.name, "read")
            for e in [*s.idx, s.rhs]:
                reads(e)
        elif isinstance(s, LoopIR.WindowStmt):
            aliases[s.name] = base(s.rhs.name)
        elif isinstance(s, LoopIR.Call):
            inner = _param_effects(s.f)
            for param, arg in zip(s.f.args, s.args):
                if isinstance(arg, (LoopIR.Read, LoopIR.WindowExpr)):
                    for action in inner.get(param.name, ()):
                        note(arg.name, action)
    return effects
