"""`%load_ext spork_lab`: rich display of procs and the workbench magics."""

from __future__ import annotations

import sys

from exo.API import Procedure
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import SporkError
from . import _render
from ._codeview import code_view


def proc_html(p: Procedure) -> str:
    """A proc as syntax-highlighted Exo-GPU code (what notebooks show for a proc after %load_ext spork_lab)."""
    return _render.standalone(f'<div class="sl-wb sl-proc">{_render.code(code_view(p), {}, None)}</div>')


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
            raise NameError(f"no proc named {args.proc!r} in the notebook")
        sizes = {}
        for item in args.sizes:
            name, sep, value = item.partition("=")
            if not sep or not value.isdigit():
                raise ValueError(f"size {item!r} must look like name=INT, e.g. n=512")
            sizes[name] = int(value)
        return Workbench(self.shell.user_ns[args.proc], sizes=sizes)


def load_ipython_extension(ipython) -> None:
    """Register the magics and the display of procs: highlighted HTML, with the Exo-GPU text as fallback."""
    ipython.register_magics(SporkMagics)
    formatters = ipython.display_formatter.formatters
    formatters["text/html"].for_type(Procedure, proc_html)
    formatters["text/plain"].for_type(Procedure, lambda p, printer, cycle: printer.text(str(p)))
    ipython.set_custom_exc((SporkError,), _show_spork_error)


def _show_spork_error(shell, etype, value, tb, tb_offset=None) -> None:
    """A SporkError already names the user's file and line: show it without a traceback."""
    print(f"{etype.__name__}: {value}", file=sys.stderr)
