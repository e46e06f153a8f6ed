"""Workbench session: history, undo, failed steps, snapshots, script replay, and the data behind each view."""

from __future__ import annotations

import runpy
import threading
import time
from pathlib import Path

import pytest
from conftest import ir_equal
from stepwise_gemm import gemm

from spork_lab import SporkError, SporkSchedulingError, SporkTypeError, SyncError, proc
from spork_lab.lab import Workbench
from spork_lab.lab._results import Background, Interrupted
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *
from spork_lab.sync.checker import sync_check


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


def to_kernel(wb: Workbench, fences: bool = True) -> Workbench:
    """The first tutorial's steps: device function, tasks, threads, shared memory, fences."""
    wb.apply(wrap_with_context, wb.proc.find_loop("task"), CudaDeviceFunction(blockDim=256))
    wb.apply(set_loop_mode, wb.proc.find_loop("task"), cuda_tasks)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid"), cuda_threads)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid #1"), cuda_threads)
    wb.apply(set_memory, "tile", CudaSmemLinear)
    if fences:
        wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
        wb.apply(insert_fence, wb.proc.find_loop("tid #1").after(), cuda_in_order, cuda_in_order)
    return wb


def tiled_gemm(staged: bool) -> Workbench:
    """examples/stepwise_gemm.py up to its thread tiling (step 3) or to the staged copies without Fences (step 6)."""
    wb = Workbench(gemm, sizes={"M": 64, "N": 64, "K": 32})
    wb.apply(divide_loop, "i", 64, ["mt", "mi"], perfect=True)
    wb.apply(divide_loop, "j", 64, ["nt", "nj"], perfect=True)
    wb.apply(reorder_loops, "mi nt")
    wb.apply(wrap_with_context, wb.proc.find_loop("mt"), CudaDeviceFunction(blockDim=256))
    wb.apply(set_loop_mode, "mt", cuda_tasks)
    wb.apply(set_loop_mode, "nt", cuda_tasks)
    wb.apply(divide_loop, "mi", 4, ["ti", "ri"], perfect=True)
    wb.apply(divide_loop, "nj", 4, ["tj", "rj"], perfect=True)
    wb.apply(reorder_loops, "ri tj")
    wb.apply(set_loop_mode, "ti", cuda_threads(unit=16 * cuda_thread))
    wb.apply(set_loop_mode, "tj", cuda_threads)
    if staged:
        wb.apply(divide_loop, "k", 16, ["ko", "ki"], perfect=True)
        for pair in ("rj ko", "ri ko", "tj ko", "ti ko"):
            wb.apply(reorder_loops, pair)
        wb.apply(stage_mem, wb.proc.find_loop("ti"), "A[64 * mt:64 * mt + 64, 16 * ko:16 * ko + 16]", "A_s")
        wb.apply(simplify)
        wb.apply(set_memory, "A_s", CudaSmemLinear)
        wb.apply(divide_loop, "i0", 16, ["r0", "ry"], perfect=True)
        wb.apply(set_loop_mode, "ry", cuda_threads(unit=16 * cuda_thread))
        wb.apply(set_loop_mode, "i1", cuda_threads)
    return wb


def test_steps_are_recorded_with_source_text_and_diff():
    wb = Workbench(seq_reverse, sizes={"n": 512})
    assert wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True) is wb  # a cell ending in apply shows the step
    (step,) = wb.steps
    assert step.call == "divide_loop(p, 'tid', 32, ['w', 'l'], perfect=True)"
    assert step.proc is wb.proc and wb.proc is not seq_reverse
    assert any(d.startswith("+") and "for w in seq(0, 8)" in d for d in step.diff)
    assert wb.state["data"]["steps"][0]["added"] == 3
    # each change with a line of context either side, unchanged (re-indented lines count as unchanged)
    (header, before, *change, after) = step.diff
    assert header.startswith("@@ ") and before.startswith(" ") and after.startswith(" ") and before.strip() and after.strip()
    assert all(d[0] in "+-" for d in change)


def test_undo_restores_previous_proc_and_stops_at_initial():
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    first = wb.proc
    wb.apply(reorder_loops, "w l")
    wb.undo()
    assert wb.proc is first
    wb.undo().undo()
    assert wb.proc is seq_reverse and wb.steps == []


def test_sizes_the_check_refuses_are_said_without_a_place_from_the_checks_thread():
    """The check runs in a worker thread, whose only frames are Python's: the refusal named threading.py."""
    from reverse_tiles import reverse_tiles

    wb = Workbench(reverse_tiles, sizes={"n": 100})
    assert wb.check.state == "unavailable"  # the sizes are wrong, not the program: no red "failed"
    message = wb.check.message
    assert message.startswith("not checked: the sizes {'n': 100} violate the assertion "
                              "`n % 256 == 0` of reverse_tiles (line "), message
    line = next(n + 1 for n, line in enumerate(wb.state["data"]["lines"]) if line["text"].strip().startswith("assert"))
    assert f"(line {line}): choose sizes" in message  # the line as the Code view numbers it, not the file's


@pytest.fixture
def notebook_cell(monkeypatch):
    """Applies made as from a notebook cell: set `cell[:] = [id, execution count]` for each run of a cell."""
    from spork_lab.lab import _session

    cell = ["c1", 1]
    monkeypatch.setattr(_session, "running_cell", lambda: tuple(cell))
    monkeypatch.setattr(_session, "after_this_cell", lambda callback: None)  # no IPython to call it: tested below
    return cell


def test_a_failed_step_no_picture_showed_is_printed_when_its_cell_ends(notebook_cell, monkeypatch, capsys):
    """A cell that failed a step and did not end with the workbench (it printed, or ended with `;`) said nothing:
    the steps after the failed one were skipped silently."""
    from spork_lab.lab import _session

    cell_ends = []
    monkeypatch.setattr(_session, "after_this_cell", cell_ends.append)
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tidd", 4, ["a", "b"])
    wb.apply(reorder_loops, "w l")
    assert len(cell_ends) == 1
    cell_ends.pop()()
    printed = capsys.readouterr().err
    assert printed.startswith("SporkSchedulingError: ") and "divide_loop: no loop matches 'tidd'" in printed
    assert printed.endswith("The workbench stays at step 0. Not run after it in this cell: reorder_loops(...).\n")
    notebook_cell[:] = ["c2", 2]  # a cell that ends with the workbench: its picture shows the error, nothing printed
    wb.apply(divide_loop, "tidd", 4, ["a", "b"])
    assert "sl-step-error" in wb.view().header
    cell_ends.pop()()
    assert capsys.readouterr().err == ""


def test_a_picture_in_a_later_cell_shows_no_failed_step_of_an_earlier_cell(notebook_cell):
    """`wb` displayed in a later cell drew the red error of a step an earlier cell failed, as if this cell failed."""
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tidd", 4, ["a", "b"])
    assert "sl-step-error" in wb.view().header
    notebook_cell[:] = ["c2", 2]
    later = wb.view()
    assert "sl-step-error" not in later.header and later.data["error"] is None


def test_calls_after_a_failed_one_in_the_same_run_of_a_cell_are_not_run(notebook_cell):
    """A failed call used to be forgotten when the cell's next call ran (on the unchanged proc) and failed or
    passed: its error vanished."""
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    wb.apply(divide_loop, "tidd", 4, ["a", "b"])
    wb.apply(reorder_loops, "w l")
    assert len(wb.steps) == 1 and "tidd" in wb.error["call"] and wb.error["skipped"] == ["reorder_loops(...)"]
    assert "Not run after it in this cell: reorder_loops(...)." in wb.state["views"]["header"]
    notebook_cell[:] = ["c2", 2]  # the next cell runs as usual
    wb.apply(reorder_loops, "w l")
    assert len(wb.steps) == 2 and wb.error is None


def test_a_cell_run_again_replaces_its_steps_and_those_after_them(notebook_cell):
    """Running a cell again used to apply its steps a second time (duplicate Fences, silently)."""
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    notebook_cell[:] = ["c2", 2]
    wb.apply(reorder_loops, "w l")
    wb.apply(set_loop_mode, "l", cuda_threads)
    notebook_cell[:] = ["c2", 3]  # c2 again: its two steps are replaced
    wb.apply(reorder_loops, "w l")
    assert [s.op.__name__ for s in wb.steps] == ["divide_loop", "reorder_loops"]
    assert "running this cell again replaced steps 2 to 3." in wb.state["views"]["header"]
    notebook_cell[:] = ["c1", 4]  # c1 again: its step and the one of the later cell c2 go
    wb.apply(divide_loop, "tid", 64, ["w", "l"], perfect=True)
    assert len(wb.steps) == 1 and "64" in wb.steps[0].call
    assert wb.replaced["text"] == "running this cell again replaced steps 1 to 2, 1 of them from later cells: run those again"
    notebook_cell[:] = ["c3", 5]
    wb.apply(reorder_loops, "w l")
    assert wb.replaced is None and "sl-step-notice" not in wb.state["views"]["header"]


def test_a_picture_of_a_replaced_step_keeps_its_step_and_says_so(notebook_cell):
    """Running an earlier cell again turned every later picture into a picture of an older step (with that step's
    errors), and said nothing; a picture whose step remains gained the new steps in its header but not its tab."""
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    first = wb.view()
    notebook_cell[:] = ["c2", 2]
    wb.apply(reorder_loops, "w l")
    notebook_cell[:] = ["c3", 3]
    wb.apply(set_loop_mode, "l", cuda_threads)
    later = wb.view()
    drawn = later.data["lines"]
    assert first.labels == {"steps": "Steps (3)"} and "step 1 of 3" in first.header  # the live picture follows
    first.view = "steps"  # its Steps tab lists the new steps when opened
    assert first.data["steps"] == [s.to_json() for s in wb.steps] and "Steps (3)" in str(first.state["tabs"])
    notebook_cell[:] = ["c2", 4]  # c2 again: steps 2 and 3 are replaced
    wb.apply(reorder_loops, "w l")
    assert later.step == 3 and later.data["lines"] == drawn and "step 3 of 3" in later.header
    assert "this picture shows steps the session no longer has" in later.header
    later.selected = 0  # a click still draws the picture's own proc
    assert later.data["lines"] == drawn and "sl-step-notice" in later.state["views"]["header"]
    assert first.labels == {"steps": "Steps (2)"} and "step 1 of 2" in first.header and "no longer" not in first.header


def test_failed_step_is_shown_at_the_users_line_and_keeps_the_session():
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    before, n_steps = wb.proc, len(wb.steps)
    line = __import__("inspect").currentframe().f_lineno + 1
    wb.apply(divide_loop, "tidd", 4, ["a", "b"])
    assert wb.proc is before and len(wb.steps) == n_steps
    assert wb.error["kind"] == "SporkSchedulingError" and "tidd" in wb.error["call"]
    assert "no loop matches 'tidd'" in wb.error["message"] and "did you mean" in wb.error["message"]
    header = wb.state["views"]["header"]
    assert "tidd" in header and f"stays at step {n_steps}" in header
    assert f"test_lab_session.py:{line}" not in header  # the widget shows the message; the call is named above it
    wb.apply(reorder_loops, "w l")
    assert wb.error is None and "sl-step-error" not in wb.state["views"]["header"]


def test_a_failed_step_outside_a_notebook_warns():
    """In a script no widget shows wb.error: the failure was silent and the script went on from the old proc."""
    from spork_lab.lab import StepFailedWarning

    wb = Workbench(seq_reverse)
    with pytest.warns(StepFailedWarning, match=r"divide_loop\(.*tidd.*\) failed; the workbench stays at step 0: "
                                               r".*test_lab_session.py:\d+: divide_loop: no loop matches 'tidd'"):
        wb.apply(divide_loop, "tidd", 4, ["a", "b"])
    assert wb.error is not None and not wb.steps


def test_a_cursor_of_another_proc_is_a_step_error():
    wb = Workbench(seq_reverse)
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    wb.apply(set_loop_mode, warp_halves.find_loop("w"), "seq")
    assert wb.error["kind"] == "SporkSchedulingError" and "not an earlier step of this workbench" in wb.error["message"]


def test_script_replays_to_the_same_proc(tmp_path):
    wb = to_kernel(Workbench(seq_reverse, sizes={"n": 512}))
    wb.apply(divide_loop, wb.proc.find_loop("tid"), 32, ["w", "l"], perfect=True)
    wb.apply(set_loop_mode, wb.proc.find_loop("w"), cuda_threads(unit=cuda_warp))
    path = tmp_path / "replay.py"
    path.write_text(wb.script())
    assert "import ForCursor" not in wb.script() and "import CudaDeviceFunction" not in wb.script()  # unused, starred
    replayed = runpy.run_path(str(path))["p"]
    assert str(replayed) == str(wb.proc)
    assert ir_equal(replayed.INTERNAL_proc().body, wb.proc.INTERNAL_proc().body)


def test_cursor_arguments_are_recorded_as_people_write_them():
    wb = Workbench(seq_reverse)
    wb.apply(insert_fence, seq_reverse.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
    assert wb.steps[-1].args[0] == "p.find_loop('tid #1').before()"
    fence = wb.proc.find_loop("task").body()[2]  # a sync statement: by its text (exo's patterns cannot name it)
    wb.apply(insert_fence, fence.after(), cuda_in_order, cuda_in_order)
    assert wb.steps[-1].args[0] == "p.find('Fence(cuda_in_order, cuda_in_order)').after()"
    wb.apply(insert_fence, wb.proc.find("Fence(_) #1").after(), cuda_in_order, cuda_in_order)
    assert wb.steps[-1].args[0] == "p.find('Fence(cuda_in_order, cuda_in_order) #1').after()"
    wb.apply(set_memory, "tile", CudaSmemLinear)
    assert wb.steps[-1].args[0] == "'tile'"
    wb.apply(lift_alloc, wb.proc.find("tile : _"))
    assert wb.steps[-1].args[0] == "p.find('tile : _')"
    wb.apply(insert_fence, wb.proc.find("tile[_] = _").after(), cuda_in_order, cuda_in_order)
    assert wb.steps[-1].args[0] == "p.find('tile[_] = _').after()"
    wb.apply(stage_mem, wb.proc.find_loop("tid").expand(0, 1), "x[256 * task:256 * task + 256]", "xs")
    assert wb.steps[-1].args[0] == "p.find_loop('tid').expand(0, 1)"
    assert wb.error is None and "body()" not in wb.script()


def test_each_display_keeps_its_step_and_can_browse_to_any():
    wb = Workbench(seq_reverse, sizes={"n": 512})
    to_kernel(wb, fences=False)
    broken = wb.view()
    assert broken.step == 5 and broken.data["hazards"]
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").after(), cuda_in_order, cuda_in_order)
    assert broken.data["hazards"] and broken.step == 5  # a later step does not rewrite it
    broken.step = 7  # what the header's ▶ does
    assert broken.data["hazards"] == [] and "step 7 of 7" in broken.state["views"]["header"]
    broken.step = 0
    assert "step 0 of 7" in broken.state["views"]["header"] and broken.data["check"]["state"] == "unavailable"
    data, _ = wb._repr_mimebundle_()
    assert "step 7 of 7" in data["text/plain"] and "step 7 of 7" in data["text/html"]


def test_code_view_marks_the_lines_the_step_changed():
    wb = Workbench(seq_reverse)
    wb.apply(set_loop_mode, "tid", "par")
    changed = [line["text"].strip() for line in wb.state["data"]["lines"] if line["changed"]]
    assert changed == ["for tid in par(0, 256):"]


def test_analysis_error_marks_its_lines_and_kernel_has_tiling():
    wb = Workbench(seq_reverse, sizes={"n": 512})
    data = wb.state["data"]
    assert data["analysis"]["state"] == "error" and data["tiling"] is None
    marked = [n for n, line in enumerate(data["lines"]) if any(m["kind"] == "error" for m in line["marks"])]
    assert marked and "tile[tid] = x[task * 256 + tid]" in data["lines"][marked[0]]["text"]
    # the message names the line as the Code view numbers it, and where the statement was written
    source_line = data["analysis"]["error"]["line"]
    assert data["analysis"]["message"].startswith(f"analysis failed: line {marked[0] + 1}: ")
    assert data["analysis"]["message"].endswith(f"(written at test_lab_session.py:{source_line})") or \
        data["analysis"]["message"].endswith(f"/test_lab_session.py:{source_line})")
    to_kernel(wb)
    grid = wb.state["data"]["tiling"]
    assert wb.state["data"]["analysis"]["state"] == "ok"
    assert grid["threads"] == 256 and grid["collectives"] == 256 and grid["active"] == 256
    assert (grid["rows"], grid["cols"]) == (8, 32)  # one 256-iteration iterator wraps at 32 columns
    assert grid["cells"][37]["values"] == {"tid": 37} and grid["cells"][37]["threads"] == [[37, 38]]


def test_an_error_on_a_line_the_code_view_does_not_show_keeps_its_place():
    """Errors are renumbered as the Code view numbers lines; one about another file's line kept no place at all."""
    from spork_lab.lab._results import Outcome

    error = {"kind": "SyncError", "message": "bad", "file": "/elsewhere/other.py", "line": 999, "where": "other.py:999"}
    outcome = Workbench(seq_reverse).result()._in_code_lines(Outcome("error", "?", error=error), "analysis failed")
    assert outcome.message == "analysis failed: other.py:999: bad"


def test_tiling_is_laid_out_by_the_cuda_threads_iterators():
    wb = tiled_gemm(staged=False)
    grid = wb.state["data"]["tiling"]
    assert grid["iters"] == [["ti", 16], ["tj", 16]] and (grid["rows"], grid["cols"]) == (16, 16)
    cell = next(c for c in grid["cells"] if c["values"] == {"ti": 2, "tj": 5})
    assert (cell["row"], cell["col"], cell["threads"]) == (2, 5, [[37, 38]])
    assert grid["level"] == "warp" and cell["group"] == 1  # thread 37 is in warp 1
    v = wb.view()
    v.level = "iter:ti"  # what the "colour by: unit of ti" button does
    grid = v.data["tiling"]
    assert grid["level"] == "iter:ti" and {c["group"] for c in grid["cells"] if c["values"]["ti"] == 3} == {3}
    assert "colour by:" in v.state["views"]["tiling"] and 'data-set="level:warpgroup"' in v.state["views"]["tiling"]


def test_selecting_a_warp_unit_loop_shows_the_collectives_it_makes():
    wb = Workbench(warp_halves)
    wb.select("x[_] = _")
    grid = wb.state["data"]["tiling"]
    active = [s["thread"] for s in grid["strip"] if s["group"] is not None]
    assert active == list(range(64, 80)) + list(range(96, 112))  # warps 2 and 3 of the CTA, 16 threads of each
    assert grid["collectives"] == 32 and (grid["rows"], grid["cols"]) == (2, 16)
    v = wb.view()
    (for_w,) = [line["stmt"] for line in v.data["lines"] if "for w in" in line["text"]]
    v.selected = for_w  # what clicking the line does
    grid = v.data["tiling"]
    assert grid["collectives"] == 2 and grid["active"] == 64 and grid["level"] == "iter:w"
    assert [c["threads"] for c in grid["cells"]] == [[[64, 96]], [[96, 128]]]


def test_hazards_mark_exactly_the_two_scheduled_statements_with_their_current_text():
    wb = tiled_gemm(staged=True)
    data = wb.state["data"]
    raw = next(c for c in data["hazards"] if c["kind"] == "RAW")
    assert raw["buffer"] == "A_s" and len(raw["stmts"]) == 2
    texts = [t.replace(" ", "") for t in raw["texts"]]
    assert texts[0].startswith("A_s[16*r0+ry,i1]=A[") and texts[1].startswith("C[ri+4*ti+64*mt,")
    marked = {n for n, line in enumerate(data["lines"]) if any(m["kind"] == "hazard" for m in line["marks"])}
    assert marked == {n for c in data["hazards"] for n in c["lines"]}
    assert not any("CudaDeviceFunction" in data["lines"][n]["text"] or "for " in data["lines"][n]["text"] for n in marked)
    # counts agree: header, tab, cards
    n = len(data["hazards"])
    assert f"{n} hazard(s) at M=64" in wb.state["views"]["header"] and f"Hazards ({n})" in str(wb.state["tabs"])
    assert wb.check.message.startswith(f"{n} hazard(s) at M=64")  # printed alone it counts them too
    assert wb.state["views"]["hazards"].count('class="sl-hazard"') == n
    witness = dict((row[0], row[1:]) for row in raw["witness"])
    assert witness["instr-tl"] == ("cuda_in_order_instr", "cuda_in_order_instr")
    assert witness["statement"][0].startswith(f"line {raw['lines'][0] + 1}: A_s[")
    assert "nothing between" in witness["visibility"][1]
    # the Code tab numbers the scheduled proc's lines; the source line each statement comes from is said beside
    h = next(h for h in sync_check(wb.proc, **wb.sizes).hazards if h.kind == "RAW" and h.buffer == "A_s")
    assert witness["source"] == (f"{h.other.stmt.file}:{h.other.stmt.line}", f"{h.access.stmt.file}:{h.access.stmt.line}")
    assert all(Path(place.rsplit(":", 1)[0]).name == "stepwise_gemm.py" for place in witness["source"])


def test_the_hint_is_a_scheduling_call_that_removes_the_hazard():
    wb = tiled_gemm(staged=True)
    raw = next(c for c in wb.state["data"]["hazards"] if c["kind"] == "RAW")
    assert "a CTA-scope Fence(cuda_in_order, cuda_in_order) between line" in raw["hint"]
    call = raw["hint"].rsplit(": ", 1)[1]
    assert call == "wb.apply(insert_fence, wb.proc.find_loop('ti').before(), cuda_in_order, cuda_in_order)"
    free = next(c for c in wb.state["data"]["hazards"] if c["kind"] == "FREE")
    assert f"at the end of A_s's scope, after line {len(wb.state['data']['lines'])}: " in free["hint"]  # ti's loop
    assert free["hint"].endswith("wb.apply(insert_fence, wb.proc.find_loop('ti').after(), cuda_in_order, cuda_in_order)")
    eval(call, {**globals(), "wb": wb})  # noqa: S307 -- the hint is Python the user can paste into a cell
    assert not [c for c in wb.state["data"]["hazards"] if c["kind"] == "RAW"]
    eval(free["hint"].rsplit(": ", 1)[1], {**globals(), "wb": wb})  # noqa: S307
    assert wb.check.value.ok


def test_a_hints_call_names_the_workbench_as_the_notebook_does():
    """The hint said `wb.apply(...)` where the notebook's workbench was `wb1`: pasted, it was a NameError."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        shell.user_ns["wb1"] = tiled_gemm(staged=True)
        shell.run_cell("hints = [c['hint'] for c in wb1.state['data']['hazards']]")
        assert all("wb1.apply(insert_fence, wb1.proc.find_loop(" in h for h in shell.user_ns["hints"])
        n_steps = len(shell.user_ns["wb1"].steps)
        shell.run_cell("from spork_lab.platforms.cuda import *\nfrom spork_lab.scheduling import *")
        shell.run_cell(shell.user_ns["hints"][0].rsplit(": ", 1)[1])  # the hint's call, pasted as is
        assert len(shell.user_ns["wb1"].steps) == n_steps + 1 and "insert_fence" in shell.user_ns["wb1"].steps[-1].call
    finally:
        InteractiveShell.clear_instance()


def test_missing_sizes_say_not_checked(monkeypatch):
    from spork_lab.lab import _results

    monkeypatch.setattr(_results, "sync_check", lambda p, **s: pytest.fail("sync_check must not run without sizes"))
    wb = Workbench(warp_halves)
    assert "give sizes for n" in wb.state["data"]["check"]["message"]


def test_sizes_that_are_not_the_procs_are_refused_when_the_workbench_is_made():
    """A misspelt size was dropped, and the check said "give sizes for n"; sizes=1024 was dict()'s TypeError."""
    line = __import__("inspect").currentframe().f_lineno + 2
    with pytest.raises(SyncError, match="Workbench\\(sizes=...\\): warp_halves has no size 'N'; its sizes are n") as e:
        Workbench(warp_halves, sizes={"N": 1024})
    assert (e.value.filename, e.value.lineno) == (__file__, line)  # the call that is wrong, not the proc
    with pytest.raises(TypeError, match=r"takes a dict of the proc's sizes, e.g. sizes=\{'n': 1024\}, not 1024"):
        Workbench(warp_halves, sizes=1024)


def test_a_size_that_is_not_an_int_is_refused_when_the_workbench_is_made():
    """Was int()'s ValueError from the checker's thread, then the check's error."""
    for value in ("big", 1024.0, True):
        with pytest.raises(TypeError, match=f"Workbench\\(sizes=...\\): n={value!r}, but a size is an int") as e:
            Workbench(warp_halves, sizes={"n": value})
        assert isinstance(e.value, SporkError) and e.value.filename == __file__


def test_misused_session_calls_say_what_to_write():
    """Were an IndexError, an AttributeError, exo's `find: failed to find matches` and a SyntaxError from exo's
    pattern parser, each from inside the workbench or exo."""
    wb = Workbench(seq_reverse)
    line = __import__("inspect").currentframe().f_lineno + 2
    with pytest.raises(IndexError, match="step 3: this workbench has steps 0 to 0") as e:
        wb.proc_at(3)
    assert isinstance(e.value, SporkError) and (e.value.filename, e.value.lineno) == (__file__, line)
    with pytest.raises(TypeError, match=r"apply takes a scheduling operation, as in wb.apply\(divide_loop, ...\), not 'divide_loop'"):
        wb.apply("divide_loop", "tid", 32, ["w", "l"])
    line = __import__("inspect").currentframe().f_lineno + 2
    with pytest.raises(SporkSchedulingError, match="select: no loop matches 'tidd'; did you mean 'tid'") as e:
        wb.select("for tidd in _: _")
    assert (e.value.filename, e.value.lineno) == (__file__, line)
    with pytest.raises(SporkSchedulingError, match=r"select: exo cannot parse the pattern 'for tid in'"):
        wb.select("for tid in")


@pytest.mark.parametrize("call, kind, message", [
    (lambda wb: wb.select("x[_]"), SporkSchedulingError, "select('x[_]') finds a part of an expression, and select "
     "takes a statement: a pattern such as \"y[_] += _\", or a loop's iterator name"),
    (lambda wb: wb.proc_at("1"), SporkTypeError, "proc_at takes a step number, an int from 0 (the initial proc) to 0, "
     "not '1'"),
    (lambda wb: wb.view("last"), SporkTypeError, "view takes a step number, an int from 0 (the initial proc) to 0, not "
     "'last'"),
    (lambda wb: wb.view(2), IndexError, "step 2: this workbench has steps 0 to 0"),
])  # fmt: skip
def test_a_selection_or_step_of_the_wrong_kind_says_what_is_taken(call, kind, message):
    """Were a bare StopIteration (select of an expression), `'<=' not supported between 'int' and 'str'` and a
    traitlets TraitError, each from inside the workbench (audit G)."""
    with pytest.raises(kind) as e:
        call(Workbench(seq_reverse))
    assert (e.value.message, e.value.filename, e.value.lineno) == (message, __file__, call.__code__.co_firstlineno)


def test_select_takes_a_loop_by_its_name():
    """select("task") found the read of `task` in an index, and raised StopIteration (audit G)."""
    wb = Workbench(seq_reverse)
    assert wb.select("task")._selection == wb.select("for task in _: _")._selection
    assert wb.select("tid #1")._selection == wb.select("for tid in _: _ #1")._selection


@pytest.mark.parametrize("call, message", [
    (lambda: Workbench("seq_reverse"), "Workbench needs a proc (made with @proc), got str"),
    (lambda: Workbench(seq_reverse, sizes=1024),
     "Workbench(sizes=...) takes a dict of the proc's sizes, e.g. sizes={'n': 1024}, not 1024"),
    (lambda: Workbench(seq_reverse).apply("divide_loop", "tid", 32, ["w", "l"]),
     "apply takes a scheduling operation, as in wb.apply(divide_loop, ...), not 'divide_loop'"),
    (lambda: Workbench(seq_reverse).apply(lambda p: None), "<lambda>(p) returned NoneType, not a proc; apply takes "
     "scheduling operations"),
])  # fmt: skip
def test_misused_session_calls_name_the_users_line(call, message):
    """Were TypeErrors raised in the workbench's frames, naming no line (in a notebook: a traceback, where every
    SporkError is one line). They are still TypeErrors."""
    with pytest.raises(SporkTypeError) as e:
        call()
    assert (e.value.filename, e.value.lineno, e.value.message) == (__file__, call.__code__.co_firstlineno, message)


def test_real_checker_finds_the_missing_fence_and_clears_after_fences():
    wb = to_kernel(Workbench(seq_reverse, sizes={"n": 512}), fences=False)
    cards = wb.state["data"]["hazards"]
    assert [c["kind"] for c in cards] == ["RAW", "FREE"]
    texts = {wb.state["data"]["lines"][n]["text"].strip() for n in cards[0]["lines"]}
    assert texts == {"tile[tid] = x[task * 256 + tid]", "y[task * 256 + tid] = tile[255 - tid]"}
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").after(), cuda_in_order, cuda_in_order)
    assert wb.check.value.ok and wb.state["data"]["hazards"] == []


def test_a_long_check_shows_progress_and_stops_when_interrupted():
    seen, stopped = [], threading.Event()

    def slow():
        try:
            while True:
                time.sleep(0.01)
        finally:
            stopped.set()

    def progress(seconds: float) -> None:
        seen.append(seconds)
        if seconds >= 1.5:  # Jupyter's stop button: a KeyboardInterrupt in the waiting thread, raised here, not by
            raise KeyboardInterrupt  # _thread.interrupt_main, whose signal a gc callback (hypothesis's) can swallow

    with pytest.raises(Interrupted) as e:
        Background(slow).result(progress)
    assert e.value.seconds >= 1.5 and seen and all(s >= 1.0 for s in seen)
    assert stopped.wait(2.0)  # the worker was stopped, not left running


def test_an_interrupted_check_leaves_the_step_unchecked_and_runs_again_when_shown(monkeypatch):
    from spork_lab.lab import _results

    def interrupted(self, progress=None):
        raise Interrupted(1.2)

    monkeypatch.setattr(_results.Background, "result", interrupted)
    wb = to_kernel(Workbench(seq_reverse, sizes={"n": 512}))
    assert wb.check.state == "interrupted" and "interrupted after 1.2 s" in wb.state["views"]["header"]
    monkeypatch.undo()
    assert wb.check.state == "ok" and wb.check.value.ok


def test_pictures_learn_of_new_steps_but_keep_their_step_and_error():
    wb = Workbench(seq_reverse)
    first = wb.view()
    wb.apply(divide_loop, "tidd", 4, ["a", "b"])
    failed = wb.view()
    wb.apply(divide_loop, "tid", 32, ["w", "l"], perfect=True)
    assert "step 0 of 1" in first.header and 'data-set="step:1"' in first.header  # ▶ now leads to the new step
    assert "step 0 of 1" in failed.header and "no loop matches &#x27;tidd&#x27;" in failed.header  # its error stays
    assert "sl-step-error" not in first.header and first.step == 0
    wb.undo()
    failed.step = 1 if len(wb.steps) else 0
    assert "step 0 of 0" in failed.header

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


def test_a_step_that_only_reindents_code_marks_only_what_it_changed():
    """Wrapping the task loop in a CudaDeviceFunction re-indents every line under it: the Code view's gutter and
    the step's diff show the `with` line alone."""
    wb = Workbench(seq_reverse, sizes={"n": 512})
    wb.apply(wrap_with_context, wb.proc.find_loop("task"), CudaDeviceFunction(blockDim=256))
    lines = wb.state["data"]["lines"]
    assert [l["text"].strip() for l in lines if l["changed"]] == ["with CudaDeviceFunction(blockDim=256):"]
    assert [d for d in wb.steps[0].diff if d[0] in "+-"] == ["+    with CudaDeviceFunction(blockDim=256):"]


def test_a_fence_inserted_like_one_further_out_is_the_line_marked_new():
    """A Fence inside a loop, where the same Fence text already ends the task: lines compared without indentation
    paired the new one with the old, and the gutter and diff marked the task's Fence (workbench audit)."""
    import procs_sync as P

    from spork_lab.platforms.cuda import cuda_in_order
    from spork_lab.scheduling import insert_fence

    wb = Workbench(P.reverse_tiles_shared_tile, sizes={"n": 512})
    wb.apply(insert_fence, wb.proc.find_loop("tid #1").after(), cuda_in_order, cuda_in_order)
    lines = wb.state["data"]["lines"]
    (new,) = [n for n, line in enumerate(lines) if line["changed"]]
    assert lines[new]["text"].strip() == "Fence(cuda_in_order, cuda_in_order)" and lines[new - 1]["text"].strip() == (
        "y[it * 256 + tid] = tile[255 - tid]")
    assert [d for d in wb.steps[0].diff if d[0] in "+-"] == ["+" + lines[new]["text"]]


def test_a_schedule_function_with_a_config_replays_as_a_short_script(tmp_path):
    """examples/sm80_gemm.py's steps take a Config dataclass: a step records only its fields that differ from the
    defaults, and the script imports the step and the class."""
    import sm80_gemm

    cfg = sm80_gemm.Config("f16", BK=32, S=3)
    wb = Workbench(sm80_gemm.naive(cfg))
    wb.apply(sm80_gemm.tile_output, cfg)
    assert wb.steps[0].call == "tile_output(p, Config(BK=32, S=3))"
    script = wb.script()
    assert "from sm80_gemm import tile_output" in script and "from sm80_gemm import Config" in script
    path = tmp_path / "replay.py"
    path.write_text(script)
    assert str(runpy.run_path(str(path))["p"]) == str(wb.proc)


def test_warp_and_warpgroup_collectives_are_first_coloured_by_their_own_level():
    """An mma runs on warps and a wgmma on warpgroups: their tiling opens at that level, and select() finds an
    instr template's call by the name the Code view prints."""
    import sm90_gemm

    wb = Workbench(sm90_gemm.make_gemm("f16"), sizes={"M": 2048, "N": 256, "K": 128})
    grid = wb.select("Sm90_mma_async_f16(_)").state["data"]["tiling"]
    assert grid["level"] == "warpgroup" and grid["collectives"] == 4 and grid["active"] == 512
    assert "allocating cuda_cluster (the whole cluster)" in wb.state["views"]["tiling"]
    assert wb.check.state == "ok" and wb.check.message.startswith("no hazards found")


def test_an_error_marks_the_statement_it_quotes_not_every_copy_of_its_source_line():
    """Statements a step inserts carry their anchor's source line (the Fences here share the second tid loop's):
    an error on that line marks the printed lines showing the code it quotes, or all of them if none does."""
    r = to_kernel(Workbench(seq_reverse, sizes={"n": 512})).result()
    line = seq_reverse.find_loop("tid #1")._impl._node.srcinfo.lineno
    assert len(r.view.lines_of_source_line(line)) == 3  # Fence, the loop, Fence
    fences = r._error_lines({"line": line, "message": "`Fence(cuda_in_order, cuda_in_order)`: a made-up error"})
    assert [r.view.lines[n].text.strip() for n in fences] == ["Fence(cuda_in_order, cuda_in_order)"] * 2
    loop = r._error_lines({"line": line, "message": "`for tid in cuda_threads(0, 256):` has no Fence(...)"})
    assert [r.view.lines[n].text.strip() for n in loop] == ["for tid in cuda_threads(0, 256):"]
    assert len(r._error_lines({"line": line, "message": "no quoted code"})) == 3


def test_a_read_of_what_nothing_wrote_is_a_card_with_its_own_hint():
    """An UNINIT card names the read alone and says to write the element first (not to pair barriers); a proc of
    constant sizes has no sizes to name in the header."""
    from procs_sync import half_loaded_tile

    wb = Workbench(half_loaded_tile)
    (card,) = wb.state["data"]["hazards"]
    assert card["kind"] == "UNINIT" and card["buffer"] == "tile" and len(card["stmts"]) == 1
    assert card["hint"].startswith("no statement before line 10 writes this element of tile")
    assert wb.check.message == "1 hazard(s)"
