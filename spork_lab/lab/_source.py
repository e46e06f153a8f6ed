"""Python source text of scheduling-op arguments, so a session replays as a script.

Cursors are written the way a person finds them: by pattern
(`p.find_loop("tid #1")`, `p.find("tile[_] = _")`, a sync statement by its
text: `p.find("Fence(cuda_in_order, cuda_in_order) #1")`), else next to or
inside a statement found by pattern (`p.find_loop("tid").next()`, for a
`with` block), and only as a last resort by navigation from the proc variable `p`
(`p.body()[0].body()[1]`); each is checked to name the very place the step
was applied to.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from exo.API import Procedure
from exo.API_cursors import BlockCursor, Cursor, GapCursor
from exo.core import internal_cursors as ic
from exo.core.LoopIR import LoopIR
from exo.frontend import pyparser
from exo.frontend.pattern_match import PatternMatch

from ..core.coll import cuda_thread
from ..core.loop_modes import CudaTasks, CudaThreads, WithBlock
from ..core.sync_stmts import is_barrier_alloc, sync_spec_of
from ..lang.sched_errors import SYNC_PATTERN, find_syncs, sync_text


def _node_path(path) -> str:
    return "".join(f".{attr}()[{i}]" for attr, i in path)


def _pattern(s) -> Optional[tuple[str, Callable]]:
    """(pattern, finder name) that names statements like `s`: find_loop for loops, find for the rest."""
    if isinstance(s, LoopIR.For) and not isinstance(s.loop_mode, WithBlock):
        return str(s.iter.name()), "find_loop"
    if isinstance(s, (LoopIR.Assign, LoopIR.Reduce)):
        op = "+=" if isinstance(s, LoopIR.Reduce) else "="
        return (f"{s.name}[_] {op} _" if s.idx else f"{s.name} {op} _"), "find"
    if isinstance(s, LoopIR.Alloc) and not is_barrier_alloc(s):
        return f"{s.name} : _", "find"
    if isinstance(s, LoopIR.Call) and sync_spec_of(s) is None:
        return f"{s.f.name}(_)", "find"
    if isinstance(s, LoopIR.Call):  # a sync statement, by its text (sched_errors.find_syncs)
        return sync_text(s), "find"
    return None  # with blocks and ifs: patterns cannot name them


def _found_source(proc: Procedure, node: ic.Node, var: str) -> Optional[str]:
    """`var.find_loop("tid #1")` / `var.find("tile[_] = _")` when that pattern finds exactly `node`."""
    named = _pattern(node._node)
    if named is None:
        return None
    pattern, finder = named
    for k, path in enumerate(_match_paths(proc, pattern, finder)):
        if path == node._path:
            return f"{var}.{finder}({pattern if k == 0 else f'{pattern} #{k}'!r})"
    return None


def _match_paths(proc: Procedure, pattern: str, finder: str) -> list:
    """Paths of the statements `proc.find_loop(pattern, many=True)` / `proc.find(...)` finds, in its order.

    Matched here rather than through those methods: exo's `match_pattern` calls `inspect.stack()` (to read
    the caller's variables, which these patterns do not use), and with a notebook's deep stack that costs
    ~0.1 s a pattern, a large part of a workbench step."""
    if SYNC_PATTERN.match(pattern):
        return [c._impl._path for c in find_syncs(proc, pattern, many=True)]
    text = f"for {pattern} in _: _" if finder == "find_loop" else pattern
    found = PatternMatch().find(ic.Cursor.create(proc._loopir_proc), pyparser.pattern(text, srclocals={}, srcglobals={}))
    return [(c[0] if isinstance(c, ic.Block) and len(c) == 1 else c)._path for c in found]


def _node_source(proc: Procedure, node: ic.Node, var: str) -> str:
    """A statement as a person finds it: by pattern, else next to (or inside) one found by pattern, else by
    navigation from `var` (`p.body()[0].body()[2]`), which always names the same place."""
    found = _found_source(proc, node, var)
    if found:
        return found
    parent_path, (attr, i) = node._path[:-1], node._path[-1]
    for other, move in ((i - 1, "next"), (i + 1, "prev")):
        if 0 <= other < len(_block_of(proc, parent_path, attr)):
            found = _found_source(proc, ic.Node(node._root, parent_path + [(attr, other)]), var)
            if found:
                return f"{found}.{move}()"
    if parent_path:
        found = _found_source(proc, ic.Node(node._root, parent_path), var)
        if found:
            return f"{found}.{attr}()[{i}]"
    return f"{var}{_node_path(node._path)}"


def _block_of(proc: Procedure, parent_path, attr: str) -> list:
    """The statement list `attr` ("body"/"orelse") of the node at `parent_path` (the proc's body when empty)."""
    if not parent_path:
        return proc._loopir_proc.body
    node = proc._loopir_proc
    for a, j in parent_path:
        node = getattr(node, a)[j]
    return getattr(node, attr)


def cursor_source(c: Cursor, var: str = "p") -> str:
    """Text that finds cursor `c` (statement, gap or block) in its proc, starting from `var`."""
    impl = c._impl
    if isinstance(c, GapCursor):
        where = "before" if impl._type == ic.GapType.Before else "after"
        return f"{_node_source(c.proc(), impl._anchor, var)}.{where}()"
    if isinstance(c, BlockCursor):
        r = impl._range
        first = _node_source(c.proc(), ic.Node(impl._anchor._root, impl._anchor._path + [(impl._attr, r.start)]), var)
        return first if len(r) == 1 else f"{first}.expand(0, {len(r) - 1})"
    if isinstance(impl, ic.Node) and all(attr in ("body", "orelse") for attr, _ in impl._path):
        return _node_source(c.proc(), impl, var)
    raise ValueError(f"cannot record a {type(c).__name__} as source; pass a statement, gap or block cursor, or a pattern string")


def value_source(v, var: str = "p") -> str:
    """Source text of one argument: literals by repr, cursors by navigation, named objects by name."""
    if isinstance(v, Cursor):
        return cursor_source(v, var)
    if isinstance(v, (list, tuple)):
        inner = ", ".join(value_source(x, var) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{value_source(k, var)}: {value_source(x, var)}" for k, x in v.items()) + "}"
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    if isinstance(v, Procedure):
        return v.name()
    if isinstance(v, type):
        return v.__name__
    if dataclasses.is_dataclass(v) and not type(v).__module__.startswith("spork_lab"):
        # a schedule's own parameters (examples/sm80_gemm.py's Config): the fields not at their default
        fields = [f for f in dataclasses.fields(v) if f.init and getattr(v, f.name) != f.default]
        return f"{type(v).__name__}({', '.join(f'{f.name}={value_source(getattr(v, f.name), var)}' for f in fields)})"
    if isinstance(v, CudaThreads):
        return "cuda_threads" if v.unit == cuda_thread else f"cuda_threads(unit={v.unit})"
    if isinstance(v, CudaTasks):
        return "cuda_tasks"
    if isinstance(v, (LoopIR.Seq, LoopIR.Par)):
        return repr("seq" if isinstance(v, LoopIR.Seq) else "par")
    # Loop modes, units, timelines, block contexts and memories print as the names users write.
    return str(v)
