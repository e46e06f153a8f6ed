"""Latency of one workbench step on the tutorial GEMM: `apply` plus the new picture's state (target < 0.3 s).

The GEMM and its steps are notebooks/02_stepwise_gemm.ipynb's (examples/stepwise_gemm.py), checked at the
notebook's sizes. Two steps are timed, each applied `reps` times (undo, apply again: a new proc, analysed and
checked again): the last step of "every thread copies its share", after which the checker finds hazards, and the
second Fence of the next step, after which it finds none. The first tutorial's Fence step is timed as a
reference measured in the same run. `first_s` is the first application, when the sync checker's C
translation of the new proc is compiled with gcc (later repetitions of the same step find it in the cache, as
they would in a notebook that re-runs a cell); `sync_check_alone_s` times `sl.sync_check` alone on the step's
proc once, to show how much of a step is the checker.

Run: SPORK_LAB_CACHE=$(mktemp -d) python benchmarks/bench_workbench_step.py  (writes
benchmarks/results/workbench_step.json; the fresh cache makes `first_s` include the gcc compile, as a
notebook's new step does)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import spork_lab as sl
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "workbench_step.json"
sys.path[:0] = [str(ROOT / "notebooks"), str(ROOT / "examples")]

from make_tutorials import example_steps  # noqa: E402
from stepwise_gemm import gemm  # noqa: E402


def gemm_session() -> tuple[sl.Workbench, list[str]]:
    """A workbench on the tutorial GEMM with every step of the notebook applied, and those steps as Python."""
    _, sizes, steps, _ = example_steps()
    wb = sl.Workbench(gemm, sizes=sizes)
    calls = [call for _, _, applies in steps for call in applies]
    names = {**globals(), "wb": wb}
    for call in calls:
        exec(call, names)  # noqa: S102 -- the notebook's own cells
    assert wb.error is None, wb.error
    return wb, calls


def time_step(wb: sl.Workbench, calls: list[str], index: int, reps: int) -> dict:
    """Median of apply(calls[index]) + the new state, on the session cut back to just before that step."""
    for _ in range(len(calls) - index):
        wb.undo()
    names = {**globals(), "wb": wb}
    times, hazards = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        exec(calls[index], names)  # noqa: S102
        state = wb.state
        times.append(time.perf_counter() - t0)
        hazards = len(state["data"]["hazards"])
        wb.undo()
    exec(calls[index], names)  # noqa: S102 -- leave the step applied
    t0 = time.perf_counter()
    sl.sync_check(wb.proc, **wb.sizes)
    check_s = time.perf_counter() - t0
    return {"step": calls[index], "hazards": hazards, "reps": reps, "median_s": round(statistics.median(times), 4),
            "min_s": round(min(times), 4), "max_s": round(max(times), 4), "first_s": round(times[0], 4),
            "sync_check_alone_s": round(check_s, 4)}


def first_tutorial_fence(reps: int) -> dict:
    """The reference: the first tutorial's Fence step (reverse_tiles at n=512)."""
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "01_first_kernel.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("@proc"))
    p = sl.parse_source(cell.rsplit("\n\n", 1)[0], filename="01_first_kernel.ipynb", func_globals=globals())
    wb = sl.Workbench(p, sizes={"n": 512})
    wb.apply(wrap_with_context, wb.proc.find_loop("task"), CudaDeviceFunction(blockDim=256))
    wb.apply(set_loop_mode, wb.proc.find_loop("task"), cuda_tasks)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid"), cuda_threads)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid #1"), cuda_threads)
    wb.apply(set_memory, "tile", CudaSmemLinear)
    calls = ['wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)']
    exec(calls[0], {**globals(), "wb": wb})  # noqa: S102 -- time_step starts by undoing it
    return time_step(wb, calls, 0, reps)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main(reps: int = 5) -> dict:
    wb, calls = gemm_session()
    last_copy_step = next(i for i, c in enumerate(calls) if '"cy", cuda_threads' in c)
    second_fence = next(i for i, c in enumerate(calls) if 'find_loop("ti").after()' in c)
    with_hazards = time_step(wb, calls, last_copy_step, reps)
    wb, calls = gemm_session()
    without = time_step(wb, calls, second_fence, reps)
    result = {
        "benchmark": "one workbench step of the tutorial GEMM (notebooks/02_stepwise_gemm.ipynb) at the notebook's "
                     "sizes: apply -> the new picture's state (analysis, sync check, cards, timeline, HTML)",
        "sizes": example_steps()[1],
        "hazards_found": with_hazards,
        "no_hazards": without,
        "reference_first_tutorial_fence": first_tutorial_fence(reps),
        "target_s": 0.3,
        "checker_cache": os.environ.get("SPORK_LAB_CACHE", "~/.cache/spork_lab (may be warm)"),
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "system": platform.platform(), "load_avg_1min": round(os.getloadavg()[0], 2)},
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
