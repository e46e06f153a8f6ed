"""Mutation test of the sync checker.

From each correct example, make every mutant that deletes one sync statement
or moves one Await's N by one, and run `sl.sync_check` on it. A mutant is
killed when the checker (or the static barrier rules it runs first) rejects
it. With --gpu, every surviving mutant is also built and run on the GPU
against its NumPy reference: a survivor must still compute the right result.

    python benchmarks/mutation_test.py [--gpu] [--out benchmarks/mutation_test_results.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import platform
import sys
import time
from pathlib import Path

import numpy as np
from exo.API import Procedure

import spork_lab as sl
from spork_lab.core.sync_stmts import sync_spec_of
from spork_lab.sync.mutants import sync_cursors, with_await_n, without_syncs

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
    for i, c in enumerate(sync_cursors(p)):
        node = c._impl._node
        spec = sync_spec_of(node)
        line = f"sync #{i} `{str(node).strip()}`"
        out.append(Mutant(example, f"delete {line}", without_syncs(p, [i])))
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


def run_on_gpu(m: Mutant, module) -> None:
    """Build the mutant and compare it with the example's NumPy reference on fresh random inputs."""
    import cupy

    try:
        built = getattr(sl.build([m.proc]), m.proc.name())
        args = module.make_args(np.random.default_rng())
        expected = module.reference(**{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()})
        dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        built(*dev.values())
        cupy.cuda.runtime.deviceSynchronize()
        bad = [k for k, want in expected.items() if not np.allclose(dev[k].get(), want, rtol=1e-5, atol=1e-4)]
        m.gpu = f"WRONG result in {', '.join(bad)}" if bad else "correct"
    except Exception as e:  # noqa: BLE001 -- any failure is the finding we record
        m.gpu = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="build and run surviving mutants on the local GPU")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "mutation_test_results.md"))
    args = parser.parse_args()

    all_mutants = []
    start = time.perf_counter()
    for module_name, proc_name, sizes in CORRECT:
        module = importlib.import_module(module_name)
        p = getattr(module, proc_name)
        p = p if isinstance(p, Procedure) else p()
        baseline = sl.sync_check(p, **sizes)
        if not baseline.ok:
            print(f"{module_name}.{proc_name} does not pass unmutated: {baseline.hazards[0]}")
            return 1
        for m in mutants_of(module_name, p):
            check(m, sizes)
            if args.gpu and m.verdict == "passes" and hasattr(module, "make_args"):
                run_on_gpu(m, module)
            all_mutants.append(m)
    elapsed = time.perf_counter() - start

    killed = sum(m.verdict != "passes" for m in all_mutants)
    lines = [
        "# Mutation test of the sync checker",
        "",
        f"Command: `python benchmarks/mutation_test.py{' --gpu' if args.gpu else ''}`; "
        f"machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}; "
        f"{elapsed:.1f} s.",
        "",
        f"**Kill rate: {killed}/{len(all_mutants)}** mutants rejected (static error or hazard).",
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
