"""What an Exo-GPU instr declares beyond exo's @instr: its instr-tl and collective unit.

Most instrs are C templates (exo's `c_instr` with `{arg}` / `{arg_data}`).
Instrs whose CUDA text needs more than a template can give (TMA coordinates
and tensor maps, wgmma descriptors, multicast masks) give a `lower` function
instead: the CUDA backend calls it with a `LoweredCall`, the arguments as it
compiled them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from exo.core.LoopIR import LoopIR

from ..errors import SporkTypeError, user_frame
from .coll import CollUnit, cuda_thread
from .timelines import InstrTl, cuda_in_order_instr


@dataclass(frozen=True)
class InstrInfo:
    """Static facts about an instr, read by the analyses and the CUDA backend."""

    instr_tl: InstrTl = cuda_in_order_instr
    coll_unit: CollUnit = cuda_thread
    usage_tls: dict = field(default_factory=dict)  # parameter name -> UsageTl (wgmma operands)
    cuda_includes: tuple = ()  # file-scope CUDA text the instr needs (#include lines, helpers): once per .cu
    convergent: bool = False  # all threads of the collective act as one (mma.sync), not lane by lane
    lower: Optional[Callable] = None  # LoweredCall -> CUDA text, instead of the c_instr template
    trailing_barrier: bool = False  # completes on an mbarrier: written `instr(...) >> bar[...]`
    tx_bytes: int = 0  # trailing-barrier instrs: bytes each destination CTA's mbarrier receives
    multicast: bool = False  # the written operand's first dimension spans the CTAs of the cluster
    tensor_map_params: tuple = ()  # parameters that take windows of a tensor map (TMA's global operand)
    tensor_map: tuple = ()  # (swizzle, box): what those tensor maps must be made with (TMA moves one box)
    aligned: tuple = ()  # (parameter, bytes): each row of its window starts aligned so (cp.async: its size; ldmatrix: 16)
    smem_box: tuple = ()  # (parameter, bytes): shared memory moved as one box (TMA): its window's rows are adjacent,
    #   and its first element is aligned so (128)
    smem_desc: tuple = ()  # (parameter, bytes): swizzled shared memory read through a wgmma descriptor: its window's
    #   rows are its buffer's consecutive swizzle rows, and its first element is aligned so (16, the address's unit)
    wgmma_shape: tuple = ()  # wgmma: (M, N, K), its PTX shape; the next wgmma of the same shape on its accumulator
    #   needs no wgmma.fence, one of another shape does (PTX ISA, wgmma.fence)
    smem_blocks: tuple = ()  # (parameter, block shape): a warp instr's shared-memory requests, one per block of its
    #   window (ldmatrix: each 8 x 16-byte matrix); sl.bank_conflicts counts their banks
    target: str = ""  # the least target that runs it: "sm_80" (or newer); "sm_90a" (that target only: wgmma)


@dataclass(frozen=True)
class LoweredArg:
    """One argument of an instr call as the CUDA backend compiled it (distributed dimensions stripped)."""

    text: str  # exo's C text of the argument (a window struct for windows)
    data: str = ""  # windows: C lvalue of the window's first element (exo's `{name_data}`)
    mem: Optional[type] = None  # the memory of the argument's buffer
    los: tuple = ()  # windows: C expressions of each index's lower bound
    sizes: tuple = ()  # windows: the extent of each sliced dimension (ints where constant)
    buffer: str = ""  # windows: C name of the buffer (a tensor map: the kernel's CUtensorMap parameter)
    tensor_map: object = None  # windows of a tensor map: its TensorMapSpec
    buffer_shape: tuple = ()  # windows of a tensor map: C expressions of the map's dimensions

    @property
    def ptr(self) -> str:
        """C pointer to the window's first element."""
        return f"&{self.data}"


@dataclass(frozen=True)
class LoweredCall:
    """What an instr's `lower` function receives."""

    name: str  # the instr as the user wrote it, for messages
    args: dict  # parameter name -> LoweredArg
    params: dict  # the keywords of a templated instr
    barrier: str = ""  # `>> bar[...]`: C expression of the mbarrier's address (this CTA's offset)
    cta_mask: str = ""  # multicast: C expression of the destination CTAs' bit mask
    srcinfo: object = None


_INFO_BY_PROC_NAME: dict[str, InstrInfo] = {}


def register_instr(name: str, info: InstrInfo) -> None:
    _INFO_BY_PROC_NAME[name] = info


def instr_info(call_or_proc) -> Optional[InstrInfo]:
    """The InstrInfo of an Exo-GPU instr (a LoopIR.Call or proc), None for plain procs."""
    proc = call_or_proc.f if isinstance(call_or_proc, LoopIR.Call) else call_or_proc
    return instr_info_by_name(proc.name)


def multicast_dst(s: LoopIR.stmt):
    """The argument a multicast instr call writes to every CTA of the cluster (its `dst` parameter), None for
    other statements."""
    info = instr_info(s) if isinstance(s, LoopIR.Call) else None
    if info is None or not info.multicast:
        return None
    return next(a for a, formal in zip(s.args, s.f.args) if str(formal.name) == "dst")


def instr_info_by_name(name: str) -> Optional[InstrInfo]:
    """The InstrInfo of the instr proc called `name` (the key the analyses can cache on)."""
    return _INFO_BY_PROC_NAME.get(name)


class InstrTemplate:
    """An instr family parameterised by compile-time keywords, e.g. `Sm80_cp_async_f32(dst, src, size=16)`.

    Each distinct keyword set makes (and caches) one concrete instr proc; the
    printer shows the call with its keywords again. A keyword whose default is
    None must be given (`N=...` of a wgmma, `box=...` of a TMA copy).
    """

    def __init__(self, name: str, make: Callable[..., object], defaults: dict):
        self.name = name
        self._make = make
        self.defaults = dict(defaults)
        self._cache: dict = {}

    def instantiate(self, **kwargs):
        """The concrete instr for these keywords (what `Sm80_cp_async_f32(dst, src, size=16)` calls in a proc,
        for `replace`); keywords it refuses are a SporkTypeError at the caller's line."""
        try:
            return self.concrete(**kwargs)
        except (TypeError, ValueError) as e:
            raise SporkTypeError(str(e), user_frame()) from None

    def concrete(self, **kwargs):
        """`instantiate`'s instr; TypeError or ValueError for keywords it refuses (the front end says where)."""
        unknown = sorted(set(kwargs) - set(self.defaults))
        if unknown:
            allowed = ", ".join(f"{k}=..." for k in self.defaults)
            raise TypeError(f"{self.name}() got unknown keyword {unknown[0]!r}; it takes {allowed}")
        params = {**self.defaults, **{k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}}  # box=[...]
        missing = [k for k, v in params.items() if v is None]
        if missing:
            needed = ", ".join(f"{k}=..." for k in missing)
            raise TypeError(f"{self.name} needs {needed}: write {self.name}(..., {needed})")
        key = tuple(sorted(params.items()))
        if key not in self._cache:
            p = self._make(**params)
            self._cache[key] = p
            _TEMPLATE_CALLS[p.name()] = (self, params)
        return self._cache[key]

    def __repr__(self) -> str:
        return self.name


_TEMPLATE_CALLS: dict = {}  # concrete instr name -> (template, keywords)


def template_call_of(proc_name: str):
    """(template, keywords) of a concrete instr made from an InstrTemplate, else None."""
    return _TEMPLATE_CALLS.get(proc_name)


def user_name(proc_name) -> str:
    """The instr name the user wrote: `Sm80_cp_async_f32`, not its generated `Sm80_cp_async_f32_16`."""
    template = template_call_of(proc_name)
    return template[0].name if template else str(proc_name)
