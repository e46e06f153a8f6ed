"""The `spork-lab` command."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import traceback
from types import SimpleNamespace
from typing import Optional

from exo.API import Procedure

from .errors import CodegenError, OutputPathError, SporkError

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def load_procs(path: pathlib.Path) -> dict:
    """Import a Python file (which may import files beside it) and return its procs (not instrs) by name,
    in definition order. Any error the file raises becomes a SporkError at the user's line."""
    folder = str(path.resolve().parent)
    if not path.exists():
        raise SporkError(f"{path}: no such file")
    if path.suffix != ".py" or not path.is_file():
        raise SporkError(f"{path} is not a Python file: give the .py file that defines the procs (a notebook: "
                         "`jupyter nbconvert --to script` it first)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SporkError:
        raise
    except Exception as e:  # noqa: BLE001 -- whatever the user's file raised, said at the user's line
        raise _at_user_line(e, folder) from None
    finally:
        sys.path.remove(folder)
    return module_procs(module)


def module_procs(module) -> dict:
    """A module's procs (not instrs) by name, in definition order, and those its `PROCS` lists: a module may make
    its procs on first use (a module `__getattr__`, as examples/sm80_gemm.py does) so that importing it is fast."""
    found = {name: value for name, value in vars(module).items()
             if isinstance(value, Procedure) and not value.is_instr()}
    for p in getattr(module, "PROCS", []):
        found.setdefault(p.name(), p)
    return found


def _at_user_line(e: Exception, folder: str) -> SporkError:
    """`e` as a SporkError at the innermost line of the user's files (those under `folder`) it passed through."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(folder)]
    if isinstance(e, SyntaxError) and e.filename and e.filename.startswith(folder):
        where = SimpleNamespace(filename=e.filename, lineno=e.lineno)
    else:
        where = SimpleNamespace(filename=frames[-1].filename, lineno=frames[-1].lineno) if frames else None
    text = str(e).strip().replace("\n", "\n  ")
    return SporkError(f"{type(e).__name__}: {text}", where)


def _run_example(module, cupy) -> None:
    """Build each of the example's procs, check it against its NumPy reference and time it."""
    import numpy as np

    from .runtime import benchmark, build, example_case

    for p in module.PROCS:
        built = getattr(build([p]), p.name())
        args, expected = example_case(module, p, np.random.default_rng())
        dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        built(*dev.values())
        errors = {k: float(np.max(np.abs(dev[k].get() - want))) for k, want in expected.items()}
        timing = benchmark(built, list(dev.values()), reps=20)
        worst = max(errors.values())
        print(f"     {p.name():28s} max |error| {worst:.2e}  median {timing.median_ms:.3f} ms")


def demo(args: argparse.Namespace) -> int:
    """Parse, schedule and print the example programs; generate their CUDA; run them on a GPU if present."""
    from .codegen import compile_procs

    files = sorted(EXAMPLES.glob("*.py"))
    if not files:
        print(f"no examples found in {EXAMPLES}", file=sys.stderr)
        return 1
    from .runtime import gpu_cupy

    cupy = gpu_cupy()
    out_dir = pathlib.Path(args.out)
    for path in files:
        print(f"==== {path.relative_to(ROOT)}")
        procs = load_procs(path)
        for name, p in procs.items():
            print(f"---- {name}")
            print(p)
        module = sys.modules[path.stem]
        if not hasattr(module, "PROCS"):
            continue
        paths = compile_procs(module.PROCS, out_dir, path.stem)
        lines = sum(len(f.read_text().splitlines()) for f in paths)
        print(f"---- generated {', '.join(str(f) for f in paths)} ({lines} lines)")
        if cupy is not None and hasattr(module, "reference"):
            _run_example(module, cupy)
    if cupy is None:
        print("(no GPU here: the kernels were generated but not run)")
    return 0


def compile_file(args: argparse.Namespace) -> int:
    """Generate the .c, .h, .cu and .cuh files of the procs in a Python file."""
    from .codegen import compile_procs, compute_capability

    path = pathlib.Path(args.file)
    procs = load_procs(path)
    if not procs:
        print(f"error: {path} defines no procs (functions decorated with @proc) to compile", file=sys.stderr)
        return 2
    if args.proc:
        missing = [n for n in args.proc if n not in procs]
        if missing:
            print(f"error: {path} defines no proc {', '.join(missing)} (it has: {', '.join(procs)})", file=sys.stderr)
            return 2
        procs = {n: procs[n] for n in args.proc}
    try:
        compute_capability(args.arch)
    except CodegenError:  # said here: its place would be spork-lab's own script
        print(f"error: --arch {args.arch}: a target looks like sm_80 or sm_90a", file=sys.stderr)
        return 2
    try:
        written = compile_procs(list(procs.values()), args.out, path.stem, args.arch)
    except SporkError as e:
        if args.proc or len(procs) == 1 or isinstance(e, OutputPathError):
            raise
        print(f"error: {e}", file=sys.stderr)
        print(f"note: without --proc every proc of {path.name} is compiled ({', '.join(procs)}); name the ones to "
              "compile with --proc NAME", file=sys.stderr)
        return 2
    for f in written:
        print(f)
    return 0


def lab(args: argparse.Namespace) -> int:
    """Open JupyterLab on the tutorials, or on a folder of copies of them."""
    from .lab._launch import NOTEBOOKS_DIR, copy_tutorials, launch_lab

    folder = NOTEBOOKS_DIR
    if args.dir is not None:
        folder = pathlib.Path(args.dir).resolve()
        try:
            for copied in copy_tutorials(folder):
                print(f"copied {copied}")
        except OSError as e:
            print(f"error: {args.dir}: cannot copy the tutorials there ({e.strerror})", file=sys.stderr)
            return 2
    return launch_lab(folder, open_browser=not args.no_browser, port=args.port)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="spork-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="print the examples, generate their CUDA, run them on a GPU if present")
    p_demo.add_argument("-o", "--out", default="build/demo", help="where the generated code goes")
    p_demo.set_defaults(run=demo)
    p_compile = sub.add_parser("compile", help="generate CUDA C++ and host C for the procs of a Python file")
    p_compile.add_argument("file")
    p_compile.add_argument("--proc", action="append", help="only this proc (repeatable)")
    p_compile.add_argument("-o", "--out", required=True, help="output directory")
    p_compile.add_argument("--arch", help="the GPU the code is for (sm_80, sm_90a, ...): its limits are checked "
                           "(shared memory per CTA, clusters); without it, the most any target allows")
    p_compile.set_defaults(run=compile_file)
    p_lab = sub.add_parser("lab", help="open JupyterLab on the tutorial notebooks")
    p_lab.add_argument("dir", nargs="?", help="open JupyterLab on this folder instead, with copies of the tutorials "
                       "(those it lacks), so that the repository's stay as they are (for a class)")
    p_lab.add_argument("--port", type=int, default=8888)
    p_lab.add_argument("--no-browser", action="store_true")
    p_lab.set_defaults(run=lab)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except OutputPathError as e:  # its place would be spork-lab's own script
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    except SporkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
