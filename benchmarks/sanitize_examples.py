"""Run every GPU example under compute-sanitizer's racecheck and synccheck tools.

Each example proc is built once, then run once per tool in a child process
(`--one MODULE:PROC`) under `compute-sanitizer --tool TOOL`, on a small size.
The table of hazards found goes to benchmarks/sanitizer_results.md.

    python benchmarks/sanitize_examples.py
    python benchmarks/sanitize_examples.py --only dist_gemm,dist_cluster_smem --out /tmp/dist.md
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

# Every runnable example, at a size small enough for the sanitizers.
SMALL = {"vec_add": 1 << 14, "reverse_tiles": 256 * 64, "block_reduce": 256 * 64, "warp_specialized_copy": 512 * 32,
         "sync_ring": 1024, "cp_async_double_buffer": 1 << 14, "mbarrier_ring_tasks": 256 * 64,
         "event_two_stage": 1 << 14, "sm80_mma_gemm": 128, "index_arithmetic": 64, "dist_gemm": 128,
         "dist_cluster_smem": 256 * 4, "sm80_gemm": 256, "sm90_tma_wgmma": 256, "sm90_rmem_a": 256, "sm90_gemm": 512,
         "sm90_tma_store": 256, "sm90_persistent_store": 16, "stepwise_gemm": 128, "pipelined_tiles": 1024 * 16,
         "smem_transpose": 64}  # fmt: skip
TOOLS = ["racecheck", "synccheck"]


def wrong_outputs(module, p, built, size: dict) -> list:
    """Run `built` (proc p of example `module`) once on fresh random inputs, make_args(**size); the names of the
    outputs that differ from the example's reference (within its TOLERANCE)."""
    import cupy

    from spork_lab.runtime import example_case

    args, expected = example_case(module, p, np.random.default_rng(), **size)
    dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
    built(*dev.values())
    cupy.cuda.runtime.deviceSynchronize()
    tolerance = getattr(module, "TOLERANCE", dict(rtol=1e-5, atol=1e-4))  # e.g. looser for tf32 tensor cores
    return [k for k, want in expected.items() if not np.allclose(dev[k].get(), want, **tolerance)]


def procs_of(module) -> list:
    """The example's procs to run: its PROCS, or what its `sanitized_procs()` adds to them (procs too slow to
    schedule at import, such as sm90_gemm's tutorial steps)."""
    return module.sanitized_procs() if hasattr(module, "sanitized_procs") else module.PROCS


def run_one(target: str) -> int:
    """Build and run one example proc once on fresh random inputs; exit 1 on a wrong result."""
    import spork_lab as sl

    module_name, proc_name = target.split(":")
    module = importlib.import_module(module_name)
    p = next(q for q in procs_of(module) if q.name() == proc_name)
    built = getattr(sl.build([p]), proc_name)
    ok = not wrong_outputs(module, p, built, {"n": SMALL[module_name]})
    print("RESULT", "correct" if ok else "WRONG")
    return 0 if ok else 1


def _last_line(output: str) -> str:
    """The program's own last line (a RESULT line, or the error that stopped it), for a failed run's row."""
    mine = [line for line in output.splitlines() if line.strip() and not line.startswith("=========")]
    return mine[-1].strip()[:160].replace("|", "/") if mine else "no output"


def summarize(output: str) -> str:
    """compute-sanitizer's own summary line (hazard/error counts)."""
    found = re.findall(r"========= (?:RACECHECK|ERROR) SUMMARY: .*", output)
    return found[-1].replace("========= ", "") if found else "no summary (see log)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help="MODULE:PROC: run one example (used under compute-sanitizer)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "sanitizer_results.md"))
    parser.add_argument("--only", help="comma-separated example modules (default: every one in SMALL)")
    args = parser.parse_args()
    if args.one:
        return run_one(args.one)

    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        print("compute-sanitizer not found on PATH")
        return 1
    rows = ["| example | proc | tool | result | sanitizer summary |", "|---|---|---|---|---|"]
    for module_name in args.only.split(",") if args.only else SMALL:
        for p in procs_of(importlib.import_module(module_name)):
            target = f"{module_name}:{p.name()}"
            subprocess.run([sys.executable, __file__, "--one", target], capture_output=True)  # build (cached)
            for tool in TOOLS:
                run = subprocess.run([sanitizer, "--tool", tool, sys.executable, __file__, "--one", target],
                                     capture_output=True, text=True)
                out = run.stdout + run.stderr
                result = "correct" if "RESULT correct" in out else "WRONG or failed: " + _last_line(out)
                rows.append(f"| {module_name} | {p.name()} | {tool} | {result} | {summarize(out)} |")
                print(rows[-1], flush=True)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    text = "# compute-sanitizer on the examples\n\nGPU: " + gpu.stdout.strip() + "\n\n" + "\n".join(rows) + "\n"
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
