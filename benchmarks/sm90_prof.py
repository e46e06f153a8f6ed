"""Profiling aids for the Sm90a GEMM in one device call (benchmarks/sm90_device.sh runs them).

    python3 benchmarks/sm90_prof.py names [MxNxK]            # the cuBLAS kernels gemm.py's comparisons run
    python3 benchmarks/sm90_prof.py run DIR NAME [MxNxK]     # under ncu: our prebuilt kernel NAME, then cuBLAS, twice

`names` answers what cuBLAS does differently (tile, cluster, cooperative or ping-pong, stream-K: its kernel
names say) without ncu; `run` gives ncu one launch of each after a warm-up, on fresh random inputs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _shape(args: list) -> tuple:
    return tuple(int(x) for x in (args[0] if args else "8192x8192x8192").split("x"))


def names(shape: tuple) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    M, N, K = shape
    for dt, tdt in (("tf32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        A, B = torch.randn(M, K, device="cuda").to(tdt), torch.randn(N, K, device="cuda").to(tdt)
        calls = {"matmul": lambda: torch.matmul(A, B.t())}
        if dt != "tf32":
            calls["mm f32 out"] = lambda: torch.mm(A, B.t(), out_dtype=torch.float32)
        for what, fn in calls.items():
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            kernels = sorted({e.key for e in prof.key_averages() if e.device_type.name == "CUDA"})
            print(f"cuBLAS {dt} {what} {M}x{N}x{K}: {kernels}", flush=True)


def run(folder: Path, name: str, shape: tuple) -> None:
    import torch

    from gemm import Runner, load_prebuilt

    [(k, built)] = [kb for kb in load_prebuilt(folder, name) if kb[0].name == name]  # `name` is also a prefix
    runner = Runner(k, built)
    torch.backends.cuda.matmul.allow_tf32 = k.dtype == "tf32"
    A, B, C = runner.inputs(shape)
    ours, theirs = runner.launcher(A, B, C), runner.cublas(A, B.t())
    for _ in range(2):
        ours()
        theirs()
    torch.cuda.synchronize()


if __name__ == "__main__":
    if sys.argv[1] == "names":
        names(_shape(sys.argv[2:]))
    else:
        run(Path(sys.argv[2]), sys.argv[3], _shape(sys.argv[4:]))
