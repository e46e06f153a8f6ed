"""The `spork-lab` command."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
from typing import Optional

from exo.API import Procedure

from .errors import SporkError

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def load_procs(path: pathlib.Path) -> dict:
    """Import a Python file and return its procs (not instrs) by name, in definition order."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, Procedure) and not value.is_instr()
    }


def demo(args: argparse.Namespace) -> int:
    """Parse, schedule and print the example programs."""
    files = sorted(EXAMPLES.glob("*.py"))
    if not files:
        print(f"no examples found in {EXAMPLES}", file=sys.stderr)
        return 1
    for path in files:
        print(f"==== {path.relative_to(ROOT)}")
        for name, p in load_procs(path).items():
            print(f"---- {name}")
            print(p)
    return 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="spork-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="parse, schedule and print the example programs").set_defaults(run=demo)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except SporkError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
