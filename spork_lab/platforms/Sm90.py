"""sm_90a: wgmma, TMA and clusters. Their memories and instrs arrive with the Hopper issues;
the timelines they use are already defined in spork_lab.sync.timelines."""

from __future__ import annotations

__all__: list = []
