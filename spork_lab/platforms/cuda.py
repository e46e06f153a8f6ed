"""Generic CUDA: blocks, loop modes, collective units, memories, barriers, timelines.

`from spork_lab.platforms.cuda import *` gives every name an Exo-GPU proc uses
besides the Sm80/Sm90 instructions.
"""

from __future__ import annotations

import math

from exo.core.memory import DRAM, MemGenError

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
    alloc_tls = frozenset({cuda_in_order_instr})
    read_tls = _cuda_tls
    write_tls = _cuda_tls

    @classmethod
    def smem_bytes(cls, elem_bytes, shape, srcinfo):
        return elem_bytes * math.prod(const_shape("shared memory", cls, shape, srcinfo))

    @classmethod
    def cuda_alloc(cls, new_name, prim_type, shape, srcinfo, smem_ptr=""):
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


class CudaMbarrier(BarrierMemory):
    """Split barriers as shared-memory mbarriers with phase parity (and reverse barriers)."""

    allows_reverse = True


class CudaCommitGroup(BarrierMemory):
    """Split barriers as commit groups: cp.async / wgmma commit_group + wait_group N."""


class CudaEvent(BarrierMemory):
    """Split barriers as CUDA events between CPU code, streams and device functions."""


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
