"""Mutation test of the sync checker.

From each correct example, make every mutant that deletes one sync statement,
moves one sync statement one statement earlier or later in its block (swaps
it with its neighbour), or moves one Await's N by one, and run
`sl.sync_check` on it. A mutant is
killed when the checker (or the static barrier rules it runs first) rejects
it. With --gpu, every surviving mutant is also built and run on the GPU
against its NumPy reference: a survivor must still compute the right result
(all built in parallel first, then run 8 at a time, each in its own process
under a time limit, since a mutant may deadlock).

    python benchmarks/mutation_test.py [--gpu] [--out benchmarks/mutation_test_results.md]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import importlib
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from exo.API import Procedure

import spork_lab as sl
from spork_lab.core.sync_stmts import sync_spec_of
from spork_lab.sync.mutants import sync_cursors, with_await_n, with_sync_moved, without_syncs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

# (example module, proc name, sizes for the check). Every proc here must pass the check unmutated.
CORRECT = [
    ("reverse_tiles", "reverse_tiles", {"n": 512}),
    ("block_reduce", "block_reduce", {"n": 512}),
    ("warp_specialized_copy", "warp_specialized_copy", {"n": 1024}),
    ("sync_ring", "ring_copy", {"n": 256}),
    ("cp_async_double_buffer", "cp_async_double_buffer", {"n": 1024}),
    ("sm80_mma_gemm", "sm80_mma_gemm", {"M": 128, "N": 128, "K": 64}),
    ("sm80_gemm", "sync_check_kernel", {"M": 256, "N": 256, "K": 128}),  # a function: the GEMM is scheduled on use
    ("mbarrier_ring_tasks", "mbarrier_ring_tasks", {"n": 512}),
    ("event_two_stage", "event_two_stage", {"n": 512}),
    ("pipelined_tiles", "tiles_commit", {"n": 2048}),
    ("pipelined_tiles", "tiles_mbarrier", {"n": 2048}),
    ("pipelined_tiles", "tiles_ws", {"n": 2048}),
    ("dist_gemm", "dist_mma_cta", {"M": 64, "N": 128, "K": 48}),
    ("dist_cluster_smem", "dist_cluster_smem", {"n": 1024}),
    ("sm90_tma_store", "sm90_tma_store", {"M": 128, "N": 64}),
    ("sm90_tma_wgmma", "sm90_tma_wgmma", {"M": 64, "N": 256, "K": 96}),
    ("sm90_rmem_a", "sm90_rmem_a", {"M": 64, "N": 128, "K": 64}),
    ("stepwise_gemm", "gemm_smem", {"M": 64, "N": 64, "K": 32}),
]
# Not here: index_arithmetic, vec_add and scheduling_tour have no sync statements, dist_register_tile
# neither; the Sm90 GEMM has its own script (mutation_test_sm90.py).

# Why each survivor of the last run is a correct program, read off the program (one item per kind of survivor).
_SURVIVOR_NOTES = [
    "- More waiting: a commit-group Await's N lowered by one or a ReverseAwait's lag shortened (tiles_ws "
    "`~4` -> `~3`) waits for everything the original waited for, and more.",
    "- ring_copy's ReverseAwait lag 1 leaves one slot of slack on a 2-slot ring (lag 2 is exact, so `N -2 -> "
    "-3` is safe): the producer's ReverseAwait moved after its writes is covered by the previous iteration's, "
    "which waited for the release of the slot's previous use; the consumer's ReverseArrive moved before its "
    "reads releases iteration it, which the producer's lag-1 await pairs with only when refilling the slot "
    "read in iteration it - 1, read before that release.",
    "- event_two_stage: both launches and the events are on one stream, which already orders the launches "
    "(`launched` moved before the launch); `done` recorded before the launches makes the CPU's wait return "
    "early, so the proc returns with its kernels queued on the stream, as every proc without a CPU wait does.",
    "- sm80_gemm: the `Await(cg, cuda_in_order, 2)` after each Arrive is redundant (the previous iteration's "
    "`Await(.., 1)` already completed the groups it waits for, and its Fence published them), so deleting, "
    "moving or changing it and moving the Arrive after it are safe; the main loop's `Await(.., 1)` moved "
    "before the fragment loads waits earlier (its Fence stays); the final `Await(.., 0)` waits only for the "
    "tail's empty groups, and moving it or the final Fence across the epilogue's register-to-global stores "
    "touches no shared data.",
    "- tiles_commit: the tail loop's second Fence and the task's final Fence are redundant with each other (no "
    "copy refills a slot in the tail; only an empty-group Await lies between them), so deleting either or "
    "moving them is safe; the final `Await(cg, .., 0)` waits only for the tail's empty groups.",
    "- tiles_mbarrier: the prologue's ReverseAwaits (lag 3) are skipped (its first three turns), so moving one "
    "after the copies changes nothing; the steady loop's Arrive moved after its Await: that Await pairs with "
    "the Arrive of two iterations earlier. The tail's ReverseArrive moved before its reads releases slots no "
    "producer refills in this task (the next task's copies come after the final Fence). (`delete sync #7`, the "
    "tail's ReverseArrive, passed before the checker required every await of a lag-paired ring to have its "
    "arrive by the scope end: the generated scope end waits for the phases the first 3 awaits skipped, "
    "releases 5, 6 and 7, and 6 and 7 were never sent.)",
    "- sm90_tma_wgmma: the consumers' `Await(bar, wgmma_async_smem, ~0)` moved after `Fence(wgmma_fence_1, "
    "wgmma_fence_2)` still precedes the wgmma that read the tiles; the wgmma fence orders register accesses, "
    "not the TMA loads. sm90_rmem_a: a Fence swapped with an allocation.",
]


@dataclasses.dataclass
class Mutant:
    example: str
    description: str
    proc: Procedure
    verdict: str = ""  # "static error", "hazard", or "passes"
    detail: str = ""
    gpu: str = ""


def mutants_of(example: str, p: Procedure) -> list:
    out = []
    seen = {str(p)}  # a move that swaps two like syncs is p itself; moving #i down past #i+1 is #i+1 moved up
    for i, c in enumerate(sync_cursors(p)):
        node = c._impl._node
        spec = sync_spec_of(node)
        line = f"sync #{i} `{str(node).strip()}`"
        out.append(Mutant(example, f"delete {line}", without_syncs(p, [i])))
        for step, where in ((-1, "earlier"), (1, "later")):
            moved = with_sync_moved(p, i, step)
            if moved is not None and str(moved) not in seen:
                seen.add(str(moved))
                out.append(Mutant(example, f"move {line} one statement {where}", moved))
        if spec.is_await:
            for delta in (-1, 1):
                n = spec.N + delta
                out.append(Mutant(example, f"N {spec.N} -> {n} in {line}", with_await_n(p, i, n)))
    return out


def check(m: Mutant, sizes: dict) -> None:
    try:
        report = sl.sync_check(m.proc, **sizes)
    except sl.SporkError as e:
        m.verdict, m.detail = "static error", e.message.splitlines()[0]
        return
    if report.ok:
        m.verdict = "passes"
    else:
        h = report.hazards[0]
        where = f" on {h.buffer}{list(h.index)}" if h.buffer is not None else ""
        m.verdict, m.detail = "hazard", f"{h.kind}{where}"


def run_one(key: str, sources: Path, build_only: bool) -> str:
    """Build mutant `key` (`e:i`, of CORRECT[e]) from its printed source in `sources` (parsing it is fast; making
    the mutant again would schedule its example); unless build_only, run it on fresh random inputs against the
    example's reference."""
    from sanitize_examples import wrong_outputs

    module = importlib.import_module(CORRECT[int(key.split(":")[0])][0])
    p = sl.parse_source((sources / f"{key}.py").read_text())
    built = getattr(sl.build([p]), p.name())
    if build_only:
        return "built"
    bad = wrong_outputs(module, p, built, {})
    return f"WRONG result in {', '.join(bad)}" if bad else "correct"


def gpu_name() -> str:
    """The GPU the survivors ran on, for the results file's header."""
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()


def child_arguments(parser: argparse.ArgumentParser) -> None:
    """The hidden arguments with which run_on_gpu starts the script again, for one build or one run."""
    parser.add_argument("--run-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--build-one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sources", type=Path, default=None, help=argparse.SUPPRESS)


def ran_as_child(args: argparse.Namespace, run_one) -> bool:
    """In a child process: make its one build or run (`run_one(key, sources, build_only)`) and print the outcome."""
    if args.run_one is None and args.build_one is None:
        return False
    print(run_one(args.run_one or args.build_one, args.sources, args.build_one is not None))
    return True


def build_all(script: str, keys: list, extra: tuple = (), deadline: float = math.inf) -> None:
    """Build mutants in parallel, one process each, as many at a time as there are CPUs (nvcc is slow; sl.build
    caches the libraries); `extra`: more arguments of the script's --build-one / --run-one. None is started past
    `deadline` (time.monotonic())."""

    def build(k) -> None:
        if time.monotonic() < deadline:
            subprocess.run([sys.executable, script, "--build-one", str(k), *extra], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(build, keys))


NOT_FINISHED = "not finished"  # the outcome's kind, for a caller's summary
NOT_RUN = f"{NOT_FINISHED}: past the time budget"


def run_on_gpu(script: str, keys: list, timeout_s: float, extra: tuple = (), jobs: int = 8,
               deadline: float = math.inf) -> dict:
    """{key: outcome}: all built first, then run `jobs` at a time, each in its own process under a time limit
    (a mutant may deadlock; its process dies with its context; the GPU time-slices the processes). Past
    `deadline` (time.monotonic()) nothing more is started: those keys' outcome is NOT_RUN, so a caller under a
    time limit still writes what it found."""
    build_all(script, keys, extra, deadline)

    def run(k) -> str:
        left = deadline - time.monotonic()
        if left <= 0:
            return NOT_RUN
        try:
            res = subprocess.run([sys.executable, script, "--run-one", str(k), *extra], capture_output=True,
                                 text=True, timeout=min(timeout_s, left))
            outcome = (res.stdout.strip() or res.stderr.strip() or "no output").splitlines()[-1][:160]
        except subprocess.TimeoutExpired:
            outcome = (f"no result in {min(timeout_s, left):.0f} s (hung: a deadlock, or a slow start)"
                       if left >= timeout_s else NOT_RUN)
        print(f"proc {k}: {outcome}", flush=True)
        return outcome

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return dict(zip(keys, pool.map(run, keys)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="build and run surviving mutants on the local GPU")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per survivor's run on the GPU")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "mutation_test_results.md"))
    child_arguments(parser)
    args = parser.parse_args()
    if ran_as_child(args, run_one):
        return 0

    all_mutants, survivors = [], {}
    start = time.perf_counter()
    for e, (module_name, proc_name, sizes) in enumerate(CORRECT):
        module = importlib.import_module(module_name)
        p = getattr(module, proc_name)
        p = p if isinstance(p, Procedure) else p()
        baseline = sl.sync_check(p, **sizes)
        if not baseline.ok:
            print(f"{module_name}.{proc_name} does not pass unmutated: {baseline.hazards[0]}")
            return 1
        label = module_name if proc_name == module_name else f"{module_name}.{proc_name}"
        for i, m in enumerate(mutants_of(label, p)):
            check(m, sizes)
            if m.verdict == "passes" and hasattr(module, "make_args"):
                survivors[f"{e}:{i}"] = m
            all_mutants.append(m)
    elapsed = time.perf_counter() - start
    if args.gpu:
        with tempfile.TemporaryDirectory() as sources:
            for key, m in survivors.items():
                (Path(sources) / f"{key}.py").write_text(str(m.proc))
            for key, outcome in run_on_gpu(__file__, list(survivors), args.timeout, ("--sources", sources)).items():
                survivors[key].gpu = outcome

    killed = sum(m.verdict != "passes" for m in all_mutants)
    lines = [
        "# Mutation test of the sync checker",
        "",
        f"Command: `python benchmarks/mutation_test.py{' --gpu' if args.gpu else ''}`; "
        f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}"
        f"{', GPU ' + gpu_name() if args.gpu else ''}; checks {elapsed:.1f} s.",
        "",
        f"**Kill rate: {killed}/{len(all_mutants)}** mutants rejected (static error or hazard).",
        "",
        "Survivors (verdict `passes`) and why each is a correct program:",
        "",
        *_SURVIVOR_NOTES,
        "",
        "| example | mutant | verdict | detail | GPU run (survivors) |",
        "|---|---|---|---|---|",
    ]
    for m in all_mutants:
        lines.append(f"| {m.example} | {m.description.replace('|', '/')} | {m.verdict} | {m.detail} | {m.gpu} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
