"""The anywidget of the workbench: state computed in Python, drawn by spork_lab/lab/static/workbench.js.

Each display of a workbench is its own `WorkbenchView`, showing the step it
was created at. The front end reports clicks by setting traits (`step`,
`selected`, `level`, `timeline`, `view`); Python redraws.
"""

from __future__ import annotations

import anywidget
import traitlets

from ._render import CSS_PATH, ON_DEMAND, STATIC_DIR


class WorkbenchView(anywidget.AnyWidget):
    """Synced traits: `state` (the views as HTML and the tabs), `header` and tab `labels` (newer than state's),
    the `step` shown, the `selected` statement, the tiling colour `level`, the `timeline` window ("barrier:page")
    and the visible `view` tab. `data` (not synced: notebooks store widget state) is what the views were drawn
    from."""

    _esm = STATIC_DIR / "workbench.js"
    _css = CSS_PATH
    state = traitlets.Dict().tag(sync=True)
    header = traitlets.Unicode("").tag(sync=True)  # also in state; alone, so a new step elsewhere updates only it
    labels = traitlets.Dict().tag(sync=True)  # tab labels newer than state's (the step count, after new steps)
    step = traitlets.Int(0).tag(sync=True)
    selected = traitlets.Int(-1).tag(sync=True)
    level = traitlets.Unicode("").tag(sync=True)
    timeline = traitlets.Unicode("").tag(sync=True)
    view = traitlets.Unicode("code").tag(sync=True)

    def __init__(self, session, step: int, error=None):
        super().__init__(step=step)
        self._session = session
        self._error = error  # the failed step this picture was displayed with, shown while it shows that step
        self._error_step = step
        self._selection = None  # (path, statement class) clicked in this picture; None: the session's choice
        self._pages: dict = {}
        self._history: list = list(session.steps)  # the steps drawn; kept when the session replaces this step
        self._stale = False
        self._steps_outdated = False  # the session has steps the Steps tab does not list yet: drawn when opened
        self.data: dict = {}
        self._redraw()
        self.view = self.state["first_view"]
        self.observe(self._changed, names=["step", "selected", "level", "timeline", "view"])

    def _changed(self, change) -> None:
        if self._redrawing:
            return
        name, new = change["name"], change["new"]
        if name == "step" and not 0 <= new <= len(self._history):
            self.step = min(max(new, 0), len(self._history))  # redraws through this observer
            return
        if name == "selected":
            r = self._session.result(self.step, self._frozen())
            if 0 <= new < len(r.view.stmts):
                self._selection = (r.view.paths[new], type(r.view.stmts[new]))
                self.level = ""
        elif name == "timeline":
            barrier, _, page = new.rpartition(":")
            if page.lstrip("-").isdigit():
                self._pages[barrier] = int(page)
        elif name == "view" and new not in ON_DEMAND and not (new == "steps" and self._steps_outdated):
            return  # switching tabs is the front end's business; CUDA and Banks are made when opened, Steps drawn again
        self._redraw()

    _redrawing = False

    def steps_changed(self) -> None:
        """The session gained or lost steps. A picture whose step is still the session's shows the new history
        (header and Steps tab); one whose step was replaced (a cell above ran again, or undo) keeps drawing
        the steps it had, and says so."""
        if self._stale:
            return
        live = self._session.steps
        if len(live) < self.step or any(a is not b for a, b in zip(live[: self.step], self._history)):
            self._stale = True
        else:  # only the header and a label travel to every picture at each step; the Steps tab when opened
            self._history = list(live)
            self._steps_outdated = True
            self.labels = {"steps": self._session.steps_label()}
        self.header = self._session.header(self.step, self._shown_error(), self._frozen())

    def _frozen(self):
        """The steps of a stale picture (None: the session's own)."""
        return self._history if self._stale else None

    def _shown_error(self):
        return self._error if self.step == self._error_step else None

    def _redraw(self) -> None:
        self._redrawing = True
        try:
            rendered = self._session.render(self.step, self._selection, self.level, self._pages, self.view,
                                            self._shown_error(), self._frozen())
            self.data = rendered["data"]
            self.state = {k: rendered[k] for k in ("views", "tabs", "first_view")}
            self.header = rendered["views"]["header"]
            self.labels, self._steps_outdated = {}, False
            selected = self.data["selected"]
            self.selected = -1 if selected is None else selected
        finally:
            self._redrawing = False
