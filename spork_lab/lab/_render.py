"""HTML of the workbench views, rendered in Python from the session's data.

The live widget places these fragments in tabs; the static fallback (a
notebook opened without a kernel, nbconvert, GitHub) stacks them on one page.
One renderer for both keeps the two pictures identical.
"""

from __future__ import annotations

import json
import re
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

from ._codeview import CodeView, highlight

STATIC_DIR = Path(__file__).resolve().parent / "static"  # the widget front end (no build step), shipped in the package
CSS_PATH = STATIC_DIR / "workbench.css"


def _badge(outcome_state: str, message: str, bad: bool) -> str:
    cls = "sl-bad" if bad else "sl-ok" if outcome_state == "ok" else "sl-unknown"
    return f'<span class="sl-badge {cls}">{escape(message)}</span>'


def header(title: str, n_steps: int, analysis, check, n_hazards: int, step_error: Optional[dict]) -> str:
    """Title line, analysis and sync-check badges, and the error of a failed step."""
    parts = [
        f'<div class="sl-head"><span class="sl-title">{escape(title)}</span>',
        f'<span class="sl-stepno">step {n_steps}</span>',
        _badge(analysis.state, analysis.message, analysis.state == "error"),
        _badge(check.state, check.message, check.state == "error" or n_hazards > 0),
        "</div>",
    ]
    if step_error:
        parts.append(
            f'<div class="sl-step-error"><b>{escape(step_error["call"])}</b> failed '
            f'({escape(step_error["kind"])}): {escape(step_error["message"])}'
            "<br>The session is unchanged.</div>"
        )
    return "".join(parts)


def code(view: CodeView, marks: dict[int, list[dict]], selected: Optional[int]) -> str:
    """The printed proc, one row per line; statement rows are clickable (data-stmt)."""
    rows = ['<div class="sl-code">']
    for n, line in enumerate(view.lines):
        line_marks = marks.get(n, [])
        classes = ["sl-line"]
        if line.stmt is not None:
            classes.append("sl-stmt")
        if selected is not None and line.stmt == selected:
            classes.append("sl-selected")
        classes += sorted({f"sl-mark-{m['kind']}" for m in line_marks})
        attr = f' data-stmt="{line.stmt}"' if line.stmt is not None else ""
        title = "; ".join(m["text"] for m in line_marks)
        badge = "".join(f'<span class="sl-marker sl-marker-{m["kind"]}">{escape(m["label"])}</span>' for m in line_marks)
        rows.append(
            f'<div class="{" ".join(classes)}"{attr} data-line="{n + 1}" title="{escape(title)}">'
            f'<span class="sl-gutter">{n + 1}</span><span class="sl-marks">{badge}</span>'
            f'<span class="sl-src">{highlight(line.text) or "&nbsp;"}</span></div>'
        )
    rows.append("</div>")
    return "".join(rows)


def _ranges(threads: list[int]) -> str:
    """[0, 15], [32, 47] style text for a sorted thread list (closed ranges, as in the user guide's figures)."""
    out, start = [], None
    for i, t in enumerate(threads):
        if start is None:
            start = t
        if i + 1 == len(threads) or threads[i + 1] != t + 1:
            out.append(f"[{start}, {t}]")
            start = None
    return ", ".join(out)


def tiling(stmt_text: Optional[str], grid: Optional[dict], unit: Optional[str], note: str) -> str:
    """The threads of one CTA/cluster as cells (one row per warp), coloured by collective; idle threads grey."""
    if grid is None:
        head = f'<div class="sl-tiling-stmt"><code>{escape(stmt_text)}</code></div>' if stmt_text else ""
        return f'<div class="sl-tiling">{head}<div class="sl-note">{escape(note)}</div></div>'
    idle = grid["threads"] - grid["active"]
    parts = [
        '<div class="sl-tiling">',
        f'<div class="sl-tiling-stmt"><code>{escape(stmt_text or "")}</code></div>',
        f'<div class="sl-tiling-sum">collective unit <b>{escape(unit or "?")}</b>: '
        f'{grid["collectives"]} collective(s), {grid["active"]} active and {idle} idle of {grid["threads"]} threads '
        f'(blockDim={grid["blockDim"]}, clusterDim={grid["clusterDim"]})</div>',
        '<div class="sl-grid">',
    ]
    cells = grid["cells"]
    for cta in range(grid["clusterDim"]):
        if grid["clusterDim"] > 1:
            parts.append(f'<div class="sl-cta-label">CTA {cta}</div>')
        base = cta * grid["blockDim"]
        for w in range(0, grid["blockDim"], 32):
            parts.append(f'<div class="sl-warp"><span class="sl-warp-label">warp {(base + w) // 32}</span>')
            for c in cells[base + w : base + min(w + 32, grid["blockDim"])]:
                if c["values"] is None:
                    parts.append(f'<span class="sl-cell sl-idle" title="{escape(c["title"])}">{c["thread"]}</span>')
                else:
                    parts.append(
                        f'<span class="sl-cell sl-active" style="background:{c["colour"]}" '
                        f'data-collective="{c["collective"]}" title="{escape(c["title"])}">{c["thread"]}</span>'
                    )
            parts.append("</div>")
    parts.append("</div>")
    groups: dict[int, list] = {}
    for c in cells:
        if c["values"] is not None:
            groups.setdefault(c["collective"], []).append(c)
    parts.append('<div class="sl-legend">')
    shown = sorted(groups)[:16]
    for k in shown:
        members = groups[k]
        values = ", ".join(f"{name}={v}" for name, v in members[0]["values"].items()) or "all"
        parts.append(
            f'<div class="sl-legend-row"><span class="sl-swatch" style="background:{members[0]["colour"]}"></span>'
            f'{escape(values)}; threads {_ranges([c["thread"] for c in members])}</div>'
        )
    if len(groups) > len(shown):
        parts.append(f'<div class="sl-legend-row">... and {len(groups) - len(shown)} more collectives</div>')
    if idle:
        parts.append('<div class="sl-legend-row"><span class="sl-swatch sl-idle"></span>idle</div>')
    parts.append("</div></div>")
    return "".join(parts)


def steps(initial_name: str, records: list[dict]) -> str:
    """History: each step's call and what it changed (a line diff of the printed proc)."""
    parts = ['<ol class="sl-steps" start="0">', f'<li class="sl-step"><code>p = {escape(initial_name)}</code> (initial proc)</li>']
    for r in records:
        diff = "".join(
            f'<div class="sl-diff-{"add" if d.startswith("+") else "del" if d.startswith("-") else "ctx"}">{escape(d)}</div>'
            for d in r["diff"]
        )
        parts.append(
            f'<li class="sl-step"><code>{escape(r["call"])}</code> '
            f'<span class="sl-diffstat">+{r["added"]} -{r["removed"]} lines</span>'
            f'<details><summary>what changed</summary><div class="sl-diff">{diff or "(no text change)"}</div></details></li>'
        )
    parts.append("</ol>")
    return "".join(parts)


def _field(value) -> str:
    """Readable text of one hazard field: an access as `statement` (line) threads ... iters ..., else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("stmt"), dict):
        stmt = value["stmt"]
        threads = ", ".join(f"[{a}, {b})" for a, b in value.get("threads", []))
        iters = ", ".join(f"{k}={v}" for k, v in (value.get("iters") or {}).items())
        return f"{stmt.get('text', '')}  (source line {stmt.get('line')})  threads {threads}  {iters}"
    return json.dumps(value)


def hazards(note: str, cards: list[dict]) -> str:
    """One card per hazard (same kind and statements), with the first instance's fields and the instance count."""
    parts = [f'<div class="sl-note">{escape(note)}</div>']
    for card in cards:
        fields = "".join(
            f"<dt>{escape(k)}</dt><dd>{escape(_field(v))}</dd>" for k, v in card["fields"].items() if k != "kind"
        )
        where = ", ".join(str(n + 1) for n in card["lines"]) or "?"
        count = f" at {card['count']} thread/iteration pairs (first shown)" if card["count"] > 1 else ""
        parts.append(
            f'<div class="sl-hazard"><div class="sl-hazard-kind">{escape(str(card["kind"]))} hazard{count}</div>'
            f'<div class="sl-hazard-where">printed line(s) {where}</div><dl>{fields}</dl></div>'
        )
    return "".join(parts)


def static_page(state: dict) -> str:
    """All views on one page: the picture a notebook keeps without a kernel."""
    views = state["views"]
    sections = "".join(
        f'<div class="sl-section"><div class="sl-section-title">{escape(label)}</div>{views[key]}</div>'
        for key, label in state["tabs"]
    )
    return standalone(f'<div class="sl-wb sl-static">{views["header"]}{sections}</div>')


def standalone(html: str) -> str:
    """HTML that draws itself without the widget's front end.

    The stylesheet travels twice: as a <style> block, and copied into each
    element's style attribute, because untrusted notebooks and GitHub strip
    <style> blocks but keep (most) inline styles.
    """
    css = CSS_PATH.read_text()
    return f"<style>{css}</style>{inline_styles(html, css)}"


_VAR = re.compile(r"var\(--[\w-]+,\s*([^()]*)\)")  # var(--jp-x, fallback) -> fallback: no theme variables outside JupyterLab
_SIMPLE_SELECTOR = re.compile(r"^((?:\.[\w-]+)+)(?:\s+([a-z]+))?$")  # .a, .a.b, or .a tag


def _class_rules(css: str) -> list:
    """(required classes, descendant tag or None, declarations) of the rules simple enough to inline."""
    rules = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S)):
        declarations = " ".join(_VAR.sub(r"\1", body).split()).rstrip(";")
        for selector in selectors.split(","):
            m = _SIMPLE_SELECTOR.match(selector.strip())
            if m and ".sl-live" not in m.group(1):
                rules.append((set(m.group(1)[1:].split(".")), m.group(2), declarations))
    return rules


class _Inliner(HTMLParser):
    """Rewrites HTML, adding the declarations of matching class rules to each element's style."""

    VOID = {"br", "hr", "img", "input", "meta", "link", "wbr"}

    def __init__(self, rules: list):
        super().__init__(convert_charrefs=False)
        self.rules, self.out, self.ancestors = rules, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        above = set().union(*self.ancestors) if self.ancestors else set()
        style = [d for need, t, d in self.rules if (t is None and need <= classes) or (t == tag and need <= above)]
        if style:
            attrs["style"] = "; ".join(style + ([attrs["style"]] if attrs.get("style") else []))
        text = "".join(f' {k}="{escape(v or "", quote=True)}"' if v is not None else f" {k}" for k, v in attrs.items())
        self.out.append(f"<{tag}{text}>")
        if tag not in self.VOID:
            self.ancestors.append(classes)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.ancestors:
            self.ancestors.pop()
        self.out.append(f"</{tag}>")

    def handle_data(self, data):
        self.out.append(data)

    def handle_entityref(self, name):
        self.out.append(f"&{name};")

    def handle_charref(self, name):
        self.out.append(f"&#{name};")


def inline_styles(html: str, css: str) -> str:
    """`html` with the simple class rules of `css` copied into style attributes."""
    inliner = _Inliner(_class_rules(css))
    inliner.feed(html)
    inliner.close()
    return "".join(inliner.out)
