"""sm_90a: wgmma, TMA and clusters. Their memories and instrs arrive with the Hopper issues;
the timelines they use are already defined in spork_lab.core.timelines."""

from __future__ import annotations

from ..lang.frontend import register_platform

__all__: list = []

register_platform({name: globals()[name] for name in __all__})
