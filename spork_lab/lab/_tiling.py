"""The Tiling view: the collectives of a statement laid out by its `cuda_threads` iterators.

A statement inside `for ii in cuda_threads(0, 16, unit=16 * cuda_thread): for jj
in cuda_threads(0, 16)` runs once per (ii, jj): the view draws that as a
16 x 16 grid (from the innermost iterator out, iterators alternate between
columns and rows), each cell one
collective, coloured by a level the user picks: thread, warp, warpgroup, or the
value of one iterator (that loop's unit). Under it, a strip of every thread of
the CTA (or cluster), one row per warp, named warps labelled and idle threads
hatched. Then the proc's distributed allocations (the `dist` pass): each a
grid of its shards over the distributed dimensions, with their owner threads.
Everything drawn is computed here from the tiling's own
`threads`/`iter_values_of`; the grid is a CSS grid of fractions, so it fits
the cell's width.
"""

from __future__ import annotations

import colorsys
from html import escape
from itertools import product
from typing import Optional

from ..core.ir import sizes_text

LEVEL_SIZES = {"thread": 1, "warp": 32, "warpgroup": 128}


# Ten light categorical colours (Tableau 10, mixed with white for the dark text on them): golden-angle hues at
# one lightness put close greens on warps 1 and 6 of eight.
_PALETTE = ("#9cb6d1", "#f7c08f", "#eea2a3", "#b5d8d5", "#a9cfa3", "#f4e2a0", "#d3b5ca", "#ffcbd0", "#cbb4a6", "#d8d3d1")


def _colour(index: int) -> str:
    """A distinct, readable colour per group: the palette's, then golden-angle hue steps; as #rrggbb, since
    notebook sanitizers drop hsl() from style attributes."""
    if index < len(_PALETTE):
        return _PALETTE[index]
    r, g, b = colorsys.hls_to_rgb((index * 137.508) % 360 / 360, 0.72, 0.62)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _ranges(threads) -> str:
    return ", ".join(f"[{lo}]" if hi - lo == 1 else f"[{lo}, {hi - 1}]" for lo, hi in threads)


def _short(threads) -> str:
    """Cell text: '17' or '0-15' (first range only, '+' when there are more)."""
    lo, hi = threads[0]
    text = str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}"
    return text + ("+" if len(threads) > 1 else "")


def levels(tiling) -> list[str]:
    """The colour levels a tiling offers: thread, warp, warpgroup, and one per cuda_threads iterator."""
    return ["thread", "warp", "warpgroup"] + [f"iter:{name}" for name, _ in tiling.iters]


def default_level(tiling) -> str:
    """The level a statement is first coloured by: its collectives' own size when they are warps or
    warpgroups (an mma, a wgmma), else thread, or warp when there are more than 32 collectives."""
    lo, hi = tiling.threads({name: 0 for name, _ in tiling.iters})[0]
    size = hi - lo
    if size >= LEVEL_SIZES["warpgroup"]:
        return "warpgroup"
    count = 1
    for _, c in tiling.iters:
        count *= c
    return "warp" if size >= LEVEL_SIZES["warp"] or count > 32 else "thread"


def _layout(iters: list) -> tuple[list, list]:
    """(row iterators, column iterators): from the innermost out, iterators alternate between columns and rows
    (ii x jj: ii rows, jj columns); a single iterator longer than 32 wraps at 32 columns ([], [])."""
    if len(iters) == 1 and iters[0][1] > 32:
        return [], []
    inner_first = iters[::-1]
    return inner_first[1::2][::-1], inner_first[0::2][::-1]


def tiling_grid(tiling, level: str, warp_names: dict[int, str]) -> dict:
    """Grid data of `tiling` (an algebra.CollTiling) coloured by `level` (see `levels`).

    Returns {"iters", "rows", "cols", "row_iters", "col_iters", "cells": [{"row", "col", "values",
    "threads", "group", "colour"}], "strip": [{"thread", "group" (None: idle), "colour"}], "collectives",
    "active", "threads", "blockDim", "clusterDim", "level", "levels", "warp_names"}.
    """
    iters = [(name, count) for name, count in tiling.iters]
    if level not in levels(tiling):
        level = "warp"
    row_iters, col_iters = _layout(iters)
    cells = []
    groups: dict = {}

    def group_of(values: dict, first_thread: int):
        if level.startswith("iter:"):
            return values[level[5:]]
        return first_thread // LEVEL_SIZES[level]

    for k, combo in enumerate(product(*[range(c) for _, c in iters])):
        values = dict(zip([n for n, _ in iters], combo))
        threads = tiling.threads(values)
        if row_iters or col_iters:
            row = col = 0
            for name, count in row_iters:
                row = row * count + values[name]
            for name, count in col_iters:
                col = col * count + values[name]
        else:  # no iterators (one collective), or one long iterator wrapped at 32 columns
            row, col = divmod(k, 32)
        g = group_of(values, threads[0][0])
        groups.setdefault(g, len(groups))
        cells.append({"row": row, "col": col, "values": values, "threads": [list(t) for t in threads], "group": g,
                      "colour": _colour(groups[g])})
    n = tiling.blockDim * tiling.clusterDim
    strip = []
    for t in range(n):
        values: Optional[dict] = tiling.iter_values_of(t)
        if values is None:
            strip.append({"thread": t, "group": None, "colour": None})
            continue
        first = tiling.threads(values)[0][0]
        g = group_of(values, first)
        strip.append({"thread": t, "group": g, "colour": _colour(groups.get(g, 0))})
    return {
        "iters": [[name, count] for name, count in iters],
        "rows": 1 + max(c["row"] for c in cells),
        "cols": 1 + max(c["col"] for c in cells),
        "row_iters": [name for name, _ in row_iters],
        "col_iters": [name for name, _ in col_iters],
        "cells": cells,
        "strip": strip,
        "collectives": len(cells),
        "active": sum(1 for s in strip if s["group"] is not None),
        "threads": n,
        "blockDim": tiling.blockDim,
        "clusterDim": tiling.clusterDim,
        "level": level,
        "levels": levels(tiling),
        "warp_names": {str(w): name for w, name in warp_names.items()},
    }


def _level_label(level: str) -> str:
    return f"unit of {level[5:]}" if level.startswith("iter:") else level


def _axis(names: list, index: int, iters: dict) -> str:
    """'ii=3' (or 'a=1, c=0') for row/column `index` of the grid."""
    parts = []
    for name in reversed(names):
        count = iters[name]
        parts.append(f"{name}={index % count}")
        index //= count
    return ", ".join(reversed(parts))


def render(stmt_lines: list[str], grid: Optional[dict], unit: Optional[str], note: str, allocs: tuple = ()) -> str:
    """The selected statement (all its lines), the collective grid, the thread strip, a compact legend, and the
    shard grids of the proc's distributed allocations (`allocs`: DistAlloc.to_json() of each)."""
    stmt = "".join(f"<div>{escape(line)}</div>" for line in stmt_lines)
    head = f'<div class="sl-tiling-stmt"><code>{stmt}</code></div>' if stmt_lines else ""
    if grid is None:
        return f'<div class="sl-tiling">{head}<div class="sl-note">{escape(note)}</div></div>'
    idle = grid["threads"] - grid["active"]
    per = len(grid["cells"][0]["threads"]) and sum(hi - lo for lo, hi in grid["cells"][0]["threads"])
    parts = [
        '<div class="sl-tiling">', head,
        f'<div class="sl-tiling-sum">collective unit <b>{escape(unit or "?")}</b>: {grid["collectives"]} collective(s) '
        f'of {per} thread(s); {grid["active"]} active and {idle} idle of {grid["threads"]} threads '
        f'(blockDim={grid["blockDim"]}, clusterDim={grid["clusterDim"]})</div>',
        '<div class="sl-levels">colour by: ' + "".join(
            f'<button class="sl-btn{" sl-btn-on" if lv == grid["level"] else ""}" data-set="level:{escape(lv)}">'
            f'{escape(_level_label(lv))}</button>' for lv in grid["levels"]) + "</div>",
    ]
    iters = dict((n, c) for n, c in grid["iters"])
    rows, cols = grid["rows"], grid["cols"]
    dense = " sl-grid-dense" if cols > 24 else ""
    by_pos = {(c["row"], c["col"]): c for c in grid["cells"]}
    wrapped = not grid["row_iters"] and not grid["col_iters"] and grid["iters"]
    axis = (f'rows: {", ".join(grid["row_iters"]) or "-"}; columns: {", ".join(grid["col_iters"]) or "-"}' if not wrapped
            else f"{grid['iters'][0][0]} = 32 * row + column")
    parts.append(f'<div class="sl-grid-axis">{escape(axis)}</div>')
    parts.append(f'<div class="sl-cgrid{dense}" style="grid-template-columns: max-content repeat({cols}, minmax(0, 1fr))">')
    parts.append('<span class="sl-cg-corner"></span>')
    for col in range(cols):
        label = _axis(grid["col_iters"], col, iters) if grid["col_iters"] else str(col) if wrapped else ""
        parts.append(f'<span class="sl-cg-head">{escape(label.split("=")[-1] if label else "")}</span>')
    for row in range(rows):
        label = _axis(grid["row_iters"], row, iters) if grid["row_iters"] else (str(32 * row) if wrapped else "")
        parts.append(f'<span class="sl-cg-row">{escape(label)}</span>')
        for col in range(cols):
            c = by_pos.get((row, col))
            if c is None:
                parts.append('<span class="sl-cg-cell sl-idle"></span>')
                continue
            values = sizes_text(c["values"]) or "the whole collective"
            title = f"{values}: threads {_ranges(c['threads'])}"
            text = "" if dense else escape(_short(c["threads"]))
            parts.append(f'<span class="sl-cg-cell" style="background:{c["colour"]}" title="{escape(title)}">{text}</span>')
    parts.append("</div>")
    one_each = grid["collectives"] == grid["threads"] == grid["active"]
    if not one_each or grid["warp_names"]:  # else the grid already shows every thread
        parts.append(_strip(grid))
    parts.append(_legend(grid))
    parts.append(shard_grids(list(allocs), grid["level"]))
    parts.append("</div>")
    return "".join(parts)


def shard_grids(allocs: list[dict], level: str) -> str:
    """Each distributed allocation (the `dist` pass' data) as a grid of its shards over the distributed
    dimensions, each cell a shard with its owner threads, coloured by the owners' group at `level`."""
    if not allocs:
        return ""
    size = LEVEL_SIZES.get(level, 0)
    parts = ['<div class="sl-shards"><div class="sl-shards-title">distributed allocations</div>']
    for a in allocs:
        dims = [a["shape"][d] for d in a["distributed_dims"]]
        cols = dims[-1] if dims else 1
        owners = {tuple(s["index"]): s["threads"] for s in a["shards"]}
        shard = " x ".join(map(str, a["shard_shape"])) or "1"
        parts.append(
            f'<div class="sl-shards-head"><code>{escape(a["name"])}</code> @ {escape(a["memory"])}: '
            f'{" x ".join(map(str, dims))} shards of {escape(shard)} (dims {", ".join(map(str, a["distributed_dims"]))}), '
            f'each owned by a {escape(a["owner_unit"])} of the allocating {escape(a["alloc_unit"])}</div>'
        )
        parts.append(f'<div class="sl-cgrid{" sl-grid-dense" if cols > 24 else ""}" '
                     f'style="grid-template-columns: repeat({cols}, minmax(0, 1fr))">')
        groups: dict = {}
        for index in product(*[range(d) for d in dims]):
            threads = owners.get(tuple(index))
            if threads is None:
                parts.append('<span class="sl-cg-cell sl-idle" title="no use touches this shard"></span>')
                continue
            key = threads[0][0] // size if size else tuple(index)
            colour = _colour(groups.setdefault(key, len(groups)))
            title = f"{a['name']}[{', '.join(map(str, index))}]: threads {_ranges(threads)}"
            text = "" if cols > 24 else escape(_short(threads))
            parts.append(f'<span class="sl-cg-cell" style="background:{colour}" title="{escape(title)}">{text}</span>')
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)


def _strip(grid: dict) -> str:
    """Every thread of the CTA/cluster, one row per warp (named warps labelled), idle threads hatched."""
    out = ['<div class="sl-strip">']
    per_cta = grid["blockDim"]
    for w in range(grid["threads"] // 32):
        cta, local = divmod(w * 32, per_cta)
        name = grid["warp_names"].get(str(local // 32))
        label = (f"CTA {cta} " if grid["clusterDim"] > 1 else "") + f"warp {local // 32}" + (f" {name}" if name else "")
        out.append(f'<div class="sl-strip-row"><span class="sl-strip-label">{escape(label)}</span>')
        for s in grid["strip"][w * 32 : w * 32 + 32]:
            if s["group"] is None:
                out.append(f'<span class="sl-tc sl-idle" title="thread {s["thread"]}: idle"></span>')
            else:
                out.append(f'<span class="sl-tc" style="background:{s["colour"]}" title="thread {s["thread"]}"></span>')
        out.append("</div>")
    out.append("</div>")
    return "".join(out)


def _legend(grid: dict) -> str:
    """One entry per colour when there are few; a one-line summary when there are hundreds."""
    members: dict = {}
    for s in grid["strip"]:
        if s["group"] is not None:
            members.setdefault(s["group"], (s["colour"], []))[1].append(s["thread"])
    level = grid["level"]
    name = level[5:] if level.startswith("iter:") else level
    out = ['<div class="sl-legend">']
    if len(members) > 16:
        out.append(f'<div class="sl-legend-row">{len(members)} colours, one per {escape(_level_label(level))} '
                   f"(hover a cell for its threads)</div>")
    else:
        for g, (colour, threads) in members.items():
            runs, start = [], threads[0]
            for a, b in zip(threads, threads[1:] + [None]):
                if b != a + 1:
                    runs.append((start, a + 1))
                    start = b
            what = f"{name}={g}" if level.startswith("iter:") else f"{level} {g}"
            if level in ("warp", "warpgroup") and grid["clusterDim"] > 1 and grid["blockDim"] >= LEVEL_SIZES[level]:
                per_cta = grid["blockDim"] // LEVEL_SIZES[level]  # per CTA, as the strip names them
                what = f"CTA {g // per_cta} {level} {g % per_cta}"
            out.append(f'<div class="sl-legend-row"><span class="sl-swatch" style="background:{colour}"></span>'
                       f"{escape(what)}: threads {_ranges(runs)}</div>")
    if grid["threads"] > grid["active"]:
        out.append('<div class="sl-legend-row"><span class="sl-swatch sl-idle"></span>idle</div>')
    out.append("</div>")
    return "".join(out)
