"""One device call's Sm90a GEMM sweep: generated kernels, diagnostic variants of their CUDA, and the hand kernel,
checked and timed against cuBLAS in the same run.

    python3 benchmarks/sm90_sweep.py --out DIR [--dtypes tf32] [--variants base,wg,persist,both] [--hand DIR]

Candidates:
- `gen`: examples/sm90_gemm.py's `make_gemm(dt, BN=256, S=4, CL=2, G=8)` as generated;
- diagnostic variants of the generated CUDA text (measurements only; the
  language cannot express them yet, and the `wg` one relies on the hand
  kernel's unverified assumption): `wg` releases a stage once per warpgroup
  (thread 0 after its wait_group) instead of once per warp; `persist` keeps
  the ring running across tasks like the hand kernel (no per-task drain and
  cluster barrier; correct only when K / BK is a multiple of S, true for
  every shape here); `both`;
- `hand`: benchmarks/sm90_hand/gemm_hand.cu (a prebuilt gemm_hand.so; its best
  configuration per dtype from run 1).

Every candidate is first checked on fresh random inputs at CHECK shapes (non-square)
and at each timed shape (C poisoned with NaN; max|C - C64| / max|C64| against a
float64 product); then timed with benchmarks/gemm.py's `_time_pair` (ours and
cuBLAS alternating, CUDA events, L2 flushed, launch hidden behind a GPU spin, medians; and
again with the host's launch exposed, as run 3 measured). Libraries are built in
parallel first (nvcc takes most of a minute per kernel). Rows go to DIR/sweep.json;
a table is printed last.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "benchmarks"))

CHECK = [(2048, 768, 256), (2048, 2560, 512), (4096, 512, 1024)]  # M: a multiple of 128 * CL * G = 2048
TIMED = [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 14336, 4096)]
HAND_CONFIG = {"tf32": (0, 16), "f16": (5, 8), "bf16": (10, 16)}  # (config index, group) best in run 1
MAX_ERR = {"tf32": 2e-3, "f16": 1e-4, "bf16": 1e-4}
_BAR = 'asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory");'


def _patch_wg(cu: str) -> str:
    """Release once per warpgroup (arrival count 4 = 2 CTAs x 2 warpgroups) instead of once per warp."""
    init, arrive = "spork_mbar_init(&ring_r[i], 16u)", "if (threadIdx.x % 32 == 0) { for (unsigned c = 0; c < 2; ++c) spork_mbar_arrive_remote(&ring_r"
    assert cu.count(init) == 1 and cu.count(arrive) == 1
    return cu.replace(init, "spork_mbar_init(&ring_r[i], 4u)").replace(arrive, arrive.replace("% 32 ==", "% 128 =="))


def _patch_persist(cu: str) -> str:
    """The ring runs on across tasks: no per-task rebase of the producer's count, no drain, no cluster barrier."""
    lines, out, skip = cu.split("\n"), [], 0
    for n, line in enumerate(lines):
        if skip:
            skip -= 1
            continue
        s = line.strip()
        if re.fullmatch(r"for \(int i = 0; i < 1; \+\+i\) ring_[fr]b\[i\] = ring_[fr]w\[i\];", s):
            continue
        if s == "for (int i = 0; i < 1; ++i) {" and "const unsigned first" in lines[n + 1]:
            skip = 4  # the drain: first, for, wait, closing brace
            continue
        if s == _BAR and line.startswith("      asm"):  # in the task loop (the init and exit barriers stay)
            continue
        out.append(line)
    text = "\n".join(out)
    assert "const unsigned first" not in text and text.count(_BAR) == 2, "persist patch did not apply"
    return text


PATCHES = {"base": lambda cu: cu, "wg": _patch_wg, "persist": _patch_persist, "both": lambda cu: _patch_persist(_patch_wg(cu))}


def _build(job: tuple) -> str:
    from spork_lab.runtime import build_library

    sources, basename = job
    return str(build_library(sources, basename, "sm_90a"))


def generated(dtypes: list, variants: list) -> list:
    """[(name, dtype, callable(M, N, K, A, B, C) on torch tensors)], built in parallel."""
    import spork_lab as sl
    from sm90_gemm import make_gemm
    from spork_lab.codegen import lib_name
    from spork_lab.runtime import BuiltModule
    from spork_lab.runtime._args import proc_spec

    jobs, meta = [], []
    for dt in dtypes:
        p = make_gemm(dt, BN=256, S=4, CL=2, G=8)
        basename = f"sweep_{dt}"
        c, h, cu, cuh = sl.compile_procs_to_strings([p], basename, "sm_90a")
        for v in variants:
            jobs.append(((c, h, PATCHES[v](cu), cuh), basename))
            meta.append((f"gen_{v}", dt, p, basename))
    with concurrent.futures.ProcessPoolExecutor(max_workers=len(jobs) or 1) as pool:
        libs = list(pool.map(_build, jobs))
    out = []
    for lib, (name, dt, p, basename) in zip(libs, meta):
        fn = getattr(BuiltModule(Path(lib), lib_name(basename), [proc_spec(p._loopir_proc)]), str(p.name()))
        out.append((name, dt, _generated_call(fn)))
    return out


def _generated_call(fn):
    import cupy
    import torch

    from gemm import _cupy

    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def call(M, N, K, A, B, C):
        with stream:
            fn(M, N, K, _cupy(A), _cupy(B), _cupy(C))

    return call


def hand(folder: Path, dtypes: list) -> list:
    import torch

    lib = ctypes.CDLL(str(folder / "gemm_hand.so"))
    out = []
    for dt in dtypes:
        index, group = HAND_CONFIG[dt]

        def call(M, N, K, A, B, C, index=index, group=group):
            grid = ctypes.c_int(0)
            rc = lib.run_config(index, ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()),
                                ctypes.c_void_p(C.data_ptr()), M, N, K, group,
                                ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), ctypes.byref(grid))
            if rc:
                raise RuntimeError(f"hand kernel config {index}: error {rc}")

        out.append(("hand", dt, call))
    return out


def _inputs(dt: str, M: int, N: int, K: int):
    import torch

    tdt = {"tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dt]
    A = torch.randn(M, K, device="cuda").to(tdt)
    B = torch.randn(N, K, device="cuda").to(tdt)
    return A, B, torch.full((M, N), float("nan"), device="cuda")


def _error(call, dt: str, shape: tuple, inputs=None) -> float:
    import torch

    M, N, K = shape
    A, B, C = inputs or _inputs(dt, M, N, K)
    C.fill_(float("nan"))
    call(M, N, K, A, B, C)
    torch.cuda.synchronize()
    if torch.isnan(C).any():
        return float("nan")
    ref = A.double() @ B.double().t()
    return float(((C.double() - ref).abs().max() / ref.abs().max()).item())


def main() -> int:
    import torch

    from gemm import _time_pair

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtypes", default="tf32")
    parser.add_argument("--hand-dtypes", default="tf32,f16,bf16")
    parser.add_argument("--variants", default="base,wg,persist,both")
    parser.add_argument("--hand", type=Path, default=None, help="folder with a prebuilt gemm_hand.so")
    parser.add_argument("--reps", type=int, default=15)
    a = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    cands = generated(a.dtypes.split(","), a.variants.split(","))
    if a.hand:
        cands += hand(a.hand, a.hand_dtypes.split(","))
    rows = []
    for name, dt, call in cands:
        errs = {f"{M}x{N}x{K}": _error(call, dt, (M, N, K)) for M, N, K in CHECK}
        ok = all(e <= MAX_ERR[dt] for e in errs.values())
        print(f"{name} {dt}: check {errs} {'ok' if ok else 'FAILED'}", flush=True)
        for shape in TIMED:
            M, N, K = shape
            A, B, C = _inputs(dt, M, N, K)
            err = _error(call, dt, shape, (A, B, C))
            ms, cublas_ms = _time_pair(lambda: call(M, N, K, A, B, C), lambda: torch.matmul(A, B.t()), a.reps)
            host_ms, _ = _time_pair(lambda: call(M, N, K, A, B, C), lambda: torch.matmul(A, B.t()), 5, hide_launch=False)
            flops = 2 * M * N * K
            rows.append({"kernel": name, "dtype": dt, "M": M, "N": N, "K": K, "tflops": round(flops / ms / 1e9, 1),
                         "cublas_tflops": round(flops / cublas_ms / 1e9, 1), "ratio": round(cublas_ms / ms, 3),
                         "ms": ms, "ms_launch_exposed": host_ms,
                         "max_rel_err": err, "check": errs, "check_ok": ok and err <= MAX_ERR[dt],
                         "gpu": torch.cuda.get_device_name()})
            print(f"{name:12} {dt:5} {M}x{N}x{K}: {rows[-1]['tflops']:6.1f} TFLOP/s vs cuBLAS {rows[-1]['cublas_tflops']:6.1f} "
                  f"({rows[-1]['ratio']:.3f}x) err {err:.1e}; {ms:.3f} ms, {host_ms:.3f} ms with the launch exposed", flush=True)
            del A, B, C
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("\nkernel        dtype shape              TFLOP/s  cuBLAS  ratio  ok")
    for r in rows:
        print(f"{r['kernel']:12} {r['dtype']:5} {r['M']}x{r['N']}x{r['K']:<6} {r['tflops']:8.1f} {r['cublas_tflops']:7.1f} "
              f"{r['ratio']:6.3f}  {r['check_ok']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
