"""Base class of CUDA memories: what the analyses and the CUDA backend ask of a memory."""

from __future__ import annotations

from exo.core.memory import Memory, MemGenError

from ..coll.algebra import CollUnit


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

    @classmethod
    def alloc(cls, new_name, prim_type, shape, srcinfo):
        raise MemGenError(f"{srcinfo}: {new_name} @ {cls.name()} can only be allocated in CUDA code")

    @classmethod
    def free(cls, new_name, prim_type, shape, srcinfo):
        return ""

    @classmethod
    def can_read(cls):
        return True

    @classmethod
    def write(cls, s, lhs, rhs):
        return f"{lhs} = {rhs};"

    @classmethod
    def reduce(cls, s, lhs, rhs):
        return f"{lhs} += {rhs};"
