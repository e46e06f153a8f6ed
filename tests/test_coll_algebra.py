"""Tests of the collective algebra (seed 001): worked examples from the seeds plus
hypothesis properties checked against brute-force thread sets."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spork_lab.core.coll import (
    CollSizeExpr,
    CollTiling,
    CollType,
    CollUnit,
    blockDim,
    clusterDim,
    cuda_cluster,
    cuda_cta_in_cluster,
    cuda_thread,
    cuda_warp,
    cuda_warpgroup,
    domain_completion,
    unit_typing,
)
from spork_lab.errors import CollectiveError

EVAL_NAMESPACE = {
    "cuda_thread": cuda_thread,
    "cuda_warp": cuda_warp,
    "cuda_warpgroup": cuda_warpgroup,
    "cuda_cta_in_cluster": cuda_cta_in_cluster,
    "CollUnit": CollUnit,
    "blockDim": blockDim,
    "clusterDim": clusterDim,
}

WARP_OF_EACH_CTA = CollUnit((clusterDim, blockDim / 32, 32), (clusterDim, 1, 32))
LANE_OF_EACH_WARP = CollUnit((blockDim / 32, 32), (blockDim / 32, 1))

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def thread_set(intervals: list[tuple[int, int]]) -> set[int]:
    return {t for start, stop in intervals for t in range(start, stop)}


def all_iter_values(tiling: CollTiling) -> list[dict[str, int]]:
    names = [name for name, _ in tiling.iters]
    return [dict(zip(names, values)) for values in itertools.product(*(range(c) for _, c in tiling.iters))]


def collectives(tiling: CollTiling) -> list[tuple[dict[str, int], set[int]]]:
    return [(sigma, thread_set(tiling.threads(sigma))) for sigma in all_iter_values(tiling)]


# --------------------------------------------------------------------------
# Worked examples from the seeds
# --------------------------------------------------------------------------


def test_seed_000_figure_two_nested_loops():
    cta = CollTiling.top(128)
    m_body = cta.tile("m", 8, 16 * cuda_thread)
    n_body = m_body.tile("n", 16, cuda_thread)
    assert m_body.threads({"m": 0}) == [(0, 16)]
    assert m_body.threads({"m": 2}) == [(32, 48)]
    assert m_body.threads({"m": 7}) == [(112, 128)]
    assert n_body.threads({"m": 7, "n": 15}) == [(127, 128)]
    assert n_body.threads({"m": 1, "n": 2}) == [(18, 19)]
    assert n_body.iter_values_of(127) == {"m": 7, "n": 15}
    assert n_body.iter_values_of(34) == {"m": 2, "n": 2}
    assert m_body.thread_count == 16 and n_body.thread_count == 1
    assert n_body.iters == (("m", 8), ("n", 16))
    assert m_body.matches(16 * cuda_thread) and not m_body.matches(cuda_warp)
    assert n_body.matches(cuda_thread)


def test_seed_000_cuda_warps_inside_warpgroups():
    wg_body = CollTiling.top(256).tile("wg", 2, cuda_warpgroup)
    selected = wg_body.select_warps(3, 4)
    assert selected.threads({"wg": 0}) == [(96, 128)]
    assert selected.threads({"wg": 1}) == [(224, 256)]
    assert selected.matches(cuda_warp)
    assert selected.iter_values_of(230) == {"wg": 1}
    assert selected.iter_values_of(95) is None
    assert wg_body.select_warps(0, 4).threads({"wg": 1}) == [(128, 256)]


def test_seed_000_ten_by_four_threads_do_not_fit_a_warp():
    warp = CollTiling.top(128).tile("w", 4, cuda_warp)
    with pytest.raises(CollectiveError, match=r"10 x 4 = 40 threads > 32"):
        warp.tile("i", 10, 4 * cuda_thread)
    assert warp.tile("i", 8, 4 * cuda_thread).threads({"w": 1, "i": 7}) == [(60, 64)]
    assert "blockDim" not in _refusal(lambda: warp.tile("i", 10, 4 * cuda_thread))  # a warp: blockDim is not it


def _refusal(tile) -> str:
    with pytest.raises(CollectiveError) as e:
        tile()
    return e.value.message


def test_a_loop_wider_than_the_cta_names_its_blockdim():
    message = _refusal(lambda: CollTiling.top(128).tile("w", 8, cuda_warp))
    assert message.endswith("8 x 32 = 256 threads > 128 threads in the enclosing collective (the whole CTA, "
                            "blockDim=128: give the CudaDeviceFunction a larger blockDim, or the loop fewer iterations)")


def test_seed_001_one_warp_from_each_cta():
    ctype = unit_typing(WARP_OF_EACH_CTA, blockDim=128, clusterDim=4)
    assert ctype == CollType((4, 4, 32), (4, 1, 32))
    warp2 = {cta * 128 + 64 + lane for cta in range(4) for lane in range(32)}
    assert ctype.matches(warp2)
    assert not ctype.matches(warp2 - {64})
    assert not ctype.matches(set(range(64, 96)))

    body = CollTiling.top(128, 4).tile("w", 4, WARP_OF_EACH_CTA)
    assert body.threads({"w": 2}) == [(64, 96), (192, 224), (320, 352), (448, 480)]
    assert body.matches(WARP_OF_EACH_CTA) and not body.matches(cuda_warp)
    per_cta = body.tile("c", 4, cuda_warp)
    assert per_cta.threads({"w": 1, "c": 3}) == [(416, 448)]
    with pytest.raises(CollectiveError, match="one dimension"):
        body.tile("t", 128, cuda_thread)


@pytest.mark.parametrize("clusterDim_value", [2, 4])
def test_ctas_in_a_cluster(clusterDim_value):
    cluster = CollTiling.top(256, clusterDim_value)
    assert cluster.matches(cuda_cluster) and not cluster.matches(cuda_cta_in_cluster)
    cta = cluster.tile("cta", clusterDim_value, cuda_cta_in_cluster)
    assert cta.matches(cuda_cta_in_cluster)
    last = clusterDim_value - 1
    assert cta.threads({"cta": last}) == [(last * 256, clusterDim_value * 256)]
    warp = cta.tile("w", 8, cuda_warp)
    assert warp.threads({"cta": 1, "w": 2}) == [(256 + 64, 256 + 96)]
    assert warp.iter_values_of(256 + 70) == {"cta": 1, "w": 2}
    with pytest.raises(CollectiveError, match="threads >"):
        cta.tile("x", 2, cuda_cta_in_cluster)


def test_named_warps_select_the_same_warps_of_every_cta():
    cluster = CollTiling.top(384, 2)
    consumers = cluster.select_cta_warps(4, 12)
    assert consumers.threads({}) == [(128, 384), (384 + 128, 768)]
    assert consumers.thread_count == 512
    wg_of_each_cta = CollUnit((clusterDim, blockDim / 128, 128), (clusterDim, 1, 128))
    assert consumers.tile("wg", 2, wg_of_each_cta).threads({"wg": 1}) == [(256, 384), (640, 768)]
    with pytest.raises(CollectiveError, match="one dimension"):
        consumers.tile("wg", 4, cuda_warpgroup)
    per_cta = cluster.tile("cta", 2, cuda_cta_in_cluster).select_cta_warps(4, 12).tile("wg", 2, cuda_warpgroup)
    assert per_cta.threads({"cta": 1, "wg": 1}) == [(640, 768)]
    numbered = cluster.tile("cta", 2, cuda_cta_in_cluster).select_cta_warps(4, 12).select_warps(1, 2)
    assert numbered.threads({"cta": 0}) == [(160, 192)]
    with pytest.raises(CollectiveError, match="whole CTAs"):
        cluster.tile("w", 4, cuda_warp).select_cta_warps(0, 1)
    with pytest.raises(CollectiveError, match="only 12 warps"):
        cluster.select_cta_warps(0, 13)


def test_unit_typing_unitary_and_agnostic():
    per_cta_lane = unit_typing(LANE_OF_EACH_WARP, blockDim=64, clusterDim=2)
    assert per_cta_lane == CollType((2, 2, 32), (1, 2, 1))
    agnostic = unit_typing(LANE_OF_EACH_WARP, blockDim=64, clusterDim=2, agnostic=True)
    assert agnostic == CollType((2, 2, 32), (None, 2, 1))
    lane5_both_ctas = {5, 37, 69, 101}
    assert agnostic.matches(lane5_both_ctas) and not per_cta_lane.matches(lane5_both_ctas)
    assert per_cta_lane.matches({69, 101})
    assert unit_typing(cuda_warp, 128, 1) == CollType((4, 32), (1, 32))
    with pytest.raises(CollectiveError, match="exceeds"):
        unit_typing(cuda_warpgroup, 64, 1)
    with pytest.raises(CollectiveError, match="whole number"):
        unit_typing(CollUnit((blockDim / 64, 64), (1, 64)), 96, 1)


def test_tiling_errors_name_the_problem():
    cta = CollTiling.top(128)
    with pytest.raises(CollectiveError, match="whole warps"):
        cta.tile("h", 8, 16 * cuda_thread).select_warps(0, 1)
    with pytest.raises(CollectiveError, match="outside the 4 warps"):
        cta.select_warps(2, 5)
    half_lanes = cta.tile("h", 2, 16 * LANE_OF_EACH_WARP)
    assert half_lanes.threads({"h": 1}) == [(16, 32), (48, 64), (80, 96), (112, 128)]
    with pytest.raises(CollectiveError, match="not made of whole 2 \\* cuda_warp"):
        half_lanes.tile("w", 1, 2 * cuda_warp)
    with pytest.raises(CollectiveError, match="count must be a positive"):
        cta.tile("z", 0, cuda_warp)
    with pytest.raises(ValueError, match="already used"):
        cta.tile("i", 2, cuda_warp).tile("i", 2, cuda_thread)


def test_completion_splits_only_where_the_ops_allow():
    # 4 x 16 threads inside a pair of warps: the quarters of the pair cross the warp boundary.
    quarters = CollTiling.top(128).tile("p", 2, 2 * cuda_warp).tile("q", 4, 16 * cuda_thread)
    with pytest.raises(CollectiveError, match="pitch 32"):
        quarters.completed({32})
    assert collectives(quarters.completed({16, 64})) == collectives(quarters)
    assert not quarters.matches(cuda_warp)
    # 2 x 16 threads stay in the first warp of the pair: splitting at 32 pins that warp.
    halves = CollTiling.top(128).tile("p", 2, 2 * cuda_warp).tile("h", 2, 16 * cuda_thread)
    split = halves.canonical().completed({32})
    assert split.domain == (4, 32)
    assert [op.iter for op in split.dims[0].ops] == ["p", None]
    assert collectives(split) == collectives(halves)


def test_units_print_and_scale():
    assert 32 * cuda_thread == cuda_warp and 4 * cuda_warp == cuda_warpgroup
    assert str(cuda_warp) == "cuda_warp" and str(16 * cuda_thread) == "16 * cuda_thread"
    assert str(256 * cuda_thread) == "2 * cuda_warpgroup"
    assert str(2 * cuda_cta_in_cluster) == "2 * cuda_cta_in_cluster"
    assert str(2 * WARP_OF_EACH_CTA) == "CollUnit((clusterDim, blockDim / 32, 32), (clusterDim, 2, 32))"
    assert 1 * cuda_cluster == cuda_cluster
    for bad in (0, -2, 1.5, True):
        with pytest.raises(TypeError, match="positive int"):
            bad * cuda_thread
    with pytest.raises(TypeError):
        blockDim / (blockDim * clusterDim)
    assert hash(CollUnit((clusterDim * blockDim,), (32,))) == hash(cuda_warp)


def test_to_json_is_plain_data():
    import json

    tiling = CollTiling.top(256, 2).tile("cta", 2, cuda_cta_in_cluster).tile("w", 8, cuda_warp)
    data = json.loads(json.dumps(tiling.to_json()))
    assert data["domain"] == [16, 32] and data["box"] == [1, 32] and data["threadCount"] == 32
    ops = [op for dim in data["dims"] for op in dim["ops"]]
    assert [(op["iter"], op["tileCount"], op["treeDepth"], op["threadPitch"]) for op in ops] == [
        ("cta", 2, 0, 256),
        ("w", 8, 1, 32),
    ]


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

BASE_UNITS = [cuda_thread, cuda_warp, cuda_warpgroup, cuda_cta_in_cluster, WARP_OF_EACH_CTA, LANE_OF_EACH_WARP]


ALL_UNITS = [k * base for base in BASE_UNITS for k in (1, 2, 3, 4, 8)]


def units() -> st.SearchStrategy[CollUnit]:
    return st.sampled_from(ALL_UNITS)


def unit_threads(unit: CollUnit, tiling: CollTiling) -> int | None:
    try:
        return unit_typing(unit, tiling.blockDim, tiling.clusterDim).thread_count
    except CollectiveError:
        return None


@st.composite
def tiling_steps(draw) -> tuple[CollTiling, list[tuple[CollTiling, CollTiling, str, CollUnit | None]]]:
    """A random tiling, plus each successful step as (parent, child, iterator or '', unit)."""
    tiling = CollTiling.top(draw(st.sampled_from([64, 128, 256])), draw(st.sampled_from([1, 2, 4])))
    steps = []
    for i in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["tile", "tile", "tile", "warps", "cta_warps"]))
        try:
            if kind == "tile":
                fitting = [u for u in ALL_UNITS if (unit_threads(u, tiling) or math.inf) <= tiling.thread_count]
                unit = draw(st.sampled_from(fitting))
                count = draw(st.integers(1, tiling.thread_count // unit_threads(unit, tiling)))
                child, name = tiling.tile(f"i{i}", count, unit), f"i{i}"
            elif kind == "warps":
                lo = draw(st.integers(0, 7))
                child, name, unit = tiling.select_warps(lo, draw(st.integers(lo + 1, 8))), "", None
            else:
                lo = draw(st.integers(0, 3))
                child, name, unit = tiling.select_cta_warps(lo, draw(st.integers(lo + 1, 4))), "", None
        except CollectiveError:
            continue
        steps.append((tiling, child, name, unit))
        tiling = child
    return tiling, steps


@SETTINGS
@given(tiling_steps())
def test_tilings_partition_their_parent(case):
    _, steps = case
    for parent, child, name, unit in steps:
        for sigma, parent_threads in collectives(parent):
            counts = dict(child.iters)
            pieces = [thread_set(child.threads({**sigma, name: v})) for v in range(counts.get(name, 1))]
            assert all(piece <= parent_threads for piece in pieces)
            assert sum(len(p) for p in pieces) == len(set().union(*pieces)), "iterations overlap"
            assert all(len(p) == child.thread_count for p in pieces)
        if unit is not None:
            assert child.matches(unit)


@SETTINGS
@given(tiling_steps())
def test_iter_values_of_inverts_threads(case):
    tiling, _ = case
    owner: dict[int, dict[str, int]] = {}
    for sigma, threads in collectives(tiling):
        for t in threads:
            assert t not in owner
            owner[t] = sigma
    for t in range(tiling.blockDim * tiling.clusterDim):
        assert tiling.iter_values_of(t) == owner.get(t)


@SETTINGS
@given(tiling_steps(), st.data())
def test_domain_completion_preserves_thread_sets(case, data):
    tiling, _ = case
    expected = collectives(tiling)
    n = tiling.blockDim * tiling.clusterDim
    divisors = [p for p in range(1, n + 1) if n % p == 0]
    pitches = data.draw(st.sets(st.sampled_from(divisors), max_size=3))
    assert collectives(tiling.canonical()) == expected
    try:
        completed = tiling.completed(pitches)
    except CollectiveError:
        return
    assert set(pitches) <= set(completed.pitches)
    assert collectives(completed) == expected


@SETTINGS
@given(tiling_steps(), units())
def test_matches_agrees_with_brute_force(case, unit):
    tiling, _ = case
    try:
        ctype = unit_typing(unit, tiling.blockDim, tiling.clusterDim)
    except CollectiveError:
        assert not tiling.matches(unit)
        return
    expected = all(ctype.matches(threads) for _, threads in collectives(tiling))
    assert tiling.matches(unit) == expected
    if expected:
        completed_tiling, completed_type = domain_completion(tiling, unit)
        assert completed_tiling.domain == completed_type.domain


@SETTINGS
@given(units(), st.sampled_from([1, 2, 3, 4, 8]), st.sampled_from([64, 128, 256, 512]), st.sampled_from([1, 2, 4]))
def test_scaled_unit_typing_scales_thread_count(unit, k, block, cluster):
    try:
        scaled = unit_typing(k * unit, block, cluster)
    except CollectiveError:
        return
    base = unit_typing(unit, block, cluster)
    assert scaled.thread_count == k * base.thread_count
    assert scaled.is_aligned and math.prod(scaled.domain) == block * cluster


sizes = st.builds(
    CollSizeExpr,
    st.builds(Fraction, st.integers(1, 64), st.sampled_from([1, 2, 32])),
    st.integers(1, 2),
    st.integers(0, 2),
) | st.integers(1, 64)


@SETTINGS
@given(st.lists(st.tuples(sizes, sizes | st.none()), min_size=1, max_size=3) | units())
def test_str_round_trips_through_eval(spec):
    unit = spec if isinstance(spec, CollUnit) else CollUnit(tuple(d for d, _ in spec), tuple(b for _, b in spec))
    assert eval(str(unit), dict(EVAL_NAMESPACE)) == unit


@st.composite
def small_types(draw) -> CollType:
    domain = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    box = tuple(draw(st.sampled_from([1, d, None])) for d in domain)
    return CollType(domain, box)


@SETTINGS
@given(small_types(), st.data())
def test_type_matching_follows_the_definition(ctype, data):
    n = math.prod(ctype.domain)
    if data.draw(st.booleans()):
        mu = data.draw(st.sets(st.integers(0, n - 1)))
    else:
        chosen = [data.draw(st.sets(st.integers(0, d - 1), min_size=1)) for d in ctype.domain]
        mu = {sum(c * p for c, p in zip(v, ctype.pitches)) for v in itertools.product(*chosen)}

    def allowed(d, b):
        subsets = [set(s) for r in range(1, d + 1) for s in itertools.combinations(range(d), r)]
        return [s for s in subsets if b is None or (b != 1 or len(s) == 1) and (b != d or len(s) == d)]

    by_definition = any(
        mu == {sum(c * p for c, p in zip(v, ctype.pitches)) for v in itertools.product(*cs)}
        for cs in itertools.product(*(allowed(d, b) for d, b in zip(ctype.domain, ctype.box)))
    )
    assert ctype.matches(mu) == by_definition
    pitches = data.draw(st.sets(st.sampled_from([p for p in range(1, n + 1) if n % p == 0]), max_size=2))
    try:
        completed = ctype.completed(pitches)
    except ValueError:
        return
    assert completed.matches(mu) == by_definition


def test_nested_warp_selections_compose_before_matching():
    """Warps [0, 5) then [0, 4) of those are warps [0, 4): a warpgroup of the cluster (found by hypothesis)."""
    tiling = CollTiling.top(64, 4).select_warps(0, 5).select_warps(0, 4)
    assert tiling.matches(cuda_warpgroup)
    assert not CollTiling.top(64, 4).select_warps(0, 5).select_warps(1, 5).matches(cuda_warpgroup)
