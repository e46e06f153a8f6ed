"""Generic CUDA: blocks, loop modes, collective units, memories, barriers, timelines.

`from spork_lab.platforms.cuda import *` gives every name an Exo-GPU proc uses
besides the Sm80/Sm90 instructions.
"""

from __future__ import annotations

import math

from exo.core.memory import DRAM, MemGenError

from ..core import timelines as tl
from ..core.blocks import CudaAsync, CudaDeviceFunction, CudaWarpConfig, CudaWarps
from ..core.coll import (
    CollUnit,
    blockDim,
    clusterDim,
    cuda_cta_in_cluster,
    cuda_thread,
    cuda_warp,
    cuda_warpgroup,
)
from ..core.loop_modes import cuda_tasks, cuda_threads
from ..core.memories import CudaMemory, const_shape
from ..core.sync_stmts import (
    Arrive,
    Await,
    BarrierMemory,
    Fence,
    QueueFacts,
    ReverseArrive,
    ReverseAwait,
)
from ..core.timelines import (
    Sm80_cp_async,
    Sm80_cp_async_instr,
    Sm80_generic,
    cpu_in_order,
    cpu_in_order_instr,
    cuda_generic_and_async_proxy,
    cuda_in_order,
    cuda_in_order_instr,
    cuda_temporal,
    tma_to_gmem_async,
    tma_to_gmem_async_instr,
    tma_to_smem_async,
    tma_to_smem_async_instr,
    wgmma_async,
    wgmma_async_instr,
    wgmma_async_smem,
    wgmma_fence_1,
    wgmma_fence_2,
)
from ..errors import SyncError
from ..lang.frontend import register_platform

_cuda_tls = frozenset(
    {cuda_in_order_instr, Sm80_cp_async_instr, tma_to_smem_async_instr, tma_to_gmem_async_instr, wgmma_async_instr}
)


class CudaGmemLinear(CudaMemory):
    """Device global memory, row-major. Allocated by CPU code; accessed only by CUDA code."""

    native_unit = None  # not distributed: one allocation per device
    device_allocated = False
    alloc_tls = frozenset({cpu_in_order_instr})
    read_tls = _cuda_tls
    write_tls = _cuda_tls

    @classmethod
    def alloc(cls, new_name, prim_type, shape, srcinfo):
        if not shape:
            raise MemGenError(f"{srcinfo}: scalars cannot live in CudaGmemLinear; use a [1] tensor")
        size = " * ".join(shape)
        return f"{prim_type} *{new_name} = ({prim_type}*) spork_cuda_malloc(({size}) * sizeof({prim_type}));"

    @classmethod
    def free(cls, new_name, prim_type, shape, srcinfo):
        return f"spork_cuda_free({new_name});"


class CudaSmemLinear(CudaMemory):
    """Shared memory of one CTA, constant shape, row-major."""

    native_unit = cuda_cta_in_cluster
    linear_smem = True
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = _cuda_tls
    write_tls = _cuda_tls

    @classmethod
    def smem_bytes(cls, elem_bytes, shape, srcinfo):
        return elem_bytes * math.prod(const_shape("shared memory", cls, shape, srcinfo))

    @classmethod
    def cuda_alloc(cls, new_name, prim_type, shape, srcinfo, smem_ptr=""):
        if not shape:  # a scalar: exo's C names it, not a pointer to it
            return f"{prim_type} &{new_name} = *reinterpret_cast<{prim_type}*>({smem_ptr});"
        return f"{prim_type} *{new_name} = reinterpret_cast<{prim_type}*>({smem_ptr});"


class CudaRmem(CudaMemory):
    """Registers of one thread, constant shape."""

    native_unit = cuda_thread
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = frozenset({cuda_in_order_instr, wgmma_async_instr})
    write_tls = frozenset({cuda_in_order_instr, wgmma_async_instr})

    @classmethod
    def cuda_alloc(cls, new_name, prim_type, shape, srcinfo, smem_ptr=""):
        dims = const_shape(new_name, cls, shape, srcinfo)
        return f"{prim_type} {new_name}[{math.prod(dims)}];" if dims else f"{prim_type} {new_name};"


def _use_error(use, message: str) -> SyncError:
    return SyncError(message, use.stmt.srcinfo)


_ARRIVE_TLS = frozenset({tl.cuda_in_order_instr, tl.Sm80_cp_async_instr, tl.tma_to_smem_async_instr})
_GENERIC = frozenset({tl.cuda_in_order_instr, tl.Sm80_cp_async_instr})
_CUDA_TLS = frozenset(tl.INSTR_TLS.values()) - {tl.cpu_in_order_instr}
_HOST_TLS = frozenset({tl.cpu_in_order_instr, tl.cuda_in_order_instr})


def _check_await_n(mem: type, name: str, awaits: list) -> None:
    for u in awaits:
        problem = mem.await_n_error(name, u.spec.kind, u.spec.N)
        if problem:
            raise _use_error(u, problem)


class CudaMbarrier(BarrierMemory):
    """Split barriers as shared-memory mbarriers with phase parity (and reverse barriers)."""

    in_shared_memory = True
    pairs_by_lag = True
    allows_reverse = True
    takes_trailing_loads = True  # TMA loads complete on it: `copy(...) >> bar[...]`
    lowering = "mbarrier"

    @classmethod
    def await_n_error(cls, name: str, kind: str, n: int) -> str | None:
        if n < 0:
            return None
        return (f"{kind} on CudaMbarrier {name} takes N = ~lag, not {n}: write ~0 to wait for the latest arrive (~k: "
                "the one k phases back); mbarriers pair by lag, commit groups by count")

    @classmethod
    def check_queue(cls, name: str, positions: int, arrives: list, awaits: list, reverse: bool) -> QueueFacts:
        _check_await_n(cls, name, awaits)
        for u in awaits:
            problem = cls.lag_error(name, u.spec.kind, awaits[0].spec.N, u.spec.N)
            if problem:
                raise _use_error(u, problem)
        counts = {u.arrivals for u in arrives}
        if len(counts) > 1:
            raise _use_error(
                arrives[-1],
                f"every arrive on mbarrier {name} must make the same number of arrivals (collectives of "
                f"{sorted({u.thread_count for u in arrives})} threads, multicast to {sorted({u.spec.window_shape for u in arrives})})",
            )
        for u in arrives:
            if not u.spec.first_tl.instr_tls <= _ARRIVE_TLS or not u.spec.first_tl.instr_tls:
                raise _use_error(
                    u, f"an mbarrier arrive orders in-order CUDA, cp.async or TMA-load accesses, not {u.spec.first_tl}"
                )
            if u.spec.window_shape and tl.Sm80_cp_async_instr in u.spec.first_tl.instr_tls:
                raise _use_error(u, f"a cp.async Arrive signals this CTA's mbarrier only (cp.async.mbarrier.arrive has "
                                    f"no remote form), so it cannot arrive on a slice {name}[...] of the cluster's "
                                    "barriers: arrive on this CTA's barrier, then order the peers with a Fence by "
                                    "the whole cluster")
            if u.spec.window_shape and any(a.tx_bytes for a in arrives):
                raise _use_error(u, f"TMA loads complete on {name}, so an Arrive on it sets the bytes its phase "
                                    "awaits (mbarrier.arrive.expect_tx on this CTA's barrier): arrive on this CTA's "
                                    f"barrier ({name}[cta]), not a slice; a multicast TMA load completes on the "
                                    "barrier of every CTA it writes by itself")
            if u.tx_bytes and tl.tma_to_smem_async_instr not in u.spec.first_tl.instr_tls:
                raise _use_error(u, f"this Arrive closes a phase that TMA loads complete on: its first sync-tl must "
                                    f"include tma_to_smem_async (Arrive(tma_to_smem_async, 1)), not {u.spec.first_tl}")
            if u.tx_bytes >= 1 << 20:
                raise _use_error(u, f"the TMA loads of one phase of {name} move {u.tx_bytes} bytes; an mbarrier counts "
                                    "fewer than 2^20: split them over more barriers")
        for u in awaits:
            if not u.spec.second_tl.instr_tls <= _CUDA_TLS:
                raise _use_error(u, f"an mbarrier await orders CUDA accesses, not {u.spec.second_tl}")
        return QueueFacts(lag=~awaits[0].spec.N, arrivals=counts.pop())


class CudaCommitGroup(BarrierMemory):
    """Split barriers as commit groups: cp.async / wgmma commit_group + wait_group N."""

    lowering = "commit_group"
    # The first sync-tl of the arrives picks the hardware queue: (flavour, its instr-tl, threads per queue).
    FLAVOURS = {
        "Sm80_cp_async": ("cp.async", tl.Sm80_cp_async_instr, 1),
        "wgmma_async": ("wgmma", tl.wgmma_async_instr, 128),
        "tma_to_gmem_async": ("cp.async.bulk", tl.tma_to_gmem_async_instr, 1),
    }

    @classmethod
    def await_n_error(cls, name: str, kind: str, n: int) -> str | None:
        return None if n >= 0 else f"Await on commit group {name} needs N >= 0 (wait_group N), not ~{~n}"

    @classmethod
    def check_queue(cls, name: str, positions: int, arrives: list, awaits: list, reverse: bool) -> QueueFacts:
        first = arrives[0].spec.first_tl
        if first.name not in cls.FLAVOURS:
            raise _use_error(
                arrives[0], f"an Arrive on a commit group commits the arriving threads' asynchronous copies, so its "
                f"first sync-tl names them: `Arrive(Sm80_cp_async, 1) >> {name}` after cp.async copies (wgmma_async "
                f"after wgmma, tma_to_gmem_async after TMA stores), not {first}; to order {first} accesses, use a "
                "Fence or a CudaMbarrier"
            )
        flavour, instr_tl, scope = cls.FLAVOURS[first.name]
        if positions != 1:
            raise _use_error(
                arrives[0], f"{name} @ CudaCommitGroup: each thread has one {flavour} commit queue; use a scalar barrier"
            )
        _check_await_n(cls, name, awaits)
        for u in awaits:
            if not u.spec.second_tl.instr_tls <= {tl.cuda_in_order_instr, instr_tl} | tl.ASYNC_PROXY_INSTR_TLS:
                raise _use_error(u, f"{flavour}.wait_group cannot order {u.spec.second_tl}")
        unit = "warpgroup" if scope > 1 else "thread"
        for u in arrives + awaits:
            if u.thread_count is None or u.thread_count % scope:
                raise _use_error(u, f"{flavour} commit groups are per {unit}: run this statement with whole {unit}s")
        if len({u.thread_count for u in arrives + awaits}) > 1:
            raise _use_error(
                awaits[0],
                f"Arrive and Await on commit group {name} must be executed by the same collective unit "
                f"(the hardware queue is per {unit})",
            )
        return QueueFacts(max_wait_n=max(u.spec.N for u in awaits), flavour=flavour, scope_threads=scope)


class CudaEvent(BarrierMemory):
    """Split barriers as CUDA events between CPU code, streams and device functions."""

    lives_on_device = False
    lowering = "event"

    @classmethod
    def await_n_error(cls, name: str, kind: str, n: int) -> str | None:
        return None if n == 0 else f"Await on CudaEvent {name} needs N = 0: an event remembers only its latest record"

    @classmethod
    def check_queue(cls, name: str, positions: int, arrives: list, awaits: list, reverse: bool) -> QueueFacts:
        for u in arrives + awaits:
            if u.thread_count is not None:
                raise _use_error(u, f"CudaEvent {name} is recorded and awaited by CPU code, outside device functions")
        for u in arrives:
            if not u.spec.first_tl.instr_tls <= _HOST_TLS:
                raise _use_error(u, f"cudaEventRecord orders CPU and stream (in-order CUDA) work, not {u.spec.first_tl}")
        _check_await_n(cls, name, awaits)
        for u in awaits:
            if not u.spec.second_tl.instr_tls <= _HOST_TLS:
                raise _use_error(u, f"an event wait orders CPU or stream work, not {u.spec.second_tl}")
        return QueueFacts()


class _BarrierType:
    """`barrier`, the type of barrier variables: `bar: barrier @ CudaMbarrier`, `barrier[2, 4]`."""

    def __getitem__(self, dims):
        return self

    def __repr__(self) -> str:
        return "barrier"


barrier = _BarrierType()

__all__ = [
    # blocks and loops
    "CudaDeviceFunction", "CudaAsync", "CudaWarps", "CudaWarpConfig", "cuda_tasks", "cuda_threads",
    # collective units
    "CollUnit", "blockDim", "clusterDim", "cuda_thread", "cuda_warp", "cuda_warpgroup", "cuda_cta_in_cluster",
    # memories and barriers
    "DRAM", "CudaMemory", "CudaGmemLinear", "CudaSmemLinear", "CudaRmem",
    "barrier", "BarrierMemory", "CudaMbarrier", "CudaCommitGroup", "CudaEvent",
    # sync statements
    "Fence", "Arrive", "Await", "ReverseArrive", "ReverseAwait",
    # instr-tls
    "cpu_in_order_instr", "cuda_in_order_instr", "Sm80_cp_async_instr", "tma_to_smem_async_instr",
    "tma_to_gmem_async_instr", "wgmma_async_instr",
    # sync-tls
    "cpu_in_order", "cuda_in_order", "Sm80_cp_async", "Sm80_generic", "tma_to_smem_async", "tma_to_gmem_async",
    "wgmma_async", "wgmma_async_smem", "wgmma_fence_1", "wgmma_fence_2", "cuda_generic_and_async_proxy",
    "cuda_temporal",
]  # fmt: skip

register_platform({name: globals()[name] for name in __all__})
