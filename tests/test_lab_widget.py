"""Widget data and display without a browser: code lines, tiling grid, barrier timeline, mimebundle, IPython
extension, doctor."""

from __future__ import annotations

import re

import pytest
from IPython.core.interactiveshell import InteractiveShell

import make_tutorials
from procs_wgmma import WgAccumulator, wg_mma, wg_store, wg_zero
import spork_lab
from spork_lab import proc
from spork_lab.core.coll import CollTiling, cuda_thread
from spork_lab.lab import Workbench, _doctor
from spork_lab.lab._codeview import code_view, highlight, printed_text
from spork_lab.lab._render import STATIC_DIR, static_page
from spork_lab.lab._tiling import tiling_grid
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *


@proc
def long_lines(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            buf: f32[32] @ CudaSmemLinear
            for t in cuda_threads(0, 32):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[t:t + 1], src[task * 32 + t:task * 32 + t + 1], size=4)
            Fence(Sm80_generic, cuda_in_order)
            for t in cuda_threads(0, 32):
                dst[task * 32 + t] = buf[t]


def test_code_lines_of_str_of_proc_with_wrapped_statements_mapped():
    view = code_view(long_lines, str(long_lines))
    assert [line.text for line in view.lines] == str(long_lines).split("\n")
    (cp_call,) = [i for i, s in enumerate(view.stmts) if str(s).startswith("Sm80_cp_async_f32")]
    cp_lines = view.lines_of_stmt(cp_call)
    assert len(cp_lines) == 2  # the printer wraps the call over two lines; both belong to it
    assert view.lines[0].stmt is None and view.stmt_at_path((0, 0, 1, 0, 0)) is not None


def test_printed_text_wraps_a_long_signature_only():
    """The workbench's own text (no yapf): the signature broken after commas, under its first argument."""
    text = printed_text(long_lines, width=60).split("\n")
    assert text[0].startswith("def long_lines(") and all(len(line) <= 60 for line in text[:3])
    assert text[1].startswith(" " * len("def long_lines(")) and text[1].strip()
    view = code_view(long_lines)
    assert [line.text for line in view.lines] == printed_text(long_lines).split("\n")
    assert all(line.stmt is None for line in view.lines if line.text.lstrip().startswith(("def", "n:", "src:", "dst:")))
    (cp_call,) = [i for i, s in enumerate(view.stmts) if str(s).startswith("Sm80_cp_async_f32")]
    assert len(view.lines_of_stmt(cp_call)) == 1


def test_highlight_marks_keywords_loops_and_gpu_names():
    out = highlight("for t in cuda_threads(0, 32): Fence(cuda_in_order, x) @ CudaSmemLinear <b>")
    assert '<span class="sl-tok-kw">for</span>' in out
    assert '<span class="sl-tok-loop">cuda_threads</span>' in out
    assert '<span class="sl-tok-sync">Fence</span>' in out
    assert '<span class="sl-tok-gpu">CudaSmemLinear</span>' in out
    assert "&lt;b&gt;" in out


def test_tiling_grid_follows_the_user_guide_figure():
    # for m in cuda_threads(0, 8, unit=16 * cuda_thread): for n in cuda_threads(0, 16): m=2 -> threads [32, 47]
    tiling = CollTiling.top(128).tile("m", 8, 16 * cuda_thread).tile("n", 16, cuda_thread)
    grid = tiling_grid(tiling, "iter:m", {})
    assert grid["threads"] == 128 and grid["active"] == 128 and grid["collectives"] == 128
    assert (grid["rows"], grid["cols"], grid["row_iters"], grid["col_iters"]) == (8, 16, ["m"], ["n"])
    cell = next(c for c in grid["cells"] if (c["row"], c["col"]) == (2, 1))
    assert cell["values"] == {"m": 2, "n": 1} and cell["threads"] == [[33, 34]] and cell["group"] == 2
    outer = tiling_grid(CollTiling.top(128).tile("m", 6, 16 * cuda_thread), "warp", {})
    assert outer["collectives"] == 6 and outer["active"] == 96 and (outer["rows"], outer["cols"]) == (1, 6)
    assert outer["strip"][100]["group"] is None and outer["cells"][2]["threads"] == [[32, 48]]
    assert {s["colour"] for s in outer["strip"][32:48]} == {outer["cells"][2]["colour"]}


def test_widget_loads_its_front_end_from_extension_dir():
    wb = Workbench(long_lines)
    assert (STATIC_DIR / "workbench.js").is_file()
    v = wb.view()
    assert "export default" in str(v._esm) and ".sl-cg-cell" in str(v._css) and "data-set" in str(v._esm)
    assert [key for key, _ in wb.state["tabs"]] == ["code", "tiling", "timeline", "hazards", "steps", "banks", "cuda"]


def test_mimebundle_has_widget_and_static_picture():
    wb = Workbench(long_lines, sizes={"n": 64})
    data, _ = wb._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    html = data["text/html"]
    assert "<style>" in html and 'class="sl-wb sl-static"' in html
    for title in ("Code", "Tiling", "Barrier timeline", "Steps (0)", "Hazards ("):
        assert re.search(r'<div class="sl-section-title"[^>]*>' + re.escape(title), html)
    assert "CUDA" not in re.findall(r'<div class="sl-section-title"[^>]*>([^<]*)', html)  # generated on demand only
    assert html.count('class="sl-cg-cell') == 32 and 'class="sl-tc' not in html  # one thread per cell: no strip


def test_load_ext_registers_magics_and_proc_html():
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "spork_lab")
        assert {"spork_doctor", "spork_workbench"} <= set(shell.magics_manager.magics["line"])
        data, _ = shell.display_formatter.format(long_lines)
        assert re.search(r"sl-tok-loop\"[^>]*>cuda_threads", data["text/html"]) and "def long_lines" in data["text/plain"]
        shell.user_ns["long_lines"] = long_lines
        wb = shell.run_line_magic("spork_workbench", "long_lines n=64")
        assert isinstance(wb, Workbench) and wb.sizes == {"n": 64}
        with pytest.raises(ValueError, match="name=INT"):
            shell.run_line_magic("spork_workbench", "long_lines n=big")
    finally:
        InteractiveShell.clear_instance()


def test_workbench_magic_errors_are_one_line(capsys):
    """%spork_workbench raised a NameError or a ValueError, which IPython showed with a traceback through
    spork_lab's frames; an error raised below a magic named a line of IPython's own files, not the cell's."""
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "spork_lab")
        shell.user_ns.update(long_lines=long_lines, three=3)
        for line, message in [("nope n=4", r"MagicError: %spork_workbench: no proc named 'nope' in the notebook"),
                              ("long_lines n=big", r"MagicError: %spork_workbench: size 'n=big' must look like "
                                                   r"name=INT, e\.g\. n=512"),
                              ("three n=4", r"SporkTypeError: Cell In\[\d+\]:1: Workbench needs a proc \(made with "
                                            r"@proc\), got int")]:
            capsys.readouterr()
            assert not shell.run_cell(f"%spork_workbench {line}").success
            shown = capsys.readouterr()
            assert re.fullmatch(message, (shown.out + shown.err).strip()), shown
    finally:
        InteractiveShell.clear_instance()


def test_load_ext_keeps_proc_annotations_unevaluated():
    """A cell that loads the extension and defines a proc without `from __future__ import annotations` works:
    Python would otherwise evaluate `n: size` and fail with NameError."""
    shell = InteractiveShell.instance()
    try:
        result = shell.run_cell(
            "%load_ext spork_lab\n"
            "from spork_lab import proc\n"
            "from spork_lab.platforms.cuda import *\n"
            "@proc\n"
            "def zero(n: size, x: f32[n] @ CudaGmemLinear):\n"
            "    for i in seq(0, n):\n"
            "        x[i] = 0.0\n"
        )
        assert result.success, result.error_in_exec
        assert "def zero(n: size, x: f32[n] @ CudaGmemLinear):" in str(shell.user_ns["zero"])
    finally:
        InteractiveShell.clear_instance()


def test_package_level_extension_hook_delegates():
    assert callable(spork_lab.load_ipython_extension)


GOOD = {
    "packages": {"jupyterlab": "4.2.0", "notebook": None, "ipywidgets": "8.1.5", "jupyterlab_widgets": "3.0.13",
                 "widgetsnbextension": "4.0.13", "anywidget": "0.9.13", "plotly": "5.24.0", "ipykernel": "6.29.0"},
    "cupy": {"cupy-cuda12x": "13.3.0"},
    "nvcc": "12.4",
    "gpus": ["NVIDIA H100, 550.54, 9.0"],
}


def _with(**packages) -> dict:
    return {**GOOD, "packages": {**GOOD["packages"], **packages}}


def test_doctor_finds_known_mismatches():
    assert _doctor.diagnose(GOOD) == (True, [])
    ok, problems = _doctor.diagnose(_with(jupyterlab_widgets="1.1.0"))
    assert not ok and "Error displaying widget" in problems[0][0] and "jupyterlab_widgets>=3" in problems[0][1]
    ok, problems = _doctor.diagnose(_with(ipywidgets="7.8.1"))
    assert not ok and 'ipywidgets>=8' in problems[0][1]
    ok, problems = _doctor.diagnose(_with(anywidget=None))
    assert not ok and "anywidget" in problems[0][1]
    ok, problems = _doctor.diagnose({**GOOD, "cupy": {"cupy-cuda11x": "13.3.0"}})
    assert ok and problems == [("cupy-cuda11x is built for another CUDA major version than nvcc 12.4",
                                "pip install cupy-cuda12x (and uninstall cupy-cuda11x)")]
    ok, problems = _doctor.diagnose({**GOOD, "gpus": [], "nvcc": None, "cupy": {}})
    assert ok and [p.split(":")[0] for p, _ in problems] == ["nvcc not found", "no NVIDIA GPU visible (nvidia-smi)"]


def test_doctor_prints_versions(capsys):
    report = spork_lab.doctor()
    out = capsys.readouterr().out
    for name in ("jupyterlab", "ipywidgets", "anywidget", "plotly", "CuPy", "nvcc", "GPU", "widgets can render"):
        assert name in out
    assert isinstance(report["widgets_can_render"], bool)


def test_spork_errors_show_as_one_message_in_ipython(capfd):
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "spork_lab")
        cell = (
            "from __future__ import annotations\n"
            "from spork_lab import proc\n"
            "from spork_lab.platforms.cuda import *\n"
            "@proc\n"
            "def bad(x: f32[32] @ CudaGmemLinear):\n"
            "    Fence(cuda_in_order)\n"
        )
        result = shell.run_cell(cell)
        err = capfd.readouterr().err
        assert not result.success
        assert "SporkSyntaxError: " in err and ":6: Fence takes 2 arguments, got 1" in err
        assert "Traceback" not in err
    finally:
        InteractiveShell.clear_instance()


def test_static_picture_carries_its_styles_inline():
    """Untrusted notebooks and GitHub drop <style> blocks; the inline copies keep the picture readable."""
    from spork_lab.lab._render import CSS_PATH, inline_styles

    css = CSS_PATH.read_text()
    html = inline_styles('<div class="sl-line sl-stmt"><span class="sl-gutter">1</span></div>'
                         '<table class="sl-witness"><tr><th>a</th></tr></table>', css)
    assert '<div class="sl-line sl-stmt" style="display: flex; white-space: pre;' in html
    assert "cursor: pointer" in html and "var(" not in html
    assert '<th style="text-align: left; color: #57606a;' in html
    assert "outline: 2px" not in html  # hover rules of the live widget stay out


warps = [CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 1)]
# the race-debugging tutorial's deadlock: the consumer stops releasing the ring's slots after four iterations
ring_missing_release = spork_lab.parse_source(make_tutorials.RING_MISSING_RELEASE, filename="make_tutorials.py",
                                              func_globals=globals())


def test_barrier_timeline_pairs_events_and_opens_at_the_deadlock():
    v = Workbench(ring_missing_release, sizes={"n": 256}).view()
    assert v.view == "timeline"  # a failing barrier check opens the timeline
    (bar,) = v.data["timelines"]
    labels = [(lane["position"], lane["queue"], lane["role"], lane["label"]) for lane in bar["lanes"]]
    each = [("forward", "arrive", "producer · threads [0, 31]"), ("forward", "await", "consumer · threads [32, 63]"),
            ("reverse", "arrive", "consumer · threads [32, 63]"), ("reverse", "await", "producer · threads [0, 31]")]
    assert labels == [([i], *lane) for i in (0, 1) for lane in each]  # bar[2]: each index its own queues, its own lanes
    assert all(e["position"] == bar["lanes"][e["lane"]]["position"] for e in bar["events"])
    events = bar["events"]
    bad = events[bar["bad"]]
    # bar[0]'s reverse queue got arrives at it = 0, 2 only: the producer's ReverseAwait at it = 6 waits for #3
    assert (bad["kind"], bad["position"], bad["iters"], bad["index"], bad["state"]) == ("ReverseAwait", [0], {"task": 0, "it": 6}, 3, "bad")
    await0 = next(e for e in events if e["kind"] == "Await" and e["iters"]["it"] == 2)
    arrive = events[await0["pairs"]]
    assert (arrive["kind"], arrive["iters"]["it"], arrive["index"], arrive["slot"], arrive["parity"]) == ("Arrive", 2, 2, 0, 1)
    assert [e["state"] for e in events if e["kind"] == "ReverseAwait"][:2] == ["pass", "pass"]  # lag 1: nothing to wait for yet
    html = v.state["views"]["timeline"]
    assert ">bar[1] reverse await</text>" in html
    line = next(n + 1 for n, l in enumerate(v.data["lines"]) if "ReverseAwait(" in l["text"])
    assert f'data-event="{bar["bad"]}" data-set="selected:{bad["stmt"]}" data-goto="code"' in html
    assert bad["line"] == line and "sl-ev-bad" in html and "waits for arrive #3, which has not happened" in html
    # bar: barrier[2]: the rings and arrive numbers are each index's (the header read as if bar had 1 mbarrier)
    assert ("each of bar[2]: forward ring of 1 mbarrier, reverse ring of 2 (depths from the Await lags)"
            in html.split('class="sl-tl-head">')[1]), html


@proc
def two_warpgroups_commit_groups(A: f32[64, 8] @ CudaGmemLinear, B: f32[8, 8] @ CudaGmemLinear,
                                 C: f32[2, 64, 8] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, 1):
            cg: barrier @ CudaCommitGroup
            A_s: f32[64, 8] @ CudaSmemLinear
            B_s: f32[8, 8] @ CudaSmemLinear
            for t in cuda_threads(0, 64, unit=4 * cuda_thread):
                for q in cuda_threads(0, 4):
                    for j in seq(0, 2):
                        A_s[t, 2 * q + j] = A[t, 2 * q + j]
            for t in cuda_threads(0, 64):
                B_s[t / 8, t % 8] = B[t / 8, t % 8]
            Fence(cuda_in_order, wgmma_async_smem)
            D: f32[2, 64, 8] @ WgAccumulator
            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                wg_zero(D[wg, :, :])
                Fence(wgmma_fence_1, wgmma_fence_2)
            for kt in seq(0, 3):
                for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                    with CudaAsync(wgmma_async_instr):
                        wg_mma(D[wg, :, :], A_s, B_s)
                    Arrive(wgmma_async, 1) >> cg
                    Await(cg, cuda_in_order, 0)
            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                wg_store(C[wg, :, :], D[wg, :, :])
            Fence(cuda_in_order, cuda_in_order)  # every warpgroup's reads of A_s, B_s done before they are freed


def test_each_warpgroup_awaits_its_own_commit_groups_in_the_timeline():
    """Two warpgroups commit and wait on their own wgmma groups, interleaved: each await pairs with its own
    warpgroup's arrive (the timeline numbered one queue for both and drew a passing kernel as a deadlock)."""
    v = Workbench(two_warpgroups_commit_groups, sizes={}).view()
    assert v.data["check"]["message"].startswith("no hazards") and v.view != "timeline"
    (cg,) = v.data["timelines"]
    events = cg["events"]
    awaits = [e for e in events if e["kind"] == "Await"]
    assert len(awaits) == 6 and cg["bad"] is None
    for e in awaits:
        arrive = events[e["pairs"]]
        assert (arrive["kind"], arrive["threads"], arrive["iters"]) == ("Arrive", e["threads"], e["iters"])
        assert arrive["text"] == "Arrive(wgmma_async, 1) >> cg"  # the statement as the Code tab prints it


def test_a_hazard_cards_message_numbers_lines_as_the_code_tab():
    """The checker's message named the allocation by its line in this file, the card's witness by the Code tab's."""
    from spork_lab.sync.mutants import without_syncs

    v = Workbench(without_syncs(two_warpgroups_commit_groups, [4]), sizes={}).view()  # no Fence before A_s is freed
    (card,) = [c for c in v.data["hazards"] if c["buffer"] == "A_s"]
    alloc = next(n + 1 for n, line in enumerate(v.data["lines"]) if line["text"].strip().startswith("A_s: f32[64, 8]"))
    assert card["kind"] == "FREE" and f"(allocated at line {alloc}) is freed at the end of its scope" in card["message"]
    assert ("statement", card["witness"][0][1], f"end of A_s's scope (allocated at line {alloc})") == card["witness"][0]


def test_a_race_across_barriers_points_at_their_pairing_first():
    """The missing release made a WAR on buf whose card proposed a Fence first; the barriers between the accesses
    were meant to order them, and a barrier's own error (DEADLOCK) is fixed in its pairing, never by a Fence."""
    v = Workbench(ring_missing_release, sizes={"n": 256}).view()
    (war,) = [c for c in v.data["hazards"] if c["kind"] == "WAR"]
    assert war["hint"].startswith("the barrier statements between them (lines ")
    assert "check their pairing in the Barrier timeline" in war["hint"] and "; or add a CTA-scope Fence(" in war["hint"]
    deadlocks = [c for c in v.data["hazards"] if c["kind"] == "DEADLOCK"]
    assert deadlocks and all(c["hint"].startswith("open the Barrier timeline") for c in deadlocks)
    (scope_end,) = [c for c in deadlocks if "the scope of bar[0] ends" in c["message"]]  # said "threads: none"
    alloc = next(n + 1 for n, line in enumerate(v.data["lines"]) if line["text"].strip().startswith("bar: barrier"))
    assert scope_end["witness"][0][1] == f"end of bar's scope (allocated at line {alloc})"
    assert [row[0] for row in scope_end["witness"]] == ["statement", "iterators"]
    # a card's lines select its statement in Code; the CUDA tab says that this code is not sound
    assert f'<div class="sl-hazard-where" data-set="selected:{war["stmts"][-1]}" data-goto="code"' in v.state["views"]["hazards"]
    note = Workbench(ring_missing_release, sizes={"n": 256}).result().cuda()[1]
    assert note.endswith("the sync check found 1 hazard(s) at n=256 (and 3 more past the deadlock, which the GPU never "
                         "reaches): on the GPU this code can race or hang, and compiles all the same")


def test_what_runs_past_the_deadlock_is_folded_and_greyed():
    """Of the four hazards, three are what the hung producer (and the consumer it leaves waiting) would do next:
    their cards come folded after the deadlock's, the Code tab marks only the deadlock, and the timeline greys the
    events past the hang and dashes the consumer's Await that waits for the producer's next arrive."""
    v = Workbench(ring_missing_release, sizes={"n": 256}).view()
    cards = v.data["hazards"]
    assert [c["after_hang"] for c in cards] == [False, True, True, True] and cards[0]["kind"] == "DEADLOCK"
    assert dict(v.state["tabs"])["hazards"] == "Hazards (1)"
    assert v.data["check"]["message"] == ("1 hazard(s) at n=256 (and 3 more past the deadlock, which the GPU never "
                                          "reaches)")
    html = v.state["views"]["hazards"]
    folded = html[html.index('<details class="sl-after-hang">'):]
    assert html.count('class="sl-hazard"') == 4 and folded.count('class="sl-hazard"') == 3
    assert "3 more after the deadlock" in folded and "WAR hazard" in folded
    marked = {m["label"] for line in v.data["lines"] for m in line["marks"]}
    assert marked == {"DEADLOCK"}
    (bar,) = v.data["timelines"]
    waiting = [e for e in bar["events"] if e["state"] == "hang"]
    assert [(e["kind"], e["iters"]["it"]) for e in waiting] == [("Await", 6)]
    after = [e for e in bar["events"] if e["after_hang"]]
    assert after and {e["iters"]["it"] for e in after} == {6, 7} and all(e["state"] != "bad" for e in after)
    timeline = v.state["views"]["timeline"]
    assert timeline.count("sl-ev-after") == len(after) and "which threads that already hang never make" in timeline


def test_an_await_before_its_arrive_points_at_the_arrive_not_at_a_hang():
    """The consumer's block comes first: its first Await pairs with the producer's arrive later in the same
    iteration. The timeline says so, naming that arrive's event, instead of a GPU that waits forever."""
    from procs_sync import ring_copy_deadlock

    v = Workbench(ring_copy_deadlock, sizes={"n": 128}).view()
    (bar,) = v.data["timelines"]
    bad = bar["events"][bar["bad"]]
    arrive = bar["events"][bad["later"]]
    assert (bad["kind"], bad["index"], arrive["kind"], arrive["index"]) == ("Await", 1, "Arrive", 1)
    assert bad["later"] > bar["bad"] and arrive["iters"] == bad["iters"]
    note = v.state["views"]["timeline"].split('class="sl-tl-bad">')[1]
    assert f"waits for arrive #1, which the program makes only later (event {bad['later'] + 1})" in note
    assert "the GPU would wait forever" not in note


def test_clicking_an_event_selects_its_statement_and_pages_move_the_window():
    v = Workbench(ring_missing_release, sizes={"n": 1024}).view()
    (bar,) = v.data["timelines"]
    assert len(bar["events"]) > 32 and bar["page"] == 0 and 'data-set="timeline:bar:1"' in v.state["views"]["timeline"]
    v.timeline = "bar:1"  # the ▶ button
    assert v.data["timelines"][0]["page"] == 1 and "events 33–" in v.state["views"]["timeline"]
    ev = bar["events"][0]
    v.selected = ev["stmt"]  # what clicking the event does (and it opens the Code tab)
    assert v.data["selected"] == ev["stmt"] and "ReverseAwait" in v.data["lines"][ev["line"] - 1]["text"]


def test_static_picture_has_the_barrier_timeline_under_its_heading():
    import base64

    data, _ = Workbench(ring_missing_release, sizes={"n": 256})._repr_mimebundle_()
    html = data["text/html"]
    title = re.search(r'<div class="sl-section-title"[^>]*>Barrier timeline</div>', html)
    # an <img> of the SVG: sanitizers strip inline <svg> (untrusted notebooks, GitHub) but keep images
    image = re.search(r'<img src="data:image/svg\+xml;base64,([^"]+)"', html[title.end():])
    assert image and "<svg" not in html
    assert 'class="sl-ev sl-ev-bad"' in base64.b64decode(image.group(1)).decode()


def test_exo_scheduling_errors_show_as_one_message_at_the_users_line(capfd):
    """A pattern exo's own Procedure method cannot find (p.find_loop) is explained like our ops' errors."""
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "spork_lab")
        shell.user_ns["long_lines"] = long_lines
        result = shell.run_cell("x = 1\nlong_lines.find_loop('tt')\n")
        err = capfd.readouterr().err
        assert not result.success and "Traceback" not in err
        assert "SporkSchedulingError: " in err and ":2: find_loop: no loop matches 'tt'; did you mean 't'?" in err
    finally:
        InteractiveShell.clear_instance()


def test_the_cuda_tab_is_generated_when_opened():
    v = Workbench(long_lines).view()
    assert "opened in a running notebook" in v.state["views"]["cuda"]
    v.view = "cuda"  # what clicking the tab does
    html = v.state["views"]["cuda"]
    assert "<details><summary>runtime prelude" in html and html.index("__global__") > html.index("</details>")


def test_the_banks_tab_counts_bank_conflicts_when_opened():
    from smem_transpose import transpose

    wb = Workbench(transpose, sizes={"M": 64, "N": 64})
    v = wb.view()
    assert "counted when this tab is opened" in v.state["views"]["banks"]
    v.view = "banks"
    html = v.state["views"]["banks"]
    assert "1 of 2 shared-memory accesses conflict" in html and "32.00x, at worst 32-way" in html
    assert html.index("tile[lane, 8 * q + w]") < html.index("conflict-free")  # the conflicting access first
    row = re.search(r'<tr class="sl-banks-bad" data-set="selected:(\d+)" data-goto="code"', html)  # shows it in Code
    assert [line["text"].strip() for line in wb.state["data"]["lines"] if line["stmt"] == int(row.group(1))] == [
        "y[32 * bj + 8 * q + w, 32 * bi + lane] = tile[lane, 8 * q + w]"]
    assert "sl-banks-summary\">" not in static_page(v.state)  # computed on demand: not in the stored picture
    v.view = "code"
    assert "Banks" in [label for _, label in v.state["tabs"]]


def test_tiling_draws_the_shard_grid_of_a_distributed_allocation():
    from dist_gemm import dist_mma_cta

    wb = Workbench(dist_mma_cta)
    wb.select("Sm80_mma_tf32(_)")
    (acc,) = wb.state["data"]["tiling"]["distributed"]
    assert acc["name"] == "D" and acc["distributed_dims"] == [0, 1] and acc["shard_shape"] == [2, 4, 16, 8]
    assert [(s["index"], s["threads"]) for s in acc["shards"]] == [([0, 0], [[0, 32]]), ([0, 1], [[32, 64]]),
                                                                   ([1, 0], [[64, 96]]), ([1, 1], [[96, 128]])]
    html = wb.state["views"]["tiling"]
    assert "2 x 2 shards of 2 x 4 x 16 x 8" in html and 'title="D[1, 0]: threads [64, 95]"' in html


def test_a_fence_the_whole_cluster_runs_is_called_cluster_scope():
    """The scope came from the collective's name, which for the whole cluster was its repr: a
    `CollUnit((clusterDim * blockDim,), (clusterDim * blockDim,))-scope Fence`."""
    from procs_sync import remote_arrive_hands_over_global

    (raw,) = Workbench(remote_arrive_hands_over_global, sizes={}).state["data"]["hazards"]
    assert "or add a cluster-scope Fence(cuda_in_order, cuda_in_order) between line" in raw["hint"], raw["hint"]


def test_a_count_card_says_which_await_to_add():
    """An Arrive never awaited: the card's fix is the Await (it sent the user to the timeline, which shows no
    failing event for it)."""
    import procs_sync as P

    v = Workbench(P.cp_async_second_group_drained, sizes={"n": 512}).view()
    (card,) = v.data["hazards"]
    arrive = next(n for n, line in enumerate(v.data["lines"], 1) if "Arrive(Sm80_cp_async, 1) >> cg" in line["text"])
    assert card["kind"] == "COUNT"  # the line as the Code tab numbers it (was the source file's: workbench audit)
    assert card["hint"].startswith(f"`Await(cg, cuda_in_order, 0)` after line {arrive}, before"), card["hint"]


def test_cards_number_threads_within_the_task_as_the_tiling_and_timeline_do():
    """The checker numbers task 1's threads from 64 (two warps a task); the timeline showed task 1's Arrive by
    [0, 31] and its card said [64, 95] (workbench audit of session 39)."""
    import procs_sync as P

    v = Workbench(P.mbar_next_task_overrun, sizes={"n": 8}).view()
    card = v.data["hazards"][0]
    witness = {row[0]: row[1:] for row in card["witness"]}
    assert witness["iterators"] == ("task=0", "task=1") and witness["threads"] == ("[32, 63]", "[0, 31]")
    arrive = next(e for e in v.data["timelines"][0]["events"] if e["kind"] == "Arrive" and e["iters"] == {"task": 1})
    assert arrive["threads"] == [(0, 32)]


@proc
def consumers_reuse_a_tile(x: f32[4, 64] @ CudaGmemLinear, y: f32[4, 64] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("producer", 1), CudaWarpConfig("consumer", 2)]):
        for task in cuda_tasks(0, 1):
            tile: f32[64] @ CudaSmemLinear
            for k in seq(0, 4):
                with CudaWarps(name="consumer"):
                    for t in cuda_threads(0, 64):
                        tile[t] = x[k, t]
                    Fence(cuda_in_order, cuda_in_order)
                    for t in cuda_threads(0, 64):
                        y[k, t] = tile[63 - t]
            Fence(cuda_in_order, cuda_in_order)


def test_a_fence_of_named_warps_is_called_by_their_name():
    """The hint said "a 64 threads (box [1, 64] of domain [1, 96])-scope Fence" (workbench audit); the Fence it
    proposes removes the hazard."""
    from spork_lab.scheduling import insert_fence

    wb = Workbench(consumers_reuse_a_tile)
    (card,) = wb.view().data["hazards"]
    assert card["kind"] == "WAR" and card["hint"].startswith("a consumer-warps-scope Fence(cuda_in_order, cuda_in_order) ")
    wb.apply(insert_fence, wb.proc.find_loop("t #1").after(), cuda_in_order, cuda_in_order)
    assert wb.view().data["hazards"] == []


def test_a_clusters_warps_are_named_per_cta_in_the_legend_as_in_the_strip():
    """The legend said "warp 4: threads [128, 159]" where the strip says "CTA 1 warp 0" (workbench audit)."""
    from dist_cluster_smem import dist_cluster_smem

    v = Workbench(dist_cluster_smem, sizes={"n": 256}).view()
    v.selected = next(line["stmt"] for line in v.data["lines"] if line["text"].strip().startswith("tile[cta, t] ="))
    v.level = "warp"
    legend = re.findall(r'sl-legend-row"><span class="sl-swatch"[^>]*></span>([^<]*)</div>', v.state["views"]["tiling"])
    assert legend[:5] == ["CTA 0 warp 0: threads [0, 31]", "CTA 0 warp 1: threads [32, 63]", "CTA 0 warp 2: threads [64, 95]",
                          "CTA 0 warp 3: threads [96, 127]", "CTA 1 warp 0: threads [128, 159]"], legend
