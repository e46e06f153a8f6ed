"""The Barrier timeline view: per barrier, a lane per arriving or awaiting collective, events in program order.

Data comes from the sync report (`barrier_timeline`: every arrive and await
with its queue, collective, iterator values, arrive number, ring slot and
parity). Here each await is paired with the event of the arrive it waits for,
lanes are named (warp names from the analysis), barrier errors (DEADLOCK,
COUNT) are pinned to their events, and the events are drawn as SVG, a window
of `PAGE` events at a time, so the picture fits the cell's width.
"""

from __future__ import annotations

import math
from html import escape

from ..core.ir import sizes_text
from ._codeview import CodeView, show_in_code
from ._hazards import locate, task_threads, threads_per_task

PAGE = 32  # events per window
_COL, _LANE, _LABEL, _TOP = 30, 34, 170, 22  # SVG geometry: event column, lane height, lane label width, axis


def _range_text(threads) -> str:
    return ", ".join(f"[{lo}]" if hi - lo == 1 else f"[{lo}, {hi - 1}]" for lo, hi in threads)


def _role(kind: str) -> str:
    return "arrive" if kind.endswith("Arrive") else "await"


def barrier_timelines(report, hazards: list, view: CodeView, analysis) -> list[dict]:
    """Per barrier: {"name", "info", "lanes": [{"queue", "role", "label", "position"}], "events": [...], "bad": first bad
    event or None, "truncated"}; each event {"lane", "kind", "queue", "position", "index", "slot", "parity",
    "iters", "threads", "stmt", "line", "pairs": event number of its arrive or None, "state" (ok, pass, bad: the
    pairing fails, hang: waits for an arrive that hung threads never make), "after_hang": its threads hung before,
    "later": for an await whose arrive comes only after it in program order, that arrive's event number}. A lane's
    "position" is the barrier index its events use (`[1]` of `bar[2]`; None for a single barrier): each index has its
    own queues, so its own lanes."""
    cta = max((threads_per_task(f.ctx) for f in analysis.device_functions), default=0) if analysis else 0
    failures = [h for h in hazards if h.kind in ("DEADLOCK", "COUNT") and h.after_hang is None]
    out: dict[str, dict] = {}
    # queue -> event numbers of its arrives since the queue (re)started; a queue is the checker's: a barrier
    # position's forward or reverse queue, of its own per owner (a multicast's source CTA, a commit group's threads)
    arrives: dict[tuple, list[int]] = {}
    where: list[int] = []  # per report event, its number in its barrier's events
    for e in report.barrier_timeline:
        ev = e.to_json()
        b = out.setdefault(ev["barrier"], {"name": ev["barrier"], "info": report.barriers.get(ev["barrier"], {}),
                                           "lanes": [], "events": [], "bad": None})
        stmt = locate(ev["stmt"], view)
        info = analysis.stmt_info(view.stmts[stmt]) if stmt is not None and analysis is not None else None
        threads = task_threads(ev["threads"], threads_per_task(info.device_function if info else None) or cta)
        who = f"threads {_range_text(threads)}" if threads else "CPU"
        if info is not None and info.warp_name:
            who = f"{info.warp_name} · {who}"
        indexed = math.prod(b["info"].get("dims") or [1]) > 1
        lane = {"queue": ev["queue"], "role": _role(ev["kind"]), "label": who,
                "position": ev["position"] if indexed else None}
        if lane not in b["lanes"]:
            b["lanes"].append(lane)
        queue = arrives.setdefault((ev["barrier"], tuple(ev["position"]), ev["queue"], ev["owner"]), [])
        n = len(b["events"])
        where.append(n)
        pairs, state = None, "ok"
        if lane["role"] == "arrive":
            if len(queue) >= ev["index"]:
                queue.clear()  # the barrier's scope started again (next task): numbering restarts
            queue.append(n)
        elif ev["index"] <= 0:
            state = "pass"  # a ring's first awaits: no arrive to wait for yet
        elif ev["index"] <= len(queue):
            pairs = queue[ev["index"] - 1]
        else:
            state = "bad"  # waits for an arrive that has not happened: deadlock
        if any(h.access.stmt and h.access.stmt.path == tuple(ev["stmt"]["path"] or ()) and h.access.iters == ev["iters"]
               for h in failures):
            state = "bad"
        if ev["hang"] == "here" and state != "bad":
            state = "hang"  # its arrive is one that threads which already hang never make
        elif ev["hang"] == "after" and state == "bad":
            state = "ok"  # past the deadlock: not where the pairing fails
        if state == "bad" and b["bad"] is None:
            b["bad"] = n
        b["events"].append({
            "lane": b["lanes"].index(lane), "kind": ev["kind"], "queue": ev["queue"], "position": ev["position"],
            "index": ev["index"], "slot": ev["slot"], "parity": ev["parity"], "iters": ev["iters"],
            "threads": threads, "stmt": stmt, "line": view.lines_of_stmt(stmt)[0] + 1 if stmt is not None else None,
            "text": view.stmt_text(stmt) if stmt is not None else ev["stmt"]["text"], "pairs": pairs, "state": state,
            "after_hang": ev["hang"] == "after", "later": ev["later"],  # the report's event number, for now
        })
    for b in out.values():
        for ev in b["events"]:
            if ev["later"] is not None:
                ev["later"] = where[ev["later"]]  # its arrive is on the same barrier
        order = {("forward", "arrive"): 0, ("forward", "await"): 1, ("reverse", "arrive"): 2, ("reverse", "await"): 3}
        ranked = sorted(range(len(b["lanes"])), key=lambda i: (b["lanes"][i]["position"] or [], order[(b["lanes"][i]["queue"], b["lanes"][i]["role"])], i))
        new_of = {old: new for new, old in enumerate(ranked)}
        b["lanes"] = [b["lanes"][i] for i in ranked]
        for ev in b["events"]:
            ev["lane"] = new_of[ev["lane"]]
        b["truncated"] = bool(report.timeline_truncated)
    return list(out.values())


def first_page(b: dict) -> int:
    """The window that shows the barrier's first bad event (else the first window)."""
    return (b["bad"] or 0) // PAGE


def _event_title(b: dict, ev: dict) -> str:
    pos = f"[{', '.join(map(str, ev['position']))}]" if ev["position"] else ""
    where = sizes_text(ev["iters"])
    ring = f", ring slot {ev['slot']}, parity {ev['parity']}" if ev["slot"] is not None else ""
    if _role(ev["kind"]) == "arrive":
        what = f"arrive #{ev['index']}{ring}"
    elif ev["state"] == "pass":
        what = "passes: no arrive to wait for yet"
    elif ev["state"] == "bad" and ev["pairs"] is None and ev["later"] is not None:
        what = (f"waits for arrive #{ev['index']}, which the program makes only later (event {ev['later'] + 1}): in "
                "its own order, the one sync_check runs, it would wait forever")
    elif ev["state"] == "bad" and ev["pairs"] is None:
        what = f"waits for arrive #{ev['index']}, which has not happened: the GPU would wait forever"
    elif ev["state"] == "hang":
        what = (f"waits for arrive #{ev['index']}, which threads that already hang never make: the GPU would wait "
                "here forever")
    else:
        what = f"waits for arrive #{ev['index']}{ring}"
    if ev["after_hang"]:
        what += " (past the deadlock: on the GPU these threads never get here)"
    line = f"line {ev['line']}: " if ev["line"] else ""
    return f"{ev['kind']} {b['name']}{pos} ({ev['queue']}) by {_range_text(ev['threads']) or 'the CPU'}; {where}: {what}. {line}{ev['text']}"


def render(b: dict, page: int) -> str:
    """One barrier's lanes and a window of its events as SVG (scaled to the cell's width), with paging buttons."""
    info = b["info"]
    depth = ""
    if info.get("memory") == "CudaMbarrier":
        # the barriers' own rings (a phase reuses its mbarrier every `depth` arrives), not the data's ring
        forward = info.get("forward_depth")
        depth = f"forward ring of {forward} mbarrier{'s' * (forward != 1)}" + (
            f", reverse ring of {info['reverse_depth']}" if info.get("reverse_depth") else "")
        depth += " (depths from the Await lags)" if info.get("reverse_depth") else " (depth from the Await lag)"
        if info.get("dims"):  # bar[2]: each index has its rings, and its own arrive numbers (an event's [i])
            depth = f"each of {b['name']}[{', '.join(map(str, info['dims']))}]: {depth}"
    head = f'<div class="sl-tl-head"><b>{escape(b["name"])}</b> @ {escape(str(info.get("memory", "?")))}'
    head += f" · {escape(depth)}" if depth else ""
    events = b["events"]
    pages = max(1, -(-len(events) // PAGE))
    page = min(max(page, 0), pages - 1)
    lo, hi = page * PAGE, min(len(events), (page + 1) * PAGE)
    head += f' · events {lo + 1}–{hi} of {len(events)}{" (truncated)" if b["truncated"] else ""}'
    if pages > 1:
        head += (f' <button class="sl-btn" data-set="timeline:{escape(b["name"])}:{page - 1}"{" disabled" if page == 0 else ""}>◀</button>'
                 f'<button class="sl-btn" data-set="timeline:{escape(b["name"])}:{page + 1}"{" disabled" if page == pages - 1 else ""}>▶</button>')
    head += "</div>"
    width = _LABEL + (hi - lo) * _COL + 10
    height = _TOP + len(b["lanes"]) * _LANE + 6
    svg = [f'<svg class="sl-tl-svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           # scaled to the cell's width, but not below 560 px: a narrow cell scrolls it (.sl-tl) rather than shrink
           f'style="width: 100%; max-width: {width}px; min-width: {min(width, 560)}px; height: auto" '
           'xmlns="http://www.w3.org/2000/svg">']
    for i, lane in enumerate(b["lanes"]):
        y = _TOP + i * _LANE
        fill = "#f6f8fa" if lane["queue"] == "forward" else "#fbf5ff"
        svg.append(f'<rect x="0" y="{y}" width="{width}" height="{_LANE - 2}" fill="{fill}"/>')
        role = f'{"reverse " if lane["queue"] == "reverse" else ""}{lane["role"]}'
        if lane["position"] is not None:
            role = f'{b["name"]}[{", ".join(map(str, lane["position"]))}] {role}'
        svg.append(f'<text x="4" y="{y + 13}" font-size="10.5" font-weight="600" fill="#57606a">{escape(role)}</text>'
                   f'<text x="4" y="{y + 26}" font-size="10" fill="#57606a">{escape(lane["label"])}</text>')
    for n in range(lo, hi, 4):
        svg.append(f'<text x="{_LABEL + (n - lo) * _COL + 2}" y="12" font-size="9" fill="#8c959f">{n + 1}</text>')

    def centre(n: int) -> tuple[float, float]:
        ev = events[n]
        return _LABEL + (n - lo) * _COL + _COL / 2, _TOP + ev["lane"] * _LANE + (_LANE - 2) / 2

    for n in range(lo, hi):  # pairing lines first, under the boxes
        ev = events[n]
        if ev["pairs"] is None:
            continue
        x1, y1 = centre(n)
        colour = "#0969da" if ev["queue"] == "forward" else "#8250df"
        if ev["after_hang"]:
            colour = "#d0d7de"
        if ev["pairs"] >= lo:
            x0, y0 = centre(ev["pairs"])
            svg.append(f'<path d="M{x0 + 11},{y0} C{(x0 + x1) / 2},{y0} {(x0 + x1) / 2},{y1} {x1 - 11},{y1}" '
                       f'stroke="{colour}" stroke-width="1.3" fill="none" opacity="0.8"/>')
        else:  # its arrive is in an earlier window
            svg.append(f'<path d="M{_LABEL},{y1} L{x1 - 11},{y1}" stroke="{colour}" stroke-width="1" '
                       f'stroke-dasharray="3 2" fill="none" opacity="0.7"/>')
    for n in range(lo, hi):
        ev = events[n]
        x, y = centre(n)
        arrive = _role(ev["kind"]) == "arrive"
        fill = ("#ddf4ff" if ev["queue"] == "forward" else "#fbefff") if arrive else "#ffffff"
        stroke, dash, sw = ("#0969da" if ev["queue"] == "forward" else "#8250df"), "", 1.2
        if ev["state"] == "pass":
            dash = ' stroke-dasharray="2 2"'
        if ev["state"] == "bad":
            stroke, fill, sw = "#cf222e", "#ffebe9", 2.5
        elif ev["state"] == "hang":
            stroke, fill, sw, dash = "#cf222e", "#ffffff", 2, ' stroke-dasharray="4 2"'
        if ev["after_hang"]:
            stroke, fill, sw, dash = "#d0d7de", "#ffffff", 1, ' stroke-dasharray="2 2"'

        label = f"{'A' if arrive else 'W'}{ev['index'] if ev['index'] > 0 else '–'}"
        sub = f"s{ev['slot']}p{ev['parity']}" if ev["slot"] is not None else ""
        attrs = show_in_code(ev["stmt"])
        bad = " sl-ev-bad" if ev["state"] == "bad" else " sl-ev-after" if ev["after_hang"] else ""
        ink = "#8c959f" if ev["after_hang"] else "#24292f"
        svg.append(
            f'<g class="sl-ev{bad}" data-event="{n}"{attrs}><title>{escape(_event_title(b, ev))}</title>'
            f'<rect x="{x - 12}" y="{y - 13}" width="24" height="26" rx="4" fill="{fill}" stroke="{stroke}" '
            f'stroke-width="{sw}"{dash}/>'
            f'<text x="{x}" y="{y - 1}" font-size="10" text-anchor="middle" font-weight="600" fill="{ink}">{label}</text>'
            f'<text x="{x}" y="{y + 9}" font-size="7.5" text-anchor="middle" fill="#57606a">{escape(sub)}</text></g>'
        )
    svg.append("</svg>")
    note = ""
    if b["bad"] is not None:
        ev = events[b["bad"]]
        note = f'<div class="sl-tl-bad">event {b["bad"] + 1}: {escape(_event_title(b, ev))}</div>'
    return f'<div class="sl-tl" data-barrier="{escape(b["name"])}">{head}{"".join(svg)}{note}</div>'


def timeline_view(note: str, barriers: list[dict], pages: dict) -> str:
    """Every barrier's timeline (A = arrive, W = await, #k its arrive number, s/p ring slot and parity)."""
    if not barriers:
        return f'<div class="sl-timeline"><div class="sl-note">{escape(note)}</div></div>'
    legend = ('<div class="sl-note">A<i>k</i>: arrive number <i>k</i> of its queue; W<i>k</i>: await pairing with arrive '
              '<i>k</i> (line to it; a dashed line from the left: its arrive is on an earlier page); s/p: ring slot and phase '
              'parity; a dashed box: an await with nothing to wait for yet; '
              'red: where the pairing fails (dashed red: an await left waiting by threads that hang); grey: past '
              'the deadlock, what hung threads would do next (on the GPU they never get there). '
              'Click an event to select its statement.</div>')
    body = "".join(render(b, pages.get(b["name"], first_page(b))) for b in barriers)
    return f'<div class="sl-timeline">{legend}{body}</div>'
