"""sm_90a: wgmma, TMA (bulk tensor copies) with tensor maps, clusters and multicast.

Memories
  `Sm90_SmemSwizzled(128)` (also 64, 32): shared memory in the swizzled layout
      TMA writes and wgmma reads. The last dimension is one swizzle row
      (128 bytes: 32 f32 or 64 f16/bf16), rows are swizzled in 8-row atoms; only
      TMA and wgmma access it.
  `Sm90_RmemMatrixD`: wgmma accumulators, `[64, N]` f32 per warpgroup (N / 2
      registers per thread), native unit warpgroup.
  `Sm90_RmemMatrixA`: a register A operand, `[64, K]` per warpgroup (K = 16 for
      16-bit types, 8 for tf32).
Tensor maps: `T = A[...] @ Sm90_tensorMap(swizzle, *box)` in CPU code
(spork_lab.core.tensor_maps); the CUDA backend encodes the CUtensorMap on the
host with the driver API and passes it as a `__grid_constant__` parameter.

Instructions (keyword-templated families; `dt` is f32, f16 or bf16):
  TMA loads, which complete on an mbarrier (`... >> bar[...]`; the Arrive that
  closes the phase expects the bytes of every load into that barrier):
    Sm90_copy_tensor_to_smem_swizzled_2{dt}(dst, T[...], box=(R, C))
    Sm90_copy_tensor_to_smem_linear_2{dt}(dst, T[...], box=(R, C))
    Sm90_multicast_copy_tensor_to_smem_swizzled_2{dt}(dst[:, ...], T[...], box=(R, C), ncta=2)
    Sm90_copy_tensor_clipped_to_smem_swizzled_2{dt}(n, k, r0, c0, dst, T[:, :], box=(R, C))   the box at
        (r0, c0) of the whole map T of shape [n, k], zeros past its edge (partial tiles); multicast_ likewise
  TMA stores and reduce-adds from linear shared memory, on bulk commit groups
  (`Arrive(tma_to_gmem_async, 1) >> cg` / `Await(cg, ..., N)`):
    Sm90_copy_tensor_to_gmem_linear_2{dt}(T[...], src, box=(R, C))
    Sm90_reduce_tensor_to_gmem_linear_2{dt}(T[...], src, box=(R, C))
  wgmma (one warpgroup, async, on wgmma commit groups), D[64, N] += A[64, K] B[N, K]^T:
    Sm90_mma_async_tf32(D, A, B, M=64, N=n)   (k8)    Sm90_mma_async_f16 / _bf16 (k16)
      rmem_a=True: A in registers (Sm90_RmemMatrixA) instead of swizzled shared memory
    Sm90_mma_load_a_{tf32,f16,bf16}(A_r, A_s)   register A operand from linear shared memory
    Sm90_zero_scale_d_f32(D, M=64, N=n)         D = 0
    Sm90_mma_store_d_row_major_{f32,f16,bf16}(C[...], D, M=64, N=n)   row-major tile of that type (f16/bf16
                                                rounded to nearest), global or linear shared
    Sm90_mma_store_d_clipped_row_major_{f32,f16,bf16}(rows, cols, r0, c0, C[:, :], D, N=n)   the tile at (r0, c0)
                                                of C [rows, cols], less what lies past its edge
"""

from __future__ import annotations

import ast
import math
from functools import lru_cache

from exo.core.memory import MemGenError

from ..core.coll import cuda_cta_in_cluster, cuda_thread, cuda_warpgroup
from ..core.instrs import InstrInfo, InstrTemplate, LoweredCall, register_instr
from ..core.memories import CudaMemory, const_shape
from ..core.tensor_maps import Sm90_tensorMap
from ..core.timelines import (
    cuda_in_order_instr,
    tma_to_gmem_async_instr,
    tma_to_smem_async_instr,
    wgmma_async_instr,
    wgmma_usage_a,
    wgmma_usage_b,
    wgmma_usage_d,
)
from ..errors import CodegenError
from ..lang.frontend import parse_source, register_platform
from .cuda import CudaGmemLinear, CudaSmemLinear

# ---- memories ---------------------------------------------------------------


class _SmemSwizzled(CudaMemory):
    """Base of the `Sm90_SmemSwizzled(n)` memories (instr parameters take any of them)."""

    native_unit = cuda_cta_in_cluster
    swizzle = 0
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = frozenset({wgmma_async_instr, tma_to_gmem_async_instr})
    write_tls = frozenset({tma_to_smem_async_instr})
    smem_align = 1024  # the swizzle atom (8 rows): TMA and wgmma compute the pattern from address bits

    @classmethod
    def name(cls):
        return f"Sm90_SmemSwizzled({cls.swizzle})" if cls.swizzle else "Sm90_SmemSwizzled"

    @classmethod
    def smem_bytes(cls, elem_bytes, shape, srcinfo):
        dims = const_shape("swizzled shared memory", cls, shape, srcinfo)
        if len(dims) < 2 or dims[-1] * elem_bytes != cls.swizzle or (math.prod(dims[:-1]) % 8):
            raise MemGenError(
                f"{srcinfo}: {cls.name()} tiles are [..., rows, {cls.swizzle // elem_bytes}]: the last dimension is one "
                f"{cls.swizzle}-byte swizzle row and the rows come in multiples of 8, got [{', '.join(shape)}]"
            )
        return elem_bytes * math.prod(dims)

    @classmethod
    def cuda_alloc(cls, new_name, prim_type, shape, srcinfo, smem_ptr=""):
        return f"{prim_type} *{new_name} = reinterpret_cast<{prim_type}*>({smem_ptr});"


@lru_cache(maxsize=None)
def Sm90_SmemSwizzled(swizzle: int) -> type:
    """Shared memory swizzled in `swizzle`-byte rows (128, 64 or 32): TMA's and wgmma's operand layout."""
    if swizzle not in (32, 64, 128):
        raise ValueError(f"Sm90_SmemSwizzled: swizzle must be 128, 64 or 32 bytes, got {swizzle!r}")
    return type(f"Sm90_SmemSwizzled_{swizzle}", (_SmemSwizzled,), {"swizzle": swizzle, "__module__": __name__})


class _WarpgroupMatrix(CudaMemory):
    """Registers of one warpgroup's wgmma operand: the last two dims are one [64, n] tile."""

    scalar_access = False
    native_unit = cuda_warpgroup
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = frozenset({cuda_in_order_instr, wgmma_async_instr})
    write_tls = frozenset({cuda_in_order_instr, wgmma_async_instr})

    @classmethod
    def _tile_regs(cls, dims: list, new_name: str, srcinfo) -> int:
        if len(dims) < 2 or dims[-2] != 64:
            raise MemGenError(f"{srcinfo}: {new_name} @ {cls.name()} holds [..., 64, n] tiles (m64 of wgmma)")
        return dims[-2] * dims[-1] // 128

    @classmethod
    def cuda_alloc(cls, new_name, prim_type, shape, srcinfo, smem_ptr=""):
        dims = const_shape(new_name, cls, shape, srcinfo)
        return f"{prim_type} {new_name}[{math.prod(dims[:-2]) * cls._tile_regs(dims, new_name, srcinfo)}];"

    @classmethod
    def window(cls, basetyp, baseptr, indices, strides, srcinfo):
        """A window `x[i, :, :]` starts at the registers of tile i. An accumulator window of all 64 rows from
        column c (`x[i, :, c:c + n]`, c a multiple of 8) starts at register c / 2 of the tile: each thread holds
        4 values of every 8 columns, in column order, so a wgmma of width n finds its own layout there."""
        column = indices[-1] if len(indices) >= 2 else ""
        if (len(indices) < 2 or indices[-2] != "0" or any(not s.isdigit() for s in strides[:-2])
                or (column != "0" and cls is not Sm90_RmemMatrixD)):
            raise MemGenError(f"{srcinfo}: {cls.name()} windows must cover whole tiles, e.g. x[i, :, :]")
        if column != "0" and not _multiple_of(column, 8):
            raise MemGenError(f"{srcinfo}: a window of {cls.name()} columns starts at a multiple of 8 (the fragment "
                              f"holds 8 columns at a time), got column {column}")
        tile = int(strides[-3]) if len(strides) > 2 else 0
        per_tile = tile // 128 if tile else 0
        terms = [f"({i}) * {int(s) // tile * per_tile}" for i, s in zip(indices[:-2], strides[:-2])]
        terms += [f"({column}) / 2"] if column != "0" else []
        return f"{baseptr}[{' + '.join(terms) or 0}]"


def _multiple_of(c_expr: str, n: int) -> bool:
    """Whether an index expression is a multiple of n for every value of its variables: a sum of constants and
    products with a constant factor that n divides (anything else is not known to be)."""
    def known(e) -> bool:
        if isinstance(e, ast.Constant):
            return isinstance(e.value, int) and e.value % n == 0
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
            return known(e.left) and known(e.right)
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
            return known(e.left) or known(e.right)
        return False

    try:
        return known(ast.parse(c_expr, mode="eval").body)
    except SyntaxError:
        return False


class Sm90_RmemMatrixD(_WarpgroupMatrix):
    """wgmma accumulators: [64, N] f32 per warpgroup, N / 2 registers per thread."""


class Sm90_RmemMatrixA(_WarpgroupMatrix):
    """A register A operand of wgmma: [64, K] per warpgroup (8 halves or 4 floats per thread)."""


# ---- shared helpers ---------------------------------------------------------

_DTYPES = {  # name: (exo type, C type, bytes, wgmma type, k per wgmma, CUtensorMapDataType)
    "f32": ("f32", "float", 4, "tf32", 8, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"),
    "f16": ("f16", "__half", 2, "f16", 16, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"),
    "bf16": ("bf16", "__nv_bfloat16", 2, "bf16", 16, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"),
}
TENSOR_MAP_DTYPES = {v[1]: v[5] for v in _DTYPES.values()}  # C type -> CUtensorMapDataType (host encoding)
_SWIZZLE_CODE = {128: 1, 64: 2, 32: 3}  # wgmma descriptor layout types
TMA_SMEM_ALIGN = 128  # a TMA box's shared-memory address is a multiple of this (else a misaligned-address fault)
WGMMA_DESC_ALIGN = 16  # a wgmma descriptor holds its operand's address in units of this

SM90_PRELUDE = r"""
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ __forceinline__ unsigned spork_sm90_smem(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
// wgmma shared-memory descriptor of a K-major tile whose rows are `row_bytes` swizzled bytes (8-row atoms).
__device__ __forceinline__ unsigned long long spork_wgmma_desc(const void *p, unsigned code, unsigned row_bytes) {
  return (unsigned long long)((spork_sm90_smem(p) & 0x3FFFF) >> 4) | (1ull << 16) |
         ((unsigned long long)((8 * row_bytes) >> 4) << 32) | ((unsigned long long)code << 62);
}
"""


def _namespace() -> dict:
    from .cuda import CudaGmemLinear as G
    from .cuda import CudaSmemLinear as S

    return {"CudaGmemLinear": G, "CudaSmemLinear": S, "_SmemSwizzled": _SmemSwizzled,
            "Sm90_RmemMatrixD": Sm90_RmemMatrixD, "Sm90_RmemMatrixA": Sm90_RmemMatrixA}  # fmt: skip


def _parse(src: str) -> object:
    return parse_source(src, filename=__file__, func_globals=_namespace(), instr=("", ""))


def _box(box, who: str, esize: int) -> tuple:
    """A TMA box (rows, cols) of `esize`-byte elements: TMA's limits, and rows a multiple of 16 bytes (the driver's
    tensor-map encoding refuses others, which failed the launch)."""
    if not (isinstance(box, tuple) and len(box) == 2 and all(isinstance(b, int) and 0 < b <= 256 for b in box)):
        raise ValueError(f"{who}: box must be a pair (rows, cols) of ints in [1, 256], got {box!r}")
    if box[1] * esize % 16:
        raise ValueError(f"{who}: a TMA box's rows are a multiple of 16 bytes, got {box[1]} x {esize} bytes: give it "
                         f"a multiple of {16 // esize} columns")
    return box


def _tensor_map_arg(call: LoweredCall, arg: str):
    """The LoweredArg of a TMA instr's global operand, which must be a window of a tensor map."""
    a = call.args[arg]
    if a.tensor_map is None:
        raise CodegenError(
            f"{call.name}: its global operand must be a window of a tensor map, `T = A[...] @ Sm90_tensorMap(...)` "
            "made in CPU code", call.srcinfo
        )
    return a


def _coords(call: LoweredCall, arg: str) -> list:
    """TMA coordinates of a tensor-map window, innermost dimension first."""
    return [f"(int) ({c})" for c in reversed(_tensor_map_arg(call, arg).los)]


def _asm(text: str, operands: str) -> str:
    return f'asm volatile("{text}" :: {operands} : "memory");'


# ---- TMA --------------------------------------------------------------------


def _make_tma_load(dt: str, layout: str, multicast: bool, clipped: bool = False):
    """A TMA load of one box. `clipped`: the box at (r0, c0) of the whole tensor map, which may reach past the
    tensor's edge; TMA fills the elements past it with zeros (the tensor map's dimensions are the edge)."""
    def make(box=None, ncta=2):
        name = (f"Sm90_{'multicast_' if multicast else ''}copy_tensor{'_clipped' if clipped else ''}_to_smem_"
                f"{layout}_2{dt}")
        typ, ctype, esize = _DTYPES[dt][:3]
        rows, cols = _box(box, name, esize)
        if layout == "swizzled" and cols * esize not in _SWIZZLE_CODE:
            raise ValueError(f"{name}: a swizzled tile's rows are 32, 64 or 128 bytes, got {cols} x {esize} bytes")
        mem = f"_SmemSwizzled" if layout == "swizzled" else "CudaSmemLinear"
        lead = f"{ncta}, " if multicast else ""
        q, qi = ("for q in seq(0, %d):\n        " % ncta, "q, ") if multicast else ("", "")
        pad = "    " if multicast else ""
        if clipped:
            head = (f"n: size, k: size, r0: index, c0: index, dst: [{typ}][{lead}{rows}, {cols}] @ {mem}, "
                    f"src: [{typ}][n, k] @ CudaGmemLinear):\n    assert r0 >= 0\n    assert c0 >= 0\n")
            element = (f"            {pad}if r0 + r < n and c0 + c < k:\n"
                       f"                {pad}dst[{qi}r, c] = src[r0 + r, c0 + c]\n"
                       f"            {pad}else:\n"
                       f"                {pad}dst[{qi}r, c] = 0.0\n")
        else:
            head = f"dst: [{typ}][{lead}{rows}, {cols}] @ {mem}, src: [{typ}][{rows}, {cols}] @ CudaGmemLinear):\n"
            element = f"            {pad}dst[{qi}r, c] = src[r, c]\n"
        src = (
            f"def {name}_{rows}x{cols}{f'_mc{ncta}' if multicast else ''}({head}"
            f"    {q}for r in seq(0, {rows}):\n"
            f"        {pad}for c in seq(0, {cols}):\n" + element
        )
        p = _parse(src)
        swizzle = cols * esize if layout == "swizzled" else 0

        def lower(call: LoweredCall) -> str:
            if call.args["dst"].mem.__dict__.get("swizzle", swizzle) != swizzle:
                raise CodegenError(f"{name}: the destination is {call.args['dst'].mem.name()}, but {cols} x {esize}-byte "
                                   f"rows need Sm90_SmemSwizzled({swizzle})", call.srcinfo)
            c0, c1 = _clipped_coords(call, name) if clipped else _coords(call, "src")
            ops = (f'"r"(spork_sm90_smem({call.args["dst"].ptr})), "l"(&{call.args["src"].buffer}), '
                   f'"r"(spork_sm90_smem({call.barrier}))')
            if multicast:
                return _asm(
                    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                    " [%0], [%1, {%4, %5}], [%2], %3;",
                    f'{ops}, "h"((unsigned short) ({call.cta_mask})), "r"({c0}), "r"({c1})',
                )
            return _asm(
                "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];",
                f'{ops}, "r"({c0}), "r"({c1})',
            )

        register_instr(
            p.name(),
            InstrInfo(tma_to_smem_async_instr, cuda_thread, lower=lower, trailing_barrier=True,
                      tx_bytes=rows * cols * esize, multicast=multicast, tensor_map_params=("src",),
                      tensor_map=(swizzle, (rows, cols)), target="sm_90",
                      smem_box=(("dst", TMA_SMEM_ALIGN),)),
        )
        return p

    return make


def _clipped_coords(call: LoweredCall, name: str) -> list:
    """TMA coordinates of a clipped load, innermost first. Its zeros past the edge are the hardware's only if
    `src` is the whole map (exo checks that `n, k` are its shape)."""
    src = _tensor_map_arg(call, "src")
    if not (all(lo == "0" for lo in src.los) and tuple(src.sizes) == src.buffer_shape):
        raise CodegenError(
            f"{name}(n, k, r0, c0, dst, T[:, :]) reads the box at (r0, c0) of the whole tensor map T, and n, k are "
            f"T's shape (its edge, where TMA fills zeros); got a window at ({', '.join(src.los)}) of shape "
            f"({', '.join(map(str, src.sizes))}) of a map of shape ({', '.join(src.buffer_shape)})",
            call.srcinfo,
        )
    return [f"(int) ({call.args['c0'].text})", f"(int) ({call.args['r0'].text})"]


def _make_tma_store(dt: str, reduce: bool):
    def make(box=None):
        name = f"Sm90_{'reduce' if reduce else 'copy'}_tensor_to_gmem_linear_2{dt}"
        rows, cols = _box(box, name, _DTYPES[dt][2])
        typ = _DTYPES[dt][0]
        op = "+=" if reduce else "="
        src = (
            f"def {name}_{rows}x{cols}(dst: [{typ}][{rows}, {cols}] @ CudaGmemLinear, "
            f"src: [{typ}][{rows}, {cols}] @ CudaSmemLinear):\n"
            f"    for r in seq(0, {rows}):\n"
            f"        for c in seq(0, {cols}):\n"
            f"            dst[r, c] {op} src[r, c]\n"
        )
        p = _parse(src)
        kind = "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group" if reduce else \
            "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"

        def lower(call: LoweredCall) -> str:
            c0, c1 = _coords(call, "dst")
            return _asm(f"{kind} [%0, {{%2, %3}}], [%1];",
                        f'"l"(&{call.args["dst"].buffer}), "r"(spork_sm90_smem({call.args["src"].ptr})), '
                        f'"r"({c0}), "r"({c1})')

        register_instr(p.name(), InstrInfo(tma_to_gmem_async_instr, cuda_thread, lower=lower, tensor_map_params=("dst",),
                                           tensor_map=(0, (rows, cols)), target="sm_90",
                                           smem_box=(("src", TMA_SMEM_ALIGN),)))
        return p

    return make


# ---- wgmma ------------------------------------------------------------------


def _wgmma_helper(dt: str, n: int, rmem_a: bool) -> tuple:
    """(C function name, its definition): one wgmma.mma_async with `n` accumulator registers bound."""
    wt, k = _DTYPES[dt][3], _DTYPES[dt][4]
    fname = f"spork_wgmma_m64n{n}k{k}_{wt}_{'rs' if rmem_a else 'ss'}"
    nreg = n // 2
    regs = ", ".join(f"%{i}" for i in range(nreg))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    if rmem_a:
        a_ops, a_in = ", ".join(f"%{nreg + i}" for i in range(4)), ", ".join(f'"r"(a[{i}])' for i in range(4))
        b, tail = nreg + 4, ("1, 1" if wt == "tf32" else "1, 1, 0")
        a_param, a_text = "const unsigned *a", "{" + a_ops + "}"
    else:
        a_in, a_param, a_text = '"l"(a)', "unsigned long long a", f"%{nreg}"
        b, tail = nreg + 1, ("1, 1" if wt == "tf32" else "1, 1, 0, 0")
    text = f"""__device__ __forceinline__ void {fname}(float *d, {a_param}, unsigned long long b) {{
  asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{wt}.{wt} {{{regs}}}, {a_text}, %{b}, 1, {tail};"
    : {outs}
    : {a_in}, "l"(b) : "memory");
}}"""
    return fname, text


def _desc(call: LoweredCall, arg: str) -> str:
    """The descriptor of operand `arg`: its first element's address and its swizzle only, so its rows must be its
    buffer's consecutive swizzle rows (`InstrInfo.smem_desc`, checked by the analysis and sync_check)."""
    a = call.args[arg]
    sw = getattr(a.mem, "swizzle", 0)
    if sw not in _SWIZZLE_CODE:
        raise CodegenError(f"{call.name}: {arg} must be in Sm90_SmemSwizzled(128, 64 or 32) shared memory", call.srcinfo)
    return f"spork_wgmma_desc({a.ptr}, {_SWIZZLE_CODE[sw]}u, {sw}u)"


def _make_wgmma(dt: str):
    def make(M=64, N=None, rmem_a=False):
        name = f"Sm90_mma_async_{_DTYPES[dt][3]}"
        if M != 64:
            raise ValueError(f"{name}: wgmma computes m64 tiles: M must be 64, got {M!r}")
        if not (isinstance(N, int) and 8 <= N <= 256 and N % 8 == 0):
            raise ValueError(f"{name}: N must be a multiple of 8 in [8, 256] (wgmma m64nNk), got {N!r}")
        typ, k = _DTYPES[dt][0], _DTYPES[dt][4]
        a_mem = "Sm90_RmemMatrixA" if rmem_a else "_SmemSwizzled"
        src = (
            f"def {name}_m64n{N}{'_rA' if rmem_a else ''}(D: [f32][64, {N}] @ Sm90_RmemMatrixD, "
            f"A: [{typ}][64, {k}] @ {a_mem}, B: [{typ}][{N}, {k}] @ _SmemSwizzled):\n"
            f"    for m in seq(0, 64):\n"
            f"        for n in seq(0, {N}):\n"
            f"            for k in seq(0, {k}):\n"
            f"                D[m, n] += A[m, k] * B[n, k]\n"
        )
        p = _parse(src)
        fname, helper = _wgmma_helper(dt, N, rmem_a)

        def lower(call: LoweredCall) -> str:
            a = f"reinterpret_cast<const unsigned *>({call.args['A'].ptr})" if rmem_a else _desc(call, "A")
            return f"{fname}({call.args['D'].ptr}, {a}, {_desc(call, 'B')});"

        register_instr(
            p.name(),
            InstrInfo(wgmma_async_instr, cuda_warpgroup,
                      usage_tls={"D": wgmma_usage_d, "A": wgmma_usage_a, "B": wgmma_usage_b},
                      convergent=True, lower=lower, cuda_includes=(helper,), wgmma_shape=(64, N, k),
                      smem_desc=tuple((arg, WGMMA_DESC_ALIGN) for arg in (("B",) if rmem_a else ("A", "B"))),
                      target="sm_90a"),
        )
        return p

    return make


def _lane_prologue() -> str:
    return "const int sm90_w = threadIdx.x / 32 % 4, sm90_g = threadIdx.x % 32 / 4, sm90_t = threadIdx.x % 4;"


def _make_load_a(dt: str):
    def make():
        typ, ctype, _, wt, k, _ = _DTYPES[dt]
        name = f"Sm90_mma_load_a_{wt}"
        src = (
            f"def {name}(A_r: [{typ}][64, {k}] @ Sm90_RmemMatrixA, A_s: [{typ}][64, {k}] @ CudaSmemLinear):\n"
            f"    for m in seq(0, 64):\n"
            f"        for k in seq(0, {k}):\n"
            f"            A_r[m, k] = A_s[m, k]\n"
        )
        p = _parse(src)
        # wgmma's register A fragment (PTX ISA, "Register fragment A"): warp w holds rows 16w..16w+15;
        # lane = 4 g + t. 16-bit: halves (g, 2t..2t+1), (g+8, ..), (g, 2t+8..), (g+8, 2t+8..); tf32: (g, t),
        # (g+8, t), (g, t+4), (g+8, t+4).
        if k == 16:
            cells = [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
            col = "2 * sm90_t"
        else:
            cells = [(0, 0), (8, 0), (0, 4), (8, 4)]
            col = "sm90_t"

        def lower(call: LoweredCall) -> str:
            r, s = call.args["A_r"], call.args["A_s"]
            loads = " ".join(
                f"({r.ptr})[{i}] = sm90_s[(16 * sm90_w + sm90_g + {dr}) * sm90_ld + {col} + {dc}];"
                for i, (dr, dc) in enumerate(cells)
            )
            return (f"{{ {_lane_prologue()} const {ctype} *sm90_s = {s.ptr}; const int sm90_ld = {s.text}.strides[0]; "
                    f"{loads} }}")

        register_instr(p.name(), InstrInfo(cuda_in_order_instr, cuda_warpgroup, lower=lower))
        return p

    return make


def _make_zero_d():
    def make(M=64, N=None):
        if M != 64 or not (isinstance(N, int) and 8 <= N <= 256 and N % 8 == 0):
            raise ValueError(f"Sm90_zero_scale_d_f32: M=64 and N a multiple of 8 in [8, 256], got M={M!r}, N={N!r}")
        src = (
            f"def Sm90_zero_scale_d_f32_m64n{N}(D: [f32][64, {N}] @ Sm90_RmemMatrixD):\n"
            f"    for m in seq(0, 64):\n"
            f"        for n in seq(0, {N}):\n"
            f"            D[m, n] = 0.0\n"
        )
        p = _parse(src)

        def lower(call: LoweredCall) -> str:
            return f"{{ float *sm90_d = {call.args['D'].ptr};\n#pragma unroll\nfor (int i = 0; i < {N // 2}; ++i) sm90_d[i] = 0.0f; }}"

        register_instr(p.name(), InstrInfo(cuda_in_order_instr, cuda_warpgroup, lower=lower))
        return p

    return make


_STORE_PAIR = {  # dst type: (C type of two adjacent columns, the conversion of two f32 accumulators to it)
    "f32": ("float2", "make_float2"),
    "f16": ("__half2", "__floats2half2_rn"),
    "bf16": ("__nv_bfloat162", "__floats2bfloat162_rn"),
}


# A 16-bit tile row-block of 8 columns is spread over the 4 lanes of a quad (one 32-bit pair each). The wide store
# transposes each 4 x 4 block of pairs (4 row-blocks x 4 lanes) within the quad, so that a lane holds one whole
# row-block and writes it with one 16-byte store: a warp's store then covers 64 contiguous bytes of each of 8 rows
# (2 full sectors) instead of 4 bytes per lane, 4 times fewer store instructions and L2 requests.
_QUAD_TRANSPOSE = r"""
// a[q] <- a[(q + s) & 3], s in 0..3 (selects, not a run-time index: the values stay in registers)
__device__ __forceinline__ void spork_rot4(unsigned (&a)[4], int s) {
  const unsigned b0 = s & 1 ? a[1] : a[0], b1 = s & 1 ? a[2] : a[1], b2 = s & 1 ? a[3] : a[2], b3 = s & 1 ? a[0] : a[3];
  a[0] = s & 2 ? b2 : b0; a[1] = s & 2 ? b3 : b1; a[2] = s & 2 ? b0 : b2; a[3] = s & 2 ? b1 : b3;
}
// Lane t of a quad holds v[k] = its pair of row-block k; afterwards v[m] = lane m's pair of row-block t.
__device__ __forceinline__ void spork_quad_transpose(unsigned (&v)[4]) {
  const int t = threadIdx.x % 4, base = threadIdx.x % 32 & ~3;
  spork_rot4(v, t);  // v[q] = own pair of row-block (q + t) & 3, for lane (t - q) & 3
  unsigned x[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) x[q] = __shfl_sync(0xffffffffu, v[q], base | ((t - q) & 3));
  spork_rot4(x, t);  // x[q] = pair of lane (-q) & 3
  v[0] = x[0]; v[1] = x[3]; v[2] = x[2]; v[3] = x[1];
}
"""


def _make_store_d(dt: str, clipped: bool = False):
    """D (f32) to a row-major tile of dt: f32 as is, f16/bf16 rounded to nearest (the epilogue cuBLAS runs).
    `clipped`: the tile at (r0, c0) of the whole matrix dst, less its rows and columns past dst's edge."""

    def make(M=64, N=None):
        name = f"Sm90_mma_store_d{'_clipped' if clipped else ''}_row_major_{dt}"
        if M != 64 or not (isinstance(N, int) and 8 <= N <= 256 and N % 8 == 0):
            raise ValueError(f"{name}: M=64 and N a multiple of 8 in [8, 256], got M={M!r}, N={N!r}")
        if clipped:
            src = (
                f"def {name}_m64n{N}(rows: size, cols: size, r0: index, c0: index, "
                f"dst: [{dt}][rows, cols] @ CudaMemory, D: [f32][64, {N}] @ Sm90_RmemMatrixD):\n"
                f"    assert r0 >= 0\n    assert c0 >= 0\n"
                f"    for m in seq(0, 64):\n"
                f"        for n in seq(0, {N}):\n"
                f"            if r0 + m < rows and c0 + n < cols:\n"
                f"                dst[r0 + m, c0 + n] = D[m, n]\n"
            )
        else:
            src = (
                f"def {name}_m64n{N}(dst: [{dt}][64, {N}] @ CudaMemory, D: [f32][64, {N}] @ Sm90_RmemMatrixD):\n"
                f"    for m in seq(0, 64):\n"
                f"        for n in seq(0, {N}):\n"
                f"            dst[m, n] = D[m, n]\n"
            )
        ns = _namespace()
        ns["CudaMemory"] = CudaMemory
        p = parse_source(src, filename=__file__, func_globals=ns, instr=("", ""))
        ctype, pair, cvt = _DTYPES[dt][1], *_STORE_PAIR[dt]
        wide = dt != "f32" and N % 32 == 0

        def narrow(indent: str) -> str:
            return (
                f"{indent}#pragma unroll\n{indent}for (int j = 0; j < {N // 8}; ++j) {{ "
                f"*reinterpret_cast<{pair} *>(&sm90_p[8 * j]) = {cvt}(sm90_d[4 * j], sm90_d[4 * j + 1]); "
                f"*reinterpret_cast<{pair} *>(&sm90_p[8 * sm90_ld + 8 * j]) = {cvt}(sm90_d[4 * j + 2], sm90_d[4 * j + 3]); }}"
            )

        def rows_aligned(start: str, n: int) -> str:
            """C test: every row from `start` (row pitch sm90_ld elements) starts n-byte aligned."""
            return f"((reinterpret_cast<unsigned long long>({start}) | {_DTYPES[dt][2]}ull * sm90_ld) & {n - 1}) == 0"

        def lane_elements(indent: str) -> str:
            """The lane's elements one by one: element e of sm90_d is at row 8 (e % 4 / 2), column 8 (e / 4) + e % 2."""
            return (f"{indent}#pragma unroll\n{indent}for (int e = 0; e < {N // 2}; ++e) "
                    f"sm90_p[(e % 4 / 2) * 8 * sm90_ld + 8 * (e / 4) + e % 2] = {_CONVERT[dt]}(sm90_d[e]);")

        def tile(head: str, pairs_checked: bool) -> str:
            """Store the whole tile from sm90_p (its first element) with row stride sm90_ld; unless `pairs_checked`
            (the caller tested it), rows whose pairs are not aligned (an odd pitch or start) store element by element."""
            head = head + f"{_lane_prologue()} sm90_p += (16 * sm90_w + sm90_g) * sm90_ld + 2 * sm90_t;\n"
            pairs = (narrow("") if pairs_checked else
                     f"if ({rows_aligned('sm90_p - 2 * sm90_t', 2 * _DTYPES[dt][2])}) {{\n" + narrow("  ")
                     + "\n} else {\n" + lane_elements("  ") + "\n}")
            if not wide:
                return head + pairs + " }"
            # rows 16-byte aligned: lane t writes row-block 4i + t of its two rows whole (else the pair stores)
            return head + (
                f"if ({rows_aligned('sm90_p - 2 * sm90_t', 16)}) {{\n"
                f"  #pragma unroll\n  for (int i = 0; i < {N // 32}; ++i) {{\n"
                f"    #pragma unroll\n    for (int r = 0; r < 2; ++r) {{\n"
                f"      unsigned sm90_v[4];\n"
                f"      #pragma unroll\n      for (int k = 0; k < 4; ++k) {{ const {pair} sm90_h = "
                f"{cvt}(sm90_d[4 * (4 * i + k) + 2 * r], sm90_d[4 * (4 * i + k) + 2 * r + 1]); "
                f"sm90_v[k] = *reinterpret_cast<const unsigned *>(&sm90_h); }}\n"
                f"      spork_quad_transpose(sm90_v);\n"
                f"      *reinterpret_cast<uint4 *>(&sm90_p[8 * r * sm90_ld + 32 * i + 6 * sm90_t]) = "
                f"make_uint4(sm90_v[0], sm90_v[1], sm90_v[2], sm90_v[3]);\n"
                f"    }}\n  }}\n}} else {{\n" + pairs + "\n} }"
            )

        def lower(call: LoweredCall) -> str:
            dst = call.args["dst"]
            if dst.mem not in (CudaGmemLinear, CudaSmemLinear):
                raise CodegenError(f"{name} stores to CudaGmemLinear or CudaSmemLinear, not {dst.mem.name()}",
                                   call.srcinfo)
            # Accumulator layout (PTX ISA, "wgmma D fragment"): warp w of the warpgroup holds rows 16w..16w+15;
            # lane 4g + t holds, for each 8-column block j, (g, 8j + 2t + {0, 1}) and (g + 8, 8j + 2t + {0, 1}).
            if not clipped:
                return tile(f"{{ {ctype} *sm90_p = {dst.ptr}; const int sm90_ld = {dst.text}.strides[0]; "
                            f"const float *sm90_d = {call.args['D'].ptr}; ", pairs_checked=False)
            rows, cols, r0, c0 = (call.args[a].text for a in ("rows", "cols", "r0", "c0"))
            if not (all(lo == "0" for lo in dst.los) and tuple(dst.sizes) in ((), (rows, cols))):
                raise CodegenError(f"{name}(rows, cols, r0, c0, C[:, :], D) stores into the whole matrix C of shape "
                                   f"(rows, cols); got a window at ({', '.join(dst.los)})", call.srcinfo)
            # A whole tile with aligned pairs takes the unclipped store; a tile on the edge stores element by element.
            head = (f"{{ const int sm90_r0 = {r0}, sm90_c0 = {c0}, sm90_rows = {rows}, sm90_cols = {cols}; "
                    f"const int sm90_ld = {dst.text}.strides[0]; const float *sm90_d = {call.args['D'].ptr}; "
                    f"{ctype} *sm90_p = {dst.ptr} + (long long) sm90_r0 * sm90_ld + sm90_c0;\n")
            full = (f"sm90_r0 + 64 <= sm90_rows && sm90_c0 + {N} <= sm90_cols && "
                    + rows_aligned("sm90_p", 2 * _DTYPES[dt][2]))  # every row's pairs aligned
            edge = (f"{_lane_prologue()}\n#pragma unroll\nfor (int j = 0; j < {N // 8}; ++j) {{\n"
                    f"  #pragma unroll\n  for (int e = 0; e < 4; ++e) {{\n"
                    f"    const int sm90_r = 16 * sm90_w + sm90_g + 8 * (e / 2), sm90_c = 8 * j + 2 * sm90_t + e % 2;\n"
                    f"    if (sm90_r0 + sm90_r < sm90_rows && sm90_c0 + sm90_c < sm90_cols) "
                    f"sm90_p[(long long) sm90_r * sm90_ld + sm90_c] = {_CONVERT[dt]}(sm90_d[4 * j + e]);\n  }}\n}}")
            return head + f"if ({full}) " + tile("{ ", pairs_checked=True) + f" else {{ {edge} }} }}"

        register_instr(p.name(), InstrInfo(cuda_in_order_instr, cuda_warpgroup, lower=lower,
                                           cuda_includes=(_QUAD_TRANSPOSE,) if wide else ()))
        return p

    return make


_CONVERT = {"f32": "", "f16": "__float2half_rn", "bf16": "__float2bfloat16_rn"}  # one f32 accumulator to dst


# ---- the families users call --------------------------------------------------

_BOX = {"box": None}
_names = {}
for _dt in ("f32", "f16", "bf16"):
    _names[f"Sm90_copy_tensor_to_smem_swizzled_2{_dt}"] = InstrTemplate(
        f"Sm90_copy_tensor_to_smem_swizzled_2{_dt}", _make_tma_load(_dt, "swizzled", False), _BOX)
    _names[f"Sm90_copy_tensor_to_smem_linear_2{_dt}"] = InstrTemplate(
        f"Sm90_copy_tensor_to_smem_linear_2{_dt}", _make_tma_load(_dt, "linear", False), _BOX)
    _names[f"Sm90_multicast_copy_tensor_to_smem_swizzled_2{_dt}"] = InstrTemplate(
        f"Sm90_multicast_copy_tensor_to_smem_swizzled_2{_dt}", _make_tma_load(_dt, "swizzled", True), {**_BOX, "ncta": 2})
    _names[f"Sm90_copy_tensor_clipped_to_smem_swizzled_2{_dt}"] = InstrTemplate(
        f"Sm90_copy_tensor_clipped_to_smem_swizzled_2{_dt}", _make_tma_load(_dt, "swizzled", False, True), _BOX)
    _names[f"Sm90_multicast_copy_tensor_clipped_to_smem_swizzled_2{_dt}"] = InstrTemplate(
        f"Sm90_multicast_copy_tensor_clipped_to_smem_swizzled_2{_dt}", _make_tma_load(_dt, "swizzled", True, True),
        {**_BOX, "ncta": 2})
    _names[f"Sm90_copy_tensor_to_gmem_linear_2{_dt}"] = InstrTemplate(
        f"Sm90_copy_tensor_to_gmem_linear_2{_dt}", _make_tma_store(_dt, False), _BOX)
    _names[f"Sm90_reduce_tensor_to_gmem_linear_2{_dt}"] = InstrTemplate(
        f"Sm90_reduce_tensor_to_gmem_linear_2{_dt}", _make_tma_store(_dt, True), _BOX)
for _dt in ("f32", "f16", "bf16"):
    _wt = _DTYPES[_dt][3]
    _names[f"Sm90_mma_async_{_wt}"] = InstrTemplate(f"Sm90_mma_async_{_wt}", _make_wgmma(_dt), {"M": 64, "N": None, "rmem_a": False})
    _names[f"Sm90_mma_load_a_{_wt}"] = InstrTemplate(f"Sm90_mma_load_a_{_wt}", _make_load_a(_dt), {})
_names["Sm90_zero_scale_d_f32"] = InstrTemplate("Sm90_zero_scale_d_f32", _make_zero_d(), {"M": 64, "N": None})
for _dt in ("f32", "f16", "bf16"):
    _names[f"Sm90_mma_store_d_row_major_{_dt}"] = InstrTemplate(
        f"Sm90_mma_store_d_row_major_{_dt}", _make_store_d(_dt), {"M": 64, "N": None})
    _names[f"Sm90_mma_store_d_clipped_row_major_{_dt}"] = InstrTemplate(
        f"Sm90_mma_store_d_clipped_row_major_{_dt}", _make_store_d(_dt, True), {"M": 64, "N": None})
globals().update(_names)

__all__ = ["Sm90_SmemSwizzled", "Sm90_RmemMatrixD", "Sm90_RmemMatrixA", "Sm90_tensorMap", *_names]

register_platform({name: globals()[name] for name in __all__})
