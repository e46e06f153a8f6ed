"""Collectives that are not whole warps compile to CUDA that computes what the program says.

Found by the session-16 soundness audit: programs that pass `sl.sync_check`
whose CUDA was wrong because two lowerings took "thread count or pitch a
multiple of 32" for "whole warps":
- an iterator of warp pitch was broadcast with `__shfl_sync` from lane 0 in
  lanes where lane 0 does not run (wrong results);
- a 32-thread collective strided over four warps arrived on an mbarrier as
  "one warp": `__syncwarp`, then lane 0 of each warp, on lane 0's barrier
  (the other barriers never completed: the kernel hung).
And a tensor written only through a window alias was declared `const` (nvcc
rejected the kernel).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from procs_lanes import (
    LANE_PROCS,
    nested_warps_in_a_name,
    strided_arrive_groups,
    strided_arrive_ring,
    upper_lanes_copy,
    whole_warps_copy,
    written_through_gmem_alias,
)
from gpu_vs_cpu import assert_gpu_matches_cpu

import spork_lab as sl


def cuda_text(p) -> str:
    return sl.compile_procs_to_strings([p], p.name())[2]


def test_an_index_is_broadcast_from_lane_zero_only_where_whole_warps_run():
    assert "__shfl_sync" in cuda_text(whole_warps_copy)
    assert "__shfl_sync" not in cuda_text(upper_lanes_copy)
    producer, consumer = cuda_text(strided_arrive_groups).split("warps named 'consumer'")
    assert "__shfl_sync" not in producer  # w: in the 8 lanes of group g of each warp
    assert "__shfl_sync" in consumer  # g: one warp each


@pytest.mark.parametrize("p", [strided_arrive_groups, strided_arrive_ring], ids=lambda p: p.name())
def test_a_strided_collective_arrives_once_per_thread(p):
    (info,) = sl.analyze(p).barriers.values()
    assert {u.arrivals for u in info.uses if u.spec.is_arrive and not u.spec.is_reverse} == {32}
    producer = cuda_text(p).split("warps named 'producer'")[1].split("warps named 'consumer'")[0]
    assert "spork_mbar_arrive(" in producer and "__syncwarp" not in producer and "threadIdx.x % 32 == 0" not in producer


def test_a_tensor_written_through_an_alias_is_not_const():
    cu = cuda_text(written_through_gmem_alias)
    assert re.search(r"const float \*y\b|const float\* y\b", cu) is None, cu


def test_nested_warp_ranges_in_a_name_are_predicated_on_the_warp_index():
    """The inner predicate's coordinate joined an empty list of offsets, `(exo_thread / 32 - ) < 1`, which nvcc
    rejected (audit D)."""
    predicates = re.findall(r"if \((exo_thread / 32[^{]*)\) \{", cuda_text(nested_warps_in_a_name))
    assert predicates == ["exo_thread / 32 % 5 < 2", "exo_thread / 32 < 1"]


@pytest.mark.parametrize("p", LANE_PROCS, ids=lambda p: p.name())
def test_each_passes_the_sync_check(p):
    assert sl.sync_check(p, n=2).ok


@pytest.mark.gpu
@pytest.mark.parametrize("p", LANE_PROCS, ids=lambda p: p.name())
def test_the_gpu_computes_what_the_program_says(p):
    pytest.importorskip("cupy")
    rng = np.random.default_rng()  # fresh inputs every run
    for n in (3, 200):
        shapes = [a.type.shape() for a in p._loopir_proc.args if a.type.is_tensor_or_window()]
        x = rng.standard_normal([n] + [int(str(d)) for d in shapes[0][1:]]).astype(np.float32)
        assert_gpu_matches_cpu(p, n=n, x=x, y=np.full_like(x, np.nan))
