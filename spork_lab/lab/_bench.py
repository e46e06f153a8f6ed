"""`%%spork_bench`: build procs with nvcc, run them at several sizes on the local GPU, check, chart and tabulate.

The magic's steps, each a function here so they are tested without a GPU:
`parse_sizes` reads `--sizes M=N=K=1024` (several sets allowed); `build`
compiles with `sl.build`'s nvcc cache (flags passed through); `make_args`
makes random inputs from the proc's signature (a GEMM-shaped proc's C starts
at zero, so cuBLAS is its automatic reference); `measure` runs each proc once
against the reference on copies of the same inputs, then times it with
`sl.benchmark`; `BenchReport` shows the result as a plotly chart (an SVG copy
for viewers without plotly) and an HTML table. Without a GPU the CUDA is still
generated and compiled, and the report says plainly that no GPU is present.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from html import escape
from typing import Callable, Optional, Sequence

import numpy as np
from exo.API import Procedure

from ..codegen import compile_procs_to_strings, lib_name
from ..core.ir import evaluate, sizes_text
from ..errors import SporkError
from ..runtime import BuiltModule, benchmark, build_library, built_spec, gpu_cupy, local_arch, nvcc_flags
from ..runtime._args import ProcSpec, bf16_bits, bf16_floats, size_refusal
from ..sync.checker import last_check
from ._doctor import run_tool
from ._render import svg_image

DEFAULT_ARCH = "sm_90a"  # what the CUDA is compiled for when no GPU is here to ask (and no --arch is given)


class BenchError(SporkError):
    """A %%spork_bench argument the magic cannot use."""


def parse_sizes(text: str) -> dict[str, int]:
    """`M=N=K=1024` or `n=1048576` or `M=512,N=256,K=128` -> {"M": 512, ...}."""
    sizes: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        *names, value = [x.strip() for x in part.split("=")]
        if not names or not value.isdigit() or not all(n.isidentifier() for n in names):
            raise BenchError(f"--sizes {text!r}: write name=INT (or M=N=K=INT), comma-separated, e.g. n=1048576")
        sizes.update({n: int(value) for n in names})
    return sizes


@dataclass(frozen=True)
class Gemm:
    """The matrices of a GEMM-shaped proc: C[M, N] (+)= A[M, K] @ B[K, N], or @ B^T with B[N, K] (`b_nk`)."""

    a: str
    b: str
    c: str
    b_nk: bool = False

    @property
    def product(self) -> str:
        return "A·Bᵀ" if self.b_nk else "A·B"


def gemm_names(spec: ProcSpec) -> Optional[Gemm]:
    """The proc's GEMM matrices if it is GEMM-shaped over three size arguments: float matrices A[M, K], B[K, N]
    (or B[N, K], multiplied transposed) and the one written, C[M, N]; else None."""
    ints = [a.name for a in spec.args if a.kind == "int"]
    mats = [a for a in spec.args if a.kind == "cuda" and len(a.shape) == 2 and (a.dtype.kind == "f" or a.bf16)]
    if len(ints) != 3 or len(mats) != 3:
        return None
    dims = {a.name: tuple(str(d) for d in a.shape) for a in mats}
    written = [a.name for a in mats if a.writes]
    if len(written) != 1:
        return None
    c = written[0]
    m, n = dims[c]
    for b_nk in (False, True):
        for a in mats:
            for b in mats:
                (am, ak), (bk, bn) = dims[a.name], dims[b.name][:: -1 if b_nk else 1]
                if len({a.name, b.name, c}) == 3 and am == m and bn == n and ak == bk:
                    return Gemm(a.name, b.name, c, b_nk)
    return None


def check_sizes(specs: Sequence[ProcSpec], sizes: dict[str, int]) -> None:
    """One --sizes set against the procs: no name that none of them takes, and what each proc needs
    (`_check_proc_sizes`)."""
    taken = list(dict.fromkeys(a.name for spec in specs for a in spec.args if a.kind == "int"))
    unknown = [name for name in sizes if name not in taken]
    if unknown:
        raise BenchError(f"--sizes names {', '.join(unknown)}, which no proc here takes; their sizes are "
                         f"{', '.join(taken) or '(none)'}")
    for spec in specs:
        _check_proc_sizes(spec, sizes)


def _check_proc_sizes(spec: ProcSpec, sizes: dict[str, int]) -> None:
    """A value for every size of the proc, positive for a `size` parameter, its assertions true and the windows
    its instrs need aligned aligned (`size_refusal`)."""
    missing = [a.name for a in spec.args if a.kind == "int" and a.name not in sizes]
    if missing:
        raise BenchError(f"{spec.name}: --sizes gives no value for {', '.join(missing)}")
    zero = next((a.name for a in spec.args if a.positive and sizes[a.name] <= 0), None)
    if zero is not None:
        raise BenchError(f"{spec.name}: --sizes {zero}={sizes[zero]}, but {zero} is a size: give a positive int")
    refusal = size_refusal(spec, sizes)
    if refusal is not None:
        raise BenchError(f"{spec.name}: {refusal}")


def make_args(spec: ProcSpec, sizes: dict[str, int], rng: np.random.Generator, small_integers: bool = False) -> list:
    """Host values for a call: the sizes, and random arrays of each parameter's shape (a GEMM's C: zeros).
    small_integers: floats drawn from -2..2 too, so that sums of their products are exact in any order of summation
    (in f16 while they stay within 2048)."""
    _check_proc_sizes(spec, sizes)
    gemm = gemm_names(spec)
    out = []
    for a in spec.args:
        if a.kind == "int":
            out.append(sizes[a.name])
        elif a.kind == "bool":
            out.append(False)
        else:
            shape = tuple(evaluate(d, sizes) for d in a.shape)
            if gemm and a.name == gemm.c or a.dtype.kind not in "fiu":
                out.append(np.zeros(shape, dtype=a.dtype))
            elif a.bf16:  # values' bits: random uint16 bits below 100 were subnormals, whose products are 0
                out.append(bf16_bits(rng.integers(-2, 3, shape) if small_integers else rng.standard_normal(shape)))
            elif a.dtype.kind == "f" and small_integers:
                out.append(rng.integers(-2, 3, shape).astype(a.dtype))
            elif a.dtype.kind == "f":
                out.append(rng.standard_normal(shape).astype(a.dtype))
            else:
                out.append(rng.integers(0, 100, shape).astype(a.dtype))
    return out


def work(spec: ProcSpec, args: list) -> tuple[float, str]:
    """(amount, unit) of one call: 2 M N K flop for a GEMM, else the bytes of every array (written ones twice)."""
    gemm = gemm_names(spec)
    if gemm:
        by_name = {a.name: v for a, v in zip(spec.args, args)}
        (m, k), n = by_name[gemm.a].shape, by_name[gemm.c].shape[1]
        return 2.0 * m * n * k, "TFLOP/s"
    moved = sum(v.nbytes * (2 if a.writes else 1) for a, v in zip(spec.args, args) if isinstance(v, np.ndarray))
    return float(moved), "GB/s"


@dataclass
class Row:
    """One proc (or the reference) at one set of sizes."""

    name: str
    sizes: dict
    median_ms: Optional[float] = None
    p20_ms: Optional[float] = None
    p80_ms: Optional[float] = None
    rate: Optional[float] = None  # in `unit`
    unit: str = ""
    error: Optional[float] = None  # max |out - reference| / max |reference| over the written arrays
    ok: Optional[bool] = None
    reference: str = ""  # the name of the reference row it is compared with


@dataclass
class BenchReport:
    """What %%spork_bench shows: a chart and a table of `rows`, or why nothing ran."""

    rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # build lines, "no GPU is present", ncu output, ...
    device: str = ""

    def table_html(self) -> str:
        head = "<tr><th>proc</th><th>sizes</th><th>median</th><th>p20–p80</th><th>rate</th><th>vs reference</th><th>max rel. error</th></tr>"
        ref = {(r.name, tuple(r.sizes.items())): r for r in self.rows if r.name.startswith("reference")}
        body = []
        for r in self.rows:
            base = ref.get((r.reference, tuple(r.sizes.items())))
            vs = f"{100 * r.rate / base.rate:.1f}%" if base and r.rate and base.rate and r is not base else ""
            err = "" if r.error is None else f"{r.error:.1e}" + ("" if r.ok else " ✗")
            cells = [r.name, _size_text(r.sizes), _ms(r.median_ms),
                     "" if r.p20_ms is None else f"{r.p20_ms:.3f}–{r.p80_ms:.3f} ms",
                     "" if r.rate is None else f"{r.rate:.2f} {r.unit}", vs, err]
            body.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
        notes = "".join(f"<div>{escape(n)}</div>" for n in self.notes)
        style = "border-collapse: collapse; font-size: 12.5px"
        table = f'<table class="sl-bench" style="{style}">{head}{"".join(body)}</table>' if self.rows else ""
        device = f"<div><b>{escape(self.device)}</b></div>" if self.device else ""
        return f'<div class="sl-bench-report">{device}{table}{notes}</div>'

    def table_text(self) -> str:
        lines = [self.device] if self.device else []
        for r in self.rows:
            rate = "" if r.rate is None else f"{r.rate:.2f} {r.unit}"
            err = "" if r.error is None else f"err {r.error:.1e}{'' if r.ok else ' FAILED'}"
            lines.append(f"{r.name:24s} {_size_text(r.sizes):24s} {_ms(r.median_ms):>12s} {rate:>14s} {err}")
        return "\n".join(lines + self.notes)

    def figure(self):
        """A plotly bar chart: rate against sizes, one bar per proc, the reference beside."""
        import plotly.graph_objects as go

        timed = [r for r in self.rows if r.rate is not None]
        fig = go.Figure()
        for name in dict.fromkeys(r.name for r in timed):
            mine = [r for r in timed if r.name == name]
            fig.add_bar(name=name, x=[_size_text(r.sizes) for r in mine], y=[r.rate for r in mine])
        unit = timed[0].unit if timed else ""
        fig.update_layout(barmode="group", title=self.device, yaxis_title=unit, xaxis_title="sizes",
                          height=380, margin=dict(l=60, r=20, t=50, b=50))
        return fig

    def svg(self) -> str:
        """The chart as plain SVG, for viewers without plotly (GitHub, nbconvert)."""
        timed = [r for r in self.rows if r.rate is not None]
        names = list(dict.fromkeys(r.name for r in timed))
        groups = list(dict.fromkeys(_size_text(r.sizes) for r in timed))
        top = max((r.rate for r in timed), default=1.0) or 1.0
        w, h, left, bottom = 640, 300, 60, 40
        gw = (w - left - 10) / max(1, len(groups))
        bw = gw * 0.8 / max(1, len(names))
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 20 * len(names)}" font-family="sans-serif" font-size="11">',
               f'<text x="4" y="14">{escape(timed[0].unit if timed else "")}</text>',
               f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" stroke="#888"/>']
        for gi, g in enumerate(groups):
            out.append(f'<text x="{left + gi * gw + gw / 2}" y="{h - bottom + 16}" text-anchor="middle">{escape(g)}</text>')
            for ni, name in enumerate(names):
                r = next((r for r in timed if r.name == name and _size_text(r.sizes) == g), None)
                if r is None:
                    continue
                bh = (h - bottom - 24) * r.rate / top
                x = left + gi * gw + gw * 0.1 + ni * bw
                out.append(f'<rect x="{x:.1f}" y="{h - bottom - bh:.1f}" width="{bw - 2:.1f}" height="{bh:.1f}" '
                           f'fill="{_COLOURS[ni % len(_COLOURS)]}"><title>{escape(name)}: {r.rate:.2f}</title></rect>')
                out.append(f'<text x="{x + bw / 2 - 1:.1f}" y="{h - bottom - bh - 3:.1f}" text-anchor="middle" font-size="9">{r.rate:.1f}</text>')
        for ni, name in enumerate(names):
            y = h + 4 + 20 * ni
            out.append(f'<rect x="{left}" y="{y}" width="12" height="12" fill="{_COLOURS[ni % len(_COLOURS)]}"/>'
                       f'<text x="{left + 18}" y="{y + 10}">{escape(name)}</text>')
        out.append("</svg>")
        return "".join(out)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        data = {"text/plain": self.table_text(), "text/html": self.table_html()}
        if any(r.rate is not None for r in self.rows):
            import json

            import plotly.io as pio

            chart = f'<div class="sl-bench-chart">{svg_image(self.svg(), 640, "benchmark chart")}</div>'
            data["text/html"] = chart + data["text/html"]
            data["application/vnd.plotly.v1+json"] = json.loads(pio.to_json(self.figure()))
        return data


_COLOURS = ["#0969da", "#bf8700", "#1a7f37", "#8250df", "#cf222e", "#57606a"]


def _size_text(sizes: dict) -> str:
    values = set(sizes.values())
    if len(sizes) > 1 and len(values) == 1:
        return f"{'='.join(sizes)}={values.pop()}"
    return sizes_text(sizes)


def _ms(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.3f} ms"


def build(procs: Sequence[Procedure], arch: str, flags: Sequence[str]) -> tuple:
    """(library path, basename) of the procs compiled with nvcc (cached by content)."""
    basename = "bench_" + "_".join(p.name() for p in procs)[:40]
    sources = compile_procs_to_strings(list(procs), basename, arch)
    return build_library(sources, basename, arch, flags=flags), basename


def _values(array, arg, xp):
    """An array's values: a bf16 parameter's bits as floats."""
    return bf16_floats(array, xp) if arg.bf16 else array


def _max_rel_error(got, want) -> float:
    scale = float(abs(want).max()) or 1.0
    return float(abs(got - want).max()) / scale


@dataclass(frozen=True)
class Reference:
    """What a proc is checked and timed against: `check(*args)` writes the expected outputs into the arguments,
    `timed(*args)` is what the reference's time measures; `name` is its row's."""

    name: str
    check: Callable
    timed: Callable


def reference_for(spec: ProcSpec, given: Optional[Callable], cupy) -> Optional[Reference]:
    """The given reference callable, or for a GEMM-shaped proc cuBLAS through CuPy: checked against the float32
    product (C starts at zero, so `C += A @ B` and `C = A @ B` agree), timed at the inputs' own type (cuBLAS's
    f16 GEMM for f16 inputs, with B transposed for a B[N, K]; bf16 through cuBLAS directly, CuPy having no
    bfloat16); else None."""
    if given is not None:
        return Reference(f"reference ({getattr(given, '__name__', 'given')})", given, given)
    gemm = gemm_names(spec)
    if gemm is None:
        return None
    names = [a.name for a in spec.args]
    ia, ib, ic = names.index(gemm.a), names.index(gemm.b), names.index(gemm.c)

    def floats(args, i: int):
        return _values(args[i], spec.args[i], cupy).astype(cupy.float32, copy=False)

    def oriented(b):
        return b.T if gemm.b_nk else b

    def check(*args) -> None:
        product = cupy.matmul(floats(args, ia), oriented(floats(args, ib)))
        args[ic][...] = bf16_bits(product, cupy) if spec.args[ic].bf16 else product

    def timed(*args) -> None:
        if spec.args[ia].bf16:
            _cublas_bf16_gemm(cupy, args[ia], args[ib], gemm.b_nk, bf16_c=spec.args[ic].bf16)
        else:
            cupy.matmul(args[ia], oriented(args[ib]))

    dtype = spec.args[ia].dtype
    kind = "bf16" if spec.args[ia].bf16 else f"{dtype.kind}{8 * dtype.itemsize}"
    return Reference(f"reference (cuBLAS {kind} {gemm.product})", check, timed)


_CUDA_R_32F, _CUDA_R_16BF = 0, 14  # cudaDataType values (CUDA's library_types.h)


def _cublas_bf16_gemm(cupy, a, b, b_nk: bool, bf16_c: bool):
    """A @ B (or A @ B^T) by cuBLAS's bf16 GEMM with f32 accumulation, on bf16 bits, into a new f32 or bf16 C
    (as cupy.matmul makes one). Row-major, so cuBLAS's column-major computes C^T = B^T A^T."""
    from cupy_backends.cuda.libs import cublas

    (m, k), n = a.shape, b.shape[0 if b_nk else 1]
    c = cupy.empty((m, n), cupy.uint16 if bf16_c else cupy.float32)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas.gemmEx(handle, cublas.CUBLAS_OP_T if b_nk else cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, m, k,
                  one.ctypes.data, b.data.ptr, _CUDA_R_16BF, k if b_nk else n, a.data.ptr, _CUDA_R_16BF, k,
                  zero.ctypes.data, c.data.ptr, _CUDA_R_16BF if bf16_c else _CUDA_R_32F, n,
                  cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
    return c


def measure(procs: Sequence[Procedure], size_sets: list, reference: Optional[Callable], arch: Optional[str],
            flags: Sequence[str], tol: float, reps: int, profile: bool) -> BenchReport:
    """Build, then (with a GPU) check and time every proc at every size set against the reference."""
    if reps < 1:  # before nvcc runs
        raise BenchError(f"--reps {reps}: give at least 1 timed run")
    specs = [built_spec(p) for p in procs]
    for sizes in size_sets:  # before nvcc runs, and without a GPU too, where nothing would run to find them
        check_sizes(specs, sizes)
    report = BenchReport()
    cupy = gpu_cupy()
    arch = arch or (local_arch() if cupy else DEFAULT_ARCH)
    lib, basename = build(procs, arch, flags)
    report.notes.append(f"built {', '.join(p.name() for p in procs)} for {arch}: nvcc {' '.join(nvcc_flags(arch, flags))} -> {lib}")
    report.notes += [check_note(p) for p in procs]
    if cupy is None:
        listed = run_tool(["nvidia-smi", "-L"])
        if listed and "GPU" in listed:
            report.notes.append(f"nvidia-smi lists {listed.splitlines()[0]}, but CuPy cannot use it (pip install "
                                "cupy-cuda13x, matching nvcc's CUDA): the CUDA was generated and compiled, but not run")
        else:
            report.notes.append("no GPU is present here (no CUDA device visible to CuPy): the CUDA was generated and "
                                "compiled, but nothing was run or timed")
        return report
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    report.device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    module = BuiltModule(lib, lib_name(basename), specs)
    rng = np.random.default_rng(0)
    for sizes in size_sets:
        ref_rows: dict[str, Row] = {}  # each reference is timed once per size set
        for p, spec in zip(procs, specs):
            host = make_args(spec, sizes, rng)
            amount, unit = work(spec, host)
            scale = 1e9 if unit == "TFLOP/s" else 1e6  # flop/ms -> TFLOP/s, bytes/ms -> GB/s
            built = module.procs[spec.name]
            ref = reference_for(spec, reference, cupy)
            dev = [cupy.asarray(v) if isinstance(v, np.ndarray) else v for v in host]
            built(*dev)
            row = Row(spec.name, dict(sizes), unit=unit)
            if ref is not None:
                row.reference = ref.name
                ref_dev = [cupy.asarray(v) if isinstance(v, np.ndarray) else v for v in host]
                ref.check(*ref_dev)
                written = [i for i, a in enumerate(spec.args) if a.kind == "cuda" and a.writes]
                row.error = max((_max_rel_error(*(_values(x[i], spec.args[i], cupy) for x in (dev, ref_dev)))
                                 for i in written), default=0.0)
                row.ok = row.error <= tol
            timed_ref = ref.timed if ref is not None and ref.name not in ref_rows else None
            t = benchmark(built, dev, reference=timed_ref, reps=reps)
            row.median_ms, row.p20_ms, row.p80_ms, row.rate = t.median_ms, t.p20_ms, t.p80_ms, amount / t.median_ms / scale
            report.rows.append(row)
            if timed_ref is not None:
                ref_rows[ref.name] = Row(ref.name, dict(sizes), t.reference_median_ms, unit=unit,
                                         rate=amount / t.reference_median_ms / scale)
        report.rows += ref_rows.values()
    if profile:
        report.notes.append(_profile(procs, size_sets[0], arch, flags))
    return report


def check_note(p: Procedure) -> str:
    """What the latest sl.sync_check said of `p` (the build runs the analysis only): a racy kernel's times and
    results are not the program's."""
    last = last_check(p)
    if last is None:
        return (f"{p.name()} has not been through sl.sync_check in this session: the build runs the analysis only, "
                "and sync_check at small sizes proves that the kernel computes what the program says")
    sizes, hazards = last
    if hazards:
        return (f"warning: sl.sync_check found {hazards} hazard(s) in {p.name()} at {sizes_text(sizes)}: the kernel "
                "can race or hang, and what it computes (and how fast) is not what the program says")
    return f"sl.sync_check passed {p.name()} at {sizes_text(sizes)}"


def _concrete(spec: ProcSpec, sizes: dict) -> ProcSpec:
    """The spec with its shapes evaluated at `sizes` (plain ints: it pickles, for the profiling process; the sizes
    passed `check_sizes` already)."""
    args = tuple(replace(a, shape=tuple(evaluate(d, sizes) for d in a.shape)) for a in spec.args)
    return replace(spec, args=args, preds=(), alignment=())


_PROFILED = """\
import pickle, sys
import cupy, numpy as np
from spork_lab.lab._bench import make_args
from spork_lab.runtime import BuiltModule
lib, name, specs, sizes = pickle.loads(bytes.fromhex(sys.argv[1]))
module = BuiltModule(lib, name, specs)
for s in specs:
    module.procs[s.name](*[cupy.asarray(v) if isinstance(v, np.ndarray) else v for v in make_args(s, sizes, np.random.default_rng(0))])
cupy.cuda.runtime.deviceSynchronize()
"""


def _profile(procs: Sequence[Procedure], sizes: dict, arch: str, flags: Sequence[str]) -> str:
    """Nsight Compute's speed-of-light summary of one run of each proc at `sizes` (when ncu is on PATH)."""
    import pickle

    ncu = shutil.which("ncu")
    if ncu is None:
        return "--profile: Nsight Compute (ncu) is not on PATH here"
    lib, basename = build(procs, arch, flags)
    specs = [built_spec(p) for p in procs]
    job = pickle.dumps((str(lib), lib_name(basename), [_concrete(s, sizes) for s in specs], sizes)).hex()
    run = subprocess.run([ncu, "--section", "SpeedOfLight", sys.executable, "-c", _PROFILED, job], capture_output=True, text=True)
    return run.stdout[-6000:] + (run.stderr[-2000:] if run.returncode else "")


def parse_flags(args) -> list[str]:
    """nvcc flags from the magic's options: -O level, --maxrregcount, and any --nvcc-flag given."""
    flags = [f"-O{args.O}"] if args.O is not None else []
    if args.maxrregcount is not None:
        flags.append(f"--maxrregcount={args.maxrregcount}")
    flags += list(args.nvcc_flag or [])
    if not all(re.fullmatch(r"-[-\w=.,+/]+", f) for f in flags):
        raise BenchError(f"nvcc flags must look like -X or --name=value, got {flags}")
    return flags
