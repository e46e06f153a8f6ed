"""compute-sanitizer racecheck and synccheck on the prebuilt Sm80 GEMMs at a small size: seconds, no scheduling.

    python3 benchmarks/sm80_sanitize.py DIR [--only NAME] [--out FILE.md]

DIR is a `benchmarks/gemm.py --prebuild` folder. Each kernel is compiled once
(build_library caches it), then run once per tool in a child process (`--one`)
under `compute-sanitizer --tool TOOL` at M = N = 256, K = 384 (every kernel's
tiles divide it, and K = 384 runs the pipeline's steady state and reuses ring
slots), on fresh random inputs, C poisoned with NaN, checked against a float64
product. Only CuPy and NumPy are loaded in the sanitized process (no PyTorch),
which keeps each run to seconds. Exit status 1 if any run is wrong or reports
a hazard.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
TOOLS = ["racecheck", "synccheck"]
SHAPE = (256, 256, 384)  # M, N, K


def run_one(folder: Path, name: str) -> int:
    """Run kernel `name` of the prebuild once on fresh inputs; print RESULT correct/WRONG."""
    import cupy
    from gemm import TOLERANCE, load_prebuilt
    from sm80_gemm import inputs  # (gemm puts examples/ on the path)

    (k, built), = [(k, b) for k, b in load_prebuilt(folder, name) if k.name == name]
    M, N, K = SHAPE
    A, B, A64, B64 = inputs(np.random.default_rng(), k.dtype, M, N, K, k.b_nk)
    C = cupy.full((M, N), np.nan, dtype=cupy.float32)
    built(M, N, K, cupy.asarray(A), cupy.asarray(B), C)
    cupy.cuda.runtime.deviceSynchronize()
    ref = A64 @ (B64.T if k.b_nk else B64)
    err = float(np.abs(C.get().astype(np.float64) - ref).max() / np.abs(ref).max())
    ok = err <= TOLERANCE[k.dtype]
    print("RESULT", "correct" if ok else "WRONG", f"max rel err {err:.1e}")
    return 0 if ok else 1


def summarize(output: str) -> str:
    found = re.findall(r"========= (?:RACECHECK|ERROR) SUMMARY: .*", output)
    return found[-1].replace("========= ", "") if found else "no summary (see log)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--only", default="", help="only the kernels whose name contains this")
    parser.add_argument("--one", help="(internal) run this kernel once")
    parser.add_argument("--out", type=Path)
    a = parser.parse_args()
    if a.one:
        return run_one(a.folder, a.one)
    import json

    from gemm import load_prebuilt

    names = [e["name"] for e in json.loads((a.folder / "index.json").read_text())["kernels"] if a.only in e["name"]]
    load_prebuilt(a.folder, a.only)  # compile them all (in parallel) before sanitizing
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        print("compute-sanitizer not found on PATH")
        return 1
    rows, bad = ["| kernel | M x N x K | tool | result | sanitizer summary |", "|---|---|---|---|---|"], 0
    for name in names:
        for tool in TOOLS:
            run = subprocess.run([sanitizer, "--tool", tool, sys.executable, __file__, str(a.folder), "--one", name],
                                 capture_output=True, text=True)
            out = run.stdout + run.stderr
            result = next((line[len("RESULT "):] for line in out.splitlines() if line.startswith("RESULT ")), "failed")
            summary = summarize(out)
            bad += run.returncode != 0 or not result.startswith("correct") or not re.search(r"\b0 errors", summary)
            rows.append(f"| {name} | {'x'.join(map(str, SHAPE))} | {tool} | {result} | {summary} |")
            print(rows[-1], flush=True)
            if a.out:  # after each run: a time limit that stops the script keeps the rows so far
                a.out.write_text("# compute-sanitizer on the Sm80 GEMMs (benchmarks/sm80_sanitize.py)\n\n" + "\n".join(rows) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
