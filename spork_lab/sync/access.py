"""How the abstract machine records an access: the rules both sync engines share."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from ..core.coll import cuda_thread, cuda_warp, cuda_warpgroup
from ..core.instrs import instr_info_by_name
from ..core.memories import CudaMemory

REGISTER_UNITS = (cuda_thread, cuda_warp, cuda_warpgroup)


@lru_cache(maxsize=None)
def is_shared_memory(mem) -> bool:
    """Memory that several collectives use (shared, global), not registers owned by one collective."""
    return getattr(mem, "native_unit", None) not in REGISTER_UNITS


@lru_cache(maxsize=None)
def is_global_memory(mem) -> bool:
    """Global (device) memory: no collective allocates it; peer CTAs see its accesses only through
    cluster-scope syncs (a remote mbarrier arrive releases at .cta scope)."""
    return isinstance(mem, type) and issubclass(mem, CudaMemory) and not mem.device_allocated


def distributed_shared(analysis, sym) -> bool:
    """Is allocation `sym` shared memory split into shards (seed 000, distributed memory)?

    Its elements are reused, after the free, by each shard's owner only (e.g.
    one CTA of a cluster), not by the whole allocating collective.
    """
    a = analysis.dist.get(sym)
    return a is not None and a.is_distributed and is_shared_memory(a.mem)


@lru_cache(maxsize=None)
def unordered_access(instr_name: Optional[str], collective_threads: int, mem) -> bool:
    """Whether an access starts visible to no thread at all (an empty V_S, as for async instructions).

    An instr run by several threads whose lanes act independently (not
    convergent by definition, like a fragment load, unlike mma.sync) states
    its effect for the whole collective, not which lane touches which element
    of shared or global memory; so no lane may assume it sees the others'
    accesses until a sync statement says so. Registers the collective owns
    are private to it and keep the ordinary rule.
    """
    if instr_name is None or collective_threads <= 1 or not is_shared_memory(mem):
        return False
    info = instr_info_by_name(instr_name)
    return info is not None and not info.convergent
