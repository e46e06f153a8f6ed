"""`%load_ext spork_lab`: rich display of procs, the workbench magics and `%%spork_bench`."""

from __future__ import annotations

import __future__
import sys
import traceback
from typing import Optional

from exo.API import Procedure
from exo.rewrite.LoopIR_scheduling import SchedulingError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import BuildError, SporkError
from ..lang.sched_errors import explain, user_frame
from . import _bench, _render
from ._codeview import code_view


def proc_html(p: Procedure) -> str:
    """A proc as syntax-highlighted Exo-GPU code (what notebooks show for a proc after %load_ext spork_lab)."""
    return _render.standalone(f'<div class="sl-wb sl-proc">{_render.code(code_view(p), {}, None)}</div>')


class MagicError(SporkError, ValueError):
    """A magic's line names what the notebook lacks, or is malformed: shown as one line, as every SporkError."""


@magics_class
class SporkMagics(Magics):
    """Line magics of the workbench."""

    @line_magic
    def spork_doctor(self, line: str) -> None:
        """Print the versions of the notebook and GPU stack and the fix for each known mismatch."""
        from ._doctor import doctor

        doctor()

    @magic_arguments()
    @argument("proc", help="name of a proc in the notebook's namespace")
    @argument("sizes", nargs="*", help="sizes for the sync check, as name=value (e.g. n=512)")
    @line_magic
    def spork_workbench(self, line: str):
        """Open a Workbench on a proc: %spork_workbench my_proc n=512"""
        from ._session import Workbench

        args = parse_argstring(self.spork_workbench, line)
        if args.proc not in self.shell.user_ns:
            raise MagicError(f"%spork_workbench: no proc named {args.proc!r} in the notebook")
        sizes = {}
        for item in args.sizes:
            name, sep, value = item.partition("=")
            if not sep or not value.isdigit():
                raise MagicError(f"%spork_workbench: size {item!r} must look like name=INT, e.g. n=512")
            sizes[name] = int(value)
        return Workbench(self.shell.user_ns[args.proc], sizes=sizes)

    @magic_arguments()
    @argument("procs", nargs="*", help="procs already defined (line magic: %%spork_bench is the cell form)")
    @argument("--sizes", action="append", required=True,
              help="one size set, e.g. n=1048576 or M=N=K=2048 or M=512,N=256,K=128; repeat for several")
    @argument("--reference", help="a callable in the notebook taking the proc's arguments (CuPy arrays) and writing "
                                  "its outputs; GEMM-shaped procs default to cuBLAS (cupy.matmul)")
    @argument("--arch", help="nvcc target, e.g. sm_90a (default: the local GPU's; sm_90a without a GPU)")
    @argument("-O", type=int, help="nvcc optimisation level (default 3)")
    @argument("--maxrregcount", type=int, help="nvcc --maxrregcount")
    @argument("--nvcc-flag", action="append", help="any other nvcc flag, passed through (repeatable)")
    @argument("--tol", type=float, default=1e-2, help="largest max|out - ref| / max|ref| accepted (default 1e-2)")
    @argument("--reps", type=int, default=50, help="timed runs per proc and size (default 50)")
    @argument("--profile", action="store_true", help="also run Nsight Compute (ncu) once per proc where present")
    @line_cell_magic
    def spork_bench(self, line: str, cell: Optional[str] = None):
        """Build procs with nvcc, run them at each --sizes on the local GPU, check them against the reference, and
        show a chart and a table. %%spork_bench benchmarks the procs the cell defines; %spork_bench NAME ... the
        named ones. Without a GPU the CUDA is generated and compiled, and the output says no GPU is present."""
        args = parse_argstring(self.spork_bench, line)
        ns = self.shell.user_ns
        if cell is not None:
            before = {k: v for k, v in ns.items() if isinstance(v, Procedure)}
            result = self.shell.run_cell(cell)
            if not result.success:
                return None
            procs = [v for k, v in ns.items() if isinstance(v, Procedure) and not v.is_instr() and before.get(k) is not v]
        else:
            missing = [n for n in args.procs if not isinstance(ns.get(n), Procedure)]
            if missing:
                raise _bench.BenchError(f"%spork_bench: no proc named {', '.join(missing)} in the notebook")
            procs = [ns[n] for n in args.procs]
        if not procs:
            raise _bench.BenchError("%%spork_bench: the cell defines no proc (name the procs with %spork_bench NAME ...)")
        reference = None
        if args.reference:
            reference = ns.get(args.reference)
            if not callable(reference):
                raise _bench.BenchError(f"--reference {args.reference}: no callable of that name in the notebook")
        sizes = [_bench.parse_sizes(s) for s in args.sizes]
        try:
            return _bench.measure(procs, sizes, reference, args.arch, _bench.parse_flags(args), args.tol, args.reps,
                                  args.profile)
        except BuildError as e:  # the compiler's output, shown rather than raised
            return _bench.BenchReport(notes=[f"build failed: {e}"])


def load_ipython_extension(ipython) -> None:
    """Register the magics and the display of procs: highlighted HTML, with the Exo-GPU text as fallback. Turn on
    `from __future__ import annotations` for the code the notebook runs next: a proc's annotations (`n: size`,
    `f32[n] @ CudaGmemLinear`) are Exo's to read, and Python must not evaluate them."""
    ipython.compile.flags |= __future__.annotations.compiler_flag
    ipython.register_magics(SporkMagics)
    formatters = ipython.display_formatter.formatters
    formatters["text/html"].for_type(Procedure, proc_html)
    formatters["text/plain"].for_type(Procedure, lambda p, printer, cycle: printer.text(str(p)))
    ipython.set_custom_exc((SporkError, SchedulingError), _show_spork_error)


def _show_spork_error(shell, etype, value, tb, tb_offset=None) -> None:
    """A SporkError already names the user's file and line: show it without a traceback. So is exo's own
    SchedulingError from a Procedure method (`p.find_loop("x")`), once explained at the user's line."""
    if not isinstance(value, SporkError):
        frames = [f for f, _ in traceback.walk_tb(tb)]
        procs = [f.f_locals.get("self") for f in frames if isinstance(f.f_locals.get("self"), Procedure)]
        op = next((f.f_code.co_name for f in frames if isinstance(f.f_locals.get("self"), Procedure)), "scheduling")
        value = explain(value, op, procs[0] if procs else None, user_frame(frames[-1]) if frames else None)
        etype = type(value)
    print(f"{etype.__name__}: {value}", file=sys.stderr)
