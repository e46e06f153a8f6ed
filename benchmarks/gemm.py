"""GEMM benchmark: spork_lab's generated kernels against cuBLAS, same inputs, same run -> results/gemm.json.

    python3 benchmarks/gemm.py --platform {sm80,sm90} [--dtypes tf32,f16,bf16] [--shapes 8192x8192x8192,...] [--sweep]

Every row of results/gemm.json (replaced in place, keyed by kernel, platform,
dtype and shape) is {"kernel", "platform", "dtype", "M", "N", "K", "tflops",
"cublas_tflops", "max_rel_err", "gpu", "date"} plus "layout" and "cublas"
(what cuBLAS was asked). Method: each kernel is first checked on fresh random
inputs at its small `checks` shapes (one non-square), C poisoned with NaN,
against a float64 product (max|C - C64| / max|C64|); then, per timed shape,
fresh random normal inputs, the same check, and `--reps` timed pairs, ours
and cuBLAS (PyTorch matmul, TF32 allowed for tf32 rows) alternating on one
stream (CUDA events, L2 flushed before each run), medians compared, so both
see the same clocks and temperature (the card is power-limited under GEMMs).
The kernel's arguments are prepared before timing, and a ~1 ms GPU spin queued
before the start event keeps the host's work of a call (ctypes, argument checks,
tensor-map encoding) out of the measured time (`--show-launch` leaves it in).

The Sm90 defaults include `..._q8_steps`: make_gemm's persistent kernel of the
row before it (f32 C) as examples/sm90_gemm.py's STEPS reach it from the naive
loop nest, which the tutorial replays.

`--sweep` times every candidate tile configuration of the platform instead of
its default one. Scheduling and nvcc take minutes, so a sweep can be built
here and timed on the GPU machine:

    python3 benchmarks/gemm.py --platform sm80 --sweep --prebuild DIR --arch sm_90a   # no GPU needed
    python3 benchmarks/gemm.py --prebuilt DIR [--shapes ...]                          # on the GPU

DIR holds each kernel's generated sources and index.json (name, platform, dtype,
layout, and the text of a proc with the kernel's parameters and assertions, from
which the argument checks are rebuilt without scheduling again); the GPU machine
compiles them with its nvcc, in parallel.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "gemm.json"
sys.path.insert(0, str(ROOT / "examples"))

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 14336, 4096)]
TOLERANCE = {"tf32": 2e-3, "f16": 1e-4, "bf16": 1e-4}  # max rel err; f16/bf16 products are exact in f32
OUT_TOLERANCE = {"f16": 1e-3, "bf16": 8e-3}  # a 16-bit C adds its rounding (half an ulp of the largest element)
TORCH_DTYPES = {"tf32": "float32", "f32": "float32", "f16": "float16", "bf16": "bfloat16"}
SOURCE_EXTS = ("c", "h", "cu", "cuh")  # what compile_procs_to_strings returns, in order
LAYOUT_KN = "C[M,N] f32 = A[M,K] @ B[K,N], row-major, f32 accumulation"
LAYOUT_NK = "C[M,N] f32 = A[M,K] @ B[N,K]^T, row-major, f32 accumulation"
SM90_SIGNATURE_BODY = """
    for m in seq(0, M):
        for n in seq(0, N):
            C[m, n] = 0.0
            for k in seq(0, K):
                C[m, n] += A[m, k] * B[n, k]
"""


@dataclass(frozen=True)
class Kernel:
    """One kernel to time: `schedule()` gives its proc (slow); `signature` is the text of a proc with the same
    parameters and assertions (parsed on the GPU machine to check arguments of a prebuilt library), or None
    where the kernel cannot be prebuilt; `checks` are the small (M, N, K) checked before timing, one non-square."""

    name: str
    platform: str
    dtype: str  # tf32 (f32 data), f16 or bf16
    layout: str
    b_nk: bool  # B is given as [N, K] (C = A @ B^T) rather than [K, N]
    schedule: Callable
    signature: Optional[str]
    checks: tuple
    out: str = "f32"  # C's type: f32, or the 16-bit input type (rounded from f32 accumulators)


# Sm80 configurations tried by --sweep (benchmarks/sm80_gemm_notes.md has their times).
_SM80_VARIANTS = [{}, dict(BM=256, BN=128), dict(S=3)]
SM80_SWEEP = {d: _SM80_VARIANTS + [dict(fragments_ahead=d == "tf32")] for d in ("tf32", "f16", "bf16")}  # other pipeline
SM80_SWEEP["tf32"].append(dict(fragments_ahead=False))  # (for tf32 with B given as [N, K], whose default has them)


def sm80_kernels(dtype: str, sweep: bool) -> list:
    import sm80_gemm as g

    bases = [c for c in g.CONFIGS.values() if c.dtype == dtype]  # tf32: B given as [K, N] and as [N, K]
    configs = list(dict.fromkeys(dataclasses.replace(b, **kw) for b in bases for kw in SM80_SWEEP[dtype])) if sweep else bases
    return [
        Kernel(f"{cfg.name}_{cfg.tiles}" if sweep else cfg.name, "sm80", dtype, LAYOUT_NK if cfg.b_nk else LAYOUT_KN,
               cfg.b_nk, lambda c=cfg: getattr(g, c.name) if c in bases else g.schedule(g.naive(c), c),
               str(g.naive(cfg)), ((256, 512, 384), (512, 256, 256)))
        for cfg in configs
    ] + [  # the ring built by hand (HAND_STEPS, no fragments ahead): the same CUDA as pipeline_loop's without them
        Kernel(f"{cfg.name}_hand" if not sweep else f"{cfg.name}_{cfg.tiles}_hand", "sm80", dtype, LAYOUT_KN, False,
               lambda c=cfg: g.schedule_by_hand(c), str(g.rename(g.naive(cfg), f"{cfg.name}_hand")),
               ((256, 512, 384), (512, 256, 256)))
        for cfg in dict.fromkeys(dataclasses.replace(c, fragments_ahead=False) for c in configs if not (c.b_nk or c.swap_ab))
    ]  # fmt: skip


def sm90_kernels(dtype: str, sweep: bool) -> list:
    """The Sm90a GEMM: C of the input type (what cuBLAS writes for f16/bf16) and C f32, each compared with cuBLAS
    asked for the same output type; --sweep adds the candidates of SM90_SWEEP."""
    from sm90_gemm import CONFIGS, Config, make_gemm, naive, schedule

    from spork_lab.scheduling import rename

    configs = CONFIGS[dtype] + (SM90_SWEEP[dtype] if sweep else [])
    kernels = []
    for cfg in configs:
        p = make_gemm(dtype, **cfg)
        name, header = str(p.name()), str(p).split("    A_tm = ")[0]  # parameters and assertions
        out = cfg.get("out", "f32")
        m = 128 * cfg.get("CL", 2) * cfg.get("G", 8)  # a multiple of 128 CL G
        bn = cfg.get("BN", 256)
        nq = bn * cfg.get("Q", 1)  # a persistent GEMM's columns: a multiple of its Q column lanes' tiles
        kc = 64 * cfg.get("S", 4) if cfg.get("Q") else 256  # a persistent GEMM's K: a multiple of S K-blocks
        checks = ((1000, 1000, 1000), (333, 777, 264)) if cfg.get("clip") else ((m, 3 * nq, kc), (m, 10 * nq, 2 * kc))
        layout = LAYOUT_NK if out == "f32" else LAYOUT_NK.replace("f32 =", f"{out} =", 1)
        kernels.append(Kernel(name, "sm90", dtype, layout, True, lambda p=p: p, header + SM90_SIGNATURE_BODY, checks,
                              out))
        if name == Config(dtype).name:  # the same kernel reached by the tutorial's STEPS from the naive loop nest
            steps = lambda n=f"{name}_steps", c=Config(dtype): rename(schedule(naive(c), c), n)  # noqa: E731
            kernels.append(Kernel(f"{name}_steps", "sm90", dtype, layout, True, steps,
                                  header.replace(name, f"{name}_steps", 1) + SM90_SIGNATURE_BODY, checks, out))
    return kernels


SM90_SWEEP = {  # tried by --sweep besides examples/sm90_gemm.py's CONFIGS: raster groups (run 6: G = 8 best), K-blocks
    # of half a 128-byte swizzle row in twice the stages (the same shared memory, a longer lead for TMA; run 9),
    # narrower wgmma (NW columns each; cuBLAS's 128 x 320 kernel issues m64n64k16; run 9) and 128 x 320 tiles
    # (cuBLAS's; run 10 at N a multiple of 320), 128 x 256 with partial tiles (`clip`: any M, N; run 12), and
    # 128 x 320 in 3 stages (cuBLAS's `64x3`) or other raster groups (run 13); tiles 192, 224 and 240 wide, whose
    # last round fits the 66 clusters better at 8192^3, and 128 x 256 in 3 stages (run 17); the 128 x 256 tile with its
    # tasks as cuda_tasks (one per tile, a barrier at each task's end), as before run 18 made the GEMM persistent by hand;
    # with partial tiles, persistent on 4 x 16 and 16 x 4 clusters (run 19: grids that share 12 x 32 and 32 x 12 tiles
    # evenly); clusters of 4 CTAs, each loading a quarter of the multicast B tile (run 20: an H100 holds only 30 at once);
    # the persistent GEMM's tiles stored by TMA from shared memory (run 25)
    "tf32": [dict(G=16), dict(G=4), dict(SW=64, S=8), dict(NW=64), dict(NW=128), dict(BN=320, NW=160), dict(clip=True),
             dict(BN=320, NW=160, clip=True, S=3), dict(BN=320, NW=160, clip=True, G=16), dict(),
             dict(CL=4, G=4, Q=8), dict(Q=8, tma_store=2), dict(Q=8, S=3), dict(Q=8, S=3, tma_store=4)],
    "f16": [dict(G=16, out="f16"), dict(G=4, out="f16"), dict(SW=64, S=8, out="f16"), dict(SW=64, S=6, out="f16"),
            dict(NW=64, out="f16"), dict(NW=128, out="f16"), dict(NW=64), dict(BN=320, NW=160, out="f16"),
            dict(BN=320, NW=64, out="f16"), dict(BN=320, NW=160), dict(out="f16", clip=True),
            dict(BN=320, NW=160, out="f16", clip=True, S=3), dict(BN=320, NW=160, out="f16", clip=True, G=4),
            dict(BN=320, NW=160, out="f16", clip=True, G=16), dict(BN=224, out="f16", clip=True),
            dict(BN=240, out="f16", clip=True), dict(BN=192, out="f16", clip=True), dict(BN=224, S=5, out="f16", clip=True),
            dict(S=3, out="f16"), dict(out="f16"), dict(), dict(out="f16", clip=True, G=4, Q=16),
            dict(out="f16", clip=True, G=16, Q=4), dict(CL=4, G=4, Q=8, out="f16"), dict(out="f16", Q=8, tma_store=2),
            dict(out="f16", Q=8, S=3), dict(out="f16", Q=8, S=3, tma_store=4)],
    "bf16": [dict(G=16, out="bf16"), dict(G=4, out="bf16"), dict(SW=64, S=8, out="bf16"), dict(NW=64, out="bf16"),
             dict(BN=320, NW=160, out="bf16"), dict(out="bf16", clip=True), dict(out="bf16"), dict(),
             dict(CL=4, G=4, Q=8, out="bf16"), dict(out="bf16", Q=8, tma_store=2),
             dict(out="bf16", Q=8, S=3), dict(out="bf16", Q=8, S=3, tma_store=4)],
}


PLATFORMS = {"sm80": sm80_kernels, "sm90": sm90_kernels}


def _time_pair(ours, theirs, reps: int, hide_launch: bool = True) -> tuple:
    """Median ms of ours() and theirs(), alternating, L2 flushed before each (torch events on its current stream).

    With hide_launch the GPU is kept busy (a ~1 ms spin) while the host records the start event and launches,
    so the time between the events is the kernel's, not the host's launch overhead (ctypes, argument checks,
    tensor map encoding), which a 256 MB flush alone does not always hide.
    """
    import torch

    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(3):
        ours()
        theirs()
    times = ([], [])
    for _ in range(reps):
        for fn, out in ((ours, times[0]), (theirs, times[1])):
            flush.zero_()
            if hide_launch:
                torch.cuda._sleep(2_000_000)  # cycles
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
    return statistics.median(times[0]), statistics.median(times[1])


def _cupy(t):
    """A CuPy view of a torch tensor (bf16 as its bits: NumPy and CuPy have no bfloat16)."""
    import cupy
    import torch

    return cupy.from_dlpack(t.view(torch.int16) if t.dtype == torch.bfloat16 else t)


class Runner:
    """One built kernel on the GPU: fresh inputs, the float64 check, the timed pair against cuBLAS."""

    def __init__(self, k: Kernel, built):
        import cupy
        import torch

        self.k, self.built = k, built
        self.stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream())  # the CUDA stream protocol
        self.tdt = {"tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[k.dtype]

    def inputs(self, shape: tuple) -> tuple:
        import torch

        M, N, K = shape
        A = torch.randn(M, K, device="cuda").to(self.tdt)
        B = torch.randn(*((N, K) if self.k.b_nk else (K, N)), device="cuda").to(self.tdt)
        return A, B, torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, TORCH_DTYPES[self.k.out]))

    def launcher(self, A, B, C) -> Callable:
        """A function that runs the kernel on A, B, C; the CuPy views are made once, outside the timed calls."""
        args = (A.shape[0], C.shape[1], A.shape[1], *(_cupy(x) for x in (A, B, C)))

        def run():
            with self.stream:
                self.built(*args)

        return run

    def broken_assertion(self, shape: tuple) -> str | None:
        """The kernel's first assertion that (M, N, K) = shape breaks (e.g. a persistent GEMM's K: a multiple of its
        ring's S K-blocks), which the timed sweep reports and passes over; None where they all hold."""
        from spork_lab.runtime._args import broken_assertion

        pred = broken_assertion(self.built.spec, dict(zip((a.name for a in self.built.spec.args if a.kind == "int"), shape)))
        return None if pred is None else str(pred)

    def checked(self, shape: tuple) -> tuple:
        """(A, B, C, max rel err) after one run on fresh inputs; RuntimeError past the tolerance or on a CUDA error."""
        import torch

        A, B, C = self.inputs(shape)
        self.launcher(A, B, C)()
        torch.cuda.synchronize()
        ref = A.double() @ (B.double().t() if self.k.b_nk else B.double())
        err = float(((C.double() - ref).abs().max() / ref.abs().max()).item())  # NaN (never <= tol) if unwritten
        lib = self.built.module
        tol = TOLERANCE[self.k.dtype] if self.k.out == "f32" else OUT_TOLERANCE[self.k.out]
        if not err <= tol or getattr(lib.lib, f"{lib.lib_name}_last_error")() != 0:
            raise RuntimeError(f"{self.k.name} wrong at {'x'.join(map(str, shape))}: max rel err {err:.2e}")
        return A, B, C, err

    def row(self, shape: tuple, reps: int, hide_launch: bool) -> dict:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = self.k.dtype == "tf32"
        A, B, C, err = self.checked(shape)
        Bt = B.t() if self.k.b_nk else B
        ms, cublas_ms = _time_pair(self.launcher(A, B, C), self.cublas(A, Bt), reps, hide_launch)
        M, N, K = shape
        flops = 2 * M * N * K
        k = self.k
        return {
            "kernel": k.name, "platform": k.platform, "dtype": k.dtype, "M": M, "N": N, "K": K,
            "tflops": round(flops / ms / 1e9, 1), "cublas_tflops": round(flops / cublas_ms / 1e9, 1),
            "max_rel_err": err, "gpu": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "layout": k.layout,
            "cublas": self.cublas_text(),
        }  # fmt: skip

    def _f32_out(self) -> bool:
        """cuBLAS is asked for an f32 product of 16-bit inputs (torch.mm's out_dtype), like our f32 C (the Sm90 rows;
        the Sm80 rows compare with cuBLAS's 16-bit product, as they always did)."""
        return self.k.platform == "sm90" and self.k.out == "f32" and self.k.dtype != "tf32"

    def cublas(self, A, Bt) -> Callable:
        """cuBLAS computing what we compute: the same inputs and C's type."""
        import torch

        if self._f32_out():
            return lambda: torch.mm(A, Bt, out_dtype=torch.float32)
        return lambda: torch.matmul(A, Bt)

    def cublas_text(self) -> str:
        b = "B.t()" if self.k.b_nk else "B"
        if self._f32_out():
            return f"torch.mm(A, {b}, out_dtype=torch.float32) ({self.k.dtype} in, f32 out)"
        return f"torch.matmul(A, {b}) ({self.k.dtype}{', allow_tf32' if self.k.dtype == 'tf32' else ''})"


def prebuild(kernels: list, out: Path, arch: str) -> None:
    """Schedule each kernel and write its sources to DIR ({name}.c/.h/.cu/.cuh and index.json); compile each here
    too (lib{name}.so, which the GPU machine loads instead of compiling again), so that a kernel nvcc rejects is
    found before the GPU run."""
    import spork_lab as sl
    from spork_lab.runtime import build_library

    out.mkdir(parents=True, exist_ok=True)
    index_file = out / "index.json"
    old = json.loads(index_file.read_text())["kernels"] if index_file.exists() else []
    index = [e for e in old if e["name"] not in {k.name for k in kernels}]  # a prebuild adds to the folder
    for k in kernels:
        if k.signature is None:
            raise SystemExit(f"{k.name}: the {k.platform} kernels are not prebuilt; run gemm.py on the GPU machine")
        print(f"building {k.name}", flush=True)
        sources = sl.compile_procs_to_strings([k.schedule()], k.name, arch)
        for ext, text in zip(SOURCE_EXTS, sources):
            (out / f"{k.name}.{ext}").write_text(text)
        shutil.copy(build_library(sources, k.name, arch), out / f"lib{k.name}.so")
        index.append({f.name: getattr(k, f.name) for f in dataclasses.fields(k) if f.name != "schedule"})
    index_file.write_text(json.dumps({"arch": arch, "kernels": index}, indent=1) + "\n")


def load_prebuilt(folder: Path, only: str) -> list:
    """(Kernel, built proc) for each kernel of a prebuild whose name contains `only`: its library from the prebuild,
    or where that is missing compiled here, in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    import spork_lab as sl
    from spork_lab.codegen import lib_name
    from spork_lab.runtime import BuiltModule, build_library
    from spork_lab.runtime._args import proc_spec

    index = json.loads((folder / "index.json").read_text())
    kernels = [Kernel(schedule=None, **entry) for entry in index["kernels"] if only in entry["name"]]
    sources = lambda k: tuple((folder / f"{k.name}.{ext}").read_text() for ext in SOURCE_EXTS)  # noqa: E731
    built = lambda k: folder / f"lib{k.name}.so"  # noqa: E731
    with ThreadPoolExecutor() as pool:  # nvcc runs in subprocesses
        libs = list(pool.map(lambda k: built(k) if built(k).exists() else build_library(sources(k), k.name, index["arch"]),
                             kernels))
    out = []
    for k, lib in zip(kernels, libs):
        spec = proc_spec(sl.parse_source(k.signature)._loopir_proc)
        out.append((k, getattr(BuiltModule(lib, lib_name(k.name), [spec]), spec.name)))
    return out


def save(rows: list) -> None:
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = lambda r: (r["kernel"], r["platform"], r["dtype"], r["M"], r["N"], r["K"])  # noqa: E731
    new = {key(r): r for r in old}
    new.update({key(r): r for r in rows})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(list(new.values()), indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=sorted(PLATFORMS), default="sm80")
    parser.add_argument("--dtypes", default="tf32,f16,bf16")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--sweep", action="store_true", help="every candidate tile configuration")
    parser.add_argument("--prebuild", type=Path, help="only build the kernels into this folder (no GPU needed)")
    parser.add_argument("--arch", default="sm_90a", help="target of --prebuild")
    parser.add_argument("--prebuilt", type=Path, help="compile and time the kernels of a --prebuild folder")
    parser.add_argument("--only", default="", help="only the kernels whose name contains this")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--show-launch", action="store_true", help="time the host's launch overhead too")
    parser.add_argument("--out", type=Path, default=None, help="also write this run's rows here")
    parser.add_argument("--no-save", action="store_true", help="leave results/gemm.json alone (profiling runs)")
    a = parser.parse_args()
    if a.prebuilt:
        pairs = load_prebuilt(a.prebuilt, a.only)
    else:
        kernels = [k for d in a.dtypes.split(",") for k in PLATFORMS[a.platform](d, a.sweep) if a.only in k.name]
        if a.prebuild:
            prebuild(kernels, a.prebuild, a.arch)
            return 0
        import spork_lab as sl

        pairs = [(k, getattr(sl.build([p := k.schedule()], basename=k.name), str(p.name()))) for k in kernels]
    rows, failed = [], []
    for k, built in pairs:
        runner = Runner(k, built)
        try:
            for shape in k.checks:
                runner.checked(shape)
            for shape in [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]:
                if broken := runner.broken_assertion(shape):
                    print(f"{k.name:48} {'x'.join(map(str, shape))}: not timed, its assertion {broken} does not hold")
                    continue
                r = runner.row(shape, a.reps, not a.show_launch)
                rows.append(r)
                print(f"{k.name:48} {r['M']}x{r['N']}x{r['K']}: {r['tflops']:7.1f} TFLOP/s, cuBLAS "
                      f"{r['cublas_tflops']:7.1f} ({r['tflops'] / r['cublas_tflops']:.3f}x), max rel err "
                      f"{r['max_rel_err']:.1e}", flush=True)  # fmt: skip
        except Exception as e:  # noqa: BLE001 -- a wrong or failing kernel is reported and left out; the others run
            failed.append(f"{k.name}: {e}")
            print(f"FAILED {k.name}: {type(e).__name__}: {e}", flush=True)
    if not a.no_save:
        save(rows)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
