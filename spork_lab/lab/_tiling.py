"""Per-thread data of a statement's collective tiling, for the Tiling view.

The widget draws the threads of one CTA (or cluster) as cells, one row per
warp; everything it shows per cell (iterator values, which collective, colour)
is computed here from the tiling's own `iter_values_of`.
"""

from __future__ import annotations

from typing import Optional


def _collective_index(values: dict[str, int], iters: list[tuple[str, int]]) -> int:
    """Row-major index of a collective among all iterator value combinations."""
    index = 0
    for name, count in iters:
        index = index * count + values[name]
    return index


def _colour(index: int) -> str:
    """A distinct, readable colour per collective (golden-angle hue steps)."""
    hue = (index * 137.508) % 360
    return f"hsl({hue:.0f}, 62%, 72%)"


def tiling_cells(tiling) -> dict:
    """Cells of every thread of the cluster under `tiling` (an algebra.CollTiling).

    Returns {"threads", "blockDim", "clusterDim", "iters", "collectives",
    "active", "cells": [{"thread", "values" (None when idle), "collective",
    "colour", "title"}]}.
    """
    iters = [(name, count) for name, count in tiling.iters]
    n = tiling.blockDim * tiling.clusterDim
    cells = []
    seen: set[int] = set()
    for t in range(n):
        values: Optional[dict[str, int]] = tiling.iter_values_of(t)
        if values is None:
            cells.append({"thread": t, "values": None, "collective": None, "colour": None, "title": f"thread {t}: idle"})
            continue
        k = _collective_index(values, iters)
        seen.add(k)
        shown = ", ".join(f"{name}={values[name]}" for name, _ in iters) or "(no cuda_threads iterators)"
        cells.append({"thread": t, "values": values, "collective": k, "colour": _colour(k), "title": f"thread {t}: {shown}"})
    return {
        "threads": n,
        "blockDim": tiling.blockDim,
        "clusterDim": tiling.clusterDim,
        "iters": [[name, count] for name, count in iters],
        "collectives": len(seen),
        "active": sum(1 for c in cells if c["values"] is not None),
        "cells": cells,
    }
