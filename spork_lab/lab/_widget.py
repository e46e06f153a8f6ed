"""The anywidget class of the workbench: state computed in Python, drawn by spork_lab/lab/static/workbench.js."""

from __future__ import annotations

import anywidget
import traitlets

from ._render import CSS_PATH, STATIC_DIR


class WorkbenchWidget(anywidget.AnyWidget):
    """Synced traits: `state` (views as HTML plus their data), `selected` statement, visible `view` tab."""

    _esm = STATIC_DIR / "workbench.js"
    _css = CSS_PATH
    state = traitlets.Dict().tag(sync=True)
    selected = traitlets.Int(-1).tag(sync=True)
    view = traitlets.Unicode("code").tag(sync=True)
