"""Sets of timeline signatures as sorted interval lists: ((lo, hi, bits), ...).

Thread `t` carries the (instr-tl, usage-tl) pairs whose bits (see
`timelines.pair_bit`) are set in the `bits` of the interval holding it.
Intervals are disjoint, sorted, non-empty, with non-zero bits, and adjacent
intervals with equal bits are merged, so equal sets are equal tuples (which is
what lets records be hash-consed).
"""

from __future__ import annotations

from functools import lru_cache

# The same few sets meet again at every loop iteration: memoize the set algebra.
_memo = lru_cache(maxsize=1 << 16)

SigSet = tuple
EMPTY: SigSet = ()


@_memo
def product(threads: tuple, bits: int) -> SigSet:
    """threads x pairs(bits)."""
    if not bits:
        return EMPTY
    return _normal([(lo, hi, bits) for lo, hi in threads])


@_memo
def union(a: SigSet, b: SigSet) -> SigSet:
    if not a:
        return b
    if not b or a == b:
        return a
    cuts = sorted({x for lo, hi, _ in a + b for x in (lo, hi)})
    out = []
    for lo, hi in zip(cuts, cuts[1:]):
        bits = _bits_at(a, lo) | _bits_at(b, lo)
        if bits:
            out.append((lo, hi, bits))
    return _normal(out)


def shift(s: SigSet, delta: int) -> SigSet:
    """`s` with every thread number moved by delta."""
    return tuple((lo + delta, hi + delta, bits) for lo, hi, bits in s) if delta else s


@_memo
def covers(s: SigSet, threads: tuple, bit_mask: int) -> bool:
    """Does `s` hold every pair of bit_mask for every thread of `threads`?"""
    for lo, hi in threads:
        pos = lo
        for a, b, bits in s:
            if b <= pos:
                continue
            if a > pos or (bits & bit_mask) != bit_mask:
                return False
            pos = b
            if pos >= hi:
                break
        if pos < hi:
            return False
    return True


@_memo
def meets(s: SigSet, threads: tuple, mask: int) -> bool:
    """Does `s` hold some pair of `mask` for some thread of `threads`?"""
    for a, b, bits in s:
        if bits & mask:
            for lo, hi in threads:
                if a < hi and lo < b:
                    return True
    return False


@_memo
def threads_with(s: SigSet, mask: int, within: tuple) -> tuple:
    """The threads of `within` holding a pair of `mask` in `s`, as intervals."""
    out = []
    for a, b, bits in s:
        if bits & mask:
            for lo, hi in within:
                x, y = max(a, lo), min(b, hi)
                if x < y:
                    out.append((x, y))
    return merge_threads(out)


def merge_threads(ivs) -> tuple:
    out = []
    for lo, hi in sorted(ivs):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return tuple(out)


@_memo
def intersect_threads(a: tuple, b: tuple) -> tuple:
    out = []
    for lo, hi in a:
        for x, y in b:
            lo2, hi2 = max(lo, x), min(hi, y)
            if lo2 < hi2:
                out.append((lo2, hi2))
    return merge_threads(out)


def thread_text(threads: tuple) -> str:
    return ", ".join(f"[{lo}, {hi - 1}]" if hi - lo > 1 else f"[{lo}]" for lo, hi in threads)


def _bits_at(s: SigSet, x: int) -> int:
    for lo, hi, bits in s:
        if lo <= x < hi:
            return bits
        if lo > x:
            break
    return 0


def _normal(items) -> SigSet:
    out = []
    for lo, hi, bits in items:
        if out and out[-1][1] == lo and out[-1][2] == bits:
            out[-1] = (out[-1][0], hi, bits)
        else:
            out.append((lo, hi, bits))
    return tuple(out)
