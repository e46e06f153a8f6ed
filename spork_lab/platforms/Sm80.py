"""sm_80: cp.async and warp-cooperative mma.sync (m16n8k8, tf32) memories and instrs."""

from __future__ import annotations

import math

from exo.core.memory import MemGenError

from ..core.coll import cuda_thread, cuda_warp
from ..core.instrs import InstrInfo, InstrTemplate, register_instr
from ..core.memories import CudaMemory, const_shape
from ..core.timelines import Sm80_cp_async_instr, cuda_in_order_instr
from ..lang.decorators import instr
from ..lang.frontend import parse_source, register_platform
from .cuda import CudaGmemLinear, CudaSmemLinear


class _Sm80MmaFragment(CudaMemory):
    """Registers holding one warp's mma.sync fragment; indexed only by mma instrs."""

    native_unit = cuda_warp
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = frozenset({cuda_in_order_instr})
    write_tls = frozenset({cuda_in_order_instr})
    regs_per_tile = 4  # registers each lane holds for one fragment (the last two dims)

    @classmethod
    def cuda_alloc(cls, new_name, prim_type, shape, srcinfo, smem_ptr=""):
        dims = const_shape(new_name, cls, shape, srcinfo)
        return f"{prim_type} {new_name}[{math.prod(dims[:-2]) * cls.regs_per_tile}];"

    @classmethod
    def window(cls, basetyp, baseptr, indices, strides, srcinfo):
        """A fragment window `x[i, j, :, :]` starts at the lane's registers of tile (i, j)."""
        tile = int(strides[-3]) if len(strides) > 2 else 0
        if len(indices) < 2 or indices[-2:] != ["0", "0"] or (tile and any(not s.isdigit() for s in strides[:-2])):
            raise MemGenError(f"{srcinfo}: {cls.name()} windows must cover whole fragments, e.g. x[i, j, :, :]")
        offset = " + ".join(f"({i}) * {int(s) // tile * cls.regs_per_tile}" for i, s in zip(indices[:-2], strides[:-2]))
        return f"(&{baseptr}[{offset or 0}])"


class Sm80_RmemMatrixA(_Sm80MmaFragment):
    """A operand of m16n8k8 tf32: 16 x 8 per warp, 4 registers per thread."""


class Sm80_RmemMatrixB(_Sm80MmaFragment):
    """B operand of m16n8k8 tf32: 8 x 8 per warp, 2 registers per thread."""

    regs_per_tile = 2


class Sm80_RmemMatrixD(_Sm80MmaFragment):
    """Accumulator of m16n8k8: 16 x 8 per warp, 4 registers per thread."""


def _make_cp_async_f32(size: int):
    if size not in (4, 8, 16):
        raise ValueError(f"Sm80_cp_async_f32: size must be 4, 8 or 16 bytes, got {size}")
    n = size // 4
    cache = "cg" if size == 16 else "ca"
    c_instr = (
        f'asm volatile("cp.async.{cache}.shared.global [%0], [%1], {size};" :: '
        '"r"((unsigned)__cvta_generic_to_shared(&{dst_data})), "l"(&{src_data}));'
    )
    src = (
        f"def Sm80_cp_async_f32_{size}(dst: [f32][{n}] @ CudaSmemLinear, src: [f32][{n}] @ CudaGmemLinear):\n"
        f"    for i in seq(0, {n}):\n"
        f"        dst[i] = src[i]\n"
    )
    namespace = {"CudaSmemLinear": CudaSmemLinear, "CudaGmemLinear": CudaGmemLinear}
    p = parse_source(src, filename=__file__, func_globals=namespace, instr=(c_instr, ""))
    register_instr(p.name(), InstrInfo(instr_tl=Sm80_cp_async_instr, coll_unit=cuda_thread))
    return p


Sm80_cp_async_f32 = InstrTemplate("Sm80_cp_async_f32", _make_cp_async_f32, {"size": 4})

# Fragment layouts of mma.m16n8k8 (PTX ISA, "Matrix Fragments for mma.m16n8k8"):
# lane = 4 * group + tig; A: a0 (group, tig), a1 (group + 8, tig), a2 (group, tig + 4),
# a3 (group + 8, tig + 4); B: b0 (tig, group), b1 (tig + 4, group);
# D: d0, d1 (group, 2 * tig + {0, 1}), d2, d3 (group + 8, 2 * tig + {0, 1}).
# The templates' locals are prefixed `sm80_` so they do not shadow names used in the
# arguments' index expressions. The loads round f32 to tf32 (cvt.rna) as mma expects.
_LANE = "const unsigned sm80_g = (threadIdx.x % 32u) / 4u, sm80_t = threadIdx.x % 4u;"


def _load_tf32(rmem: str, smem: str, offsets: list) -> str:
    """Template loading rmem[i] = tf32(smem[offsets[i]]), rounded to nearest (ties away) by cvt.rna."""
    loads = " ".join(
        f'asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(sm80_u) : "f"(sm80_s[{off}])); {{{rmem}_data}}[{i}] = __uint_as_float(sm80_u);'
        for i, off in enumerate(offsets)
    )
    return (
        f"{{{{ const float *sm80_s = &{{{smem}_data}}; const int sm80_ld = {{{smem}}}.strides[0]; "
        f"{_LANE} unsigned sm80_u; {loads} }}}}"
    )


@instr(
    _load_tf32(
        "rmem",
        "smem",
        [
            "sm80_g * sm80_ld + sm80_t",
            "(sm80_g + 8) * sm80_ld + sm80_t",
            "sm80_g * sm80_ld + sm80_t + 4",
            "(sm80_g + 8) * sm80_ld + sm80_t + 4",
        ],
    ),
    coll_unit=cuda_warp,
)
def Sm80_mma_load_a_tf32(rmem: [f32][16, 8] @ Sm80_RmemMatrixA, smem: [f32][16, 8] @ CudaSmemLinear):
    for m in seq(0, 16):
        for k in seq(0, 8):
            rmem[m, k] = smem[m, k]


@instr(
    _load_tf32("rmem", "smem", ["sm80_t * sm80_ld + sm80_g", "(sm80_t + 4) * sm80_ld + sm80_g"]),
    coll_unit=cuda_warp,
)
def Sm80_mma_load_b_tf32(rmem: [f32][8, 8] @ Sm80_RmemMatrixB, smem: [f32][8, 8] @ CudaSmemLinear):
    for k in seq(0, 8):
        for n in seq(0, 8):
            rmem[k, n] = smem[k, n]


@instr("{{ for (int sm80_r = 0; sm80_r < 4; ++sm80_r) {rmem_data}[sm80_r] = 0.0f; }}", coll_unit=cuda_warp)
def Sm80_mma_zero_d_tf32(rmem: [f32][16, 8] @ Sm80_RmemMatrixD):
    for m in seq(0, 16):
        for n in seq(0, 8):
            rmem[m, n] = 0.0


@instr(
    'asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 '
    '{{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};" '
    ': "+f"({D_data}[0]), "+f"({D_data}[1]), "+f"({D_data}[2]), "+f"({D_data}[3]) '
    ': "r"(__float_as_uint({A_data}[0])), "r"(__float_as_uint({A_data}[1])), '
    '"r"(__float_as_uint({A_data}[2])), "r"(__float_as_uint({A_data}[3])), '
    '"r"(__float_as_uint({B_data}[0])), "r"(__float_as_uint({B_data}[1])));',
    coll_unit=cuda_warp,
    convergent=True,  # mma.sync.aligned: the warp executes it as one
)
def Sm80_mma_tf32(
    D: [f32][16, 8] @ Sm80_RmemMatrixD, A: [f32][16, 8] @ Sm80_RmemMatrixA, B: [f32][8, 8] @ Sm80_RmemMatrixB
):
    for m in seq(0, 16):
        for n in seq(0, 8):
            for k in seq(0, 8):
                D[m, n] += A[m, k] * B[k, n]


@instr(
    "{{ float *sm80_p = &{gmem_data}; const int sm80_ld = {gmem}.strides[0]; " + _LANE +
    " sm80_p[sm80_g * sm80_ld + 2 * sm80_t] = {rmem_data}[0]; sm80_p[sm80_g * sm80_ld + 2 * sm80_t + 1] = {rmem_data}[1];"
    " sm80_p[(sm80_g + 8) * sm80_ld + 2 * sm80_t] = {rmem_data}[2];"
    " sm80_p[(sm80_g + 8) * sm80_ld + 2 * sm80_t + 1] = {rmem_data}[3]; }}",
    coll_unit=cuda_warp,
)
def Sm80_mma_store_d_tf32(gmem: [f32][16, 8] @ CudaGmemLinear, rmem: [f32][16, 8] @ Sm80_RmemMatrixD):
    for m in seq(0, 16):
        for n in seq(0, 8):
            gmem[m, n] = rmem[m, n]


__all__ = [
    "Sm80_RmemMatrixA", "Sm80_RmemMatrixB", "Sm80_RmemMatrixD",
    "Sm80_cp_async_f32", "Sm80_mma_load_a_tf32", "Sm80_mma_load_b_tf32",
    "Sm80_mma_zero_d_tf32", "Sm80_mma_tf32", "Sm80_mma_store_d_tf32",
]  # fmt: skip

register_platform({name: globals()[name] for name in __all__})
