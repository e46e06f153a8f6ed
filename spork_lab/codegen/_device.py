"""CUDA C++ for one device function: a persistent `__global__` kernel and its launcher.

The kernel body is compiled by `CudaCompiler`, a subclass of exo's C
`Compiler` (so expressions, windows and instr templates print exactly as exo
prints them), overriding what differs on the GPU: loop modes, device
allocations and synchronization statements. Distributed memory (seed 000,
rule 4): the leading distributed dimensions of an allocation and the leading
indices of its accesses and windows are stripped before exo's printing and
the memories' and instrs' templates see them, so each owner declares one
shard and memory and instr authors never see distributed dimensions.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Optional

from exo.backend.LoopIR_compiler import Compiler, _window_struct
from exo.backend.mem_analysis import MemoryAnalysis
from exo.backend.prec_analysis import PrecisionAnalysis
from exo.backend.win_analysis import WindowAnalysis
from exo.core.LoopIR import LoopIR, T, get_writes_of_stmts
from exo.rewrite.range_analysis import constant_bound

from ..analysis import Analysis
from ..analysis.checks import plain_call_in_device_code
from ..core.blocks import CudaAsync, CudaDeviceFunction, CudaWarps
from ..core.dtypes import BF16, BF16_C_NAME, cuda_source
from ..core.instrs import LoweredArg, LoweredCall, instr_info, multicast_dst, template_call_of
from ..core.ir import constant_value, expr_vars, walk_stmts
from ..core.loop_modes import CudaThreads, WithBlock
from ..core.memories import SMEM_PER_CTA, CudaMemory, elem_bytes
from ..core.sync_stmts import BarrierMemory, is_barrier_alloc, sync_spec_of, trailing_of, written_name
from ..core.tensor_maps import tensor_map_spec
from ..errors import CodegenError
from ..platforms.cuda import CudaGmemLinear
from ..platforms.Sm90 import TENSOR_MAP_DTYPES
from ._c_exprs import FaithfulExprs
from ._conversions import IntConversions
from ._externs import ExternCalls, cuda_definitions
from ._collectives import executing_collectives, iter_key, new_op, scope_tilings, stmt_pairs
from ._sync import NamedBarrierIds, lower_fence, position_expr, split_sync_lines
from ._windows import WindowAliases, with_alias_sources
from .barrier_text import _CLUSTER_SYNC, lowering, mbarrier_address

STATIC_SMEM_LIMIT = 48 * 1024  # above this a kernel needs dynamic shared memory and the opt-in attribute
SMEM_ALIGN = 128
UNROLL_LIMIT = 64  # seq loops with a constant trip count up to this are fully unrolled


@dataclass
class DeviceFunction:
    """A `with CudaDeviceFunction` block lifted out of a CPU proc, with the variables it uses."""

    name: str  # kernel name; the launcher is `{name}_launch`
    block: LoopIR.For
    args: list  # LoopIR.fnarg, in launch order
    analysis: Analysis  # of the proc the block belongs to

    @property
    def ctx(self) -> CudaDeviceFunction:
        return self.block.loop_mode.ctx

    @property
    def task_depth(self) -> int:
        """How many cuda_tasks loops the block's nest has (the analysis derived the nest)."""
        return next(len(fn.tasks) for fn in self.analysis.device_functions if fn.block is self.block)

    def barriers(self) -> dict:
        """Sym -> BarrierInfo of the barriers allocated inside the block."""
        inside = {s.name for s in walk_stmts(self.block.body) if is_barrier_alloc(s)}
        return {sym: info for sym, info in self.analysis.barriers.items() if sym in inside}


@dataclass
class DeviceCode:
    kernel: str
    launcher: str
    launcher_decl: str
    window_structs: set = field(default_factory=set)
    uses_mbarriers: bool = False  # the .cu then needs spork_lab.codegen.barrier_text's prelude
    cluster: int = 1
    srcinfo: object = None
    cuda_globals: tuple = ()  # file-scope text its instrs need (InstrInfo.cuda_includes), in first-use order
    uses_tensor_maps: bool = False  # the .cu then needs the host encoder of CUtensorMaps
    smem_bytes: int = 0  # shared memory per CTA, static and dynamic, as laid out
    smem_parts: tuple = ()  # (what, bytes, srcinfo or None) making up smem_bytes, largest allocation first
    instr_targets: tuple = ()  # (InstrInfo.target, instr name, srcinfo) of the first instr needing each target
    extern_globals: tuple = ()  # file-scope definitions of the extern helpers it calls (`_externs.cuda_definitions`)


def param_decls(df: DeviceFunction, names: dict, launcher: bool = False) -> list:
    """C parameters of the kernel (or, `launcher`, of its launcher: tensor maps arrive there as pointer and strides)."""
    written = with_alias_sources((name for name, _ in get_writes_of_stmts(df.block.body)), df.block.body)
    params = []
    for a in df.args:
        nm = names.get(a.name, str(a.name))
        if tensor_map_spec(a.name) is not None:
            n = len(a.type.shape())
            params.append(f"const void *{nm}_data, " + ", ".join(f"long long {nm}_s{i}" for i in range(n))
                          if launcher else f"const __grid_constant__ CUtensorMap {nm}")
        elif a.type in (T.size, T.index, T.stride):
            params.append(f"int_fast32_t {nm}")
        elif a.type == T.bool:
            params.append(f"bool {nm}")
        elif a.type.is_tensor_or_window() and not a.type.is_win() and a.mem is CudaGmemLinear:
            const = "" if a.name in written else "const "
            params.append(f"{const}{a.type.basetype().ctype()} *{nm}")
        else:  # sl.analyze refuses every other argument (analysis.checks._check_kernel_args)
            raise CodegenError(f"internal: {a.name} : {a.type} cannot be a kernel argument", df.block.srcinfo)
    return params


def compile_device_function(df: DeviceFunction) -> DeviceCode:
    proc = LoopIR.proc(df.name, df.args, [], [df.block], None, df.block.srcinfo)
    proc = PrecisionAnalysis().run(proc)
    proc = WindowAnalysis().apply_proc(proc)
    proc = MemoryAnalysis().run(proc)
    comp = CudaCompiler(proc, df)
    ctx = df.ctx
    threads = ctx.threads_per_cta
    params = ", ".join(param_decls(df, comp.env))
    smem = comp.smem_bytes
    align = comp.smem_align
    if smem and align > SMEM_ALIGN:  # align the pool's start by hand: the slack is part of the pool
        smem += align
    allocs = sorted(comp.smem_allocs.values(), key=lambda part: -part[1])
    barrier_bytes = sum(lowering(i.mem).smem_bytes(i) for i in comp.barriers.values())
    total = smem + barrier_bytes
    padding = smem - sum(part[1] for part in allocs)
    parts = (*allocs, *([("mbarriers", barrier_bytes, None)] if barrier_bytes else []),
             *([("alignment", padding, None)] if padding else []))
    dynamic = total > STATIC_SMEM_LIMIT
    raw = "exo_smem" if align <= SMEM_ALIGN else "exo_smem_raw"
    if not smem:
        smem_decl = []
    elif dynamic:
        smem_decl = [f"  extern __shared__ __align__({SMEM_ALIGN}) char {raw}[];"]
    else:
        smem_decl = [f"  __shared__ __align__({SMEM_ALIGN}) char {raw}[{smem}];"]
    if smem and align > SMEM_ALIGN:
        smem_decl.append(f"  char *exo_smem = {raw} + (({align}u - ((unsigned) __cvta_generic_to_shared({raw}) % {align}u)) % {align}u);")
    cluster = ctx.clusterDim
    arch_guard = [
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900",
        f'#error "{df.name}: clusterDim={cluster} needs sm_90 or newer; build for sm_90a"',
        "#endif",
    ]
    kernel = "\n".join(
        [
            f"__global__ void __launch_bounds__({threads}, {ctx.blocks_per_sm})",
            f"{df.name}({params})",
            "{",
            *(arch_guard if cluster > 1 else []),
            *smem_decl,
            *(f"  {line}" for line in comp.kernel_lines),
            *([f"  {_CLUSTER_SYNC}  // no CTA exits while a peer may still signal or write its shared memory"]
              if cluster > 1 else []),
            "}",
        ]
    )
    kernel = cuda_source(kernel)
    maps = [a for a in df.args if tensor_map_spec(a.name) is not None]
    launch_args = ", ".join([df.name, *(f"{comp.env[a.name]}_map" if a in maps else comp.env[a.name] for a in df.args)])
    decl = f'extern "C" int {df.name}_launch({", ".join(param_decls(df, comp.env, launcher=True))})'
    attr = [
        "  cudaLaunchAttribute exo_attr[1];",
        "  exo_attr[0].id = cudaLaunchAttributeClusterDimension;",
        f"  exo_attr[0].val.clusterDim.x = {cluster};",
        "  exo_attr[0].val.clusterDim.y = 1;",
        "  exo_attr[0].val.clusterDim.z = 1;",
        "  exo_cfg.attrs = exo_attr;",
        "  exo_cfg.numAttrs = 1;",
    ]
    opt_in = [
        "  static bool exo_attr_set = false;",
        "  if (!exo_attr_set) {",
        f"    exo_err = cudaFuncSetAttribute({df.name}, cudaFuncAttributeMaxDynamicSharedMemorySize, {smem});",
        "    if (exo_err != cudaSuccess) return (int) exo_err;",
        "    exo_attr_set = true;",
        "  }",
    ]
    launcher = cuda_source("\n".join(
        [
            f"{decl}",
            "{",
            f"  const long long exo_tasks = {comp.task_count_host};",
            "  if (exo_tasks <= 0) return 0;",
            "  if (exo_tasks > 2147483647LL) return (int) cudaErrorInvalidValue;  // the kernel counts tasks in int",
            "  cudaError_t exo_err = cudaSuccess;",
            *(line for a in maps for line in _encode_lines(a, comp)),
            "  int exo_grid = 0;",
            *(opt_in if dynamic else []),
            "  cudaLaunchConfig_t exo_cfg = {};",
            f"  exo_cfg.blockDim = dim3({threads});",
            f"  exo_cfg.dynamicSmemBytes = {smem if dynamic else 0};",
            "  exo_cfg.stream = exo_stream;",
            *(attr if cluster > 1 else []),
            "  static int exo_resident = 0;",
            f"  exo_err = exo_persistent_grid({ctx.blocks_per_sm}, {cluster}, exo_tasks, (const void *) {df.name}, "
            "&exo_cfg, &exo_resident, &exo_grid);",
            "  if (exo_err != cudaSuccess) return (int) exo_err;",
            "  exo_cfg.gridDim = dim3(exo_grid);",
            f"  exo_err = cudaLaunchKernelEx(&exo_cfg, {launch_args});",
            "  if (exo_err == cudaSuccess) exo_err = cudaGetLastError();",
            "  return (int) exo_err;",
            "}",
        ]
    ))
    uses_mbarriers = any(lowering(i.mem).device_helpers for i in comp.barriers.values())
    # launcher_decl keeps exo's C type names: the host .c declares the launcher with it
    return DeviceCode(kernel, launcher, decl + ";", set(comp.window_defns), uses_mbarriers, cluster, df.block.srcinfo,
                      tuple(comp.cuda_globals), bool(maps), total, parts,
                      tuple((t, *first) for t, first in comp.instr_targets.items()),
                      cuda_definitions(comp.extern_uses))


def check_smem(code: DeviceCode, cc: Optional[int]) -> None:
    """Shared memory over the per-CTA limit fails only at launch: refuse it here, naming what takes it. The
    limit is that of compute capability `cc`; without one (or one not in SMEM_PER_CTA) the largest any target
    gives, sm_90's: a kernel over it runs nowhere, and an Sm80 kernel under it may be meant for an H100."""
    if cc in SMEM_PER_CTA:
        target, why = cc, "the arch built for"
    else:
        target = max(SMEM_PER_CTA, key=SMEM_PER_CTA.get)
        given = "no arch given" if cc is None else f"no limit known here for sm_{cc}"
        why = f"{given}: the most any target gives one CTA; pass arch= to check a smaller target's"
    limit = SMEM_PER_CTA[target]
    if code.smem_bytes <= limit:
        return
    shown = [f"{what} {n} bytes" + (f" (line {where.lineno})" if where is not None else "")
             for what, n, where in code.smem_parts[:4]]
    rest = code.smem_parts[4:]
    if rest:
        shown.append(f"{len(rest)} more {sum(n for _, n, _ in rest)} bytes")
    largest = code.smem_parts[0][2] or code.srcinfo
    raise CodegenError(
        f"the device function at line {code.srcinfo.lineno} needs {code.smem_bytes} bytes of shared memory per CTA, "
        f"over the {limit} bytes ({limit // 1024} KiB) one CTA may use on sm_{target} ({why}): {', '.join(shown)}; "
        "shrink the largest (fewer ring stages, smaller tiles)",
        largest,
    )


def _config_error(config, field: str, action: str, srcinfo) -> CodegenError:
    """exo keeps a config in the host's context struct, which device code cannot reach (nvcc: `ctxt` undefined)."""
    name = f"{config.name()}.{field}"
    advice = ("give the proc the value as an argument instead (a size, or data in a one-element tensor "
              "`f32[1] @ CudaGmemLinear`)" if action == "read" else "write configs in CPU code")
    return CodegenError(f"config {name} is {action} in CUDA code, but configs live in the host's context struct, "
                        f"which CUDA code cannot reach: {advice}", srcinfo)


def _encode_lines(a, comp) -> list:
    """Launcher lines encoding the CUtensorMap of tensor-map argument `a` (exo_err set on failure)."""
    nm, spec = comp.env[a.name], tensor_map_spec(a.name)
    shape = a.type.shape()
    ctype = a.type.basetype().ctype()
    dtype = TENSOR_MAP_DTYPES.get({"_Float16": "__half", BF16_C_NAME: "__nv_bfloat16"}.get(ctype, ctype))
    if dtype is None or len(spec.box) != len(shape):
        raise CodegenError(f"tensor map {a.name}: TMA copies f32, f16 and bf16 tensors of the box's rank "
                           f"({len(spec.box)}), not {a.type}", a.srcinfo)
    dims = ", ".join(f"(long long) ({comp.comp_e(d)})" for d in shape)
    strides = ", ".join(f"{nm}_s{i}" for i in range(len(shape)))
    return [
        f"  CUtensorMap {nm}_map;",
        f"  {{ const long long d[] = {{{dims}}}, s[] = {{{strides}}}; const int b[] = {{{', '.join(map(str, spec.box))}}};",
        f"    exo_err = spork_encode_tensor_map(&{nm}_map, {dtype}, {len(shape)}, {nm}_data, d, s, b, "
        f"(int) sizeof({ctype}), {spec.swizzle}); }}",
        "  if (exo_err != cudaSuccess) return (int) exo_err;",
    ]


class CudaCompiler(IntConversions, ExternCalls, FaithfulExprs, WindowAliases, Compiler):
    """exo's C compiler, taught the Exo-GPU loop modes, device memories and sync statements."""

    index_bits = 32  # iterators and indices are `int` in device code

    def __init__(self, proc: LoopIR.proc, df: DeviceFunction):
        block = proc.body[0]
        self._ctx: CudaDeviceFunction = block.loop_mode.ctx
        self._tilings = scope_tilings(df.analysis, df.block, block)
        self._dist = {sym: a.dims for sym, a in df.analysis.dist.items() if a.is_distributed}  # Sym -> leading dims
        self._tiling_stack = []
        self._iter_syms = {}
        self._smem_offsets: dict = {}
        self.smem_bytes = 0
        self.smem_align = SMEM_ALIGN  # the largest alignment an allocation of the pool needs
        self.smem_allocs: dict = {}  # id(alloc) -> (name, bytes, srcinfo) of the pool's allocations
        self.cuda_globals: list = []  # InstrInfo.cuda_includes of the instrs used, in first-use order
        self.instr_targets: dict = {}  # InstrInfo.target -> (instr name, srcinfo) of its first use
        self._analysed = stmt_pairs(df.block, block)  # id(compiled stmt) -> the analysed statement
        self._barrier_ids = NamedBarrierIds(self._ctx.threads_per_cta)
        self._proxy_fence = df.analysis.result("proxy").fence(self._ctx.clusterDim)
        self.barriers: dict = df.barriers()  # Sym -> BarrierInfo; names become C names in _device_function
        self._task_depth = df.task_depth
        self._warp_name = None
        self.task_count_host = ""
        self.kernel_lines: list = []
        super().__init__(proc, "void", is_public_decl=True)
        self.kernel_lines = list(self._lines)

    # ---- statements ----

    def comp_s(self, s):
        if isinstance(s, LoopIR.For):
            mode = s.loop_mode
            if isinstance(mode, WithBlock):
                return self._with_block(s, mode.ctx)
            if isinstance(mode, CudaThreads):
                return self._cuda_threads(s)
            if isinstance(mode, LoopIR.Par):
                raise CodegenError("par loops (OpenMP) cannot appear in CUDA code", s.srcinfo)
            return self._seq_loop(s)
        if isinstance(s, LoopIR.WriteConfig):
            raise _config_error(s.config, s.field, "written", s.srcinfo)
        if isinstance(s, LoopIR.Alloc):
            return self._alloc(s)
        if isinstance(s, LoopIR.Free) and isinstance(s.mem, type) and issubclass(s.mem, BarrierMemory):
            info = self.barriers[s.name]
            for line in lowering(info.mem).scope_end_lines(info):
                self.add_line(line)
            return None
        if isinstance(s, LoopIR.Free) and isinstance(s.mem, type) and issubclass(s.mem, CudaMemory):
            return None  # device allocations end with their scope
        if isinstance(s, LoopIR.Call):
            return self._call(s)
        if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)) and s.name in self._dist:
            s = s.update(idx=s.idx[self._dist[s.name] :])
        return super().comp_s(s)

    def get_window_type(self, typ, is_const=None):
        """exo's window structs, plus bf16 (exo's table of struct names has no entry for it)."""
        base = (typ.as_tensor if isinstance(typ, T.Window) else typ.type).basetype()
        if not isinstance(base, BF16):
            return super().get_window_type(typ, is_const)
        if isinstance(typ, T.Window):
            n_dims, is_const = len(typ.as_tensor.shape()), typ.src_buf not in self.non_const if is_const is None else is_const
        else:
            n_dims, is_const = len(typ.type.shape()), typ.name not in self.non_const if is_const is None else is_const
        win = _window_struct("bf16", base.ctype(), n_dims, is_const)
        self.window_defns.add(win)
        return win.name

    def _seq_loop(self, s):
        """A seq loop as exo prints it, but with an `int` counter where exo's range analysis bounds its values,
        up to hi where it stops, within 32 bits (else `long long`: sizes are below 2^31 each, but seq(n, n + 4)
        passes it), and fully unrolled when its trip count is a constant of at most UNROLL_LIMIT: fragment and
        accumulator arrays are then indexed by constants only, so they stay in registers."""
        lo, hi = self.comp_e(s.lo), self.comp_e(s.hi)
        env = self.range_env.env
        ctype = "int" if self._fits((constant_bound(s.lo, env)[0], constant_bound(s.hi, env)[1])) else "long long"
        self.push(only="env")
        itr = self.new_varname(s.iter, typ=T.index)
        self.range_env.add_loop_iter(s.iter, s.lo, s.hi)
        lo_val, hi_val = constant_value(s.lo), constant_value(s.hi)
        if lo_val is not None and hi_val is not None and hi_val - lo_val <= UNROLL_LIMIT:
            self.add_line("#pragma unroll")
        self.add_line(f"for ({ctype} {itr} = {lo}; {itr} < {hi}; {itr}++) {{")
        self.push(only="tab")
        self.comp_stmts(s.body)
        self.pop()
        self.add_line("}")
    # ---- distributed memory: accesses see one shard (rule 4) ----

    def comp_e(self, e, prec=0):
        if isinstance(e, LoopIR.ReadConfig):
            raise _config_error(e.config, e.field, "read", e.srcinfo)
        d = self._dist.get(getattr(e, "name", None))
        if d and isinstance(e, LoopIR.Read) and e.idx:
            e = e.update(idx=e.idx[d:])
        elif d and isinstance(e, LoopIR.StrideExpr):
            if e.dim < d:
                raise CodegenError(f"stride({e.name}, {e.dim}) is the stride of a distributed dimension", e.srcinfo)
            e = e.update(dim=e.dim - d)
        return super().comp_e(e, prec)

    def window_struct_fields(self, e):
        d = self._dist.get(e.name)
        return super().window_struct_fields(e.update(idx=e.idx[d:]) if d else e)

    def comp_fnarg(self, e, fn, i, *, prec=0):
        """Windows as C++ aggregates: nvcc rejects C compound literals in device code."""
        text = super().comp_fnarg(e, fn, i, prec=prec)
        if isinstance(e, LoopIR.WindowExpr):
            return text.replace("(struct ", "", 1).replace("){", "{", 1)
        return text

    def _block(self, body, head: str = "{"):
        self.add_line(head)
        self.push()
        self.comp_stmts(body)
        self.pop()
        self.add_line("}")

    def _with_block(self, s, ctx):
        if isinstance(ctx, CudaDeviceFunction):
            return self._device_function(s)
        if isinstance(ctx, CudaAsync):
            self._tiling_stack.append(self._tilings[id(s)])
            self._block(s.body, f"{{ // CudaAsync({ctx.instr_tl})")
            self._tiling_stack.pop()
            return None
        if isinstance(ctx, CudaWarps):
            parent, body = self._tiling_stack[-1], self._tilings[id(s)]
            if ctx.name is not None and ctx.name != self._warp_name:
                return None  # another warp name's code path
            _, cond = self._index(parent, body) if ctx.lo is not None else (None, None)
            self._tiling_stack.append(body)
            self._block(s.body, f"if ({cond}) {{" if cond else f"{{ // {ctx}")
            self._tiling_stack.pop()
            return None
        raise CodegenError(f"{ctx} cannot appear inside CUDA code", s.srcinfo)

    def _device_function(self, s):
        ctx: CudaDeviceFunction = s.loop_mode.ctx
        tasks, body = [], s.body
        for _ in range(self._task_depth):
            tasks.append(body[0])
            body = body[0].body
        task_syms = {t.iter for t in tasks}
        counts = []
        for t in tasks:
            if (expr_vars(t.lo) | expr_vars(t.hi)) & task_syms:
                raise CodegenError("not yet supported: cuda_tasks bounds that depend on other task iterators", t.srcinfo)
            lo, hi = self.comp_e(t.lo), self.comp_e(t.hi)
            counts.append(hi if lo == "0" else f"({hi}) - ({lo})")
        self.task_count_host = " * ".join(f"(long long) ({c})" for c in counts)
        cluster = ctx.clusterDim
        if cluster > 1:
            self.add_line(f"const int exo_thread = cooperative_groups::this_cluster().block_rank() * {ctx.threads_per_cta} + threadIdx.x;")
        else:
            self.add_line("const int exo_thread = threadIdx.x;")
        for k, c in enumerate(counts):
            self.add_line(f"const int exo_count_{k} = {c};")
        self._kernel_scope_barriers()
        self.add_line("const int exo_tasks = " + " * ".join(f"exo_count_{k}" for k in range(len(counts))) + ";")
        top = self._tilings[id(tasks[-1])]
        shared = self._shared_warpgroup_names(ctx.warp_config) if ctx.warp_config is not None else set()
        if shared:
            self._setmaxnreg_per_warpgroup([w for w in ctx.warp_config if w.name in shared])
        paths = [(None, None)] if ctx.warp_config is None else [(w, ctx.warp_range(w.name)) for w in ctx.warp_config]
        for n, (warp, rng) in enumerate(paths):
            self._warp_name = warp.name if warp else None
            if warp is not None:
                lo = [f"threadIdx.x / 32 >= {rng[0]}"] if rng[0] else []
                cond = " && ".join(lo + [f"threadIdx.x / 32 < {rng[1]}"])
                self.add_line(f"{'if' if n == 0 else '} else if'} ({cond}) {{  // warps named {warp.name!r}")
                self.push(only="tab")
                if warp.setmaxnreg is not None and warp.name not in shared:
                    self._setmaxnreg(warp.setmaxnreg)
            self._task_loop(tasks, body, top, cluster)
            if warp is not None:
                self._tab = self._tab[:-2]
        if ctx.warp_config is not None:
            self.add_line("}")

    def _kernel_scope_barriers(self):
        """Give each barrier its C name and emit what lives for the whole kernel (mbarriers, counters)."""
        for sym, info in self.barriers.items():
            self.barriers[sym] = info = replace(info, name=self.new_varname(sym, typ=info.alloc.type, mem=info.mem))
            for line in lowering(info.mem).kernel_scope_lines(info):
                self.add_line(line)

    @staticmethod
    def _shared_warpgroup_names(warp_config) -> set:
        """Names with setmaxnreg whose warps share a warpgroup with another name's (the Sm90 GEMM's producer and
        unused warps): PTX wants every warp of a warpgroup to execute the same setmaxnreg instruction, so theirs is
        one instruction per warpgroup before the branches by name. Any other name's setmaxnreg opens its own branch,
        where ptxas gives the code after it that register budget (consumers before their branch ran 11% slower)."""
        names = [w.name for w in warp_config for _ in range(w.count)]
        groups = [set(names[g : g + 4]) for g in range(0, len(names), 4)]
        budgets = {w.name for w in warp_config if w.setmaxnreg is not None}
        return {name for group in groups if len(group) > 1 for name in group} & budgets

    def _setmaxnreg_per_warpgroup(self, warps) -> None:
        """One setmaxnreg per run of warpgroups of `warps` with the same budget."""
        budgets = {}
        for w in warps:
            lo, hi = self._ctx.warp_range(w.name)
            for g in range(lo // 4, -(-hi // 4)):
                budgets[g] = w.setmaxnreg
        self.add_line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
        for regs, run in itertools.groupby(sorted(budgets.items()), key=lambda item: item[1]):
            run = [g for g, _ in run]
            lower = f"threadIdx.x / 128 >= {run[0]} && " if run[0] else ""  # unsigned: `>= 0` draws nvcc's warning
            self.add_line(f"if ({lower}threadIdx.x / 128 < {run[-1] + 1}) " + self._setmaxnreg_asm(regs))
        self.add_line("#endif")

    def _setmaxnreg(self, regs: int):
        self.add_line("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
        self.add_line(self._setmaxnreg_asm(regs))
        self.add_line("#endif")

    def _setmaxnreg_asm(self, regs: int) -> str:
        """The setmaxnreg to `regs` registers per thread, from the launch's register_cap."""
        op = "inc" if regs >= self._ctx.register_cap else "dec"
        return f'asm volatile("setmaxnreg.{op}.sync.aligned.u32 {regs};");'

    def _task_loop(self, tasks, body, tiling, cluster):
        per_cta = f" / {cluster}" if cluster > 1 else ""
        self.add_line(f"for (int exo_task = blockIdx.x{per_cta}; exo_task < exo_tasks; exo_task += gridDim.x{per_cta}) {{")
        self.push()
        for k, t in enumerate(tasks):
            name = self.new_varname(t.iter, typ=T.index)
            self.range_env.add_loop_iter(t.iter, t.lo, t.hi)
            inner = " * ".join(f"exo_count_{j}" for j in range(k + 1, len(tasks)))
            idx = f"exo_task / ({inner})" if inner else "exo_task"
            if k > 0:
                idx = f"{idx} % exo_count_{k}"
            # `int` where the range analysis bounds the iterator within 32 bits; else cuda_tasks(n, n + 4) wraps
            wide = not self._fits(self.range_env.env[t.iter])
            value = idx if self.comp_e(t.lo) == "0" else self.plus_text(t.lo, idx, wide)
            self.add_line(f"[[maybe_unused]] const {'long long' if wide else 'int'} {name} = {value};")
        self._tiling_stack.append(tiling)
        self.comp_stmts(body)
        self._tiling_stack.pop()
        self.pop()
        self.add_line("}")

    def _cuda_threads(self, s):
        parent, body = self._tiling_stack[-1], self._tilings[id(s)]
        value, cond = self._index(parent, body)
        self.add_line(f"if ({cond}) {{" if cond else "{")
        self.push()
        name = self.new_varname(s.iter, typ=T.index)
        self.range_env.add_loop_iter(s.iter, s.lo, s.hi)
        self._iter_syms[iter_key(s.iter)] = s.iter
        self.add_line(f"[[maybe_unused]] const int {name} = {value};")  # a thread's iterator the body may not read
        self._tiling_stack.append(body)
        self.comp_stmts(s.body)
        self._tiling_stack.pop()
        self.pop()
        self.add_line("}")

    def _index(self, parent, body):
        """(iterator value, predicate or None) of the tiling step parent -> body, from exo_thread.

        Interval ops follow seed 001: in dimension m (pitch P, extent D) a thread's
        coordinate is c = t / P % D; each op keeps [off, off + count * box) of
        what the previous ops left and numbers it in pieces of `box`.
        Vacuously true conditions are left out.
        """
        found = new_op(parent, body)
        if found is None:
            return "0", None
        m, prev, op = found
        dim = body.dims[m]
        pitch, extent = dim.pitch, dim.extent
        units = [(o.linearOffset, o.linearBox) for o in (*prev, op)]
        if any(x % pitch for u in units for x in u):
            raise CodegenError(f"internal: tiling op {op} is not aligned to its dimension's pitch {pitch}", None)
        c = "exo_thread" + (f" / {pitch}" if pitch > 1 else "")
        if pitch * extent < body.blockDim * body.clusterDim:
            c = f"{c} % {extent}"
        span = prev[-1].linearBox // pitch if prev else extent
        if all((o.linearOffset // pitch) % span == 0 and (o.linearBox // pitch) % span == 0 for o in prev):
            r = c if span == extent else f"{c} % {span}"
        else:
            terms = [f"{o.linearOffset // pitch}" for o in prev if o.linearOffset]
            terms += [f"{self.env[self._iter_syms[o.iter]]} * {o.linearBox // pitch}" for o in prev if o.iter]
            r = f"({c} - {' - '.join(terms)})" if terms else c
        off, box, count = op.linearOffset // pitch, op.linearBox // pitch, op.tileCount
        conds = []
        if off:
            conds.append(f"{r} >= {off}")
        if off + count * box < span:
            conds.append(f"{r} < {off + count * box}")
        if count == 1:
            value = "0"
        else:
            value = f"{r} - {off}" if off else r
            if box > 1:
                value = f"({value}) / {box}"
            if pitch % 32 == 0 and body.blockDim % 32 == 0 and parent.made_of_whole_warps():
                # The same in every lane of a warp, and every lane runs this (the loop's collective is whole warps,
                # so the guard above is the same in all lanes); broadcast from lane 0, the compiler knows it and
                # keeps what is computed from it (wgmma descriptors, shared-memory offsets) in uniform registers.
                value = f"__shfl_sync(0xffffffffu, {value}, 0)"
        return value, " && ".join(conds) or None

    def _alloc(self, s):
        if is_barrier_alloc(s):
            info = self.barriers[s.name]
            for line in lowering(info.mem).scope_begin_lines(info):
                self.add_line(line)
            return None
        mem = s.mem
        if not (isinstance(mem, type) and issubclass(mem, CudaMemory)) or not mem.device_allocated:
            raise CodegenError(f"{s.name} @ {mem.name()} cannot be allocated in CUDA code", s.srcinfo)
        typ = s.type
        if s.name in self._dist:  # one shard per owner
            shard = typ.shape()[self._dist[s.name] :]
            typ = T.Tensor(shard, False, typ.basetype()) if shard else typ.basetype()
        name = self.new_varname(s.name, typ=typ, mem=mem)
        ctype = typ.basetype().ctype()
        shape = self.shape_strs(typ.shape()) if typ.is_tensor_or_window() else []
        smem_ptr = ""
        nbytes = mem.smem_bytes(elem_bytes(typ.basetype()), shape, s.srcinfo)
        if nbytes:
            if id(s) not in self._smem_offsets:
                align = getattr(mem, "smem_align", SMEM_ALIGN)
                self.smem_align = max(self.smem_align, align)
                self._smem_offsets[id(s)] = math.ceil(self.smem_bytes / align) * align
                self.smem_bytes = self._smem_offsets[id(s)] + math.ceil(nbytes / SMEM_ALIGN) * SMEM_ALIGN
                self.smem_allocs[id(s)] = (s.name.name(), nbytes, s.srcinfo)
            smem_ptr = f"exo_smem + {self._smem_offsets[id(s)]}"
        # each warp-specialized branch declares every allocation of its CTA, and a branch may use few of them
        self.add_line(f"[[maybe_unused]] {mem.cuda_alloc(name, ctype, shape, s.srcinfo, smem_ptr)}")
        return None

    def _call(self, s):
        spec = sync_spec_of(s)
        if spec is not None:
            tiling = self._tiling_stack[-1]
            if spec.kind == "Fence":
                coll = executing_collectives(tiling)
                for line in lower_fence(spec, coll, self._barrier_ids, self._ctx.clusterDim, self._ctx.warp_config is not None,
                                       s.srcinfo, self._proxy_fence):
                    self.add_line(line)
                return None
            return self._split_sync(s, spec)
        if s.f.instr is None:
            raise CodegenError(plain_call_in_device_code(s), s.srcinfo)
        info = instr_info(s)
        for text in info.cuda_includes if info is not None else ():
            if text not in self.cuda_globals:
                self.cuda_globals.append(text)
        if info is not None and info.target:
            self.instr_targets.setdefault(info.target, (written_name(s), s.srcinfo))
        if info is not None and info.lower is not None:
            for line in info.lower(self._lowered_call(s)).split("\n"):
                self.add_line(line)
            return None
        return super().comp_s(s)

    def _split_sync(self, s, spec):
        info = self.barriers[s.args[0].name]
        for line in split_sync_lines(info, self._analysed[id(s)], self._position(info, s.args[0], s.srcinfo)):
            self.add_line(line)
        return None

    def _position(self, info, arg, srcinfo) -> str:
        flat = position_expr(info, arg, srcinfo)
        return "0" if flat is None else self.comp_e(flat)

    # ---- instrs with a lowering function (spork_lab.core.instrs.LoweredCall) ----

    def _lowered_call(self, s) -> LoweredCall:
        trailing = trailing_of(s)
        n = trailing[1] if trailing else len(s.args)
        args = {str(param.name): self._lowered_arg(s, i) for i, param in enumerate(s.f.args[:n])}
        barrier = ""
        if trailing:
            bar = s.args[n]
            binfo = self.barriers[bar.name]
            barrier = mbarrier_address(binfo, self._position(binfo, bar, s.srcinfo))
        template = template_call_of(trailing[0] if trailing else s.f.name)
        name, params = (template[0].name, template[1]) if template else (str(s.f.name), {})
        mask = self._cta_mask(s) if instr_info(s).multicast else ""
        return LoweredCall(name, args, params, barrier, mask, s.srcinfo)

    def _lowered_arg(self, s, i) -> LoweredArg:
        e = s.args[i]
        text = self.comp_fnarg(e, s.f, i)
        if isinstance(e, LoopIR.WindowExpr):
            spec = tensor_map_spec(e.name)
            idx = e.idx[self._dist.get(e.name, 0) :]  # a shard's indices (rule 4)
            los = tuple(self.comp_e(w.lo if isinstance(w, LoopIR.Interval) else w.pt) for w in idx)
            sizes = tuple(
                self.comp_e(w.hi if isinstance(w.lo, LoopIR.Const) and w.lo.val == 0
                            else LoopIR.BinOp("-", w.hi, w.lo, T.index, w.srcinfo))
                for w in idx if isinstance(w, LoopIR.Interval)
            )
            data = "" if spec is not None else self.window_struct_fields(e)[0]
            shape = tuple(self.comp_e(d) for d in e.type.src_type.shape()) if spec is not None else ()
            return LoweredArg(text, data, self.mems[e.name], los, sizes, self.env[e.name], spec, shape)
        if isinstance(e, LoopIR.Read) and e.type.is_tensor_or_window():
            zeros = tuple("0" for _ in e.type.shape()[self._dist.get(e.name, 0) :])
            return LoweredArg(text, f"{self.env[e.name]}[0]", self.mems[e.name], zeros, (), self.env[e.name])
        return LoweredArg(text)

    def _cta_mask(self, s) -> str:
        """Multicast: bit mask of the CTAs the written operand's first sliced dimension (the CTA dimension) spans."""
        first = next((w for w in multicast_dst(s).idx if isinstance(w, LoopIR.Interval)), None)
        if first is None or not isinstance(first.lo, LoopIR.Const) or not isinstance(first.hi, LoopIR.Const):
            raise CodegenError("a multicast copy writes a slice over the CTAs of the cluster with constant bounds, "
                               "e.g. dst[:, ...]", s.srcinfo)
        return f"{((1 << (first.hi.val - first.lo.val)) - 1) << first.lo.val}u"
