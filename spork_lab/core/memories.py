"""Base class of CUDA memories: what the analyses and the CUDA backend ask of a memory."""

from __future__ import annotations

from exo.core.LoopIR import T
from exo.core.memory import MemGenError, Memory

from .coll import CollUnit
from .dtypes import BF16_C_NAME


class CudaMemory(Memory):
    """A memory used by CUDA code.

    `native_unit` is the collective unit that physically allocates it (seed 000,
    distributed memory rule 1); `alloc_tls`/`read_tls`/`write_tls` are the
    instr-tls that may allocate, read and write it. `global_()` stays empty:
    exo would otherwise copy device text into the host .c file.
    """

    native_unit: CollUnit = None
    alloc_tls: frozenset = frozenset()
    read_tls: frozenset = frozenset()
    write_tls: frozenset = frozenset()
    device_allocated = True  # allocated inside device code (False: by the CPU, e.g. global memory)
    # False where the instrs' layout decides which lane holds which element (mma and wgmma fragments): scalar
    # code cannot name an element by its index there, and instrs take windows of whole, adjacent tiles
    scalar_access = True
    # True where an allocation's last two dimensions are one tile whose lane layout depends on the tile's shape
    # (mma.sync fragments: 16 x 8 and 8 x 16 tf32 accumulators hold different elements in the same registers):
    # every window takes those dimensions whole, so one allocation holds one kind of tile
    whole_tiles = False
    # row-major shared memory of one CTA, each allocation 128-byte aligned: sl.bank_conflicts counts its banks
    linear_smem = False

    @classmethod
    def alloc(cls, new_name, prim_type, shape, srcinfo):
        raise MemGenError(f"{srcinfo}: {new_name} @ {cls.name()} can only be allocated in CUDA code")

    @classmethod
    def free(cls, new_name, prim_type, shape, srcinfo):
        return ""

    @classmethod
    def can_read(cls):
        return True

    # ---- CUDA backend hooks (spork_lab.codegen); shapes arrive with distributed dims stripped ----

    @classmethod
    def smem_bytes(cls, elem_bytes: int, shape: list, srcinfo) -> int:
        """Bytes this allocation takes from its CTA's shared-memory pool (0: it lives elsewhere)."""
        return 0

    @classmethod
    def cuda_alloc(cls, new_name: str, prim_type: str, shape: list, srcinfo, smem_ptr: str = "") -> str:
        """The CUDA declaration of an allocation made in device code; `smem_ptr` is its place in the pool."""
        raise MemGenError(f"{srcinfo}: {new_name} @ {cls.name()} cannot be allocated in CUDA code")

    @classmethod
    def write(cls, s, lhs, rhs):
        return f"{lhs} = {rhs};"

    @classmethod
    def reduce(cls, s, lhs, rhs):
        return f"{lhs} += {rhs};"


# Bytes of one element, by the C type exo prints for it (`basetype().ctype()`).
ELEM_BYTES = {"float": 4, "double": 8, "int8_t": 1, "uint8_t": 1, "uint16_t": 2, "int32_t": 4, "_Float16": 2,
              BF16_C_NAME: 2}


# The most shared memory one CTA may use (static plus dynamic, with the opt-in attribute), by compute
# capability (sm_90a: 90). The code generator refuses a kernel over its target's; pipeline_loop sizes rings to
# sm_90's by default.
SMEM_PER_CTA = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}


def elem_bytes(basetype) -> int:
    """Bytes of one element of an exo base type (f32: 4, f16: 2, ...), as allocations lay them out. exo's generic
    `R` is f32 by the time C is printed (its precision pass), so it is here too."""
    return ELEM_BYTES[(T.f32 if basetype == T.R else basetype).ctype()]


def const_shape(new_name: str, mem: type, shape: list, srcinfo) -> list:
    """The shape as ints; device memories other than global memory need constant shapes."""
    try:
        return [int(x) for x in shape]
    except ValueError:
        raise MemGenError(f"{srcinfo}: {new_name} @ {mem.name()} needs a constant shape, got [{', '.join(shape)}]") from None
