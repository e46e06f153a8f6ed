"""Soundness fuzz: a random schedule that sl.sync_check passes must compute on the GPU what it computes sequentially.

Each seed starts from an example kernel (with --starts tests, a test program of tests/procs_*.py; three times in
five) or one of its single-sync mutants (tests/schedule_steps.py), applies one to four random scheduling steps
(plain ones, and ones that change loop modes, memories and sync statements) and runs sl.sync_check at the sizes the
tests check it at (tests/conftest.py, check_sizes). With --gpu, every proc that passes is built with nvcc and run
on the local GPU at those sizes, on small random integers (so that summation order, FMA contraction and
tensor-core arithmetic can neither hide nor fake a difference), and its arrays must end exactly as sl.run_cpu
leaves them. A wrong result is a soundness bug:
its source goes to --failures. With --engines (no GPU needed), the reference engine checks each case too and must
report the hazards the compiled engine reports. --gpu fills the arguments with the workbench's make_args, so
it needs the notebook extra installed (`pip install -e .[notebook]`).

    python benchmarks/soundness_fuzz.py --seeds 0:400 [--gpu] [--engines] [--starts tests] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import functools
import importlib
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

from mutation_test import NOT_FINISHED, child_arguments, gpu_name, ran_as_child, run_on_gpu  # noqa: E402 -- found through the path above

MAX_STEPS = 4
CPU_MAX_OPS = 10**9  # larger cases would take the CPU reference minutes: reported, not run
ENGINE_SECONDS = 30  # the reference engine is ~300x slower than the compiled one: larger cases are reported, not run


@functools.cache
def _starts(which: str) -> list:
    """(name, proc) of the kernels a seed may start from, made once per worker process."""
    from schedule_steps import STARTS, procs_module_starts

    return STARTS if which == "examples" else procs_module_starts()


def make_case(seed: int, engines: bool = False, starts: str = "examples") -> dict:
    """The seed's proc and its verdict: {seed, start, steps, sizes, verdict, source (when it passes), and with
    `engines` whether the reference engine agrees}. `starts`: "examples" (the example kernels) or "tests" (the
    test programs), with their single-sync mutants."""
    from conftest import check_sizes
    from schedule_steps import OTHER, PLAIN, NoTarget, RandomDraw, user_error

    import spork_lab as sl
    from spork_lab.errors import SporkError
    from spork_lab.scheduling import SchedulingError

    data = RandomDraw(seed)
    every = _starts(starts)
    kernels = [(name, p) for name, p in every if "-sync" not in name]  # most mutants fail the check at once
    name, p = data.rng.choice(kernels if data.rng.random() < 0.6 else every)
    steps = []
    for _ in range(data.rng.randint(1, MAX_STEPS)):
        step, apply = data.rng.choice(PLAIN + OTHER)
        try:
            p = apply(data, p)
            steps.append(step)
        except NoTarget:
            continue
        except Exception as e:  # noqa: BLE001 -- a user error leaves the proc as it was; others are reported
            if not user_error(e):
                return dict(seed=seed, start=name, steps=steps + [step], verdict=f"internal error {type(e).__name__}")
    case = dict(seed=seed, start=name, steps=steps, sizes=check_sizes(p))
    try:
        report = sl.sync_check(p, max_events=0, **case["sizes"])
    except (SchedulingError, SporkError) as e:
        return {**case, "verdict": type(e).__name__ if user_error(e) else f"internal error {type(e).__name__}"}
    if engines:
        case["engines"] = _engines_agree(p, case["sizes"], report)
    return {**case, "verdict": "passes", "source": str(p)} if report.ok else {**case, "verdict": "hazard"}


class _TooSlow(BaseException):
    """The reference engine's time is up (a BaseException: nothing on the way catches it)."""


def _engines_agree(p, sizes: dict, report) -> str:
    """Whether the reference engine (Python, written for clarity) finds the hazards the compiled one found: the
    kinds and buffers of both reports, "agree", "DISAGREE ...", or "reference over ENGINE_SECONDS"."""
    import signal

    import spork_lab as sl

    def found(r) -> list:
        return sorted({(h.kind, h.buffer) for h in r.hazards})

    def stop(*_):
        raise _TooSlow

    signal.signal(signal.SIGALRM, stop)
    signal.alarm(ENGINE_SECONDS)
    try:
        reference = sl.sync_check(p, max_events=0, engine="python", **sizes)
    except _TooSlow:
        return f"reference over {ENGINE_SECONDS} s"
    finally:
        signal.alarm(0)
    if found(reference) == found(report):
        return "agree"
    return f"DISAGREE compiled {found(report)}, reference {found(reference)}"


def run_one(key: str, sources: Path, build_only: bool) -> str:
    """Build case `key` from its printed source; unless build_only, run it on the GPU and on the CPU."""
    import numpy as np
    from gpu_vs_cpu import assert_gpu_matches_cpu

    import spork_lab as sl
    import spork_lab.platforms.Sm80  # noqa: F401 -- parse_source knows the names of the platforms imported
    import spork_lab.platforms.Sm90  # noqa: F401
    from spork_lab.lab._bench import make_args
    from spork_lab.runtime._args import proc_spec

    case = json.loads((sources / f"{key}.json").read_text())
    names = vars(importlib.import_module(case["module"])) if case["module"] else None  # a test module's memories
    p = sl.parse_source((sources / f"{key}.py").read_text(), func_globals=names)
    if build_only:
        sl.build([p])
        return "built"
    sizes = case["sizes"]
    spec = proc_spec(p._loopir_proc)
    values = make_args(spec, sizes, np.random.default_rng(), small_integers=True)
    args = {a.name: v for a, v in zip(spec.args, values)}
    try:
        cpu = sl.run_cpu(p, max_ops=CPU_MAX_OPS, **args)
    except sl.SporkError as e:
        return f"no CPU reference: {e.message.splitlines()[0][:100]}"
    try:
        assert_gpu_matches_cpu(p, cpu=cpu, **args)
    except sl.CodegenError as e:  # the compiler refuses the proc with a message at its line: no wrong code
        return f"refused by codegen: {e.message.splitlines()[0][:100]}"
    except AssertionError as e:
        return "WRONG " + " ".join(str(e).split())[:140]
    return "correct"


OK_OUTCOMES = ("correct", "no CPU reference", "refused by codegen", NOT_FINISHED, "")


def outcome_kind(outcome: str) -> str:
    """The outcome's kind for the summary: correct, no CPU reference, refused by codegen, not finished (the time
    budget), WRONG, hung, or another error (a build's)."""
    for kind in ("correct", "no CPU reference", "refused by codegen", NOT_FINISHED, "WRONG", "no result"):
        if outcome.startswith(kind):
            return {"no result": "hung"}.get(kind, kind)
    return outcome and "error"


def gpu_outcomes(passing: list, timeout_s: float, failures: Path, deadline: float) -> dict:
    """{seed: outcome} of the passing cases on the GPU, none started past `deadline` (time.monotonic()); the
    sources of wrong ones are copied to `failures`."""
    with tempfile.TemporaryDirectory() as tmp:
        sources = Path(tmp)
        for case in passing:
            (sources / f"{case['seed']}.py").write_text(case["source"])
            module = case["start"].partition(".")[0] if "." in case["start"] else None  # --starts tests: module.proc
            (sources / f"{case['seed']}.json").write_text(json.dumps({"sizes": case["sizes"], "module": module}))
        outcomes = run_on_gpu(__file__, [c["seed"] for c in passing], timeout_s, ("--sources", str(sources)),
                              deadline=deadline)
        for seed, outcome in outcomes.items():
            if outcome_kind(outcome) not in OK_OUTCOMES:
                failures.mkdir(parents=True, exist_ok=True)
                for suffix in (".py", ".json"):
                    (failures / f"{seed}{suffix}").write_text((sources / f"{seed}{suffix}").read_text())
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:200", help="a range first:last (last excluded)")
    parser.add_argument("--gpu", action="store_true", help="build and run the passing procs on the local GPU")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per proc's run on the GPU")
    parser.add_argument("--engines", action="store_true", help="also check each case with the reference engine")
    parser.add_argument("--starts", choices=("examples", "tests"), default="examples",
                        help="start from the example kernels or from the test programs (tests/procs_*.py)")
    parser.add_argument("--budget", type=float, default=math.inf,
                        help="seconds for the whole run: the GPU runs not finished by then are reported as such "
                             "(the table is written in time under a limit such as the device tool's)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "soundness_fuzz_results.md"))
    parser.add_argument("--failures", type=Path, default=ROOT / "benchmarks" / "soundness_fuzz_failures")
    child_arguments(parser)
    args = parser.parse_args()
    if ran_as_child(args, run_one):
        return 0

    first, last = map(int, args.seeds.split(":"))
    deadline = time.monotonic() + args.budget - 10  # time to write the table
    start = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(os.cpu_count()) as pool:
        make = functools.partial(make_case, engines=args.engines, starts=args.starts)
        cases = list(pool.map(make, range(first, last)))
    elapsed = time.perf_counter() - start
    passing = [c for c in cases if c["verdict"] == "passes"]
    outcomes = gpu_outcomes(passing, args.timeout, args.failures, deadline) if args.gpu else {}
    for c in cases:
        c["gpu"] = outcomes.get(c["seed"], "")

    verdicts = collections.Counter(c["verdict"] for c in cases)
    on_gpu = collections.Counter(map(outcome_kind, outcomes.values()))
    engines = collections.Counter(c["engines"].split(" ")[0] if c["engines"].startswith("DISAGREE") else c["engines"]
                                  for c in cases if "engines" in c)
    lines = [
        "# Soundness fuzz: random schedules that sync_check passes"
        + (", run on the GPU against the CPU" if args.gpu else "")
        + (", each checked by both engines" if args.engines else ""),
        "",
        f"Command: `python benchmarks/soundness_fuzz.py --seeds {args.seeds}{' --gpu' if args.gpu else ''}"
        f"{' --starts tests' if args.starts == 'tests' else ''}"
        f"{' --engines' if args.engines else ''}{f' --budget {args.budget:g}' if args.budget < math.inf else ''}`; "
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        f"{', GPU ' + gpu_name() if args.gpu else ''}; cases made and checked in {elapsed:.0f} s.",
        "",
        "Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.most_common()) + ".",
        *(["", "On the GPU (passing procs): " + ", ".join(f"{k} {v}" for k, v in on_gpu.most_common()) + "."]
          if args.gpu else []),
        *(["", "The reference engine against the compiled one (hazard kinds and buffers): "
           + ", ".join(f"{k} {v}" for k, v in engines.most_common()) + "."] if args.engines else []),
        "",
        "| seed | start | steps | verdict | GPU run | engines |",
        "|---|---|---|---|---|---|",
        *(f"| {c['seed']} | {c['start']} | {', '.join(c['steps'])} | {c['verdict']} | {c['gpu'].replace('|', '/')} | "
          f"{c.get('engines', '')} |" for c in cases),
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))
    bad = [c for c in cases if c["verdict"].startswith("internal") or outcome_kind(c["gpu"]) not in OK_OUTCOMES
           or c.get("engines", "").startswith("DISAGREE")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
