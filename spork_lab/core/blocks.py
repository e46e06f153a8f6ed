"""Context objects of `with` blocks: CudaDeviceFunction, CudaAsync, CudaWarps.

They are plain values. The front end stores one in a `WithBlock` loop mode; the
analyses read its fields; `str()` gives the source text the printer shows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Sequence

from ..errors import SporkTypeError, user_frame
from .timelines import InstrTl, SyncTl, cuda_in_order_instr


def _check_int(owner: str, name: str, value, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise SporkTypeError(f"{owner}: {name} must be an int, got {value!r}", user_frame())


def _source_args(obj, positional: Sequence[str] = ()) -> str:
    """Source text of the non-default constructor arguments of a dataclass value."""
    parts = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value == f.default:
            continue
        if isinstance(value, tuple):
            value_src = "[" + ", ".join(str(v) for v in value) + "]"
        elif isinstance(value, str):
            value_src = repr(value)
        else:
            value_src = str(value)
        parts.append(value_src if f.name in positional else f"{f.name}={value_src}")
    return ", ".join(parts)


class BlockContext:
    """Base of the objects allowed in `with ...:` inside a proc."""

    @classmethod
    def usage(cls) -> str:
        """How to call the constructor, for error messages."""
        params = [f.name if f.name in getattr(cls, "_positional", ()) else f"{f.name}=..." for f in fields(cls)]
        return f"{cls.__name__}({', '.join(params)})"

    def __str__(self) -> str:
        return f"{type(self).__name__}({_source_args(self, getattr(self, '_positional', ()))})"


@dataclass(frozen=True)
class CudaWarpConfig:
    """A named group of `count` warps of a CTA, optionally with a `setmaxnreg` register count."""

    name: str
    count: int
    setmaxnreg: Optional[int] = None

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise SporkTypeError(f"CudaWarpConfig: name must be a str, got {self.name!r}", user_frame())
        _check_int("CudaWarpConfig", "count", self.count)
        _check_int("CudaWarpConfig", "setmaxnreg", self.setmaxnreg, optional=True)

    def __str__(self) -> str:
        return f"CudaWarpConfig({_source_args(self, ('name', 'count'))})"


@dataclass(frozen=True)
class CudaDeviceFunction(BlockContext):
    """CPU code opens a CUDA kernel launch; the body is a nest of cuda_tasks loops."""

    blockDim: Optional[int] = None
    clusterDim: int = 1
    blocks_per_sm: int = 1
    warp_config: Optional[tuple] = None

    @classmethod
    def usage(cls) -> str:
        """blockDim or warp_config, not both."""
        return ("CudaDeviceFunction(blockDim=..., clusterDim=..., blocks_per_sm=...) or "
                "CudaDeviceFunction(warp_config=[...], clusterDim=..., blocks_per_sm=...)")

    def __post_init__(self):
        _check_int("CudaDeviceFunction", "blockDim", self.blockDim, optional=True)
        _check_int("CudaDeviceFunction", "clusterDim", self.clusterDim)
        _check_int("CudaDeviceFunction", "blocks_per_sm", self.blocks_per_sm)
        if self.warp_config is not None:
            if not isinstance(self.warp_config, (list, tuple)) or not all(
                isinstance(w, CudaWarpConfig) for w in self.warp_config
            ):
                raise SporkTypeError("CudaDeviceFunction: warp_config must be a list of CudaWarpConfig(name, count)",
                                     user_frame())
            object.__setattr__(self, "warp_config", tuple(self.warp_config))
        if self.blockDim is not None and self.warp_config is not None:
            raise SporkTypeError("CudaDeviceFunction takes blockDim=... or warp_config=[CudaWarpConfig(...), ...], not "
                                 "both: with warp_config the CTA is its warps, 32 threads each", user_frame())
        if self.blockDim is None and self.warp_config is None:
            raise SporkTypeError(
                "CudaDeviceFunction needs exactly one of blockDim=... or warp_config=[CudaWarpConfig(...), ...]",
                user_frame(),
            )

    @property
    def threads_per_cta(self) -> int:
        """blockDim, derived from the warp configuration when one is given."""
        if self.warp_config is not None:
            return 32 * sum(w.count for w in self.warp_config)
        return self.blockDim

    @property
    def register_cap(self) -> int:
        """Registers per thread at launch under __launch_bounds__(blockDim, blocks_per_sm) (what setmaxnreg moves):
        the 64K register file shared in steps of 8, at most 255 (ptxas: "Used 168 registers" at 384 threads, 255 at
        256)."""
        return min(255, 65536 // (self.threads_per_cta * self.blocks_per_sm) // 8 * 8)

    def warp_range(self, name: str) -> Optional[tuple]:
        """The [lo, hi) warp indices of a named warp group, in CTA order."""
        lo = 0
        for w in self.warp_config or ():
            if w.name == name:
                return (lo, lo + w.count)
            lo += w.count
        return None


@dataclass(frozen=True)
class CudaAsync(BlockContext):
    """Inside a device function: a block whose instructions run on an async instr-tl."""

    instr_tl: InstrTl
    _positional = ("instr_tl",)

    def __post_init__(self):
        if isinstance(self.instr_tl, SyncTl):
            raise SporkTypeError(
                f"CudaAsync takes an instr-tl, and {self.instr_tl.name} is a sync-tl: "
                f"write CudaAsync({self.instr_tl.name}_instr)",
                user_frame(),
            )
        if not isinstance(self.instr_tl, InstrTl):
            raise SporkTypeError(f"CudaAsync takes an instr-tl such as Sm80_cp_async_instr, got {self.instr_tl!r}",
                                 user_frame())
        if self.instr_tl is cuda_in_order_instr:  # (cpu_in_order_instr: the analysis says it is not CUDA's)
            raise SporkTypeError(
                f"CudaAsync takes an asynchronous instr-tl such as Sm80_cp_async_instr, and {self.instr_tl.name} is "
                "in order: statements outside a CudaAsync block already run on it, so drop the `with`",
                user_frame(),
            )


@dataclass(frozen=True)
class CudaWarps(BlockContext):
    """Select warps [lo, hi) of the current collective, or the warps named in warp_config."""

    lo: Optional[int] = None
    hi: Optional[int] = None
    name: Optional[str] = None
    _positional = ("lo", "hi")

    def __post_init__(self):
        _check_int("CudaWarps", "lo", self.lo, optional=True)
        _check_int("CudaWarps", "hi", self.hi, optional=True)
        if (self.lo is None) != (self.hi is None):
            raise SporkTypeError("CudaWarps needs both lo and hi: write CudaWarps(lo, hi)", user_frame())
        if self.lo is None and self.name is None:
            raise SporkTypeError('CudaWarps needs warps: write CudaWarps(lo, hi) or CudaWarps(name="...")',
                                 user_frame())
        if self.name is not None and not isinstance(self.name, str):
            raise SporkTypeError(f"CudaWarps: name must be a str, got {self.name!r}", user_frame())
        if self.lo is not None and not 0 <= self.lo < self.hi:
            raise SporkTypeError(f"CudaWarps({self.lo}, {self.hi}): need 0 <= lo < hi", user_frame())


BLOCK_CONTEXTS = (CudaDeviceFunction, CudaAsync, CudaWarps)
