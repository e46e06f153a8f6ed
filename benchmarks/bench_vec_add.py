"""vec_add at 2^28 float32 on the local GPU vs CuPy's `x + y`, both moving 3 x 4 bytes per element.

Run: python benchmarks/bench_vec_add.py [results file]; prints one line per variant.
"""

from __future__ import annotations

import sys
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from vec_add import PROCS  # noqa: E402

import spork_lab as sl  # noqa: E402

N = 1 << 28


def main() -> None:
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    lines = [f"device: {props['name'].decode()}, n = 2^28 float32, CUDA events, L2 flushed, median of 50"]
    x = cupy.random.standard_normal(N, dtype=cupy.float32)
    y = cupy.random.standard_normal(N, dtype=cupy.float32)
    gbytes = 3 * N * 4 / 1e9
    cupy_ms = None
    for p in PROCS:
        built = getattr(sl.build([p]), p.name())
        y0 = y.copy()
        built(N, x, y0)
        assert cupy.allclose(y0, y + x), f"{p.name()} gave a wrong result"
        r = sl.benchmark(built, (N, x, y0), reference=lambda n, a, b: a + b)
        cupy_ms = r.reference_median_ms
        lines.append(
            f"{p.name():14s} {r.median_ms:.3f} ms ({gbytes / r.median_ms * 1e3:.0f} GB/s, p20-p80 "
            f"{r.p20_ms:.3f}-{r.p80_ms:.3f} ms) = {100 * cupy_ms / r.median_ms:.1f}% of CuPy x + y"
        )
    lines.append(f"cupy x + y     {cupy_ms:.3f} ms ({gbytes / cupy_ms * 1e3:.0f} GB/s)")
    text = "\n".join(lines)
    print(text)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text + "\n")


if __name__ == "__main__":
    main()
