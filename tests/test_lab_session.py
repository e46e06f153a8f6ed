"""Workbench session: history, undo, failed steps, script replay, and the data behind each view."""

from __future__ import annotations

import runpy
from types import SimpleNamespace

import pytest
from conftest import ir_equal

from spork_lab import proc
from spork_lab.lab import Workbench, _results
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *


@proc
def seq_reverse(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    for task in seq(0, n / 256):
        tile: f32[256]
        for tid in seq(0, 256):
            tile[tid] = x[task * 256 + tid]
        for tid in seq(0, 256):
            y[task * 256 + tid] = tile[255 - tid]


@proc
def warp_halves(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            with CudaWarps(2, 4):
                for w in cuda_threads(0, 2, unit=cuda_warp):
                    for l in cuda_threads(0, 16):
                        x[task * 256 + w * 16 + l] = 0.0


def to_kernel(wb: Workbench, fences: bool = True) -> None:
    """The tutorial's steps: device function, tasks, threads, shared memory, fences."""
    wb.apply(wrap_with_context, wb.proc.find_loop("task"), CudaDeviceFunction(blockDim=256))
    wb.apply(set_loop_mode, wb.proc.find_loop("task"), cuda_tasks)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid"), cuda_threads)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid #1"), cuda_threads)
    wb.apply(set_memory, "tile", CudaSmemLinear)
    if fences:
        wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
        wb.apply(insert_fence, wb.proc.find_loop("tid #1").after(), cuda_in_order, cuda_in_order)


def test_steps_are_recorded_with_source_text_and_diff():
    wb = Workbench(seq_reverse, sizes={"n": 512})
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    (step,) = wb.steps
    assert step.call == "divide_loop(p, 'tid', 32, ['w', 'l'], perfect=True)"
    assert step.proc is wb.proc and wb.proc is not seq_reverse
    assert any(d.startswith("+") and "for w in seq(0, 8)" in d for d in step.diff)
    assert wb.state["data"]["steps"][0]["added"] == 3


def test_undo_restores_previous_proc_and_stops_at_initial():
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    first = wb.proc
    wb.apply(reorder_loops, "w l")
    wb.undo()
    assert wb.proc is first
    wb.undo()
    wb.undo()
    assert wb.proc is seq_reverse and wb.steps == []


def test_failed_step_shows_error_and_keeps_session():
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    before, n_steps = wb.proc, len(wb.steps)
    wb.apply(divide_loop, "no_such_loop", 4, ["a", "b"])
    assert wb.proc is before and len(wb.steps) == n_steps
    assert wb.error["kind"] == "SchedulingError" and "no_such_loop" in wb.error["call"]
    assert "no_such_loop" in wb.state["views"]["header"] and "session is unchanged" in wb.state["views"]["header"]
    wb.apply(reorder_loops, "w l")
    assert wb.error is None and "sl-step-error" not in wb.state["views"]["header"]


def test_script_replays_to_the_same_proc(tmp_path):
    wb = Workbench(seq_reverse, sizes={"n": 512})
    to_kernel(wb)
    wb.apply(divide_loop, wb.proc.find_loop("tid"), 32, ["w", "l"], perfect=True)
    wb.apply(set_loop_mode, wb.proc.find_loop("w"), cuda_threads(unit=cuda_warp))
    path = tmp_path / "replay.py"
    path.write_text(wb.script())
    replayed = runpy.run_path(str(path))["p"]
    assert str(replayed) == str(wb.proc)
    assert ir_equal(replayed.INTERNAL_proc().body, wb.proc.INTERNAL_proc().body)


def test_cursor_arguments_are_recorded_as_users_write_them():
    wb = Workbench(seq_reverse)
    wb.apply(insert_fence, seq_reverse.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
    assert wb.steps[0].args[0] == "p.find_loop('tid #1').before()"
    wb.apply(insert_fence, wb.proc.find_loop("task").body()[2].after(), cuda_in_order, cuda_in_order)
    assert wb.steps[1].args[0] == "p.body()[0].body()[2].after()"  # a Fence: no pattern names it
    wb.apply(set_memory, "tile", CudaSmemLinear)
    assert wb.steps[2].args[0] == "'tile'"


def test_analysis_error_marks_its_lines_and_kernel_has_tiling():
    wb = Workbench(seq_reverse, sizes={"n": 512})
    data = wb.state["data"]
    assert data["analysis"]["state"] == "error" and data["tiling"] is None
    marked = [n for n, line in enumerate(data["lines"]) if any(m["kind"] == "error" for m in line["marks"])]
    assert marked and "tile[tid] = x[task * 256 + tid]" in data["lines"][marked[0]]["text"]
    to_kernel(wb)
    data = wb.state["data"]
    assert data["analysis"]["state"] == "ok"
    grid = data["tiling"]
    assert grid["threads"] == 256 and grid["collectives"] == 256 and grid["active"] == 256
    assert len(grid["cells"]) == 256 and grid["cells"][37]["values"] == {"tid": 37}


def test_selection_shows_idle_threads():
    wb = Workbench(warp_halves)
    wb.select("x[_] = _")
    grid = wb.state["data"]["tiling"]
    active = [c["thread"] for c in grid["cells"] if c["values"] is not None]
    # warps 2 and 3 of the CTA, 16 threads of each
    assert active == list(range(64, 80)) + list(range(96, 112))
    assert grid["cells"][97]["values"] == {"w": 1, "l": 1} and grid["collectives"] == 32
    assert "thread 0: idle" in wb.state["views"]["tiling"]
    (for_w,) = [line["stmt"] for line in wb.state["data"]["lines"] if "for w in" in line["text"]]
    wb.widget.selected = for_w  # what clicking the line does: the loop runs in the scope of CudaWarps(2, 4)
    grid = wb.state["data"]["tiling"]
    assert grid["collectives"] == 1 and grid["active"] == 64


def test_hazards_from_the_checker_become_cards_and_line_marks(monkeypatch):
    hazard = SimpleNamespace(
        to_json=lambda: {
            "kind": "RAW",
            "buffer": "tile",
            "first": {"path": [0, 0, 1, 0], "line": 1},
            "second": {"path": [0, 0, 2, 0], "line": 2},
        }
    )

    def fake_check(p, **sizes):
        fenced = "Fence" in str(p)
        return SimpleNamespace(ok=fenced, hazards=[] if fenced else [hazard], engine="compiled", engine_note="")

    monkeypatch.setattr(_results, "sync_check", fake_check)
    wb = Workbench(seq_reverse, sizes={"n": 512})
    to_kernel(wb, fences=False)
    (card,) = wb.state["data"]["hazards"]
    texts = [wb.state["data"]["lines"][n]["text"].strip() for n in card["lines"]]
    assert texts == ["tile[tid] = x[task * 256 + tid]", "y[task * 256 + tid] = tile[255 - tid]"]
    assert 'class="sl-hazard"' in wb.state["views"]["hazards"] and "Hazards (1)" in str(wb.state["tabs"])
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
    assert wb.state["data"]["hazards"] == [] and "no hazards found at n=512" in wb.state["views"]["header"]


def test_missing_sizes_say_not_checked(monkeypatch):
    never = lambda p, **s: pytest.fail("sync_check must not run without sizes")  # noqa: E731
    monkeypatch.setattr(_results, "sync_check", never)
    wb = Workbench(warp_halves)
    assert "give sizes for n" in wb.state["data"]["check"]["message"]


def test_real_checker_finds_the_missing_fence_and_clears_after_fences():
    wb = Workbench(seq_reverse, sizes={"n": 512})
    to_kernel(wb, fences=False)
    cards = wb.state["data"]["hazards"]
    assert cards and cards[0]["kind"] == "RAW"
    texts = {wb.state["data"]["lines"][n]["text"].strip() for n in cards[0]["lines"]}
    assert texts == {"tile[tid] = x[task * 256 + tid]", "y[task * 256 + tid] = tile[255 - tid]"}
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").after(), cuda_in_order, cuda_in_order)
    assert wb.check.value.ok and wb.state["data"]["hazards"] == []


@proc
def two_rounds(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear
            for r in seq(0, 2):
                for tid in cuda_threads(0, 256):
                    tile[tid] = x[task * 256 + tid]
                Fence(cuda_in_order, cuda_in_order)
                for tid in cuda_threads(0, 256):
                    y[task * 256 + tid] = tile[255 - tid]
                Fence(cuda_in_order, cuda_in_order)


def test_hazards_mark_the_scheduled_statement_not_every_copy_of_its_source_line():
    from spork_lab.sync.mutants import without_syncs

    unrolled = unroll_loop(two_rounds, "r")
    broken = without_syncs(unrolled, [2])  # the second round's first Fence
    wb = Workbench(broken, sizes={"n": 512})
    (card,) = wb.state["data"]["hazards"]
    lines = wb.state["data"]["lines"]
    texts = [lines[n]["text"].strip() for n in sorted(card["lines"])]
    assert card["kind"] == "RAW" and texts == ["tile[tid] = x[task * 256 + tid]", "y[task * 256 + tid] = tile[255 - tid]"]
    writes = [n for n, line in enumerate(lines) if line["text"].strip() == "tile[tid] = x[task * 256 + tid]"]
    assert len(writes) == 2 and min(card["lines"]) == writes[1]  # the second copy only
    hazard = wb.check.value.hazards[0]
    assert hazard.access.stmt.path != hazard.other.stmt.path and hazard.access.stmt.line == hazard.other.stmt.line + 3
