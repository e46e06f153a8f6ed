"""Hazard cards: the sync check's hazards placed on the current proc's printed statements and explained.

A report names each statement by its path in the scheduled proc (as well as
the user's file and line, which many scheduled statements can share), so a
hazard marks exactly the printed statements involved, with their current text.

One card per (kind, buffer, pair of statements); each has a two-column witness
(the earlier access, the later one) and a plain-words hint of the
synchronization that would order them.
"""

from __future__ import annotations

import re
from html import escape
from types import SimpleNamespace
from typing import Optional

from exo.core.LoopIR import LoopIR

from ..analysis.scopes import CLUSTER_UNIT_TEXT
from ..core.ir import sizes_text
from ..core.loop_modes import WithBlock
from ..core.sync_stmts import sync_spec_of
from ..errors import place_of
from ._codeview import CodeView, show_in_code
from ._source import cursor_source


def locate(ref: Optional[dict], view: CodeView) -> Optional[int]:
    """Index (in `view.stmts`) of the statement a report's reference names by its path, or None."""
    path = (ref or {}).get("path")
    return view.stmt_at_path(path) if path is not None else None


def _thread_text(threads) -> str:
    """Closed thread ranges as the user guide writes them: [0, 15], [32]."""
    return ", ".join(f"[{lo}]" if hi - lo == 1 else f"[{lo}, {hi - 1}]" for lo, hi in threads) or "none"


def task_threads(threads: list, per_task: int) -> list:
    """Thread ranges within their task's CTA (or cluster), as the Tiling view numbers them: the checker numbers
    the threads of task k from k x `per_task` (0: leave them)."""
    if not per_task:
        return [tuple(t) for t in threads]
    return [(lo - lo // per_task * per_task, hi - lo // per_task * per_task) for lo, hi in threads]


def threads_per_task(fn) -> int:
    """The threads of one task of a device function (a CudaDeviceFunction; None: CPU code, 0)."""
    return fn.threads_per_cta * fn.clusterDim if fn is not None else 0


class _Side:
    """One access of a hazard as placed on the current proc."""

    def __init__(self, access: Optional[dict], view: CodeView, analysis):
        self.access = access or {}
        self.iters = dict(self.access.get("iters") or {})
        self.stmt = locate(self.access.get("stmt"), view)
        self.info = analysis.stmt_info(view.stmts[self.stmt]) if self.stmt is not None and analysis else None
        self.threads = task_threads(self.access.get("threads") or [],
                                    threads_per_task(self.info.device_function if self.info else None))
        self.lines = view.lines_of_stmt(self.stmt) if self.stmt is not None else []

    @property
    def line(self) -> Optional[int]:
        """1-based printed line of the statement (its first line)."""
        return self.lines[0] + 1 if self.lines else None

    @property
    def source(self) -> str:
        """The source line the statement comes from (`Cell In[2]:8`; scheduling keeps the line of what it rewrites):
        the Code tab numbers the scheduled proc's lines, which the user's cell does not show."""
        stmt = self.access.get("stmt") or {}
        return place_of(SimpleNamespace(filename=stmt.get("file"), lineno=stmt.get("line"))) or "-"

    def text(self, view: CodeView) -> str:
        """The statement's current text on one line (the printer may wrap it over several)."""
        if not self.lines:
            return (self.access.get("stmt") or {}).get("text", "?")
        return view.stmt_text(self.stmt)


def _shared_path(a: tuple, b: tuple) -> tuple:
    """The path of the innermost statement enclosing both statements at paths `a` and `b` (() for the proc)."""
    k = 0
    while k < min(len(a), len(b)) - 1 and a[k] == b[k]:
        k += 1
    common = a[:k]
    while common and common[-1] == "else":
        common = common[:-1]
    return common


def _common_loop(a: _Side, b: _Side, view: CodeView) -> Optional[str]:
    """The outermost loop enclosing both accesses whose iteration differs between them (None: the same
    iteration of every loop they share; sibling loops that reuse an iterator name are not shared)."""
    if a.stmt is None or b.stmt is None:
        return None
    common = _shared_path(view.paths[a.stmt], view.paths[b.stmt])
    for depth in range(1, len(common) + 1):
        index = view.stmt_at_path(common[:depth])
        s = view.stmts[index] if index is not None else None
        if isinstance(s, LoopIR.For) and not isinstance(s.loop_mode, WithBlock):
            name = str(s.iter.name())
            if name in a.iters and name in b.iters and a.iters[name] != b.iters[name]:
                return name
    return None


_SCOPE_WORDS = {"cuda_thread": "thread", "cuda_warp": "warp", "cuda_warpgroup": "warpgroup", "cuda_cta_in_cluster": "CTA",
                CLUSTER_UNIT_TEXT: "cluster"}


def _cursor_at(proc, path: tuple):
    """The statement cursor at a path (child indices from the proc body; "else" steps into an orelse)."""
    cursor, into_else = None, False
    for step in path:
        if step == "else":
            into_else = True
            continue
        block = proc.body() if cursor is None else cursor.orelse() if into_else else cursor.body()
        cursor, into_else = block[step], False
    return cursor


def _scope_end(view: CodeView, proc, alloc: int) -> tuple:
    """The path of the last statement of the block that holds the allocation `alloc` (its scope ends after it)."""
    parent = view.paths[alloc][:-1]
    owner = view.stmts[view.stmt_at_path(parent[:-1] if parent and parent[-1] == "else" else parent)] if parent else None
    block = proc._loopir_proc.body if owner is None else owner.orelse if parent and parent[-1] == "else" else owner.body
    return parent + (len(block) - 1,)


def _subtree(view: CodeView, path: tuple) -> range:
    """The indices (in `view.stmts`, print order) of the statement at `path` and the statements inside it."""
    first = view.stmt_at_path(path)
    last = first
    while last + 1 < len(view.stmts) and view.paths[last + 1][:len(path)] == path:
        last += 1
    return range(first, last + 1)


def _placement(view: CodeView, analysis, proc, earlier: _Side, later: _Side, after_earlier: bool,
               scope_end: Optional[tuple], var: str) -> tuple[str, str]:
    """(scope of the collective that must run the Fence, the gap as a cursor source from `var`) for a Fence ordering the
    two accesses: in the innermost block holding both, right after the child holding the earlier access
    (`after_earlier`: a loop-carried hazard) or right before the child holding the later one; for a free
    (later = the allocation), after `scope_end`, the last statement of the allocation's block."""
    a, b = view.paths[earlier.stmt], view.paths[later.stmt]
    common = _shared_path(a, b)
    scope = "CTA"
    if common:
        owner = view.stmts[view.stmt_at_path(common)]
        body = owner.orelse if a[len(common)] == "else" else owner.body
        info = analysis.stmt_info(body[0]) if analysis is not None else None
        unit = info.coll_unit_text if info is not None else None
        scope = _SCOPE_WORDS.get(unit, unit or "CTA")
        if unit not in _SCOPE_WORDS and info is not None and info.warp_name:  # not `64 threads (box [1, 64] of ...)`
            scope = f"{info.warp_name}-warps"
    if scope_end is not None:
        return scope, cursor_source(_cursor_at(proc, scope_end).after(), var)
    side = a if after_earlier else b
    depth = len(common) + (2 if side[len(common)] == "else" else 1)
    cursor = _cursor_at(proc, side[:depth])  # the child of the common block that holds this access
    gap = cursor.after() if after_earlier else cursor.before()
    return scope, cursor_source(gap, var)


def _between(view: CodeView, first: Optional[int], second: Optional[int]) -> list[int]:
    """Printed statements strictly between two statements (in print order) that are sync statements."""
    if first is None or second is None:
        return []
    lo, hi = sorted((first, second))
    return [i for i in range(lo + 1, hi) if sync_spec_of(view.stmts[i]) is not None]


def _sync_verdict(view: CodeView, analysis, index: int, earlier: _Side, later: _Side) -> str:
    """Why one sync statement between the accesses does not order them."""
    s = view.stmts[index]
    spec = sync_spec_of(s)
    line = view.lines_of_stmt(index)[0] + 1
    if spec.kind != "Fence":
        return f"line {line}: {spec.kind} on {s.args[0].name} (see the Barrier timeline for what it pairs with)"
    info = analysis.stmt_info(s) if analysis else None
    if earlier.info is not None and earlier.info.instr_tl not in spec.first_tl.instr_tls:
        return f"line {line}: its first sync-tl {spec.first_tl} does not include {earlier.info.instr_tl}"
    if later.info is not None and later.info.instr_tl not in spec.second_tl.instr_tls:
        return f"line {line}: its second sync-tl {spec.second_tl} does not include {later.info.instr_tl}"
    unit = info.coll_unit_text if info is not None else "?"
    return f"line {line}: Fence run by each {unit} collective separately: it does not order threads of different ones"


def _witness(kind: str, earlier: _Side, later: _Side, view: CodeView, analysis, buffer: Optional[str],
             scope_end: Optional[tuple]) -> list:
    """Rows (field, earlier, later) of the two-column witness (`scope_end`: a free's, see _scope_end)."""

    def collective(side: _Side) -> str:
        if side.info is None:
            return "?"
        name = f" (warps named {side.info.warp_name})" if side.info.warp_name else ""
        return f"{side.info.coll_unit_text}{name}"

    def instr_tl(side: _Side) -> str:
        return side.info.instr_tl.name if side.info is not None else "?"

    def line_text(side: _Side) -> str:
        return f"line {side.line}: {side.text(view)}" if side.line else side.text(view)

    earlier_async = earlier.info is not None and earlier.info.instr_tl.is_async
    made = (f"asynchronous: visible to no thread until a sync on {earlier.info.instr_tl.sync_tl_name} completes it"
            if earlier_async else f"in-order: visible at once to its own threads {_thread_text(earlier.threads)} only")
    syncs = _between(view, earlier.stmt, later.stmt)
    if kind == "FREE":
        need = f"the free needs every owning thread {_thread_text(later.threads)} to see this access"
    else:
        need = f"needs the earlier access visible to threads {_thread_text(later.threads)} on {instr_tl(later)}"
    if scope_end is not None:  # the free is at the end of the scope: what matters is what follows the access
        end = _subtree(view, scope_end)[-1]
        syncs = [i for i in range(earlier.stmt + 1, end + 1) if sync_spec_of(view.stmts[i]) is not None]
        nothing = f"nothing after line {earlier.line} synchronizes before the end of {buffer}'s scope"
    else:
        nothing = f"nothing between line {earlier.line} and line {later.line} synchronizes"
    why = "; ".join(_sync_verdict(view, analysis, i, earlier, later) for i in syncs) or (
        nothing if earlier.line and later.line else "no synchronization")
    later_text = line_text(later) if kind != "FREE" else f"end of {buffer}'s scope (allocated at line {later.line})"
    return [
        ("statement", line_text(earlier), later_text),
        ("source", earlier.source, later.source),
        ("collective", collective(earlier), collective(later)),
        ("threads", _thread_text(earlier.threads), _thread_text(later.threads)),
        ("iterators", sizes_text(earlier.iters) or "-",
         sizes_text(later.iters) or "-"),
        ("instr-tl", instr_tl(earlier), instr_tl(later) if kind != "FREE" else "(free)"),
        ("visibility", made, f"{need}: {why}"),
    ]


def _hint(kind: str, earlier: _Side, later: _Side, buffer: Optional[str], view: CodeView, analysis, proc,
          scope_end: Optional[tuple], session: str, fence: Optional[list], fix: str) -> str:
    """The report's Fence (`fence`, its sync-tls; or `fix`, why none orders them), placed in the printed proc,
    with the workbench call that inserts it."""
    if fence is None:
        return fix
    first, second = fence
    if earlier.stmt is None or later.stmt is None:
        return f"a Fence({first}, {second}) between the two accesses"
    carried = _common_loop(earlier, later, view)
    in_order = carried is None and earlier.line is not None and later.line is not None and earlier.line < later.line
    after_earlier = kind == "FREE" or not in_order
    scope, gap = _placement(view, analysis, proc, earlier, later, after_earlier, scope_end, f"{session}.proc")
    fence_text = f"a {scope}-scope Fence({first}, {second})"
    call = f"{session}.apply(insert_fence, {gap}, {first}, {second})"
    if scope_end is not None:
        end = view.lines_of_stmt(_subtree(view, scope_end)[-1])[-1] + 1
        where = f"at the end of {buffer}'s scope, after line {end}"
    elif in_order:
        where = f"between line {earlier.line} and line {later.line}"
    else:
        loop = f"the body of `for {carried}`" if carried else "the loop body"
        where = f"after line {earlier.line}, at the end of {loop} (before the next iteration reaches line {later.line})"
    barriers = [i for i in _between(view, earlier.stmt, later.stmt) if sync_spec_of(view.stmts[i]).kind != "Fence"]
    if barriers and kind != "FREE":  # meant to order them: the pairing is what to fix, not a Fence to add
        lines = ", ".join(str(view.lines_of_stmt(i)[0] + 1) for i in barriers)
        return (f"the barrier statements between them (line{'s' * (len(barriers) > 1)} {lines}) do not order these "
                "accesses: check their pairing in the Barrier timeline (an Arrive or ReverseArrive missing in some "
                f"iterations, or an Await's lag); or add {fence_text} {where}: {call}")
    return f"{fence_text} {where}: {call}"


def _printed_lines(message: str, sides: list) -> str:
    """The checker's message with the lines it names (its statements' source lines) as the Code tab numbers them,
    as the rest of the card does."""
    printed = {s.access["stmt"]["line"]: s.line for s in sides if s.line and (s.access.get("stmt") or {}).get("line")}
    return re.sub(r"\bline (\d+)\b", lambda m: f"line {printed.get(int(m[1]), m[1])}", message)


def hazard_cards(report, view: CodeView, analysis, proc, session: str = "wb") -> list[dict]:
    """One card per (kind, buffer, pair of printed statements of `proc`), in the order the checker found them;
    the hints' calls apply to the workbench named `session`."""
    cards: list[dict] = []
    for h in report.hazards:
        fields = h.to_json()
        kind, buffer = fields["kind"], fields.get("buffer")
        later = _Side(fields["access"], view, analysis)
        earlier = _Side(fields.get("other"), view, analysis) if fields.get("other") else None
        key = (kind, buffer, earlier.stmt if earlier else None, later.stmt, fields["after_hang"] is not None)
        same = next((c for c in cards if c["key"] == key), None)
        if same is not None:
            same["count"] += 1
            continue
        card = {
            "key": key,
            "kind": kind,
            "buffer": buffer,
            "index": fields.get("index"),
            "message": _printed_lines(fields["message"], [s for s in (earlier, later) if s is not None]),
            "count": 1,
            "after_hang": fields["after_hang"] is not None,  # its threads already hang at a DEADLOCK
            "stmts": [s.stmt for s in (earlier, later) if s is not None],
            "stmt_lines": [s.line for s in (earlier, later) if s is not None],  # 1-based first printed lines
            "lines": [n for s in (earlier, later) if s is not None for n in s.lines],
        }
        scope_end = _scope_end(view, proc, later.stmt) if kind == "FREE" and later.stmt is not None else None
        if earlier is not None:
            card["witness"] = _witness(kind, earlier, later, view, analysis, buffer, scope_end)
        else:  # a read of nothing written (UNINIT) or a barrier error (DEADLOCK, COUNT): one statement
            scope_ends = later.stmt is not None and isinstance(view.stmts[later.stmt], LoopIR.Alloc)
            where = (f"end of {view.stmts[later.stmt].name}'s scope (allocated at line {later.line})" if scope_ends
                     else f"line {later.line}: {later.text(view)}")
            card["witness"] = [("statement", where, ""),
                               *([("threads", _thread_text(later.threads), "")] if later.threads else []),
                               ("iterators", sizes_text(later.iters) or "-", "")]
        if kind == "UNINIT":
            card["hint"] = (f"no statement before line {later.line} writes this element of {buffer}: write it "
                            "first (load it, or zero it), or read only what is written")
        elif kind == "COUNT" and fields["fix"]:  # an arrive never awaited: the Await to add
            card["hint"] = _printed_lines(fields["fix"], [later])
        elif buffer is None or earlier is None:  # a barrier's own error: its pairing is what to fix
            card["hint"] = "open the Barrier timeline: the highlighted event is where the pairing goes wrong"
        else:
            card["hint"] = _hint(kind, earlier, later, buffer, view, analysis, proc, scope_end, session,
                                 fields["fence"], fields["fix"])
        card["texts"] = [s.text(view) for s in (earlier, later) if s is not None]
        cards.append(card)
    return cards


def _select(card: dict) -> str:
    """Clicking a card's lines selects its later statement in the Code tab (as clicking a timeline event does)."""
    return show_in_code(card["stmts"][-1] if card["stmts"] else None)


def render(note: str, cards: list[dict]) -> str:
    """One card per hazard: kind, buffer and element, the two-column witness and the hint; the cards of what
    threads that already hang would do next come last, folded."""
    parts = [f'<div class="sl-note">{escape(note)}</div>']
    parts += [_card(card) for card in cards if not card["after_hang"]]
    after = [_card(card) for card in cards if card["after_hang"]]
    if after:
        parts.append(f'<details class="sl-after-hang"><summary>{len(after)} more after the deadlock: what the threads '
                     "it hangs would do next if they did not hang (on the GPU they never get there; fix the deadlock "
                     f"first)</summary>{''.join(after)}</details>")
    return "".join(parts)


def _card(card: dict) -> str:
    """One hazard's card."""
    where = f" on {card['buffer']}[{', '.join(map(str, card['index'] or []))}]" if card["buffer"] else ""
    count = f" (and {card['count'] - 1} more instance(s) of this pair)" if card["count"] > 1 else ""
    lines = " and ".join(f"line {n}" for n in card["stmt_lines"] if n) or "?"
    header = "<tr><th></th><th>earlier access</th><th>later access</th></tr>" if len(card["stmts"]) > 1 else ""
    rows = "".join(
        f"<tr><th>{escape(field)}</th><td>{escape(a)}</td><td>{escape(b)}</td></tr>" for field, a, b in card["witness"]
    )
    return (
        f'<div class="sl-hazard" data-lines="{" ".join(str(n + 1) for n in card["lines"])}">'
        f'<div class="sl-hazard-kind">{escape(card["kind"])} hazard{escape(where)}{escape(count)}</div>'
        f'<div class="sl-hazard-where"{_select(card)}>{escape(lines)}: {escape(card["message"])}</div>'
        f'<table class="sl-witness">{header}{rows}</table>'
        f'<div class="sl-hint"><b>to fix:</b> {escape(card["hint"])}</div></div>'
    )
