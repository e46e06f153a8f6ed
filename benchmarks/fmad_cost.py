"""What sl.build's default -fmad=false costs the kernels whose products are scalar code, against nvcc's -fmad=true.

Run on a GPU: python benchmarks/fmad_cost.py [results file]. The examples' scalar-FMA GEMMs (the tutorial's
gemm_smem, dist_gemm's register tile) at M = N = K = 2048 on fresh normal inputs: each build is checked against
run_cpu at 256^3 (exactly with -fmad=false, within an ulp of the operands' magnitude with -fmad=true), then timed
with sl.benchmark (CUDA events, L2 flushed, median of 30), the two builds alternating twice.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from dist_gemm import dist_register_tile  # noqa: E402
from stepwise_gemm import gemm_smem  # noqa: E402

import spork_lab as sl  # noqa: E402

FLAGS = {"-fmad=false (default)": [], "-fmad=true": ["-fmad=true"]}


def _inputs(n: int, rng: np.random.Generator) -> tuple:
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    return n, n, n, a, b, np.zeros((n, n), np.float32)


def _check(built, p, exact: bool, rng: np.random.Generator) -> str:
    host = _inputs(256, rng)
    want = sl.run_cpu(p, *host)["C"]
    dev = [cupy.asarray(v) if isinstance(v, np.ndarray) else v for v in host]
    built(*dev)
    cupy.cuda.runtime.deviceSynchronize()
    got = dev[5].get()
    if exact:
        assert np.array_equal(got, want), f"{p.name()}: not run_cpu's result"
        return "== run_cpu"
    bound = 256 * np.float32(2**-23) * (np.abs(host[3]) @ np.abs(host[4]))
    assert (np.abs(got - want) <= bound).all(), f"{p.name()}: further from run_cpu than fma rounding explains"
    differ = int((got != want).sum())
    return f"{differ} of {got.size} elements differ from run_cpu (within fma rounding)"


def main() -> None:
    rng = np.random.default_rng()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    lines = [f"device: {props['name'].decode()}; M = N = K = 2048 f32; median of 30, L2 flushed; two alternations"]
    for p in (gemm_smem, dist_register_tile):
        builds = {label: getattr(sl.build([p], flags=flags), p.name()) for label, flags in FLAGS.items()}
        for label, built in builds.items():
            lines.append(f"{p.name()} {label}: {_check(built, p, not FLAGS[label], rng)}")
        args = [cupy.asarray(v) if isinstance(v, np.ndarray) else v for v in _inputs(2048, rng)]
        times = {label: [] for label in builds}
        for _ in range(2):
            for label, built in builds.items():
                times[label].append(sl.benchmark(built, args, reps=30).median_ms)
        tflops = {label: 2 * 2048**3 / min(t) / 1e9 for label, t in times.items()}
        exact, fused = tflops.values()
        for label, t in times.items():
            lines.append(f"{p.name()} {label}: {', '.join(f'{x:.3f}' for x in t)} ms ({tflops[label]:.2f} TFLOP/s)")
        lines.append(f"{p.name()}: -fmad=false runs at {exact / fused:.3f}x the speed of -fmad=true")
    text = "\n".join(lines)
    print(text)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text + "\n")


if __name__ == "__main__":
    main()
