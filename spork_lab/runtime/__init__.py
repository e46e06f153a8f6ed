"""Build generated CUDA into a shared library, call procs with CuPy arrays, and time them.

`build(procs)` compiles with nvcc (cached by a hash of the sources, flags and
toolchain) and returns a module whose procs check their arguments in Python
before anything reaches the GPU; `benchmark` times a call with CUDA events.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import numbers
import os
import shutil
import statistics
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from exo.API import Procedure

from ..analysis import analyze
from ..codegen import compile_procs_to_strings, lib_name, proc_list
from ..core.build_cache import build_once, cache_dir, content_key
from ..errors import ArgumentError, BuildError, SporkError, SporkTypeError, user_facing, user_frame
from ._args import ProcSpec, check_args, proc_spec

class CudaError(SporkError, RuntimeError):
    """A CUDA call made by a generated proc failed, at the user's call; the message is CUDA's error string."""


# CUDA's error code that the tensor-map encoder returns for a window TMA cannot copy (no pitch API is called else).
_TENSOR_MAP_LAYOUT_ERROR = 12  # cudaErrorInvalidPitchValue
_TENSOR_MAP_LAYOUT_HINT = (": a tensor map's window of global memory must start at a 16-byte boundary and have rows a "
                           "multiple of 16 bytes apart (cuTensorMapEncodeTiled's rule): pass an aligned array, or "
                           "choose sizes that keep its rows so")


def find_nvcc() -> str:
    """nvcc from PATH, $CUDA_HOME/bin, or the nvidia-cuda-nvcc wheel."""
    candidates = [shutil.which("nvcc")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"))
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations if spec else []) or []:
        candidates += sorted(glob.glob(os.path.join(root, "*", "bin", "nvcc")))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise BuildError("nvcc not found: put it on PATH, set CUDA_HOME, or pip install nvidia-cuda-nvcc")


def local_arch() -> str:
    """The local GPU's target, e.g. sm_90a (the `a` variant where wgmma/setmaxnreg need it)."""
    try:
        import cupy
    except ImportError:
        raise BuildError("no arch given and CuPy is not installed to ask the GPU; pass arch='sm_90a'") from None
    cc = cupy.cuda.Device().compute_capability
    return f"sm_{cc}a" if int(cc) >= 90 else f"sm_{cc}"


def gencode(arch: str) -> str:
    if not arch.startswith("sm_"):
        raise BuildError(f"arch must look like sm_80 or sm_90a, got {arch!r}")
    return f"-gencode=arch=compute_{arch[3:]},code={arch}"


def nvcc_flags(arch: str, extra: Sequence[str] = ()) -> list:
    """nvcc's flags for a build: -O3 (unless `extra` names another -O level), -fmad=false (unless `extra` chooses:
    -fmad=true, --use_fast_math), a shared library for `arch`, then `extra`. nvcc's default fuses `a * b + c` into
    one fma, rounded once where the sequential program rounds twice: the GPU would not compute what sync_check
    proves. Tensor-core GEMMs are the same code either way (their products are instrs)."""
    opt = [] if any(f.startswith("-O") for f in extra) else ["-O3"]
    exact = [] if any(f.lstrip("-").startswith(("fmad", "use_fast_math")) for f in extra) else ["-fmad=false"]
    return [*opt, *exact, "-shared", "-Xcompiler", "-fPIC", "-std=c++17", gencode(arch), *extra]


def build_library(sources: tuple, basename: str, arch: str, nvcc: Optional[str] = None, flags: Sequence[str] = ()) -> Path:
    """Compile (c, h, cu, cuh) into a shared library, reusing a cached build with the same inputs (sources,
    flags, nvcc version); `flags` are extra nvcc flags (`--maxrregcount=64`, `-O2`, ...)."""
    nvcc = nvcc or find_nvcc()
    flags = nvcc_flags(arch, flags)
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    lib = cache_dir() / content_key(*sources, basename, *flags, version) / f"lib{basename}.so"
    names = [f"{basename}.{ext}" for ext in ("c", "h", "cu", "cuh")]
    failed = build_once(lib, dict(zip(names, sources)), [[nvcc, *flags, "-o", lib.name, names[0], names[2]]],
                        keep_sources=True)
    if failed:
        raise BuildError(f"nvcc failed ({failed[0]}) in {failed[2]}:\n{failed[1]}")
    return lib


class BuiltProc:
    """A proc of a built library: call it with CuPy arrays, NumPy arrays and ints."""

    def __init__(self, module: "BuiltModule", spec: ProcSpec):
        self.module = module
        self.spec = spec
        self.name = spec.name
        self._fn = getattr(module.lib, spec.name)
        self._fn.restype = None

    @user_facing
    def __call__(self, *args, **kwargs) -> None:
        cupy = self.module.cupy
        device = cupy.cuda.runtime.getDevice() if cupy else None
        if kwargs:
            names = ", ".join(a.name for a in self.spec.args)
            raise ArgumentError(f"{self.name}() takes its arguments in order, without keywords: {self.name}({names})",
                                user_frame())
        try:
            raw = check_args(self.spec, args, device)
        except (TypeError, ValueError) as e:  # said at the user's call, without our frames
            raise ArgumentError(str(e), user_frame()) from None
        c_args = [None]  # exo's ctxt argument
        for a, v in zip(self.spec.args, raw):
            c_args.append(self.module.int_type(v) if a.kind in ("int", "bool") else ctypes.c_void_p(v))
        lib, name = self.module.lib, self.module.lib_name
        if cupy:
            getattr(lib, f"{name}_set_stream")(ctypes.c_void_p(cupy.cuda.get_current_stream().ptr))
        self._fn(*c_args)
        err = getattr(lib, f"{name}_take_error")()
        if err:
            text = getattr(lib, f"{name}_error_string")(err).decode()
            hint = _TENSOR_MAP_LAYOUT_HINT if err == _TENSOR_MAP_LAYOUT_ERROR else ""
            raise CudaError(f"{self.name}(): CUDA error {err}: {text}{hint}", user_frame())

    def __repr__(self) -> str:
        return f"<built proc {self.name}({', '.join(a.name for a in self.spec.args)})>"


class BuiltModule:
    """The loaded library; each proc is an attribute."""

    def __init__(self, path: Path, lib_name: str, specs: Sequence[ProcSpec]):
        try:
            import cupy
        except ImportError:
            cupy = None
        self.cupy = cupy
        self.path = path
        self.lib_name = lib_name
        self.lib = ctypes.CDLL(str(path))
        getattr(self.lib, f"{lib_name}_error_string").restype = ctypes.c_char_p
        width = getattr(self.lib, f"{lib_name}_sizeof_int_fast32")()
        self.int_type = {4: ctypes.c_int32, 8: ctypes.c_int64}[width]
        self.procs = {s.name: BuiltProc(self, s) for s in specs}
        for name, p in self.procs.items():
            setattr(self, name, p)


def built_spec(p: Procedure) -> ProcSpec:
    """What a built proc checks at each call: its parameters, its assertions, and the alignment of the windows
    that its sizes decide (`analysis.checks.AlignmentNeed`)."""
    return replace(proc_spec(p._loopir_proc), alignment=analyze(p).result("checks"))


@user_facing
def build(procs: Sequence[Procedure], arch: Optional[str] = None, basename: Optional[str] = None,
          flags: Sequence[str] = ()) -> BuiltModule:
    """Compile procs to a shared library for `arch` (default: the local GPU), with extra nvcc `flags`, and load it."""
    procs = proc_list(procs, "sl.build")
    if isinstance(flags, str):
        raise SporkTypeError(f"build(flags=...) takes a list of nvcc flags, e.g. flags=[{flags!r}], not a string",
                             user_frame())
    specs = [built_spec(p) for p in procs]
    basename = basename or "spork_" + "_".join(p.name() for p in procs)[:40]
    try:
        arch = arch or local_arch()
        sources = compile_procs_to_strings(procs, basename, arch)
        lib = build_library(sources, basename, arch, flags=flags)
    except BuildError as e:
        if e.filename is not None:
            raise
        raise BuildError(e.message, user_frame()).with_traceback(None) from None  # nvcc's text, at the user's call
    return BuiltModule(lib, lib_name(basename), specs)


def gpu_cupy():
    """CuPy if a CUDA device is usable here, else None (no CuPy, no driver or no device all mean "no GPU")."""
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # noqa: BLE001 -- any failure to reach a device means there is none to use
        return None


def example_case(module, p: Procedure, rng, **size) -> tuple[dict, dict]:
    """An example's inputs for its proc `p` (`make_args(rng, **size)`, NumPy arrays in the proc's argument order) and
    the outputs its NumPy `reference` expects from them. An example whose procs take different arguments (tf32,
    f16 or bf16 data; B as [K, N] or [N, K]) asks for the proc: `make_args(..., proc=)`, `reference(..., proc=)`."""
    import inspect

    import numpy as np

    def which(fn) -> dict:
        return {"proc": p} if "proc" in inspect.signature(fn).parameters else {}

    args = module.make_args(rng, **size, **which(module.make_args))
    expected = module.reference(**{k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()},
                                **which(module.reference))
    return args, expected


@dataclass(frozen=True)
class BenchResult:
    """Times in milliseconds (CUDA events, L2 flushed before each run)."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int
    reference_median_ms: Optional[float] = None


def _time(fn: Callable[[], None], reps: int, warmup: int, flush) -> list:
    import cupy

    for _ in range(warmup):
        fn()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(reps):
        flush.fill(1)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return times


@user_facing
def benchmark(built_proc: BuiltProc, args: Sequence, reference: Optional[Callable] = None, reps: int = 50,
              warmup: int = 5) -> BenchResult:
    """Median time of `built_proc(*args)` (and of `reference(*args)` if given) over `reps` runs."""
    if not isinstance(built_proc, BuiltProc):
        raise SporkTypeError(f"benchmark times a proc of a built module, not {type(built_proc).__name__}: "
                             "k = sl.build([p]); sl.benchmark(k.p, args)", user_frame())
    for name, value, least in (("reps", reps, 1), ("warmup", warmup, 0)):  # no timed run has no median
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
            raise SporkTypeError(f"benchmark({name}={value!r}): give an int >= {least}", user_frame())
    import cupy

    l2 = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())["l2CacheSize"]
    flush = cupy.empty(max(2 * l2, 1 << 20), dtype=cupy.uint8)
    times = sorted(_time(lambda: built_proc(*args), reps, warmup, flush))
    ref = None
    if reference is not None:
        ref = statistics.median(_time(lambda: reference(*args), reps, warmup, flush))
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]  # noqa: E731
    return BenchResult(statistics.median(times), q(0.2), q(0.8), reps, ref)


__all__ = ["build", "benchmark", "BenchResult", "BuiltModule", "BuiltProc", "CudaError", "find_nvcc", "local_arch",
           "build_library", "nvcc_flags", "gpu_cupy", "example_case"]  # fmt: skip
