"""The collective algebra of seed 001, as plain data with no dependency on exo.

Vocabulary (seed 001):

* A *natural thread index* numbers a thread within a cluster:
  ``cluster_ctarank * blockDim + threadIdx.x``.  A *thread collective* is a set
  of them; the *top-level collective* is the whole cluster (``N = blockDim *
  clusterDim`` threads).
* A `CollUnit` is what users write (``cuda_warp``, ``4 * cuda_thread``,
  ``CollUnit(domain, box)``): sizes are `CollSizeExpr` over the parameters
  `blockDim` and `clusterDim`.  `unit_typing` turns it into a `CollType` of
  concrete integers for one device function.
* A `CollTiling` is the static assignment of ``cuda_threads`` iterations to
  thread collectives at one statement: per dimension a `CollDim` holding an
  ordered list of `CollDimOp` interval operations.

Conventions chosen where the seed is silent:

* ``None`` stands for the box value top (``⊤``, "any subset"), so that units
  print as plain Python.
* Thread sets are returned as sorted half-open intervals ``[start, stop)``.
* Seed names are kept for the fields of `CollDimOp` (``linearBox`` ...) so the
  code reads like the note.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Iterable, Optional, Union

from spork_lab.errors import CollectiveError

# --------------------------------------------------------------------------
# Size expressions
# --------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class CollSizeExpr:
    """``coeff * blockDim**blockDim_pow * clusterDim**clusterDim_pow``.

    The seed's CollSizeExpr: a rational times zero or more collective
    parameters.  Kept symbolic so a unit means the same thing in every device
    function; `substitute` gives the number for one of them.
    """

    coeff: Fraction
    blockDim_pow: int = 0
    clusterDim_pow: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "coeff", Fraction(self.coeff))
        if self.coeff <= 0:
            raise ValueError(f"a collective size must be positive, not {self.coeff}")
        if self.blockDim_pow < 0 or self.clusterDim_pow < 0:
            raise TypeError("a collective size may only multiply by blockDim and clusterDim, never divide by them")
        if self.is_constant and self.coeff.denominator != 1:
            raise ValueError(f"a constant collective size must be a whole number, not {self.coeff}")

    @property
    def is_constant(self) -> bool:
        return self.blockDim_pow == 0 and self.clusterDim_pow == 0

    def substitute(self, blockDim: int, clusterDim: int) -> Fraction:
        """The value of this size in a device function with these parameters."""
        return self.coeff * blockDim**self.blockDim_pow * clusterDim**self.clusterDim_pow

    def __mul__(self, other: Union[int, Fraction, CollSizeExpr]) -> CollSizeExpr:
        other = as_size(other)
        return CollSizeExpr(
            self.coeff * other.coeff,
            self.blockDim_pow + other.blockDim_pow,
            self.clusterDim_pow + other.clusterDim_pow,
        )

    __rmul__ = __mul__

    def __truediv__(self, other: Union[int, Fraction, CollSizeExpr]) -> CollSizeExpr:
        other = as_size(other)
        return CollSizeExpr(
            self.coeff / other.coeff,
            self.blockDim_pow - other.blockDim_pow,
            self.clusterDim_pow - other.clusterDim_pow,
        )

    def __str__(self) -> str:
        params = ["clusterDim"] * self.clusterDim_pow + ["blockDim"] * self.blockDim_pow
        num, den = self.coeff.numerator, self.coeff.denominator
        text = " * ".join(([str(num)] if num != 1 or not params else []) + params)
        return text if den == 1 else f"{text} / {den}"

    __repr__ = __str__


def as_size(value: Union[int, Fraction, CollSizeExpr]) -> CollSizeExpr:
    """Accept the ints users write wherever a size expression is expected."""
    if isinstance(value, CollSizeExpr):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, Fraction)):
        raise TypeError(f"expected a collective size (an int or an expression of blockDim/clusterDim), not {value!r}")
    return CollSizeExpr(Fraction(value))


blockDim = CollSizeExpr(Fraction(1), blockDim_pow=1)
clusterDim = CollSizeExpr(Fraction(1), clusterDim_pow=1)


# --------------------------------------------------------------------------
# Collective types
# --------------------------------------------------------------------------


def _pitches(domain: tuple[int, ...]) -> tuple[int, ...]:
    """P_m = prod(D_{m+1..M}): the thread distance between neighbours in dim m."""
    return tuple(math.prod(domain[m + 1 :]) for m in range(len(domain)))


def _find_split(domain: tuple[int, ...], pitch: int) -> Optional[tuple[int, int]]:
    """Where to split `domain` so that `pitch` becomes one of its pitches.

    Returns (dim, factor), None when the pitch is already there, and raises
    ValueError when the pitch cuts through a dimension unevenly.
    """
    for m, (extent, p) in enumerate(zip(domain, _pitches(domain))):
        if pitch == p:
            return None
        if p < pitch <= extent * p:
            if pitch % p or extent % (pitch // p):
                raise ValueError(f"pitch {pitch} does not divide dimension {m} (extent {extent}, pitch {p}) evenly")
            return m, pitch // p
    raise ValueError(f"pitch {pitch} lies outside the domain {domain}")


@dataclass(frozen=True)
class CollType:
    """A collective type (domain D, box B) of concrete sizes; ``None`` in the box is top.

    It is the "unit of measure" that statements and instructions are checked
    against.  The product of the domain is the number of threads in the cluster.
    """

    domain: tuple[int, ...]
    box: tuple[Optional[int], ...]

    def __post_init__(self) -> None:
        if len(self.domain) != len(self.box) or not self.domain:
            raise ValueError(f"domain {self.domain} and box {self.box} must be non-empty and of equal length")
        for d, b in zip(self.domain, self.box):
            if d < 1 or (b is not None and not 1 <= b <= d):
                raise ValueError(f"invalid collective type domain {self.domain}, box {self.box}")

    @property
    def pitches(self) -> tuple[int, ...]:
        return _pitches(self.domain)

    @property
    def thread_count(self) -> Optional[int]:
        """Threads in each matching collective; None when a box entry is top."""
        return None if None in self.box else math.prod(self.box)

    @property
    def is_aligned(self) -> bool:
        """Aligned form: every box entry is 1, the full extent, or top."""
        return all(b in (1, d, None) for d, b in zip(self.domain, self.box))

    def split(self, m: int, f: int) -> CollType:
        """Replace dim m by (D_m / f, f), splitting the box as seed 001 says."""
        d, b = self.domain[m], self.box[m]
        if f < 1 or d % f:
            raise ValueError(f"cannot split extent {d} by {f}")
        if b is None:
            new_box: tuple[Optional[int], Optional[int]] = (None, None)
        elif b < f:
            if f % b:
                raise ValueError(f"box {b} does not divide split factor {f}")
            new_box = (1, b)
        else:
            if b % f:
                raise ValueError(f"split factor {f} does not divide box {b}")
            new_box = (b // f, f)
        return CollType(
            self.domain[:m] + (d // f, f) + self.domain[m + 1 :],
            self.box[:m] + new_box + self.box[m + 1 :],
        )

    def aligned(self) -> CollType:
        """Split every dimension whose box is a proper part of it into (D/B, B)."""
        t = self
        m = 0
        while m < len(t.domain):
            d, b = t.domain[m], t.box[m]
            if b not in (1, d, None):
                t = t.split(m, b)
            m += 1
        return t

    def completed(self, pitches: Iterable[int]) -> CollType:
        """Split dimensions until every pitch of `pitches` is a pitch of the type."""
        t = self
        for pitch in sorted(set(pitches)):
            where = _find_split(t.domain, pitch)
            if where is not None:
                t = t.split(*where)
        return t

    def matches(self, threads: Iterable[int]) -> bool:
        """Does this set of natural thread indices match the type (seed 001)?

        In aligned form: the threads must be exactly a product of coordinate
        sets C_m, with |C_m| = 1 where B_m = 1 and C_m full where B_m = D_m.
        """
        t = self.aligned()
        mu = set(threads)
        n = math.prod(t.domain)
        if not mu or any(not 0 <= x < n for x in mu):
            return False
        coords = [{(x // p) % d for x in mu} for d, p in zip(t.domain, t.pitches)]
        if math.prod(len(c) for c in coords) != len(mu):
            return False
        for d, b, c in zip(t.domain, t.box, coords):
            if b == d and len(c) != d:
                return False
            if b == 1 and len(c) != 1:
                return False
        return True


# --------------------------------------------------------------------------
# Collective units
# --------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class CollUnit:
    """A collective unit (domain, box) over blockDim and clusterDim, as users write it.

    Ints are accepted for sizes and ``None`` in the box means top (any subset).
    Equality is structural on the normalised sizes; `str` gives Python source
    that re-evaluates to an equal unit.
    """

    domain: tuple[CollSizeExpr, ...]
    box: tuple[Optional[CollSizeExpr], ...]

    def __post_init__(self) -> None:
        domain = tuple(as_size(d) for d in self.domain)
        box = tuple(None if b is None else as_size(b) for b in self.box)
        if not domain or len(domain) != len(box):
            raise ValueError(f"a CollUnit needs a non-empty domain and a box of the same length, got {domain}, {box}")
        object.__setattr__(self, "domain", domain)
        object.__setattr__(self, "box", box)

    def _scale_dim(self) -> Optional[int]:
        """The dimension `k * unit` grows: the innermost one whose box is not its whole extent (nor top)."""
        for m in reversed(range(len(self.domain))):
            if self.box[m] is not None and self.box[m] != self.domain[m]:
                return m
        return None

    def __rmul__(self, k: int) -> CollUnit:
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise TypeError(f"a collective unit can only be scaled by a positive int, as in `4 * cuda_thread`, not by {k!r}")
        m = self._scale_dim()
        if m is None:
            if k == 1:
                return self
            raise TypeError(f"cannot scale {self} by {k}: its box already spans its whole domain")
        return CollUnit(self.domain, self.box[:m] + (k * self.box[m],) + self.box[m + 1 :])

    def substitute(self, blockDim: int, clusterDim: int) -> CollType:
        """Collective parameter substitution: the concrete (domain, box), not yet completed."""
        values = []
        for size in self.domain + self.box:
            if size is None:
                values.append(None)
                continue
            v = size.substitute(blockDim, clusterDim)
            if v.denominator != 1:
                raise CollectiveError(
                    f"unit {self}: size {size} is {v} with blockDim={blockDim}, clusterDim={clusterDim}, not a whole number"
                )
            values.append(int(v))
        domain, box = tuple(values[: len(self.domain)]), tuple(values[len(self.domain) :])
        for d, b in zip(domain, box):
            if b is not None and b > d:
                raise CollectiveError(
                    f"unit {self}: box {b} exceeds its domain extent {d} with blockDim={blockDim}, clusterDim={clusterDim}"
                )
        return CollType(domain, box)

    def __str__(self) -> str:
        for name, unit in _STANDARD_UNITS.items():
            if unit == self:
                return name
        for name, unit in reversed(_STANDARD_UNITS.items()):
            k = _scale_factor(unit, self)
            if k is not None:
                return f"{k} * {name}"
        return f"CollUnit({_tuple_source(self.domain)}, {_tuple_source(self.box)})"

    __repr__ = __str__


def _scale_factor(base: CollUnit, unit: CollUnit) -> Optional[int]:
    """The k > 1 with `k * base == unit`, if there is one."""
    m = base._scale_dim()
    if m is None or base.domain != unit.domain or unit.box[m] is None:
        return None
    top, bottom = unit.box[m], base.box[m]
    if (top.blockDim_pow, top.clusterDim_pow) != (bottom.blockDim_pow, bottom.clusterDim_pow):
        return None
    ratio = top.coeff / bottom.coeff
    if ratio.denominator != 1 or ratio <= 1:
        return None
    return int(ratio) if int(ratio) * base == unit else None


def _tuple_source(items: tuple) -> str:
    inner = ", ".join(str(x) for x in items)
    return f"({inner},)" if len(items) == 1 else f"({inner})"


cuda_thread = CollUnit((clusterDim * blockDim,), (1,))
cuda_warp = CollUnit((clusterDim * blockDim,), (32,))
cuda_warpgroup = CollUnit((clusterDim * blockDim,), (128,))
cuda_cta_in_cluster = CollUnit((clusterDim * blockDim,), (blockDim,))
cuda_cluster = CollUnit((clusterDim * blockDim,), (clusterDim * blockDim,))

# The names `str(unit)` may use, smallest first; cuda_cluster is left out because
# user namespaces (spork_lab.platforms.cuda) do not have to export it.
_STANDARD_UNITS = {
    "cuda_thread": cuda_thread,
    "cuda_warp": cuda_warp,
    "cuda_warpgroup": cuda_warpgroup,
    "cuda_cta_in_cluster": cuda_cta_in_cluster,
}


def unit_typing(unit: CollUnit, blockDim: int, clusterDim: int, agnostic: bool = False) -> CollType:
    """The aligned collective type of `unit` in a device function with these parameters.

    Substitutes the parameters, then, when the domain covers fewer threads than
    the cluster, prepends a dimension of the missing factor whose box is 1
    (unitary typing: the collective sits in one of those parts) or top
    (agnostic typing: any of them).
    """
    t = unit.substitute(blockDim, clusterDim)
    n = blockDim * clusterDim
    covered = math.prod(t.domain)
    if n % covered:
        raise CollectiveError(
            f"unit {unit}: its domain covers {covered} threads, which does not divide the {n} threads of the cluster"
        )
    if covered < n:
        t = CollType((n // covered,) + t.domain, (None if agnostic else 1,) + t.box)
    try:
        return t.aligned()
    except ValueError as e:
        raise CollectiveError(f"unit {unit} cannot be aligned with blockDim={blockDim}, clusterDim={clusterDim}: {e}") from None


# --------------------------------------------------------------------------
# Collective tilings
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CollDimOp:
    """One interval operation of a tiling dimension (seed 001).

    Maps the interval [a, b] (in thread units of its dimension) to
    [x, x + linearBox - 1] with x = a + linearOffset + sigma[iter] * linearBox,
    and sigma[None] = 0.  ``iter`` is the cuda_threads iterator, or None for a
    constant selection (CudaWarps).  ``threadPitch`` is min(mu_1) - min(mu_0)
    for consecutive iterations (0 for at most one), ``tileCount`` the number of
    iterations, ``treeDepth`` the number of tiling steps above this one.
    """

    iter: Optional[str]
    linearBox: int
    linearOffset: int
    threadPitch: int
    tileCount: int
    treeDepth: int

    def apply(self, a: int, iter_values: dict[str, int]) -> int:
        """The start of the output interval for input start `a`."""
        return a + self.linearOffset + (iter_values[self.iter] if self.iter else 0) * self.linearBox

    def to_json(self) -> dict:
        return {
            "iter": self.iter,
            "linearBox": self.linearBox,
            "linearOffset": self.linearOffset,
            "threadPitch": self.threadPitch,
            "tileCount": self.tileCount,
            "treeDepth": self.treeDepth,
        }


@dataclass(frozen=True)
class CollDim:
    """One dimension of a tiling: extent D_m, pitch P_m and its ops, applied in order.

    Each dimension decomposes hierarchically; several dimensions allow
    non-hierarchical shapes such as "warp 2 of every CTA".
    """

    extent: int
    pitch: int
    ops: tuple[CollDimOp, ...] = ()

    @property
    def interval_length(self) -> int:
        """Threads (in this dimension's thread units) left by the ops."""
        return self.ops[-1].linearBox if self.ops else self.extent * self.pitch

    @property
    def box(self) -> int:
        """Coordinates of this dimension in each collective the tiling yields."""
        return self.interval_length // self.pitch

    def interval(self, iter_values: dict[str, int]) -> tuple[int, int]:
        """The seed's F_m: inclusive coordinate range for these iterator values."""
        a = 0
        for op in self.ops:
            a = op.apply(a, iter_values)
        return a // self.pitch, (a + self.interval_length - 1) // self.pitch

    def split(self, f: int) -> tuple[CollDim, CollDim]:
        """Split into (D/f at pitch P*f, f at pitch P); ValueError if the ops do not allow it.

        Ops whose box spans at least one outer coordinate go outside, the rest
        inside (seed 001).  Inner ops only ever act within the first outer
        coordinate of their input, so when the outer ops leave several
        coordinates a constant op picking that first one is added.
        """
        if f < 1 or self.extent % f:
            raise ValueError(f"cannot split extent {self.extent} by {f}")
        outer_pitch = self.pitch * f
        outer = [op for op in self.ops if op.linearBox // self.pitch >= f]
        inner = [op for op in self.ops if op.linearBox // self.pitch < f]
        for op in outer:
            if op.linearBox % outer_pitch or op.linearOffset % outer_pitch:
                raise ValueError(f"an op of box {op.linearBox}, offset {op.linearOffset} is not aligned to pitch {outer_pitch}")
        if inner:
            outer_dim = CollDim(self.extent // f, outer_pitch, tuple(outer))
            first = inner[0]
            if first.linearOffset + first.tileCount * first.linearBox > outer_pitch:
                raise ValueError(f"an op of box {first.linearBox} x {first.tileCount} crosses pitch {outer_pitch}")
            if outer_dim.interval_length > outer_pitch:
                outer.append(CollDimOp(None, outer_pitch, 0, 0, 1, first.treeDepth))
        return CollDim(self.extent // f, outer_pitch, tuple(outer)), CollDim(f, self.pitch, tuple(inner))


@dataclass(frozen=True)
class CollTiling:
    """The collective tiling of a scope: iterator values -> thread collective.

    Built from `top` by `tile` (a cuda_threads loop), `select_warps`
    (CudaWarps(lo, hi)) and `select_cta_warps` (named CudaWarps).  Immutable,
    so every scope can keep its own.
    """

    blockDim: int
    clusterDim: int
    dims: tuple[CollDim, ...]
    iters: tuple[tuple[str, int], ...] = ()
    depth: int = 0

    @staticmethod
    def top(blockDim: int, clusterDim: int = 1) -> CollTiling:
        """The tiling of a device function's task body: the whole cluster."""
        for name, v in (("blockDim", blockDim), ("clusterDim", clusterDim)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, not {v!r}")
        return CollTiling(blockDim, clusterDim, (CollDim(blockDim * clusterDim, 1),))

    # ---- shape ----

    @property
    def domain(self) -> tuple[int, ...]:
        return tuple(d.extent for d in self.dims)

    @property
    def pitches(self) -> tuple[int, ...]:
        return tuple(d.pitch for d in self.dims)

    @property
    def box(self) -> tuple[int, ...]:
        """Coordinates per dimension in every collective the tiling yields."""
        return tuple(d.box for d in self.dims)

    @property
    def thread_count(self) -> int:
        """Threads in each collective this tiling yields."""
        return math.prod(self.box)

    # ---- reshaping ----

    def canonical(self) -> CollTiling:
        """Merge each dimension that has no ops into the one outside it.

        Same thread sets, fewest dimensions; done before adding a step so that
        earlier splits never make a tiling look non-hierarchical.
        """
        dims = list(self.dims)
        m = len(dims) - 1
        while m > 0:
            if not dims[m].ops:
                inner = dims.pop(m)
                dims[m - 1] = CollDim(dims[m - 1].extent * inner.extent, inner.pitch, dims[m - 1].ops)
            m -= 1
        return replace(self, dims=tuple(dims))

    def completed(self, pitches: Iterable[int]) -> CollTiling:
        """Split dimensions until every pitch of `pitches` is one of the tiling's pitches."""
        dims = self.dims
        for pitch in sorted(set(pitches)):
            try:
                where = _find_split(tuple(d.extent for d in dims), pitch)
                if where is not None:
                    m, f = where
                    dims = dims[:m] + dims[m].split(f) + dims[m + 1 :]
            except ValueError as e:
                raise CollectiveError(f"the current thread collective cannot be reshaped at thread pitch {pitch}: {e}") from None
        return replace(self, dims=dims)

    # ---- tiling steps ----

    def tile(self, iter_name: str, count: int, unit: CollUnit) -> CollTiling:
        """The tiling of the body of ``for iter_name in cuda_threads(0, count, unit=unit)``.

        The unit's collectives are laid out along the one dimension in which
        the current collective is wider than the unit; iteration i takes the
        i-th of them and threads past ``count`` of them stay idle.
        """
        if iter_name in dict(self.iters):
            raise ValueError(f"iterator {iter_name!r} is already used by an enclosing cuda_threads loop")
        loop = f"cuda_threads(0, {count}, unit={unit})"
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise CollectiveError(f"{loop}: the iteration count must be a positive compile-time int")
        unit_threads = unit.substitute(self.blockDim, self.clusterDim).thread_count
        parent = self.thread_count
        if unit_threads is not None and count * unit_threads > parent:
            whole = (f" (the whole CTA, blockDim={parent}: give the CudaDeviceFunction a larger blockDim, or the "
                     "loop fewer iterations)" if parent == self.blockDim else "")
            raise CollectiveError(
                f"{loop} needs {count} x {unit_threads} = {count * unit_threads} threads > {parent} threads "
                f"in the enclosing collective{whole}"
            )
        tiling, ctype = domain_completion(self, unit)
        tiled = []
        for m, (dim, b) in enumerate(zip(tiling.dims, ctype.box)):
            if b == dim.extent and dim.box != dim.extent:
                raise CollectiveError(
                    f"{loop}: the enclosing collective ({parent} threads) is not made of whole {unit} collectives"
                )
            if b == 1 and dim.box > 1:
                tiled.append(m)
        if len(tiled) > 1:
            raise CollectiveError(
                f"{loop}: the {unit} collectives of the enclosing collective ({parent} threads) do not lie along one "
                f"dimension; split the loop into nested cuda_threads loops"
            )
        iters = self.iters + ((iter_name, count),)
        if not tiled:
            if count > 1:
                raise CollectiveError(f"{loop}: only one {unit} fits in the enclosing collective ({parent} threads)")
            return replace(tiling, iters=iters, depth=self.depth + 1)
        m = tiled[0]
        dim = tiling.dims[m]
        if count > dim.box:
            raise CollectiveError(f"{loop}: only {dim.box} {unit} collectives fit in the enclosing collective")
        op = CollDimOp(iter_name, dim.pitch, 0, dim.pitch if count > 1 else 0, count, self.depth)
        return tiling._with_op(m, op, iters)

    def select_warps(self, lo: int, hi: int) -> CollTiling:
        """The tiling inside ``CudaWarps(lo, hi)``: warps [lo, hi) of the current collective, counted from its start."""
        tiling = self._whole_warps(f"CudaWarps({lo}, {hi})")
        n_warps = tiling.thread_count // 32
        if not 0 <= lo < hi <= n_warps:
            raise CollectiveError(f"CudaWarps({lo}, {hi}) selects warps outside the {n_warps} warps of the current collective")
        if (lo, hi) == (0, n_warps):
            return replace(tiling, depth=self.depth + 1)
        (m,) = [m for m, d in enumerate(tiling.dims) if d.pitch >= 32 and d.box > 1]
        pitch = tiling.dims[m].pitch
        return tiling._with_op(m, CollDimOp(None, (hi - lo) * pitch, lo * pitch, 0, 1, self.depth), self.iters)

    def select_cta_warps(self, lo: int, hi: int) -> CollTiling:
        """Named warps: warps [lo, hi) of every CTA in the current collective, which must be whole CTAs.

        The front end turns ``CudaWarps(name=...)`` into the contiguous warp
        range that name occupies in ``warp_config``.
        """
        where = f"CudaWarps selecting warps [{lo}, {hi}) of each CTA"
        if self.blockDim % 32:
            raise CollectiveError(f"{where}: blockDim={self.blockDim} is not a whole number of warps")
        n_warps = self.blockDim // 32
        if not 0 <= lo < hi <= n_warps:
            raise CollectiveError(f"{where}: a CTA has only {n_warps} warps")
        tiling = self.canonical().completed({self.blockDim})
        last = tiling.dims[-1]
        if last.extent != self.blockDim or last.ops:
            raise CollectiveError(f"{where}: the current collective is not made of whole CTAs")
        if (lo, hi) == (0, n_warps):
            return replace(tiling, depth=self.depth + 1)
        op = CollDimOp(None, (hi - lo) * 32, lo * 32, 0, 1, self.depth)
        return tiling._with_op(len(tiling.dims) - 1, op, self.iters)

    def made_of_whole_warps(self) -> bool:
        """Is every collective this tiling yields made of whole warps (all 32 lanes of each of its warps)?

        Then each lane of a warp runs the same statements: warp-collective code (`__shfl_sync`, `__syncwarp`, a lane
        elected to act for its warp) is safe there. A thread count that is a multiple of 32 is not enough: 32 threads
        can be 8 lanes of four warps.
        """
        return self._split_at_warps() is not None

    def _split_at_warps(self) -> Optional[CollTiling]:
        """Canonical form split at pitch 32 if every collective is made of whole warps, else None."""
        try:
            tiling = self.canonical().completed({32})
        except CollectiveError:
            return None
        return tiling if all(d.box == d.extent for d in tiling.dims if d.pitch < 32) else None

    def _whole_warps(self, what: str) -> CollTiling:
        """Canonical form split at pitch 32, checking the collective's warps lie along one dimension."""
        tiling = self._split_at_warps()
        if tiling is None:
            raise CollectiveError(f"{what}: the current collective is not made of whole warps")
        if len([d for d in tiling.dims if d.pitch >= 32 and d.box > 1]) > 1:
            raise CollectiveError(f"{what}: the warps of the current collective do not lie along one dimension")
        return tiling

    def _with_op(self, m: int, op: CollDimOp, iters: tuple[tuple[str, int], ...]) -> CollTiling:
        dim = self.dims[m]
        dims = self.dims[:m] + (replace(dim, ops=dim.ops + (op,)),) + self.dims[m + 1 :]
        return replace(self, dims=dims, iters=iters, depth=self.depth + 1)

    # ---- evaluation ----

    def threads(self, iter_values: dict[str, int]) -> list[tuple[int, int]]:
        """The thread collective for these iterator values, as sorted half-open intervals [start, stop).

        Extra keys (other loops' iterators) are ignored.
        """
        for name, count in self.iters:
            if name not in iter_values:
                raise KeyError(f"no value given for cuda_threads iterator {name!r}")
            if not 0 <= iter_values[name] < count:
                raise ValueError(f"{name}={iter_values[name]} is outside cuda_threads(0, {count})")
        ranges = [d.interval(iter_values) for d in self.dims]
        *outer, (first, last) = ranges
        runs: list[tuple[int, int]] = []
        for coords in itertools.product(*(range(lo, hi + 1) for lo, hi in outer)):
            base = sum(c * d.pitch for c, d in zip(coords, self.dims))
            start, stop = base + first, base + last + 1
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], stop)
            else:
                runs.append((start, stop))
        return runs

    def iter_values_of(self, thread: int) -> Optional[dict[str, int]]:
        """The iterator values for which `thread` executes the statement; None when it stays idle."""
        n = self.blockDim * self.clusterDim
        if not 0 <= thread < n:
            raise ValueError(f"thread {thread} is outside the {n} threads of the cluster")
        values = {name: 0 for name, _ in self.iters}
        for dim in self.dims:
            t = (thread // dim.pitch) % dim.extent * dim.pitch
            a = 0
            for op in dim.ops:
                rel = t - a - op.linearOffset
                if rel < 0:
                    return None
                i = rel // op.linearBox
                if i >= op.tileCount:
                    return None
                if op.iter:
                    values[op.iter] = i
                a += op.linearOffset + i * op.linearBox
        return values

    def matches(self, unit: CollUnit) -> bool:
        """Is this scope a `unit`-scope: does every collective it yields match unit_typing(unit)?

        False also when the unit has no type for these parameters.
        """
        try:
            tiling, ctype = domain_completion(self, unit)
        except CollectiveError:
            return False
        for dim, b in zip(tiling.dims, ctype.box):
            if (b == 1 and dim.box != 1) or (b == dim.extent and dim.box != dim.extent):
                return False
        return True

    def to_json(self) -> dict:
        """Plain data for drawing: the domain, each dimension's ops, and the box of one collective."""
        return {
            "blockDim": self.blockDim,
            "clusterDim": self.clusterDim,
            "domain": list(self.domain),
            "pitches": list(self.pitches),
            "dims": [{"extent": d.extent, "pitch": d.pitch, "ops": [op.to_json() for op in d.ops]} for d in self.dims],
            "box": list(self.box),
            "iters": [[name, count] for name, count in self.iters],
            "threadCount": self.thread_count,
        }


def _fold_selections(tiling: CollTiling) -> CollTiling:
    """Compose consecutive constant selections (CudaWarps) of a dimension into one.

    Selecting warps [0, 5) and then [0, 4) of those is selecting [0, 4): the
    wider intermediate box would otherwise block splitting the dimension at a
    pitch it is not aligned to, although the threads are the same.
    """
    dims = []
    for dim in tiling.dims:
        ops = []
        for op in dim.ops:
            prev = ops[-1] if ops else None
            if op.iter is None and prev is not None and prev.iter is None:
                ops[-1] = replace(op, linearOffset=prev.linearOffset + op.linearOffset)
            else:
                ops.append(op)
        dims.append(replace(dim, ops=tuple(ops)))
    return replace(tiling, dims=tuple(dims))


@functools.lru_cache(maxsize=4096)  # tilings and units are values; a proc's statements share a few dozen
def domain_completion(tiling: CollTiling, unit: CollUnit) -> tuple[CollTiling, CollType]:
    """Reshape a tiling and the (unitary) type of a unit onto one common domain (seed 001).

    Both are completed for the union of their thread pitch sets, so their
    dimensions can be compared one by one.
    """
    ctype = unit_typing(unit, tiling.blockDim, tiling.clusterDim)
    tiling = _fold_selections(tiling.canonical())
    target = set(tiling.pitches) | set(ctype.pitches)
    tiling = tiling.completed(target)
    try:
        ctype = ctype.completed(target)
    except ValueError as e:
        raise CollectiveError(f"unit {unit} cannot be compared with the current collective: {e}") from None
    return tiling, ctype
