"""Time the hand-written reference GEMMs (gemm_hand.cu) against cuBLAS on one GPU.

python3 sweep.py LIB.so [OUT.json] [--profile NAME]: for each variant in variants.inc, checks it
on fresh random inputs (output poisoned with NaN first) at a small non-square
shape and at 8192^3 against a float64 product, and times it at 8192^3 and
4096^3 (CUDA events, L2 flushed before each run, median). cuBLAS (PyTorch,
TF32 allowed for the tf32 rows) is timed in the same run on the same inputs.
Variants named `*_bt*` take B as its transpose ([N, K], K-major); cuBLAS is
timed on that layout too (`cublas_bt` rows). ONLY=REGEX in the environment
keeps the variants whose names match.
With --profile NAME only variant NAME runs, once at 512x768x384 and once at
8192^3 (the launch to give Nsight Compute: `ncu -k regex:^gemm$ --launch-skip 1`).
"""

import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import torch

DT = {"tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def variants():
    text = (Path(__file__).parent / "variants.inc").read_text()
    names = [m[1] for m in re.finditer(r"^V\((\w+),", text, re.M)]
    return [n for n in names if re.search(os.environ.get("ONLY", ""), n)]


def main():
    args = sys.argv[1:]
    profile = args[args.index("--profile") + 1] if "--profile" in args else None
    args = [a for a in args if a not in ("--profile", profile)]
    lib = ctypes.CDLL(args[0])
    out = args[1] if len(args) > 1 else None
    dev = torch.cuda.get_device_properties(0)
    flush = torch.empty(2 * dev.L2_cache_size, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream

    def timed(fn, reps):
        for _ in range(2):
            fn()
        ts = []
        for _ in range(reps):
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    def call(name, A, B, C):
        """B is [K, N], or [N, K] for a `_bt` variant."""
        M, K = A.shape
        N = B.shape[0] if "_bt" in name else B.shape[1]
        f = getattr(lib, name)
        rc = f(M, N, K, ctypes.c_void_p(A.data_ptr()), ctypes.c_void_p(B.data_ptr()), ctypes.c_void_p(C.data_ptr()),
               ctypes.c_void_p(stream))
        if rc:
            raise RuntimeError(f"{name}: launch returned {rc}")

    def rel_err(C, A, B, bt=False):
        ref = A.double() @ (B.double().t() if bt else B.double())
        return float((C.double() - ref).abs().max() / ref.abs().max())

    rows = []
    names = variants()
    if profile:
        dt = profile.split("_")[0]
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        for m, n, k in ((512, 768, 384), (8192, 8192, 8192)):
            bt = "_bt" in profile
            A = torch.randn(m, k, device="cuda").to(DT[dt])
            B = torch.randn(*((n, k) if bt else (k, n)), device="cuda").to(DT[dt])
            C = torch.full((m, n), float("nan"), device="cuda")
            call(profile, A, B, C)
            torch.cuda.synchronize()
            print(f"{profile} {m}x{n}x{k}: err {rel_err(C, A, B, bt):.1e}", flush=True)
        return
    for dt, tdt in DT.items():
        torch.backends.cuda.matmul.allow_tf32 = dt == "tf32"
        mine = [v for v in names if v.startswith(dt + "_")]
        if not mine:
            continue
        g = torch.Generator(device="cuda").manual_seed(1)
        big = {n: (torch.randn(n, n, device="cuda", generator=g).to(tdt), torch.randn(n, n, device="cuda", generator=g).to(tdt))
               for n in (8192, 4096)}
        big_t = {n: (A, B.t().contiguous()) for n, (A, B) in big.items()}
        cubs = {}
        for label, ops, bt in (("cublas", big, False), ("cublas_bt", big_t, True)):
            if bt and not any("_bt" in v for v in mine):
                continue
            mm = (lambda A, Bt: torch.matmul(A, Bt.t())) if bt else torch.matmul
            cub = cubs[bt] = {n: timed(lambda: mm(*ops[n]), 10 if n == 8192 else 20) for n in ops}
            cub_err = rel_err(mm(*ops[8192]).float(), *ops[8192], bt)
            for n in cub:
                rows.append(dict(kernel=label, dtype=dt, n=n, ms=cub[n], tflops=2 * n**3 / cub[n] / 1e9,
                                 err=cub_err if n == 8192 else None))
            print(f"{label} {dt}: {2 * 8192**3 / cub[8192] / 1e9:.1f} TFLOP/s at 8192, "
                  f"{2 * 4096**3 / cub[4096] / 1e9:.1f} at 4096, err {cub_err:.1e}", flush=True)
        for name in mine:
            bt = "_bt" in name
            cub = cubs[bt]
            try:
                A = torch.randn(512, 384, device="cuda").to(tdt)
                B = torch.randn(768, 384, device="cuda").to(tdt) if bt else torch.randn(384, 768, device="cuda").to(tdt)
                C = torch.full((512, 768), float("nan"), device="cuda")
                call(name, A, B, C)
                torch.cuda.synchronize()
                small = rel_err(C, A, B, bt)
                res = {}
                for n in (8192, 4096):
                    A, B = (big_t if bt else big)[n]
                    C = torch.full((n, n), float("nan"), device="cuda")
                    call(name, A, B, C)
                    torch.cuda.synchronize()
                    err = rel_err(C, A, B, bt) if n == 8192 else None
                    ms = timed(lambda: call(name, A, B, C), 10 if n == 8192 else 20)
                    res[n] = (ms, err)
                    rows.append(dict(kernel=name, dtype=dt, n=n, ms=ms, tflops=2 * n**3 / ms / 1e9, err=err, small_err=small,
                                     vs_cublas=cub[n] / ms))
                print(f"{name:34s} {2 * 8192**3 / res[8192][0] / 1e9:7.1f} TFLOP/s ({cub[8192] / res[8192][0]:.2f}x cuBLAS) "
                      f"4096: {2 * 4096**3 / res[4096][0] / 1e9:7.1f}  err {res[8192][1]:.1e} small {small:.1e}", flush=True)
            except Exception as e:  # noqa: BLE001 -- report and go on with the other variants
                print(f"{name}: FAILED {e}", flush=True)
                rows.append(dict(kernel=name, dtype=dt, error=str(e)))
        del big, big_t
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    meta = dict(gpu=dev.name, sms=dev.multi_processor_count, smi=smi, torch=torch.__version__)
    print(meta)
    if out:
        Path(out).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))


if __name__ == "__main__":
    main()
