"""Distributed memory (seed 000, rules 1-4): deduction, errors, analysis data, lowering."""

from __future__ import annotations

import procs_dist as P
import pytest

import spork_lab as sl


def test_transposed_register_read_is_rejected():
    """Regression: acc[ty, tx] written, acc[tx, ty] read after a Fence passed sync_check and computed
    garbage on the GPU (each thread read registers it never wrote). Every entry point must reject it."""
    for entry in (sl.analyze, lambda p: sl.sync_check(p), lambda p: sl.compile_procs_to_strings([p], "t")):
        with pytest.raises(sl.SporkError) as info:
            entry(P.transposed_read)
        assert "rule 3" in info.value.message
