"""GEMM benchmark: spork_lab kernels against cuBLAS on the local GPU -> benchmarks/results/gemm.json.

    python3 benchmarks/gemm.py [--sizes 8192 4096] [--only sm80]

For each kernel in KERNELS and each size n (M = N = K = n), on fresh random
inputs: the kernel's output is poisoned with NaN, checked against a float64
product on the GPU (max|C - C64| / max|C64|, every element written), then the
kernel and cuBLAS (PyTorch's matmul on the same input tensors; TF32 allowed for
tf32 rows) are timed by `sl.benchmark` in the same run: CUDA events, L2 flushed
before each run, median. Before timing, each kernel is also checked at small
non-square shapes. Records replace those of the same kernel, dtype and shape in
the JSON file, so platforms can be run separately.

To add a kernel (e.g. Sm90a), append a `Kernel` to KERNELS: its proc, platform,
dtype (tf32, f16 or bf16) and the small shapes its tiles allow.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
RESULTS = ROOT / "benchmarks" / "results" / "gemm.json"


@dataclass(frozen=True)
class Kernel:
    name: str
    platform: str
    dtype: str  # tf32 (f32 data), f16 or bf16; C is f32
    proc: object
    check_shapes: tuple  # (M, N, K) small shapes, non-square, checked before timing


def kernels() -> list:
    import sm80_gemm

    small = ((256, 512, 384), (512, 256, 256), (384, 768, 512))
    return [
        Kernel(f"sm80_gemm_{d}", "sm80", d, getattr(sm80_gemm, f"sm80_gemm_{d}"), small) for d in ("tf32", "f16", "bf16")
    ]


def _torch_dtype(torch, dtype: str):
    return {"tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]


def _as_cupy(cupy, torch, t):
    """A CuPy view of a torch tensor (bf16 as its int16 bits: CuPy has no bfloat16)."""
    return cupy.asarray(t.view(torch.int16) if t.dtype == torch.bfloat16 else t)


def _rel_err(torch, C, A, B) -> float:
    ref = A.double() @ B.double()
    if not bool(torch.isfinite(C).all()):
        return float("inf")  # NaN left by the poison: an element was not written
    return float((C.double() - ref).abs().max() / ref.abs().max())


def run_kernel(k: Kernel, sizes, gpu: str, date: str) -> list:
    import cupy
    import torch

    import spork_lab as sl

    built = getattr(sl.build([k.proc]), k.proc.name())
    tdt = _torch_dtype(torch, k.dtype)
    torch.backends.cuda.matmul.allow_tf32 = k.dtype == "tf32"
    gen = torch.Generator(device="cuda").manual_seed(0)

    def call(A, B, C):
        M, K = A.shape
        built(M, B.shape[1], K, _as_cupy(cupy, torch, A), _as_cupy(cupy, torch, B), cupy.asarray(C))

    def fresh(M, N, K):
        A = torch.randn(M, K, device="cuda", generator=gen).to(tdt)
        B = torch.randn(K, N, device="cuda", generator=gen).to(tdt)
        return A, B, torch.full((M, N), float("nan"), device="cuda")

    for M, N, K in k.check_shapes:
        A, B, C = fresh(M, N, K)
        call(A, B, C)
        torch.cuda.synchronize()
        err = _rel_err(torch, C, A, B)
        tol = 2e-3 if k.dtype == "tf32" else 1e-4
        if not err <= tol or built.module.lib[f"{built.module.lib_name}_last_error"]() != 0:
            raise RuntimeError(f"{k.name} wrong at {M}x{N}x{K}: max rel err {err:.2e} (tolerance {tol:.0e})")
    records = []
    for n in sizes:
        A, B, C = fresh(n, n, n)
        call(A, B, C)
        torch.cuda.synchronize()
        err = _rel_err(torch, C, A, B)
        out = torch.empty(n, n, device="cuda", dtype=tdt)
        r = sl.benchmark(built, (n, n, n, _as_cupy(cupy, torch, A), _as_cupy(cupy, torch, B), cupy.asarray(C)),
                         reference=lambda *_: torch.matmul(A, B, out=out), reps=20 if n >= 8192 else 40)  # fmt: skip
        tflops = lambda ms: 2 * n**3 / ms / 1e9  # noqa: E731
        rec = dict(kernel=k.name, platform=k.platform, dtype=k.dtype, M=n, N=n, K=n, tflops=round(tflops(r.median_ms), 1),
                   cublas_tflops=round(tflops(r.reference_median_ms), 1), max_rel_err=err, gpu=gpu, date=date)  # fmt: skip
        print(f"{k.name:18s} {n:5d}^3 {rec['tflops']:7.1f} TFLOP/s  cuBLAS {rec['cublas_tflops']:7.1f}  "
              f"({rec['tflops'] / rec['cublas_tflops']:.2f}x)  max rel err {err:.1e}", flush=True)
        records.append(rec)
    return records


def merge(old: list, new: list) -> list:
    key = lambda r: (r["kernel"], r["dtype"], r["M"], r["N"], r["K"])  # noqa: E731
    fresh = {key(r) for r in new}
    return [r for r in old if key(r) not in fresh] + new


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8192, 4096])
    ap.add_argument("--only", default="", help="run the kernels whose name or platform contains this")
    args = ap.parse_args()
    import torch

    gpu = torch.cuda.get_device_name(0)
    date = datetime.date.today().isoformat()
    records = []
    for k in kernels():
        if args.only in k.name or args.only == k.platform:
            records += run_kernel(k, args.sizes, gpu, date)
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(merge(old, records), indent=1) + "\n")


if __name__ == "__main__":
    main()
