"""HTML of the workbench views, rendered in Python from the session's data.

The live widget places these fragments in tabs; the static fallback (a
notebook opened without a kernel, nbconvert, GitHub) stacks them on one page.
One renderer for both keeps the two pictures identical.
"""

from __future__ import annotations

import base64
import re
from html import escape
from html.parser import HTMLParser
from pathlib import Path
from typing import Optional

from ._codeview import CodeView, show_in_code

STATIC_DIR = Path(__file__).resolve().parent / "static"  # the widget front end (no build step), shipped in the package
CSS_PATH = STATIC_DIR / "workbench.css"
ON_DEMAND = ("banks", "cuda")  # tabs computed when opened in a running notebook (each can take seconds)


def _badge(outcome_state: str, message: str, bad: bool) -> str:
    cls = "sl-bad" if bad else "sl-ok" if outcome_state == "ok" else "sl-unknown"
    return f'<span class="sl-badge {cls}">{escape(message)}</span>'


def header(title: str, step: int, n_steps: int, analysis, check, step_error: Optional[dict], notice: str = "") -> str:
    """Title, the step shown (with buttons to browse the others), analysis and check badges, a failed step's error
    (and the calls of its cell not run after it), a notice (steps a cell run again replaced)."""
    prev = f' data-set="step:{step - 1}"' if step > 0 else " disabled"
    nxt = f' data-set="step:{step + 1}"' if step < n_steps else " disabled"
    parts = [
        f'<div class="sl-head"><span class="sl-title">{escape(title)}</span>',
        f'<span class="sl-stepno"><button class="sl-btn"{prev} title="previous step">◀</button>'
        f" step {step} of {n_steps} "
        f'<button class="sl-btn"{nxt} title="next step">▶</button></span>',
        _badge(analysis.state, analysis.message, analysis.state == "error"),
        _badge(check.state, check.message, check.state == "error" or (check.state == "ok" and not check.value.ok)),
        "</div>",
    ]
    if step_error:
        parts.append(
            f'<div class="sl-step-error"><b>{escape(step_error["call"])}</b> failed '
            f'({escape(step_error["kind"])}): {escape(step_error["message"])}'
            f"<br>The session stays at step {step}."
            + (f" Not run after it in this cell: {escape(', '.join(step_error['skipped']))}."
               if step_error.get("skipped") else "")
            + "</div>"
        )
    if notice:
        parts.append(f'<div class="sl-step-notice">{escape(notice)}.</div>')
    return "".join(parts)


def code(view: CodeView, marks: dict[int, list[dict]], selected: Optional[int], changed: frozenset = frozenset()) -> str:
    """The printed proc, one row per line; statement rows are clickable (data-set="selected:N"); the lines the
    step changed are marked."""
    rows = ['<div class="sl-code">']
    for n, line in enumerate(view.lines):
        line_marks = marks.get(n, [])
        classes = ["sl-line"]
        if line.stmt is not None:
            classes.append("sl-stmt")
        if selected is not None and line.stmt == selected:
            classes.append("sl-selected")
        classes += sorted({f"sl-mark-{m['kind']}" for m in line_marks})
        if n in changed:
            classes.append("sl-changed")
        attr = f' data-stmt="{line.stmt}" data-set="selected:{line.stmt}"' if line.stmt is not None else ""
        title = "; ".join(m["text"] for m in line_marks)
        badge = "".join(f'<span class="sl-marker sl-marker-{m["kind"]}">{escape(m["label"])}</span>' for m in line_marks)
        rows.append(
            f'<div class="{" ".join(classes)}"{attr} data-line="{n + 1}" title="{escape(title)}">'
            f'<span class="sl-gutter">{n + 1}</span><span class="sl-marks">{badge}</span>'
            f'<span class="sl-src" style="{_hanging(line.text)}">{view.highlighted[n] or "&nbsp;"}</span></div>'
        )
    rows.append("</div>")
    return "".join(rows)


def _hanging(text: str) -> str:
    """A long line wraps, its continuation indented past the line's own indentation (no horizontal scrollbar at the
    bottom of a tall box)."""
    indent = len(text) - len(text.lstrip(" ")) + 4
    return f"padding-left: {indent}ch; text-indent: -{indent}ch"


def steps(initial_name: str, records: list[dict], shown: int) -> str:
    """History: each step's call and what it changed (a line diff); click one to show that step."""

    def item(k: int, body: str) -> str:
        current = " sl-step-shown" if k == shown else ""
        return f'<li class="sl-step{current}"><span class="sl-step-go" data-set="step:{k}">show</span> {body}</li>'

    parts = ['<ol class="sl-steps" start="0">', item(0, f"<code>p = {escape(initial_name)}</code> (initial proc)")]
    for k, r in enumerate(records, start=1):
        diff = "".join(
            f'<div class="sl-diff-{"add" if d.startswith("+") else "del" if d.startswith("-") else "ctx"}">{escape(d)}</div>'
            for d in r["diff"]
        )
        parts.append(item(
            k,
            f'<code>{escape(r["call"])}</code> <span class="sl-diffstat">+{r["added"]} -{r["removed"]} lines</span>'
            f'<details><summary>what changed</summary><div class="sl-diff">{diff or "(no text change)"}</div></details>',
        ))
    parts.append("</ol>")
    return "".join(parts)


def cuda(text: Optional[str], note: str) -> str:
    """The generated CUDA of the step (the .cu file: the kernels, and the runtime prelude before them folded),
    or why there is none."""
    if text is None:
        return f'<div class="sl-note">{escape(note)}</div>'
    start = text.find("\n__global__")
    prelude, kernels = (text[: start + 1], text[start + 1 :]) if start >= 0 else ("", text)
    folded = (f'<details><summary>runtime prelude ({prelude.count(chr(10))} lines)</summary>'
              f'<pre class="sl-cuda">{escape(prelude)}</pre></details>') if prelude else ""
    return f'<div class="sl-note">{escape(note)}</div>{folded}<pre class="sl-cuda">{escape(kernels)}</pre>'


def banks(report, note: str, view: CodeView) -> str:
    """The Banks tab: sl.bank_conflicts' count per statement (conflicting ones first; a row, clicked, shows its
    statement in Code), or why there is none."""
    if report is None:
        return f'<div class="sl-note">{escape(note)}</div>'
    if not report.accesses and not report.not_modeled:
        return f'<div class="sl-note">{escape(note)}</div><div class="sl-note">no shared-memory accesses to count</div>'
    rows = []
    for a in report.accesses:
        cost = "conflict-free" if a.conflict_free else f"{a.ratio:.2f}x, at worst {a.worst_ways}-way"
        many = f" ({a.statements} statements)" if a.statements > 1 else ""
        worst = "" if a.conflict_free else f'<div class="sl-banks-worst">worst: {escape(a.worst)}</div>'
        where = show_in_code(view.stmt_at_path(a.stmt.path) if a.stmt.path is not None else None)
        rows.append(
            f'<tr class="{"sl-banks-ok" if a.conflict_free else "sl-banks-bad"}"{where}>'
            f'<td><code>{escape(a.code)}</code>{escape(many)}{worst}</td><td>{a.kind} <code>{escape(a.buffer)}</code></td>'
            f"<td>{a.requests}</td><td>{a.wavefronts}</td><td>{a.needed}</td><td>{escape(cost)}</td></tr>")
    skipped = "".join(f'<div class="sl-note">not modeled: <code>{escape(s.text)}</code> ({escape(why)})</div>'
                      for s, why in report.not_modeled)
    summary = (f"{len(report.conflicts)} of {len(report.accesses)} shared-memory accesses conflict"
               if report.accesses else "no modeled shared-memory accesses")
    return (f'<div class="sl-note">{escape(note)}</div><div class="sl-banks-summary">{summary}</div>'
            '<table class="sl-banks"><tr><th>statement</th><th>access</th><th>requests</th><th>wavefronts</th>'
            f'<th>needed</th><th>cost</th></tr>{"".join(rows)}</table>{skipped}')


def static_page(state: dict) -> str:
    """Every view on one page (the picture a notebook keeps without a kernel), under headings; the tabs the
    live widget computes on demand (CUDA, Banks) are left out."""
    views = state["views"]
    sections = "".join(
        f'<div class="sl-section"><div class="sl-section-title">{escape(label)}</div>{views[key]}</div>'
        for key, label in state["tabs"]
        if key not in ON_DEMAND
    )
    return standalone(f'<div class="sl-wb sl-static">{views["header"]}{_svg_as_images(sections)}</div>')


_SVG = re.compile(r'<svg\b[^>]*\bwidth="(\d+)"[^>]*>.*?</svg>', re.S)


def svg_image(svg: str, width: int, alt: str) -> str:
    """An SVG drawing as an <img> with a data URI: sanitizers (untrusted notebooks, GitHub) strip inline <svg>
    but keep images."""
    data = base64.b64encode(svg.encode()).decode()
    return f'<img src="data:image/svg+xml;base64,{data}" alt="{escape(alt)}" style="width: 100%; max-width: {width}px">'


def _svg_as_images(html: str) -> str:
    return _SVG.sub(lambda m: svg_image(m.group(0), int(m.group(1)), "drawing (hover disabled in a static picture)"), html)


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
