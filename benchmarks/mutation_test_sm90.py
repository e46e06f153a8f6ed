"""Mutation test over the Sm90a GEMM (examples/sm90_gemm.py, tf32, cluster of 2): one task per tile, or with
--persistent the form benchmarks/gemm.py times (persistent by hand: each cluster loops over its tiles, the ring
running on from tile to tile; Q = 3 clusters, two tiles each at SIZES).

Mutants: every sync statement deleted or moved one statement earlier or later
in its block, every Await's N moved by one (the shared
`mutation_test.mutants_of`), and edits of the source text: a TMA load
without its trailing barrier, the ring shrunk (S - 1 slots used, the
producer's lag unchanged), the producer allowed one more stage ahead, and the
consumers' release sent to their own CTA only (not to the multicasting peer).

Verdicts: "static error" and "hazard" kill a mutant; "passes" is a survivor the
checker vouched for: each must be a correct program (the results file says
why each one is safe, and --gpu runs them). "refused" would be a SyncError
saying the abstract machine does not model a construct (none since TMA and
multicast are modelled: issue 12 item 5); it counts as a survivor.

With --gpu every survivor is built and run on the GPU against the float64
reference at M = 512, N = 768, K = 256, each in its own process with a time
limit (a mutant may deadlock): "correct", "WRONG", "timeout (deadlock)" or
the error.

    python benchmarks/mutation_test_sm90.py [--persistent] [--gpu] [--out FILE]
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

import spork_lab as sl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mutation_test import Mutant, build_all, gpu_name, mutants_of, run_on_gpu  # noqa: E402
from sm90_gemm import _FIRST_LINE, TOLERANCE, gemm_source, make_args, make_gemm, reference  # noqa: E402

SIZES = {"M": 512, "N": 768, "K": 256}
CONFIGS = {"per_tile": dict(dt="tf32", CL=2, G=1), "persistent": dict(dt="tf32", CL=2, G=1, Q=3)}  # PROCS[0], PROCS[2]
CONFIG = CONFIGS["persistent" if "--persistent" in sys.argv else "per_tile"]  # a module constant: --run-one's too

# (description, text in the source, its replacement ({S1} is S - 1: exo folds no constant arithmetic in `%`),
#  replace every occurrence)
TEXT_MUTANTS = [
    ("A load without its trailing barrier", "box=(128, BK)) >> ring[cta]", "box=(128, BK))", False),
    ("B multicast load without its trailing barrier", "ncta=CL) >> ring[:]", "ncta=CL)", False),
    ("ring shrunk: stages k % (S - 1), producer lag unchanged", "k % S", "k % {S1}", True),
    ("producer one stage further ahead (lag S)", "ReverseAwait(ring[cta], tma_to_smem_async, ~(S - 1))",
     "ReverseAwait(ring[cta], tma_to_smem_async, ~S)", False),
    ("release to the own CTA only (not the multicasting peer)", "ReverseArrive(cuda_in_order, 1) >> ring[:]",
     "ReverseArrive(cuda_in_order, 1) >> ring[cta]", False),
]


# Why the survivors of the last run are correct programs (they wait more than the GEMM needs, or later).
_SAFE_NOTES = {"per_tile": (
    "Survivors and why each is safe: `N -4 -> -3` in the producer's ReverseAwait (lag S - 2 instead of S - 1) "
    "waits for the release of the stage one iteration later than needed: strictly more waiting, and the ring "
    "still has a stage per outstanding load. `N 1 -> 0` in the consumers' `Await(cg, cuda_in_order, 1)` waits "
    "for every wgmma group, the current one included, before releasing the previous stage: strictly more "
    "waiting (the wgmma of one stage no longer overlaps the next stage's issue). The final cluster "
    "`Fence(cuda_in_order, cuda_in_order)` moved after the epilogue's stores: they read only the accumulator "
    "registers and write C, so the Fence still orders every wgmma read of A_s and B_s (completed by the "
    "`Await(cg, cuda_in_order, 0)` before it) before the next task's loads into them, only later. The last "
    "column is each survivor's run on the GPU (`--gpu`)."),
    "persistent": (
    "Survivors and why each is safe: the same two as one task per tile, both waiting more than needed: `N -4 -> "
    "-3` in the producer's ReverseAwait (lag S - 2; across a tile boundary too, the ring's phases run on, so the "
    "producer waits for one release more) and `N 1 -> 0` in the consumers' `Await(cg, cuda_in_order, 1)` (every "
    "wgmma group waited for before the release). There is no Fence between tiles to move: the only Fence left "
    "ends the task, after its last tile, and moving it before the tile loop is a hazard. The last column is "
    "each survivor's run on the GPU (`--gpu`).")}


def all_mutants() -> list:
    """Every mutant, in a fixed order (a --run-one index names the same mutant in another process)."""
    return mutants_of("sm90_gemm", make_gemm(**CONFIG)) + [_text_mutant(k) for k in range(len(TEXT_MUTANTS))]


def _text_mutant(k: int) -> Mutant:
    description, old, new, every = TEXT_MUTANTS[k]
    src, consts = gemm_source(**CONFIG)
    assert old in src, old
    new = new.replace("{S1}", str(consts["S"] - 1))
    text = src.replace(old, new) if every else src.replace(old, new, 1)
    try:
        p = sl.parse_source(text, filename=str(ROOT / "examples" / "sm90_gemm.py"), first_line=_FIRST_LINE,
                            func_locals=consts)
    except sl.SporkError as e:  # a mutant the front end already rejects
        return Mutant("sm90_gemm", description, None, "static error", e.message.splitlines()[0])
    return Mutant("sm90_gemm", description, p)


def check(m: Mutant) -> None:
    """The verdict of sl.sync_check (and the static rules it runs first) on one mutant."""
    if m.verdict:
        return
    try:
        report = sl.sync_check(m.proc, **SIZES)
    except sl.SporkError as e:
        first = e.message.splitlines()[0]
        m.verdict, m.detail = ("refused", "not modelled yet") if "does not model" in first else ("static error", first)
        return
    if report.ok:
        m.verdict = "passes"
    else:
        h = report.hazards[0]
        where = f" on {h.buffer}{list(h.index)}" if h.buffer is not None else f" on {h.message.split(',')[0]}"
        m.verdict, m.detail = "hazard", f"{h.kind}{where}"


def _proc(index: int):
    """Proc `index`: 0 is the GEMM as written, i is mutant i - 1 (made alone: a GPU run's process starts fast)."""
    if index == 0:
        return make_gemm(**CONFIG)
    sync = mutants_of("sm90_gemm", make_gemm(**CONFIG))
    return sync[index - 1].proc if index <= len(sync) else _text_mutant(index - 1 - len(sync)).proc


def run_one(index: int, build_only: bool) -> str:
    """Build proc `index`; unless build_only, run it on fresh random inputs against the float64 reference."""
    p = _proc(index)
    built = getattr(sl.build([p], arch="sm_90a"), p.name())
    if build_only:
        return "built"
    import cupy

    args = make_args(np.random.default_rng(), n=SIZES["M"])
    assert (args["M"], args["N"], args["K"]) == (SIZES["M"], SIZES["N"], SIZES["K"])
    want = reference(**args)["C"]
    dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    built(*dev.values())
    cupy.cuda.runtime.deviceSynchronize()
    got = dev["C"].get()
    return "correct" if np.allclose(got, want, **TOLERANCE) else f"WRONG (max err {np.nanmax(np.abs(got - want)):.2g})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="build and run every survivor on the local GPU")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per survivor's run on the GPU")
    parser.add_argument("--only", default=None, help="with --gpu or --prebuild: only these proc numbers (1,5,...)")
    parser.add_argument("--persistent", action="store_true", help="the persistent GEMM (CONFIGS['persistent'])")
    parser.add_argument("--out", default=None, help="default: benchmarks/mutation_test_sm90[_persistent]_results.md")
    parser.add_argument("--prebuild", action="store_true", help="only build every survivor (no GPU needed)")
    parser.add_argument("--gpu-log", type=Path, nargs="*", default=None,
                        help="take the survivors' GPU outcomes from --gpu runs' logs ('proc N: outcome' lines; "
                             "a later log's outcome wins)")
    parser.add_argument("--run-one", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--build-one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one is not None or args.build_one is not None:
        print(run_one(args.run_one if args.build_one is None else args.build_one, args.build_one is not None))
        return 0

    mode, extra = ("persistent", ("--persistent",)) if args.persistent else ("per_tile", ())
    start = time.perf_counter()
    baseline = Mutant("sm90_gemm", "none (the GEMM as written)", make_gemm(**CONFIG))
    check(baseline)
    mutants = all_mutants()
    for m in mutants:
        check(m)
    elapsed = time.perf_counter() - start
    procs = [baseline, *mutants]
    survivors = [i for i, m in enumerate(procs) if m.verdict in ("refused", "passes")]
    chosen = [i for i in survivors if args.only is None or str(i) in args.only.split(",")]
    if args.prebuild:
        build_all(__file__, chosen, extra)
        return 0
    if args.gpu_log:
        logged = {k: v for log in args.gpu_log for k, v in re.findall(r"^proc (\d+): (.*)$", log.read_text(), re.M)}
        for i in survivors:
            procs[i].gpu = logged.get(str(i), "not run (the device run ended first)")
    elif args.gpu:
        for i, outcome in run_on_gpu(__file__, chosen, args.timeout, extra).items():
            procs[i].gpu = outcome

    killed = sum(m.verdict in ("static error", "hazard") for m in mutants)
    refused = sum(m.verdict == "refused" for m in mutants)
    lines = [
        "# Mutation test over the Sm90a GEMM",
        "",
        f"Command: `python benchmarks/mutation_test_sm90.py{' --persistent' if args.persistent else ''}"
        f"{' --gpu' if args.gpu else ''}"
        f"{' --gpu-log ' + ' '.join(g.name for g in args.gpu_log) if args.gpu_log else ''}`; "
        f"machine: {platform.machine()}, Python {platform.python_version()}{', GPU ' + gpu_name() if args.gpu else ''}; "
        f"checks {elapsed:.1f} s. "
        f"Proc: `make_gemm({', '.join(f'{k}={v!r}' for k, v in CONFIG.items())})` at {SIZES}.",
        "",
        f"**Kill rate: {killed}/{len(mutants)}** (static error or hazard); {refused} refused as not modelled; "
        f"{sum(m.verdict == 'passes' for m in mutants)} passed (survivors: each must be a correct program; "
        f"`--gpu` runs them). The unmutated GEMM: {baseline.verdict}.",
        "",
        _SAFE_NOTES[mode],
        "",
        "| mutant | verdict | detail | GPU run (survivors) |",
        "|---|---|---|---|",
    ]
    for m in [baseline, *mutants]:
        lines.append(f"| {m.description.replace('|', '/')} | {m.verdict} | {m.detail.replace('|', '/')} | {m.gpu} |")
    text = "\n".join(lines) + "\n"
    default = ROOT / "benchmarks" / f"mutation_test_sm90{'_persistent' if args.persistent else ''}_results.md"
    Path(args.out or default).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
