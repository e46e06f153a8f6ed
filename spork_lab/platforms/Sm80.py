"""sm_80: cp.async and warp-cooperative mma.sync memories and instrs.

mma.sync m16n8k8 with tf32 operands and m16n8k16 with f16 or bf16 operands,
all accumulating in f32. The accumulator fragment (16 x 8 f32 per warp) has the
same layout in both shapes, so `Sm80_mma_zero_d_tf32` and
`Sm80_mma_store_d_tf32` serve all three operand types; the tf32 mma with its
operands swapped (`Sm80_mma_swap_tf32`) accumulates 8 x 16 tiles, laid out
otherwise, with zero and store instrs of their own.
"""

from __future__ import annotations

import math

from exo.core.memory import MemGenError

from ..core.coll import cuda_thread, cuda_warp
from ..core.dtypes import BF16_C_NAME
from ..core.instrs import InstrInfo, InstrTemplate, register_instr
from ..core.memories import CudaMemory, const_shape
from ..core.timelines import Sm80_cp_async_instr, cuda_in_order_instr
from ..lang.decorators import instr
from ..lang.frontend import parse_source, register_platform
from .cuda import CudaGmemLinear, CudaSmemLinear


class _Sm80MmaFragment(CudaMemory):
    """Registers holding one warp's mma.sync fragment; indexed only by mma instrs."""

    scalar_access = False
    whole_tiles = True
    native_unit = cuda_warp
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = frozenset({cuda_in_order_instr})
    write_tls = frozenset({cuda_in_order_instr})
    regs_per_tile = 4  # 32-bit registers each lane holds for one fragment (the last two dims)

    @classmethod
    def cuda_alloc(cls, new_name, prim_type, shape, srcinfo, smem_ptr=""):
        """f32 fragments are float registers; 2-byte ones are 32-bit words holding two elements each."""
        dims = const_shape(new_name, cls, shape, srcinfo)
        word = "unsigned" if prim_type in _TWO_BYTE_CTYPES else prim_type
        return f"{word} {new_name}[{math.prod(dims[:-2]) * cls.regs_per_tile}];"

    @classmethod
    def window(cls, basetyp, baseptr, indices, strides, srcinfo):
        """A fragment window `x[i, j, :, :]` starts at the lane's registers of tile (i, j)."""
        tile = int(strides[-3]) if len(strides) > 2 else 0
        if len(indices) < 2 or indices[-2:] != ["0", "0"] or (tile and any(not s.isdigit() for s in strides[:-2])):
            raise MemGenError(f"{srcinfo}: {cls.name()} windows must cover whole fragments, e.g. x[i, j, :, :]")
        offset = " + ".join(f"({i}) * {int(s) // tile * cls.regs_per_tile}" for i, s in zip(indices[:-2], strides[:-2]))
        return f"(&{baseptr}[{offset or 0}])"


_TWO_BYTE_CTYPES = ("_Float16", BF16_C_NAME)


class Sm80_RmemMatrixA(_Sm80MmaFragment):
    """A operand: 16 x 8 tf32 (m16n8k8) or 16 x 16 f16/bf16 (m16n8k16) per warp, 4 registers per thread."""


class Sm80_RmemMatrixB(_Sm80MmaFragment):
    """B operand: 8 x 8 tf32 (m16n8k8) or 16 x 8 f16/bf16 (m16n8k16) per warp, 2 registers per thread."""

    regs_per_tile = 2


class Sm80_RmemMatrixD(_Sm80MmaFragment):
    """Accumulator of m16n8k8: 16 x 8 per warp, 4 registers per thread."""


_NAMESPACE = {"CudaSmemLinear": CudaSmemLinear, "CudaGmemLinear": CudaGmemLinear}


def _cp_async_template(dtype: str, elem_bytes: int) -> InstrTemplate:
    """`Sm80_cp_async_{dtype}(dst, src, size=...)`: one thread copies `size` bytes (4, 8 or 16) to shared memory."""
    name = f"Sm80_cp_async_{dtype}"

    def make(size: int):
        if size not in (4, 8, 16):
            raise ValueError(f"{name}: size must be 4, 8 or 16 bytes, got {size}")
        n = size // elem_bytes
        cache = "cg" if size == 16 else "ca"
        c_instr = (
            f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {size};" :: '
            '"r"((unsigned)__cvta_generic_to_shared(&{dst_data})), "l"(&{src_data}));'
        )
        src = (
            f"def {name}_{size}(dst: [{dtype}][{n}] @ CudaSmemLinear, src: [{dtype}][{n}] @ CudaGmemLinear):\n"
            f"    for i in seq(0, {n}):\n"
            f"        dst[i] = src[i]\n"
        )
        p = parse_source(src, filename=__file__, func_globals=_NAMESPACE, instr=(c_instr, ""))
        register_instr(p.name(), InstrInfo(instr_tl=Sm80_cp_async_instr, coll_unit=cuda_thread,
                                           aligned=(("dst", size), ("src", size)), target="sm_80"))
        return p

    return InstrTemplate(name, make, {"size": 4})


Sm80_cp_async_f32 = _cp_async_template("f32", 4)
Sm80_cp_async_f16 = _cp_async_template("f16", 2)
Sm80_cp_async_bf16 = _cp_async_template("bf16", 2)

# Fragment layouts of mma.m16n8k8 (PTX ISA, "Matrix Fragments for mma.m16n8k8"):
# lane = 4 * group + tig; A: a0 (group, tig), a1 (group + 8, tig), a2 (group, tig + 4),
# a3 (group + 8, tig + 4); B: b0 (tig, group), b1 (tig + 4, group);
# D: d0, d1 (group, 2 * tig + {0, 1}), d2, d3 (group + 8, 2 * tig + {0, 1}).
# The templates' locals are prefixed `sm80_` so they do not shadow names used in the
# arguments' index expressions. The loads round f32 to tf32 as mma expects (`sm80_tf32`).
_LANE = "const unsigned sm80_g = (threadIdx.x % 32u) / 4u, sm80_t = threadIdx.x % 4u;"


# f32 -> tf32 rounding, file-scope text of the tf32 loads: on sm_90 cvt.rn (to nearest, ties to even) is one F2FP
# instruction; sm_80 has only cvt.rna (ties away from zero), an FSETP and a predicated add in SASS.
_TF32_ROUND = """static __device__ __forceinline__ float sm80_tf32(float x)
{
  unsigned u;
#if __CUDA_ARCH__ >= 900
  asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
#else
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
#endif
  return __uint_as_float(u);
}"""


def _load_tf32(rmem: str, smem: str, offsets: list) -> str:
    """Template loading rmem[i] = tf32(smem[offsets[i]]), rounded to nearest by `sm80_tf32`."""
    loads = " ".join(f"{{{rmem}_data}}[{i}] = sm80_tf32(sm80_s[{off}]);" for i, off in enumerate(offsets))
    return f"{{{{ const float *sm80_s = &{{{smem}_data}}; const int sm80_ld = {{{smem}}}.strides[0]; {_LANE} {loads} }}}}"


def _ldmatrix(rmem: str, smem: str, count: int, row: str, col: str, trans: bool = False, after: str = "") -> str:
    """Template of one ldmatrix.x{count}: lane l gives the shared address of row `row`, element column `col`.

    The rows (16 bytes: 8 2-byte or 4 4-byte elements) must be 16-byte aligned.
    """
    regs = ",".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"=r"({{{rmem}_data}}[{i}])' for i in range(count))
    return (
        f"{{{{ const unsigned sm80_l = threadIdx.x % 32u; const int sm80_ld = {{{smem}}}.strides[0]; "
        f"const unsigned sm80_a = (unsigned)__cvta_generic_to_shared(&(&{{{smem}_data}})[({row}) * sm80_ld + ({col})]); "
        f'asm volatile("ldmatrix.sync.aligned.m8n8.x{count}{".trans" if trans else ""}.shared.b16 {{{{{regs}}}}}, [%{count}];" '
        f': {outs} : "r"(sm80_a)); {after}}}}}'
    )


def _ldmatrix_f32(row: str, col: str, after: str = "") -> str:
    """Template of one ldmatrix.x4 of rmem (f32 registers) from smem: four 8 x 4 blocks of 32-bit words."""
    return _ldmatrix("rmem", "smem", 4, row, col, after=after).replace('"=r"({rmem_data}', '"=f"({rmem_data}')


_A_TF32_ROWS = ("sm80_l % 16u", "(sm80_l / 16u) * 4u")  # lanes 0-15: rows 0-15 at k 0; lanes 16-31: at k 4

# tf32 A through ldmatrix.x4: a 16 x 8 f32 tile is four 8 x 4 matrices of 32-bit elements, which ldmatrix
# (b16 pairs) hands out as lane (g, t) <- element (g, t); then each register is rounded to tf32.
_ROUND_A = " ".join(f"{{rmem_data}}[{i}] = sm80_tf32({{rmem_data}}[{i}]);" for i in range(4))


@instr(
    _ldmatrix_f32(*_A_TF32_ROWS, after=_ROUND_A + " "),
    coll_unit=cuda_warp,
    cuda_includes=(_TF32_ROUND,),
    aligned=(("smem", 16),),  # ldmatrix rows
    smem_blocks=(("smem", (8, 4)),),  # ldmatrix's four matrices of 8 x 4 words
)
def Sm80_mma_load_a_tf32(rmem: [f32][16, 8] @ Sm80_RmemMatrixA, smem: [f32][16, 8] @ CudaSmemLinear):
    for m in seq(0, 16):
        for k in seq(0, 8):
            rmem[m, k] = smem[m, k]


@instr(
    _load_tf32("rmem", "smem", ["sm80_t * sm80_ld + sm80_g", "(sm80_t + 4) * sm80_ld + sm80_g"]),
    coll_unit=cuda_warp,
    cuda_includes=(_TF32_ROUND,),
    smem_blocks=(("smem", (4, 8)),),  # two loads per lane: k = t (then t + 4) of column n = g
)
def Sm80_mma_load_b_tf32(rmem: [f32][8, 8] @ Sm80_RmemMatrixB, smem: [f32][8, 8] @ CudaSmemLinear):
    for k in seq(0, 8):
        for n in seq(0, 8):
            rmem[k, n] = smem[k, n]


# The `_trunc` tf32 loads leave the f32 bits as they are: the tensor core uses the top 19 bits (sign, exponent and
# 10 mantissa bits) and drops the rest, a rounding toward zero, as wgmma does with f32 data in shared memory (on an
# H200: max rel err 8e-4 against float64 at K = 8192, a truncation's; cvt.rn's 3e-4). They save the conversion
# instruction per element, which the rounding loads pay.
@instr(
    _ldmatrix_f32(*_A_TF32_ROWS),
    coll_unit=cuda_warp,
    aligned=(("smem", 16),),  # ldmatrix rows
    smem_blocks=(("smem", (8, 4)),),  # ldmatrix's four matrices of 8 x 4 words
)
def Sm80_mma_load_a_tf32_trunc(rmem: [f32][16, 8] @ Sm80_RmemMatrixA, smem: [f32][16, 8] @ CudaSmemLinear):
    for m in seq(0, 16):
        for k in seq(0, 8):
            rmem[m, k] = smem[m, k]


# Two B fragments from B given transposed (n rows of K-contiguous elements): fragment j's registers (k = t and
# t + 4 of column n = g) are words t and t + 4 of row 8 j + g, so the four 8 x 4-word blocks of the 16 x 8 tile are
# four ldmatrix matrices, no transpose (ldmatrix moves 32-bit words as pairs of b16). Lanes 8 q .. 8 q + 7 address
# matrix q: rows of fragment q / 2, k half q % 2.
@instr(
    _ldmatrix_f32("sm80_l % 8u + 8u * (sm80_l / 16u)", "(sm80_l / 8u) % 2u * 4u"),
    coll_unit=cuda_warp,
    aligned=(("smem", 16),),  # ldmatrix rows
    smem_blocks=(("smem", (8, 4)),),  # ldmatrix's four matrices of 8 x 4 words
)
def Sm80_mma_load_b_pair_nk_tf32_trunc(rmem: [f32][2, 8, 8] @ Sm80_RmemMatrixB, smem: [f32][16, 8] @ CudaSmemLinear):
    for j in seq(0, 2):
        for n in seq(0, 8):
            for k in seq(0, 8):
                rmem[j, k, n] = smem[8 * j + n, k]


def _mma(shape: str, dtype: str, hw_a: str = "A", hw_b: str = "B", bits: str = "") -> str:
    """Template of mma.sync.aligned.{shape} with `dtype` operands accumulating in f32 on D: parameter hw_a is the
    hardware's A operand (4 registers), hw_b its B operand (2); `bits` reinterprets f32 registers as the 32-bit
    words mma takes (`__float_as_uint`; 2-byte fragments are held as such words already)."""
    words = [f"{{{p}_data}}[{i}]" for p, n in ((hw_a, 4), (hw_b, 2)) for i in range(n)]
    operands = ", ".join(f'"r"({bits}({w}))' if bits else f'"r"({w})' for w in words)
    return (
        f'asm volatile("mma.sync.aligned.{shape}.row.col.f32.{dtype}.{dtype}.f32 '
        '{{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};" '
        ': "+f"({D_data}[0]), "+f"({D_data}[1]), "+f"({D_data}[2]), "+f"({D_data}[3]) '
        f": {operands});"
    )


# tf32 with B given as [K, N], operands swapped: the hardware computes D^T = B^T A^T. B's 8 x 16 tile (k, n) is the
# m16n8k8's A operand, its row m = g the column pair n = 2 g, 2 g + 1 and its row g + 8 the same pair's second
# column, so a lane's registers a0, a1 (k = t) and a2, a3 (k = t + 4) are two adjacent words of B's row each: two
# 8-byte loads straight into the registers mma reads (no transposing load exists for 32-bit words, and 16-byte
# loads would need register moves). A's tile, K-contiguous, is the hardware's B operand
# (`Sm80_mma_load_b_pair_nk_tf32_trunc` loads two). The accumulator tile is 8 x 16 (m, n): d0, d1 hold rows
# m = 2 t, 2 t + 1 of column n = 2 g, d2, d3 the same rows of column 2 g + 1.


@instr(
    "{{ const float *sm80_s = &{smem_data}; const int sm80_ld = {smem}.strides[0]; " + _LANE
    + " const float2 sm80_lo = *reinterpret_cast<const float2 *>(&sm80_s[sm80_t * sm80_ld + 2 * sm80_g]);"
    " const float2 sm80_hi = *reinterpret_cast<const float2 *>(&sm80_s[(sm80_t + 4) * sm80_ld + 2 * sm80_g]);"
    " {rmem_data}[0] = sm80_lo.x; {rmem_data}[1] = sm80_lo.y; {rmem_data}[2] = sm80_hi.x; {rmem_data}[3] = sm80_hi.y; }}",
    coll_unit=cuda_warp,
    aligned=(("smem", 8),),  # 8-byte loads
    # two loads per lane: k = t (then t + 4), columns 2 g, 2 g + 1; 8-byte loads are served half a warp at a time
    # (Nsight Compute on an H200 agrees: benchmarks/results/bank_conflicts_ncu.md), lanes 0-15 reading columns 0-7
    smem_blocks=(("smem", (4, 8)),),
)
def Sm80_mma_load_b_swap_tf32_trunc(rmem: [f32][8, 16] @ Sm80_RmemMatrixA, smem: [f32][8, 16] @ CudaSmemLinear):
    for k in seq(0, 8):
        for n in seq(0, 16):
            rmem[k, n] = smem[k, n]


@instr(_mma("m16n8k8", "tf32", "B", "A", "__float_as_uint"), coll_unit=cuda_warp,
       convergent=True)  # mma.sync.aligned: the warp executes it as one
def Sm80_mma_swap_tf32(
    D: [f32][8, 16] @ Sm80_RmemMatrixD, A: [f32][8, 8] @ Sm80_RmemMatrixB, B: [f32][8, 16] @ Sm80_RmemMatrixA
):
    for m in seq(0, 8):
        for n in seq(0, 16):
            for k in seq(0, 8):
                D[m, n] += A[k, m] * B[k, n]


def _m16n8k16(dtype: str) -> tuple:
    """The m16n8k16 instrs for one 2-byte operand type: A and B fragment loads and the mma.

    A (16 x 16, row-major in shared memory) through ldmatrix.x4, B (16 x 8, row-major,
    i.e. k-major) through ldmatrix.x2.trans, or two adjacent B fragments (16 x 16) through
    one ldmatrix.x4.trans (`load_b_pair`: half the instructions for the same bytes); the
    rows must be 16-byte aligned.
    """
    mma = _mma("m16n8k16", dtype)
    sources = {
        f"Sm80_mma_load_a_{dtype}": (
            _ldmatrix("rmem", "smem", 4, "sm80_l % 16u", "(sm80_l / 16u) * 8u"),
            f"def Sm80_mma_load_a_{dtype}(rmem: [{dtype}][16, 16] @ Sm80_RmemMatrixA, smem: [{dtype}][16, 16] @ CudaSmemLinear):\n"
            "    for m in seq(0, 16):\n        for k in seq(0, 16):\n            rmem[m, k] = smem[m, k]\n",
            False,
        ),
        f"Sm80_mma_load_b_{dtype}": (
            _ldmatrix("rmem", "smem", 2, "sm80_l % 16u", "0", trans=True),
            f"def Sm80_mma_load_b_{dtype}(rmem: [{dtype}][16, 8] @ Sm80_RmemMatrixB, smem: [{dtype}][16, 8] @ CudaSmemLinear):\n"
            "    for k in seq(0, 16):\n        for n in seq(0, 8):\n            rmem[k, n] = smem[k, n]\n",
            False,
        ),
        f"Sm80_mma_load_b_pair_{dtype}": (  # lanes 0-15 address fragment 0's rows k, lanes 16-31 fragment 1's
            _ldmatrix("rmem", "smem", 4, "sm80_l % 16u", "(sm80_l / 16u) * 8u", trans=True),
            f"def Sm80_mma_load_b_pair_{dtype}(rmem: [{dtype}][2, 16, 8] @ Sm80_RmemMatrixB, "
            f"smem: [{dtype}][16, 16] @ CudaSmemLinear):\n"
            "    for j in seq(0, 2):\n        for k in seq(0, 16):\n            for n in seq(0, 8):\n"
            "                rmem[j, k, n] = smem[k, 8 * j + n]\n",
            False,
        ),
        f"Sm80_mma_{dtype}": (
            mma,
            f"def Sm80_mma_{dtype}(D: [f32][16, 8] @ Sm80_RmemMatrixD, A: [{dtype}][16, 16] @ Sm80_RmemMatrixA, "
            f"B: [{dtype}][16, 8] @ Sm80_RmemMatrixB):\n"
            "    for m in seq(0, 16):\n        for n in seq(0, 8):\n            for k in seq(0, 16):\n"
            "                D[m, n] += A[m, k] * B[k, n]\n",
            True,  # mma.sync.aligned: the warp executes it as one
        ),
    }
    namespace = {**_NAMESPACE, "Sm80_RmemMatrixA": Sm80_RmemMatrixA, "Sm80_RmemMatrixB": Sm80_RmemMatrixB,
                 "Sm80_RmemMatrixD": Sm80_RmemMatrixD}  # fmt: skip
    procs = []
    for name, (c_instr, src, convergent) in sources.items():
        p = parse_source(src, filename=__file__, func_globals=namespace, instr=(c_instr, ""))
        ldmatrix = "ldmatrix" in c_instr
        register_instr(name, InstrInfo(coll_unit=cuda_warp, convergent=convergent, target="sm_80",
                                       aligned=(("smem", 16),) if ldmatrix else (),
                                       smem_blocks=(("smem", (8, 8)),) if ldmatrix else ()))  # 8 x 8 matrices
        procs.append(p)
    return tuple(procs)


Sm80_mma_load_a_f16, Sm80_mma_load_b_f16, Sm80_mma_load_b_pair_f16, Sm80_mma_f16 = _m16n8k16("f16")
Sm80_mma_load_a_bf16, Sm80_mma_load_b_bf16, Sm80_mma_load_b_pair_bf16, Sm80_mma_bf16 = _m16n8k16("bf16")


def _store_d(first_row: str, second_row: str, pairs: tuple) -> str:
    """Template storing a lane's four accumulator registers to gmem as two pairs of adjacent elements: registers
    pairs[0] at `first_row` (an element offset), pairs[1] at `second_row` elements past it; float2 stores where the
    address and the row stride allow, else one by one."""
    (a, b), (c, d) = [[f"{{rmem_data}}[{i}]" for i in pair] for pair in pairs]
    return (
        "{{ float *sm80_p = &{gmem_data}; const int sm80_ld = {gmem}.strides[0]; " + _LANE
        + " float *sm80_r0 = &sm80_p[" + first_row + "], *sm80_r1 = sm80_r0 + " + second_row + ";"
        + " if ((reinterpret_cast<uintptr_t>(sm80_p) | (uintptr_t) sm80_ld * 4u) % 8u == 0) {{"
        + f" *reinterpret_cast<float2 *>(sm80_r0) = make_float2({a}, {b});"
        + f" *reinterpret_cast<float2 *>(sm80_r1) = make_float2({c}, {d});"
        + f" }}}} else {{{{ sm80_r0[0] = {a}; sm80_r0[1] = {b}; sm80_r1[0] = {c}; sm80_r1[1] = {d}; }}}} }}}}"
    )


_ZERO_D = "{{ for (int sm80_r = 0; sm80_r < 4; ++sm80_r) {rmem_data}[sm80_r] = 0.0f; }}"


@instr(_ZERO_D, coll_unit=cuda_warp)
def Sm80_mma_zero_d_tf32(rmem: [f32][16, 8] @ Sm80_RmemMatrixD):
    for m in seq(0, 16):
        for n in seq(0, 8):
            rmem[m, n] = 0.0


@instr(_mma("m16n8k8", "tf32", bits="__float_as_uint"), coll_unit=cuda_warp,
       convergent=True)  # mma.sync.aligned: the warp executes it as one
def Sm80_mma_tf32(
    D: [f32][16, 8] @ Sm80_RmemMatrixD, A: [f32][16, 8] @ Sm80_RmemMatrixA, B: [f32][8, 8] @ Sm80_RmemMatrixB
):
    for m in seq(0, 16):
        for n in seq(0, 8):
            for k in seq(0, 8):
                D[m, n] += A[m, k] * B[k, n]


@instr(_store_d("sm80_g * sm80_ld + 2 * sm80_t", "8 * sm80_ld", ((0, 1), (2, 3))), coll_unit=cuda_warp)
def Sm80_mma_store_d_tf32(gmem: [f32][16, 8] @ CudaGmemLinear, rmem: [f32][16, 8] @ Sm80_RmemMatrixD):
    for m in seq(0, 16):
        for n in seq(0, 8):
            gmem[m, n] = rmem[m, n]


@instr(_ZERO_D, coll_unit=cuda_warp)
def Sm80_mma_zero_d_swap_tf32(rmem: [f32][8, 16] @ Sm80_RmemMatrixD):
    for m in seq(0, 8):
        for n in seq(0, 16):
            rmem[m, n] = 0.0


@instr(_store_d("2 * sm80_t * sm80_ld + 2 * sm80_g", "sm80_ld", ((0, 2), (1, 3))), coll_unit=cuda_warp)
def Sm80_mma_store_d_swap_tf32(gmem: [f32][8, 16] @ CudaGmemLinear, rmem: [f32][8, 16] @ Sm80_RmemMatrixD):
    for m in seq(0, 8):
        for n in seq(0, 16):
            gmem[m, n] = rmem[m, n]


__all__ = [
    "Sm80_RmemMatrixA", "Sm80_RmemMatrixB", "Sm80_RmemMatrixD",
    "Sm80_cp_async_f32", "Sm80_cp_async_f16", "Sm80_cp_async_bf16",
    "Sm80_mma_load_a_tf32", "Sm80_mma_load_b_tf32", "Sm80_mma_zero_d_tf32", "Sm80_mma_tf32", "Sm80_mma_store_d_tf32",
    "Sm80_mma_load_a_tf32_trunc", "Sm80_mma_load_b_pair_nk_tf32_trunc",
    "Sm80_mma_load_b_swap_tf32_trunc", "Sm80_mma_swap_tf32", "Sm80_mma_zero_d_swap_tf32", "Sm80_mma_store_d_swap_tf32",
    "Sm80_mma_load_a_f16", "Sm80_mma_load_b_f16", "Sm80_mma_load_b_pair_f16", "Sm80_mma_f16",
    "Sm80_mma_load_a_bf16", "Sm80_mma_load_b_bf16", "Sm80_mma_load_b_pair_bf16", "Sm80_mma_bf16",
]  # fmt: skip

register_platform({name: globals()[name] for name in __all__})
