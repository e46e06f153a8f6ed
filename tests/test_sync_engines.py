"""The compiled engine against the Python interpreter (the reference): same verdict, same hazards, same timeline.

Every proc of procs_sync.py and of the sync examples is translated (none may
fall back to the interpreter) and run by both engines. The compiled run's raw
hazards (kind, buffer ordinal, element, in order) must equal the
interpreter's first run; for hazard-free programs the whole report must be
equal, barrier timeline included.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import procs_sync as P
import pytest

from spork_lab.analysis import analyze
from spork_lab.errors import SporkError, SyncError
from spork_lab.sync import engine as E
from spork_lab.sync.checker import _Machine, sync_check
from spork_lab.sync.threads import ThreadMap

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

_KINDS = ("RAW", "WAR", "WAW", "FREE", "DEADLOCK", "COUNT")

CASES = [
    (P.reverse_tiles, {"n": 768}),
    (P.reverse_tiles_no_fence1, {"n": 512}),
    (P.reverse_tiles_no_fence2, {"n": 512}),
    (P.reverse_tiles_shared_tile, {"n": 512}),
    (P.cp_async_double_buffer, {"n": 640}),
    (P.cp_async_double_buffer_no_await, {"n": 512}),
    (P.cp_async_cross_thread, {"n": 128}),
    (P.ring_copy, {"n": 256}),
    (P.ring_copy_no_forward, {"n": 256}),
    (P.ring_copy_no_reverse, {"n": 256}),
    (P.ring_copy_lag3, {"n": 256}),
    (P.ring_copy_deadlock, {"n": 128}),
    (P.warp_sums, {}),
    (P.warp_sums_no_fence, {}),
] + [
    (getattr(importlib.import_module(module), name), sizes)
    for module, name, sizes in [
        ("sync_ring", "ring_copy", {"n": 512}),
        ("reverse_tiles", "reverse_tiles", {"n": 1024}),
        ("block_reduce", "block_reduce", {"n": 768}),
        ("warp_specialized_copy", "warp_specialized_copy", {"n": 1024}),
        ("cp_async_double_buffer", "cp_async_double_buffer", {"n": 2048}),
        ("mbarrier_ring_tasks", "mbarrier_ring_tasks", {"n": 768}),
        ("event_two_stage", "event_two_stage", {"n": 512}),
        ("dist_gemm", "dist_register_tile", {"M": 128, "N": 128, "K": 2}),
        ("dist_gemm", "dist_mma_cta", {"M": 64, "N": 64, "K": 16}),
    ]
]


def _ids(case):
    p, sizes = case
    return f"{p.name()}-{'-'.join(map(str, sizes.values()))}"


def _both(p, sizes):
    ir = p._loopir_proc
    infos, tmap = analyze(ir).barriers, ThreadMap(ir)
    compiled = E.engine_for(ir, infos, tmap)
    assert isinstance(compiled, E.Engine), f"not compiled: {compiled}"
    run = compiled.run(sizes, 50, 100000)
    reference = _Machine(ir, sizes, infos, tmap, watch=None, max_hazards=50)
    reference.run()
    return run, reference


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_engines_agree(case):
    p, sizes = case
    run, reference = _both(p, sizes)
    assert run.status in (E.SC_OK, E.SC_FULL)
    assert [_KINDS[k] for k, _, _, _ in run.hazards] == [h.kind for h in reference.hazards]
    assert [(o, e) for _, o, e, _ in run.hazards if o >= 0] == reference.hazard_elements
    compiled = sync_check(p, **sizes)
    python = sync_check(p, engine="python", **sizes)
    assert compiled.to_json() == python.to_json()


def test_the_cases_cover_both_verdicts():
    verdicts = {bool(_both(p, sizes)[0].hazards) for p, sizes in CASES}
    assert verdicts == {True, False}


def test_first_hazard_of_a_failing_ring_is_found_by_the_compiled_run():
    run, _ = _both(P.ring_copy_no_reverse, {"n": 256})
    kind, ordinal, element, _ = run.hazards[0]
    assert (_KINDS[kind], ordinal, element) == ("WAR", 2, 0)  # buf (after src, dst), element [0, 0]


def test_mbarrier_thread_errors_come_from_the_interpreter():
    with pytest.raises(SyncError, match="same threads"):
        sync_check(P.err_mbarrier_other_threads, n=1)


def test_timeline_is_capped_and_says_so():
    report = sync_check(P.ring_copy, n=256, max_events=5)
    assert len(report.barrier_timeline) == 5 and report.timeline_truncated
    assert report.to_json()["timeline_truncated"] is True
    assert not sync_check(P.ring_copy, n=256).timeline_truncated


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(E, "_compiler", None)
    monkeypatch.setenv("CC", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SporkError, match="gcc"):
        E._build("sc_test", "int x;", [])


def test_compiled_checker_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path))
    first = E._build("sc_test", "int answer(void) { return 42; }", [])
    assert first.parent == tmp_path / "sync" and first.exists()
    mtime = first.stat().st_mtime_ns
    assert E._build("sc_test", "int answer(void) { return 42; }", []) == first and first.stat().st_mtime_ns == mtime
