"""TMA tensor maps: windows of global memory that bulk tensor copies (TMA) read and write.

A tensor map is a special window, written in CPU code as
`T = A[...] @ Sm90_tensorMap(swizzle, *box)`: exo sees the window statement
`T = A[...]` (so T is an ordinary window of A for every analysis and
scheduling op), and this registry remembers, by the window's Sym, the
`TensorMapSpec` the CUDA backend needs to encode a `CUtensorMap` on the host
(swizzle of the shared-memory side, box = the tile one copy moves, in the
window's dimension order). Procs made by the front end register their tensor
maps; the printer prints them back with their spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

SWIZZLES = (0, 32, 64, 128)  # bytes of the swizzle pattern's row; 0: no swizzle (a linear tile)


@dataclass(frozen=True)
class TensorMapSpec:
    """What `Sm90_tensorMap(swizzle, *box)` says: the shared-memory swizzle and the box of one copy."""

    swizzle: int
    box: tuple

    def __post_init__(self):
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"Sm90_tensorMap: swizzle must be one of {', '.join(map(str, SWIZZLES))}, got {self.swizzle!r}")
        if not self.box or not all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= 256 for b in self.box):
            raise ValueError(f"Sm90_tensorMap: the box is 1 to 5 ints in [1, 256] (TMA's limit), got {list(self.box)}")
        if len(self.box) > 5:
            raise ValueError(f"Sm90_tensorMap: TMA copies at most 5 dimensions, got a box of {len(self.box)}")

    def source(self) -> str:
        return f"Sm90_tensorMap({', '.join(str(x) for x in (self.swizzle, *self.box))})"


def Sm90_tensorMap(swizzle: int, *box: int) -> TensorMapSpec:
    """`T = A[...] @ Sm90_tensorMap(128, 128, 64)`: T is a TMA tensor map over the window, 128 x 64 boxes, 128B swizzle."""
    return TensorMapSpec(swizzle, tuple(box))


_SPECS: dict = {}  # Sym of the window statement -> TensorMapSpec


def register_tensor_map(sym, spec: TensorMapSpec) -> None:
    _SPECS[sym] = spec


def tensor_map_spec(sym) -> Optional[TensorMapSpec]:
    """The spec of a tensor map window, or None if `sym` is not one."""
    return _SPECS.get(sym)
