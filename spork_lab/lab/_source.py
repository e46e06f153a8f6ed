"""Python source text of scheduling-op arguments, so a session replays as a script.

Cursors are written the way a user would find them: a loop as
`p.find_loop("tid #1")` (checked to find that very loop), anything else as
navigation from the proc variable `p` (`p.body()[0].body()[1].before()`),
which names exactly the same place in the proc the step was applied to.
"""

from __future__ import annotations

from exo.API import Procedure
from exo.API_cursors import BlockCursor, Cursor, GapCursor
from exo.core import internal_cursors as ic
from exo.core.LoopIR import LoopIR

from ..core.coll import cuda_thread
from ..core.ir import walk_stmts
from ..core.loop_modes import CudaTasks, CudaThreads, WithBlock


def _node_path(path) -> str:
    return "".join(f".{attr}()[{i}]" for attr, i in path)


def _node_source(proc: Procedure, node: ic.Node, var: str) -> str:
    """`var.find_loop("name #k")` for a loop that pattern finds, else `var.body()[i]...`."""
    s = node._node
    if isinstance(s, LoopIR.For) and not isinstance(s.loop_mode, WithBlock):
        name = str(s.iter.name())
        same = [t for t in walk_stmts(proc._loopir_proc.body) if isinstance(t, LoopIR.For) and str(t.iter.name()) == name]
        k = next(i for i, t in enumerate(same) if t is s)
        pattern = name if k == 0 else f"{name} #{k}"
        if proc.find_loop(pattern)._impl._path == node._path:
            return f"{var}.find_loop({pattern!r})"
    return f"{var}{_node_path(node._path)}"


def cursor_source(c: Cursor, var: str = "p") -> str:
    """Text that finds cursor `c` (statement, gap or block) in its proc, starting from `var`."""
    impl = c._impl
    if isinstance(c, GapCursor):
        where = "before" if impl._type == ic.GapType.Before else "after"
        return f"{_node_source(c.proc(), impl._anchor, var)}.{where}()"
    if isinstance(c, BlockCursor):
        r = impl._range
        return f"{var}{_node_path(impl._anchor._path)}.{impl._attr}()[{r.start}:{r.stop}]"
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
    if isinstance(v, CudaThreads):
        return "cuda_threads" if v.unit == cuda_thread else f"cuda_threads(unit={v.unit})"
    if isinstance(v, CudaTasks):
        return "cuda_tasks"
    if isinstance(v, (LoopIR.Seq, LoopIR.Par)):
        return repr("seq" if isinstance(v, LoopIR.Seq) else "par")
    # Loop modes, units, timelines, block contexts and memories print as the names users write.
    return str(v)
