"""Latency of one workbench step on the tutorial's proc: from `apply` to the new widget state (target < 0.3 s).

Run: python benchmarks/bench_workbench_step.py  (writes benchmarks/results/workbench_step.json)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import nbformat

import spork_lab as sl
from spork_lab.platforms.cuda import *
from spork_lab.scheduling import *

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "workbench_step.json"


def tutorial_proc():
    """The tutorial's sequential proc, parsed from the notebook's own cell."""
    nb = nbformat.read(ROOT / "notebooks" / "01_first_kernel.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("@proc"))
    source = cell.rsplit("\n\n", 1)[0]  # drop the trailing display line
    return sl.parse_source(source, filename="01_first_kernel.ipynb", func_globals=globals())


def kernel_session(p) -> sl.Workbench:
    """The tutorial up to the broken step (a checked kernel with hazards): the heaviest state to redraw."""
    wb = sl.Workbench(p, sizes={"n": 512})
    wb.apply(wrap_with_context, wb.proc.find_loop("task"), CudaDeviceFunction(blockDim=256))
    wb.apply(set_loop_mode, wb.proc.find_loop("task"), cuda_tasks)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid"), cuda_threads)
    wb.apply(set_loop_mode, wb.proc.find_loop("tid #1"), cuda_threads)
    wb.apply(set_memory, "tile", CudaSmemLinear)
    return wb


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main(reps: int = 20) -> dict:
    wb = kernel_session(tutorial_proc())
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)
        times.append(time.perf_counter() - t0)
        assert wb.state["data"]["steps"][-1]["op"] == "insert_fence"
        wb.undo()
    result = {
        "benchmark": "one workbench step (insert_fence on the tutorial kernel, n=512): apply -> new widget state",
        "reps": reps,
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        # The first rep builds this proc's compiled sync checker (gcc); later reps find it cached.
        "first_step_s": round(times[0], 4),
        "target_s": 0.3,
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "system": platform.platform()},
        "analysis": wb.analysis.state,
        "sync_check": wb.check.state,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
