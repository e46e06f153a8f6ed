"""Instruction, usage and synchronization timelines (seed 000, "Timeline").

An instr-tl says which timeline an instruction runs on; a usage-tl says how an
operand is used (it matters for wgmma operands only); a sync-tl is the set of
(instr-tl, usage-tl) pairs that a Fence/Arrive/Await orders.

In-order CUDA accesses to registers carry their own pair, (cuda_in_order_instr,
register_usage), because one sync statement tells them apart: wgmma.fence
(`Fence(wgmma_fence_1, wgmma_fence_2)`) orders a warpgroup's register accesses
before its wgmma, and nothing in shared memory (that needs fence.proxy.async;
seed 003, "wgmma"). Every sync-tl that names cuda_in_order_instr covers both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstrTl:
    """The timeline an instruction runs on."""

    name: str
    is_async: bool
    sync_tl_name: str  # the sync-tl users usually mean when they write this instr-tl

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class UsageTl:
    """How an instruction uses an operand (default, or a wgmma operand role)."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class SyncTl:
    """A set of (instr-tl, usage-tl) pairs ordered by a synchronization statement."""

    name: str
    pairs: frozenset

    def __repr__(self) -> str:
        return self.name

    def covers(self, instr_tl: InstrTl, usage_tl: "UsageTl" = None) -> bool:
        return (instr_tl, usage_tl or default_usage) in self.pairs

    @property
    def instr_tls(self) -> frozenset:
        return frozenset(i for i, _ in self.pairs)

    @property
    def mask(self) -> int:
        """The pairs as a bit set (see `pair_bit`), for the abstract machine's interval sets."""
        return sum(1 << pair_bit(i, u) for i, u in self.pairs)

    def __le__(self, other: SyncTl) -> bool:
        return self.pairs <= other.pairs


default_usage = UsageTl("default_usage")
register_usage = UsageTl("register_usage")  # an in-order CUDA access to registers (see the module docstring)
wgmma_usage_a = UsageTl("wgmma_usage_a")
wgmma_usage_b = UsageTl("wgmma_usage_b")
wgmma_usage_d = UsageTl("wgmma_usage_d")

cpu_in_order_instr = InstrTl("cpu_in_order_instr", False, "cpu_in_order")
cuda_in_order_instr = InstrTl("cuda_in_order_instr", False, "cuda_in_order")
Sm80_cp_async_instr = InstrTl("Sm80_cp_async_instr", True, "Sm80_cp_async")
tma_to_smem_async_instr = InstrTl("tma_to_smem_async_instr", True, "tma_to_smem_async")
tma_to_gmem_async_instr = InstrTl("tma_to_gmem_async_instr", True, "tma_to_gmem_async")
wgmma_async_instr = InstrTl("wgmma_async_instr", True, "wgmma_async")

INSTR_TLS = {
    t.name: t
    for t in [
        cpu_in_order_instr,
        cuda_in_order_instr,
        Sm80_cp_async_instr,
        tma_to_smem_async_instr,
        tma_to_gmem_async_instr,
        wgmma_async_instr,
    ]
}


# Every (instr-tl, usage-tl) pair a memory access can carry, numbered for bit sets.
ALL_PAIRS = (
    (cpu_in_order_instr, default_usage),
    (cuda_in_order_instr, default_usage),
    (cuda_in_order_instr, register_usage),
    (Sm80_cp_async_instr, default_usage),
    (tma_to_smem_async_instr, default_usage),
    (tma_to_gmem_async_instr, default_usage),
    (wgmma_async_instr, default_usage),
    (wgmma_async_instr, wgmma_usage_a),
    (wgmma_async_instr, wgmma_usage_b),
    (wgmma_async_instr, wgmma_usage_d),
)
_PAIR_BITS = {p: b for b, p in enumerate(ALL_PAIRS)}

# Instr-tls that access memory through the async proxy (seed 003): generic-proxy
# writes become visible to them only after fence.proxy.async.
ASYNC_PROXY_INSTR_TLS = frozenset({tma_to_smem_async_instr, tma_to_gmem_async_instr, wgmma_async_instr})


def pair_bit(instr_tl: InstrTl, usage_tl: UsageTl = None) -> int:
    """The bit number of an (instr-tl, usage-tl) pair in sync-tl masks."""
    return _PAIR_BITS[(instr_tl, usage_tl or default_usage)]


def _tl(name: str, *pairs) -> SyncTl:
    """A sync-tl of pairs; a bare instr-tl means its default pair (and, for cuda_in_order_instr, its
    register pair too)."""
    expanded = set()
    for p in pairs:
        if isinstance(p, tuple):
            expanded.add(p)
        else:
            expanded.add((p, default_usage))
            if p is cuda_in_order_instr:
                expanded.add((p, register_usage))
    return SyncTl(name, frozenset(expanded))


_wgmma_operands = [(wgmma_async_instr, u) for u in (wgmma_usage_a, wgmma_usage_b, wgmma_usage_d)]

cpu_in_order = _tl("cpu_in_order", cpu_in_order_instr)
cuda_in_order = _tl("cuda_in_order", cuda_in_order_instr)
Sm80_cp_async = _tl("Sm80_cp_async", Sm80_cp_async_instr)
Sm80_generic = _tl("Sm80_generic", cuda_in_order_instr, Sm80_cp_async_instr)
tma_to_smem_async = _tl("tma_to_smem_async", tma_to_smem_async_instr)
tma_to_gmem_async = _tl("tma_to_gmem_async", tma_to_gmem_async_instr)
wgmma_async_smem = _tl("wgmma_async_smem", (wgmma_async_instr, wgmma_usage_a), (wgmma_async_instr, wgmma_usage_b))
# wgmma.fence orders the warpgroup's prior register accesses before its next wgmma: registers only (shared
# memory written in the generic proxy needs fence.proxy.async: a sync-tl pair with an async-proxy second tl).
wgmma_fence_1 = _tl("wgmma_fence_1", (cuda_in_order_instr, register_usage))
wgmma_fence_2 = _tl("wgmma_fence_2", wgmma_async_instr, *_wgmma_operands)
# Generic-proxy accesses made visible to the async proxy (TMA, wgmma smem operands).
cuda_generic_and_async_proxy = _tl(
    "cuda_generic_and_async_proxy",
    cuda_in_order_instr,
    wgmma_async_instr,
    tma_to_smem_async_instr,
    tma_to_gmem_async_instr,
    *_wgmma_operands,
)
# wgmma instrs without per-operand usage-tls access memory with the default usage.
wgmma_async = _tl("wgmma_async", wgmma_async_instr, *_wgmma_operands)
# Orders nothing in memory: only time (e.g. a CPU event wait before timing).
cuda_temporal = SyncTl("cuda_temporal", frozenset())

SYNC_TLS = {
    t.name: t
    for t in [
        cpu_in_order,
        cuda_in_order,
        Sm80_cp_async,
        Sm80_generic,
        tma_to_smem_async,
        tma_to_gmem_async,
        wgmma_async,
        wgmma_async_smem,
        wgmma_fence_1,
        wgmma_fence_2,
        cuda_generic_and_async_proxy,
        cuda_temporal,
    ]
}


def needs_proxy_fence(first_tl: SyncTl, second_tl: SyncTl) -> bool:
    """Does ordering first_tl before second_tl need `fence.proxy.async`?

    Yes when generic-proxy accesses (in-order CUDA, cp.async) are ordered before
    async-proxy accesses (TMA, wgmma): seed 003, "Fences".
    """
    generic = {cuda_in_order_instr, Sm80_cp_async_instr}
    return bool(first_tl.instr_tls & generic) and bool(second_tl.instr_tls & ASYNC_PROXY_INSTR_TLS)


# wgmma's register operands (the accumulator, and A in registers: the lowering gives both this pair) are
# ordered after in-order register accesses by wgmma.fence only (seed 003, "wgmma"): a sync statement grants
# the pair only where its CUDA text has one (`emits_wgmma_fence`).
WGMMA_REGISTER_OPERAND = (wgmma_async_instr, wgmma_usage_d)


def emits_wgmma_fence(kind: str, second_tl: SyncTl) -> bool:
    """Does a sync statement of `kind` ("Fence", "Await", ...) with this second sync-tl lower with
    `wgmma.fence`? Only Fences into wgmma_fence_2 do (codegen/barrier_text.py); no Await does."""
    return kind == "Fence" and wgmma_async_instr in second_tl.instr_tls and second_tl.name.startswith("wgmma_fence")


def is_bare_wgmma_fence(first_tl: SyncTl, second_tl: SyncTl) -> bool:
    """Is `Fence(first_tl, second_tl)` wgmma.fence alone, with no barrier among its threads
    (codegen/_sync.py; the sync checker orders no execution through it)?"""
    return first_tl.name == "wgmma_fence_1" and second_tl.name == "wgmma_fence_2"


def program_order_mask(instr_tl: InstrTl, usage_tl: UsageTl = None) -> int:
    """The pairs that see an access of a thread without any sync statement (0: none).

    A synchronous access: its own pair, plus cp.async issued later by the same
    thread: "asynchronous operations are ordered after prior instructions in
    the same thread" and cp.async runs in the generic proxy (seed 003).
    Async-proxy instrs (TMA, wgmma) still need a fence. An asynchronous access:
    none, but for wgmma's accumulator, which the next wgmma of the same
    warpgroup accumulates into without a fence (seed 003: "the notable, common
    exception").
    """
    if instr_tl.is_async:
        return 1 << pair_bit(instr_tl, usage_tl) if (instr_tl, usage_tl) == (wgmma_async_instr, wgmma_usage_d) else 0
    mask = 1 << pair_bit(instr_tl, usage_tl)
    if (instr_tl, usage_tl or default_usage) == (cuda_in_order_instr, default_usage):
        mask |= 1 << pair_bit(Sm80_cp_async_instr)
    return mask


def completion_pair(instr_tl: InstrTl, usage_tl: UsageTl = None) -> int:
    """The pair bit on which an access to registers is complete for its own threads (their reuse of the
    register after its scope): an in-order register access at once; an asynchronous one (a wgmma
    operand) once a sync statement makes it visible to in-order register accesses."""
    if instr_tl.is_async:
        return pair_bit(cuda_in_order_instr, register_usage)
    return pair_bit(instr_tl, usage_tl)


def program_order_closure(mask: int) -> int:
    """`mask` plus the pairs ordered after it by program order (see `program_order_mask`).

    What a thread's in-order instructions see, its later cp.async see too.
    """
    if mask & (1 << pair_bit(cuda_in_order_instr)):
        mask |= 1 << pair_bit(Sm80_cp_async_instr)
    return mask
