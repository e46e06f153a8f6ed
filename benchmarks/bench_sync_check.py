"""Time sync_check on the 2-warp mbarrier ring of examples/sync_ring.py.

Run: python benchmarks/bench_sync_check.py [n ...]   (default n = 524288 floats)
Prints one line per n: best of 3 wall-clock runs (time.perf_counter), one process.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from sync_ring import ring_copy  # noqa: E402

from spork_lab.sync.checker import sync_check  # noqa: E402


def bench(n: int, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        report = sync_check(ring_copy, n=n)
        best = min(best, time.perf_counter() - t0)
        assert report.ok, str(report)
    return best


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] or [524288]
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    for n in sizes:
        print(f"ring_copy n={n}: {bench(n):.2f} s (best of 3)")
