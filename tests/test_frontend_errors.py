"""Misused Exo-GPU syntax: a SporkSyntaxError naming the user's file and line and what to write."""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
import textwrap
import traceback

import pytest
from exo.frontend.pyparser import ParseError

import spork_lab as sl
from spork_lab import SporkSyntaxError

HEADER = """\
from __future__ import annotations
from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.platforms.Sm90 import *


@proc
def bad(n: size, x: f32[n] @ CudaGmemLinear):
    bar: barrier @ CudaMbarrier
    with CudaDeviceFunction(blockDim=64):
        for task in cuda_tasks(0, 1):
"""


def _load(tmp_path, body: str, error: type = SporkSyntaxError):
    """Write a proc whose task-loop body is `body` and import it; return the error, the file and the marked line."""
    lines = textwrap.dedent(body).strip("\n").splitlines()
    return _import_failing(tmp_path, HEADER + "".join(f"            {line}\n" for line in lines), error)


def _import_failing(tmp_path, source: str, error: type = SporkSyntaxError):
    """Import `source` as a user's file, which must raise `error`; return it, the file and the line marked `# <-`."""
    marked = next(i for i, line in enumerate(source.splitlines(), 1) if "# <-" in line)
    path = tmp_path / "user_kernel.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("user_kernel", path)
    with pytest.raises(error) as info:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    return info.value, path, marked


CASES = {
    "unknown loop mode": ("for t in cuda_thread(0, 32):  # <-\n    pass", ["unknown loop mode 'cuda_thread'", "cuda_threads"]),
    "unknown context manager": ("with CudaAsyn(Sm80_cp_async_instr):  # <-\n    pass", ["unknown context manager 'CudaAsyn'", "CudaAsync"]),
    "proc variable as a block argument": ("with CudaWarps(0, n):  # <-\n    pass",
                                          ["`CudaWarps(0, n)`: unknown name 'n'", "compile-time values"]),
    "proc variable as an instr keyword": ("Sm80_cp_async_f32(x[0:4], x[0:4], size=n)  # <-",
                                          ["Sm80_cp_async_f32(size=...) takes a value known when the proc is compiled",
                                           "'n' is a variable of the proc: write a number"]),
    "bad keyword argument": ("with CudaWarps(0, 1, nme='a'):  # <-\n    pass", ["unexpected keyword argument 'nme'", "CudaWarps(lo, hi, name=...)"]),
    "missing arguments": ("with CudaWarps():  # <-\n    pass", ["CudaWarps needs warps", 'CudaWarps(name="...")']),
    "bad loop keyword": ("for t in cuda_threads(0, 32, units=cuda_warp):  # <-\n    pass", ["unknown keyword 'units'", "unit=..."]),
    "bare context class": ("with CudaAsync:  # <-\n    pass", ["write `with CudaAsync(...):`"]),
    "Fence arity": ("Fence(cuda_in_order)  # <-", ["Fence takes 2 arguments, got 1", "Fence(first_sync_tl, second_sync_tl)"]),
    "Await arity": ("Await(bar, cuda_in_order)  # <-", ["Await takes 3 arguments, got 2"]),
    "Arrive arity": ("Arrive(cuda_in_order) >> bar  # <-", ["Arrive takes 2 arguments", "Arrive(first_sync_tl, N) >> bar[...]"]),
    "Arrive without >>": ("Arrive(cuda_in_order, 1)  # <-", ["needs its barrier after `>>`"]),
    ">> after Fence": ("Fence(cuda_in_order, cuda_in_order) >> bar  # <-", ["`>>` only follows Arrive(...) or ReverseArrive(...)"]),
    "too many block arguments": ("with CudaAsync(Sm80_cp_async_instr, cuda_in_order_instr):  # <-\n    pass",
                                 ["CudaAsync: takes 1 positional argument, got 2; write CudaAsync(instr_tl)"]),
    "several items in with": ("with CudaWarps(0, 1), CudaWarps(1, 2):  # <-\n    pass", ["one context per `with`"]),
    "as in with": ("with CudaWarps(0, 1) as w:  # <-\n    pass", ["`with ... as name` is not allowed"]),
    # exo said "expected called object to be a extern function"
    "sync statement as a value": ("f = Fence(cuda_in_order, cuda_in_order)  # <-",
                                  ["`Fence(cuda_in_order, cuda_in_order)` is a statement and gives no value: write it "
                                   "on a line of its own"]),
    "instr call as a value": ("for w in cuda_threads(0, 1, unit=cuda_warp):\n    D: f32[16, 8] @ Sm80_RmemMatrixD\n"
                              "    x[0] = Sm80_mma_zero_d_tf32(D)  # <-", ["`Sm80_mma_zero_d_tf32(D)` is a statement"]),
    "non-barrier as barrier": ("Await(x, cuda_in_order, 0)  # <-", ["'x' is not a barrier", "x: barrier @ CudaMbarrier", "before using it in Await"]),
    "barrier as data": ("x[0] = bar  # <-", ["'bar' is a barrier, not data"]),
    "non-integer N": ("Await(bar, cuda_in_order, 1.5)  # <-", ["N must be an int", "~1"]),
    "instr-tl as sync-tl": ("Fence(Sm80_cp_async_instr, cuda_in_order)  # <-", ["Sm80_cp_async_instr is an instr-tl: write Sm80_cp_async"]),
    "unknown sync-tl": ("Fence(cuda_inorder, cuda_in_order)  # <-", ["unknown sync-tl 'cuda_inorder'", "did you mean cuda_in_order"]),
    "sync-tl as instr-tl": ("with CudaAsync(Sm80_cp_async):  # <-\n    pass", ["write CudaAsync(Sm80_cp_async_instr)"]),
    "in-order instr-tl in CudaAsync": ("for i in cuda_threads(0, 1):\n    with CudaAsync(cuda_in_order_instr):  # <-\n"
                                       "        x[0] = 0.0",
                                       ["cuda_in_order_instr is in order", "drop the `with`"]),
    "reverse sync on a commit group": ("ReverseArrive(cuda_in_order, 1) >> grp  # <-", ["needs a barrier @ CudaMbarrier"]),
    "instr argument of another shape": (
        "for w in cuda_threads(0, 1, unit=cuda_warp):\n    D: f32[16, 16] @ Sm80_RmemMatrixD\n    Sm80_mma_zero_d_tf32(D)  # <-",
        ["Sm80_mma_zero_d_tf32 takes rmem of shape [16, 8], but `D` has shape [16, 16]"]),
    "unknown instr": ("Sm80_mma_zero_d_tf3(x)  # <-", ["unknown proc or instr 'Sm80_mma_zero_d_tf3'",
                                                      "did you mean Sm80_mma_zero_d_tf32?"]),
    # was a NameError from inside exo's parser, naming no line
    "unknown function in a value": ("for t in cuda_threads(0, 64):\n    x[t] = sqrtf(x[t])  # <-",
                                    ["unknown function 'sqrtf' (did you mean sqrt?): an expression calls exo's externs "
                                     "(expf, fmaxf, relu, select, sigmoid, sin, sqrt); import them, as in "
                                     "`from exo.libs.externs import sqrt`"]),
    "extern not imported": ("for t in cuda_threads(0, 64):\n    x[t] = fmaxf(x[t], 0.0)  # <-",
                            ["fmaxf is one of exo's externs, not imported here: add `from exo.libs.externs import "
                             "fmaxf` to the file"]),  # was "unknown function 'fmaxf' (did you mean fmaxf?)"
    "unknown function in a condition": ("for t in cuda_threads(0, 64):\n    if expo(x[t]) > 0.0:  # <-\n"
                                        "        x[t] = 0.0", ["unknown function 'expo' (did you mean expf?)"]),
    # exo's type checker pairs arguments with parameters by zip: the extra one was dropped without a word
    "extra instr argument": ("for w in cuda_threads(0, 1, unit=cuda_warp):\n    D: f32[16, 8] @ Sm80_RmemMatrixD\n"
                             "    Sm80_mma_zero_d_tf32(D, D)  # <-",
                             ["Sm80_mma_zero_d_tf32 takes 1 argument (rmem), got 2"]),
    "missing instr argument": ("s: f32[64] @ CudaSmemLinear\nwith CudaAsync(Sm80_cp_async_instr):\n"
                               "    Sm80_cp_async_f32(s[0:4], size=16)  # <-",
                               ["Sm80_cp_async_f32 with size=16 takes 2 arguments (dst, src), got 1"]),
    "data in a barrier memory": ("t: f32[4] @ CudaMbarrier  # <-\nt[0] = 0.0",
                                 ["CudaMbarrier holds barriers, not data", "`t: barrier @ CudaMbarrier`"]),
    # were exo's NameError / asdl ValidationError, through its parser's frames, at the proc's line
    "misspelt memory": ("t: f32[4] @ CudaSmemLiner  # <-\nt[0] = 0.0",
                        ["unknown memory 'CudaSmemLiner' for 't' (did you mean CudaSmemLinear?)"]),
    "misspelt element type": ("t: f23[4] @ CudaSmemLinear  # <-\nt[0] = 0.0",
                              ["unknown element type 'f23' for 't' (did you mean f32?); the element types are R, f16, bf16"]),
    "collective unit as a memory": ("t: f32[4] @ cuda_warp  # <-\nt[0] = 0.0",
                                    ["cuda_warp is not a memory but a collective unit"]),
    "memory factory not called": ("t: f32[4] @ Sm90_SmemSwizzled  # <-\nt[0] = 0.0",
                                  ["Sm90_SmemSwizzled is not a memory but a function: call it",
                                   "Sm90_SmemSwizzled(128)"]),
    # was "M=64 and N a multiple of 8 in [8, 256], got M=64, N=None"
    "template instr keyword missing": ("D: f32[64, 128] @ Sm90_RmemMatrixD\nSm90_zero_scale_d_f32(D)  # <-",
                                       ["Sm90_zero_scale_d_f32 needs N=...: write Sm90_zero_scale_d_f32(..., N=...)"]),
    "template instr operand by keyword": ("s: f32[64] @ CudaSmemLinear\nfor i in cuda_threads(0, 16):\n"
                                          "    with CudaAsync(Sm80_cp_async_instr):\n"
                                          "        Sm80_cp_async_f32(dst=s[4 * i:4 * i + 4], src=x[0:4], size=16)  # <-",
                                          ["Sm80_cp_async_f32 takes its operands positionally, and only size=... by "
                                           "keyword, not dst=..."]),
    "template instr window of another shape": (
        "s: f32[64] @ CudaSmemLinear\nfor i in cuda_threads(0, 16):\n"
        "    with CudaAsync(Sm80_cp_async_instr):\n        Sm80_cp_async_f32(s[4 * i:4 * i + 2], x[4 * i:4 * i + 2], size=16)  # <-",
        ["Sm80_cp_async_f32 with size=16 takes dst of shape [4], but `s[4 * i:4 * i + 2]` has shape [2]"]),
    # was exo's "expected argument of type '[f32][16, 8]', but got type 'Window(src_type=f32[128], as_tensor=...)'"
    "instr window of fewer dimensions": (
        "s: f32[128] @ CudaSmemLinear\nfor w in cuda_threads(0, 1, unit=cuda_warp):\n"
        "    A: f32[16, 8] @ Sm80_RmemMatrixA\n    Sm80_mma_load_a_tf32(A[:, :], s[0:128])  # <-",
        ["Sm80_mma_load_a_tf32 takes smem of shape [16, 8], but `s[0:128]` has shape [128]"]),
    "instr window of a size's extent and fewer dimensions": (
        "for w in cuda_threads(0, 1, unit=cuda_warp):\n    D: f32[16, 8] @ Sm80_RmemMatrixD\n"
        "    Sm80_mma_store_d_tf32(x[0:n], D[:, :])  # <-",
        ["Sm80_mma_store_d_tf32 takes gmem of shape [16, 8], but `x[0:n]` has shape [n]"]),
}  # fmt: skip


@pytest.mark.parametrize("statement, hint", [
    ("return", "a proc returns nothing: it writes its results into its tensor arguments"),
    ("while n > 0:\n    pass", "a proc's loops have bounds: for i in seq(lo, hi)"),
])  # fmt: skip
def test_python_statements_exo_does_not_parse_say_what_to_write(tmp_path, statement, hint):
    """Were exo's bare "unsupported type of statement"."""
    first, *rest = statement.splitlines()
    err, path, line = _load(tmp_path, "\n".join([first + "  # <-", *rest]), ParseError)
    assert str(err).startswith(f"{path}:{line}:") and f"unsupported type of statement: {hint}" in str(err)


@pytest.mark.parametrize("procs, message", [
    # exo printed both shapes as reprs of its effects IR (`Effects.BinOp(op='-', lhs=Effects.Var(name=n_3, ...`)
    ("@proc\ndef callee(n: size, x: f32[n] @ CudaGmemLinear):\n    pass\n\n\n"
     "@proc\ndef caller(n: size, x: f32[n] @ CudaGmemLinear):\n    assert n >= 2\n"
     "    callee(n, x[0:n - 1])  # <-\n",
     "type-shape of calling argument may not equal the required type-shape: [(n - 1)] vs. [n]"),
    # an operand that is itself an operation (`m / 2`) left the whole expression as reprs (session 39)
    ("@proc\ndef halves(n: size, m: size, x: f32[n + m] @ CudaGmemLinear):\n"
     "    for i in seq(m / 2, n):  # <-\n        x[i] = 0.0\n",
     "expected expression (n - (m / 2)) to always be non-negative"),
])
def test_exos_effect_messages_read_as_the_user_wrote_them(tmp_path, procs, message):
    err, path, line = _import_failing(tmp_path, HEADER.split("@proc")[0] + procs, TypeError)
    assert f"{path}:{line}:" in str(err) and "Effects" not in str(err) and "0x" not in str(err)
    assert message in str(err)


def test_an_index_in_data_arithmetic_says_what_it_is(tmp_path):
    """exo said only "expected scalar type" (session 38's workbench walkthrough)."""
    err, path, line = _load(tmp_path, "for t in cuda_threads(0, 1):\n    x[t] = x[t] + t  # <-", TypeError)
    assert f"{path}:{line}:" in str(err)
    assert "expected scalar type: `t` is an index (a size, an iterator, or arithmetic on them)" in str(err)


def test_a_constant_extent_that_is_not_positive_reads_as_the_user_wrote_it(tmp_path):
    """exo printed the constant as the repr of its effects IR (`Effects.Const(val=0, ..., srcinfo=<... at 0x...>)`)."""
    err, path, line = _load(tmp_path, "s: f32[0] @ CudaSmemLinear  # <-\nx[0] = 0.0", TypeError)
    assert f"{path}:{line}:" in str(err) and "expected expression 0 to always be positive" in str(err)
    assert "Effects" not in str(err)


@pytest.mark.parametrize("case", CASES)
def test_error_names_file_line_and_fix(tmp_path, case):
    body, expected = CASES[case]
    if "grp" in body:
        body = "grp: barrier @ CudaCommitGroup\n" + body
    err, path, line = _load(tmp_path, body)
    assert (err.filename, err.lineno) == (str(path), line)
    assert str(err).startswith(f"{path}:{line}: ")
    for text in expected:
        assert text in str(err)


def test_no_exo_or_internal_frames_in_the_traceback(tmp_path):
    err, path, _ = _load(tmp_path, "Fence(cuda_in_order)  # <-")
    frames = traceback.extract_tb(err.__traceback__)
    assert not [f for f in frames if "/exo/" in f.filename]
    ours = [f.filename.rsplit("/", 1)[-1] for f in frames if "/spork_lab/" in f.filename]
    assert ours == ["decorators.py", "errors.py"]  # `@proc` itself, then the entry point that re-raises


def test_a_script_stopped_by_a_spork_error_prints_only_the_users_frames(tmp_path):
    """Python prints the frame that raises; spork_lab's excepthook leaves out its own and exo's frames."""
    script = tmp_path / "user_script.py"
    script.write_text(HEADER + "            Fence(cuda_in_order)  # <-\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert run.returncode == 1
    assert "/spork_lab/" not in run.stderr and "/exo/" not in run.stderr, run.stderr
    assert f'File "{script}", line ' in run.stderr
    assert run.stderr.rstrip().endswith(f"SporkSyntaxError: {script}:13: Fence takes 2 arguments, got 1: write "
                                        "Fence(first_sync_tl, second_sync_tl)"), run.stderr
    other = subprocess.run([sys.executable, "-c", "import spork_lab; 1 / 0"], capture_output=True, text=True)
    assert other.stderr.rstrip().endswith("ZeroDivisionError: division by zero")  # other errors as before


def _in_ipython(capsys, body: str, extension: bool) -> tuple:
    """Run a proc whose task-loop body is `body` in an IPython shell (with spork_lab's extension loaded or not):
    (the error, what the shell showed)."""
    shell = pytest.importorskip("IPython.core.interactiveshell").InteractiveShell.instance()  # maybe an earlier test's
    if extension:
        sl.load_ipython_extension(shell)
    else:
        shell.custom_exceptions = ()  # the extension's display of SporkErrors, if an earlier test loaded it
    shell.run_cell("from __future__ import annotations\nfrom spork_lab import proc\nfrom spork_lab.platforms.cuda import *")
    capsys.readouterr()
    cell = HEADER.split("@proc", 1)[1].replace("    bar: barrier @ CudaMbarrier\n", "")
    result = shell.run_cell(f"@proc{cell}            {body}\n")
    shown = capsys.readouterr()
    return result.error_in_exec, re.sub(r"\x1b\[[0-9;]*m", "", shown.out + shown.err)  # without the colours


MISTAKES = [("Fence(cuda_in_order)", SporkSyntaxError), ("x[1] = 0.0", TypeError)]


@pytest.mark.parametrize("body, error", MISTAKES)
def test_ipython_hides_the_entry_points_frames(capsys, body, error):
    """Without the extension the user sees their cell, then only the frame that raises (IPython never hides it)."""
    raised, shown = _in_ipython(capsys, body, extension=False)
    assert isinstance(raised, error), shown
    assert "skipping hidden" in shown and "Cell In[" in shown.split("skipping hidden")[0], shown
    assert len([line for line in shown.splitlines() if line.startswith("File ") and "/spork_lab/" in line]) == 1, shown


@pytest.mark.parametrize("body, error", MISTAKES)
def test_in_a_notebook_a_mistake_is_one_line_naming_the_cell(capsys, body, error):
    """With the extension, exo's bounds error (a SporkTypeError, still a TypeError) is shown as every SporkError:
    one line naming the cell and line, no traceback."""
    raised, shown = _in_ipython(capsys, body, extension=True)
    assert isinstance(raised, error) and isinstance(raised, sl.SporkError), shown
    assert "Traceback" not in shown and "/spork_lab/" not in shown, shown
    assert re.search(r"Cell In\[\d+\]:5(:\d+)?: ", shown), shown


OUT_OF_BOUNDS = {
    "window past the end of a tile, through an instr": (
        "s: f32[64] @ CudaSmemLinear\nfor i in cuda_threads(0, 16):\n"
        "    with CudaAsync(Sm80_cp_async_instr):\n        Sm80_cp_async_f32(s[4 * i + 4:4 * i + 8], x[0:4], size=16)  # <-",
        "s is written out-of-bounds"),
    "barrier index past the end of its array": ("ring: barrier[2] @ CudaMbarrier\nArrive(cuda_in_order, 1) >> ring[2]  # <-",
                                                "indexes the barrier ring: barrier[2] out-of-bounds"),
}  # fmt: skip


@pytest.mark.parametrize("case", OUT_OF_BOUNDS)
def test_out_of_bounds_through_a_call_is_reported_at_the_call(tmp_path, case):
    """exo checks a callee's effects at the callee's own statements: in spork_lab's platform files, or
    `<spork_lab sync statement>:0` for a barrier. The error must name the user's call instead."""
    body, expected = OUT_OF_BOUNDS[case]
    err, path, marked = _load(tmp_path, body, TypeError)  # exo's bounds errors keep their type
    lines = [line for line in str(err).splitlines() if "out-of-bounds" in line]
    assert lines and all(line.startswith(f"{path}:{marked}:") for line in lines), str(err)
    assert isinstance(err, sl.SporkTypeError) and err.lineno == marked
    assert expected in lines[0]
    assert not [f for f in traceback.extract_tb(err.__traceback__) if "/exo/" in f.filename]


def test_exo_front_end_errors_keep_their_type_without_exos_frames(tmp_path):
    err, path, marked = _load(tmp_path, "x[0] = undefined_name  # <-", ParseError)
    assert str(err).startswith(f"{path}:{marked}:") and "'undefined_name' undefined" in str(err)
    assert isinstance(err, sl.SporkParseError) and (err.filename, err.lineno) == (str(path), marked)
    assert not [f for f in traceback.extract_tb(err.__traceback__) if "/exo/" in f.filename]


def test_instr_alignment_names_a_parameter(tmp_path):
    path = tmp_path / "user_instr.py"
    path.write_text(
        "from __future__ import annotations\n"
        "from spork_lab import instr\n"
        "from spork_lab.platforms.cuda import *\n"
        "@instr('{d_data} = 0;', aligned=(('dst', 16),))\n"
        "def zero4(d: [f32][4] @ CudaSmemLinear):\n"
        "    for i in seq(0, 4):\n"
        "        d[i] = 0.0\n"
    )
    spec = importlib.util.spec_from_file_location("user_instr", path)
    with pytest.raises(SporkSyntaxError, match=r"@instr\(aligned=...\) names dst, not a parameter of zero4 \(d\)") as e:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert (e.value.filename, e.value.lineno) == (str(path), 5)


MODULES = {
    # the source after the imports; `# <-` marks the line the error names
    "barrier argument": ("@proc\ndef k(n: size, bar: barrier @ CudaMbarrier):  # <-\n    pass\n",
                         ["barrier 'bar' cannot be a proc argument", "bar: barrier @ CudaMbarrier"]),
    "memory whose constructor refuses its argument": (
        "@proc\ndef k(x: f32[64, 32] @ CudaGmemLinear):\n    with CudaDeviceFunction(blockDim=128):\n"
        "        for task in cuda_tasks(0, 1):\n            s: f32[64, 32] @ Sm90_SmemSwizzled(100)  # <-\n",
        ["evaluating `Sm90_SmemSwizzled(100)` raised ValueError", "swizzle must be 128, 64 or 32 bytes"]),
    "@instr instr_tl given a sync-tl": ("@instr('{d_data} = 0;', instr_tl=cuda_in_order)\n"
                                        "def zero1(d: [f32][1] @ CudaSmemLinear):  # <-\n    d[0] = 0.0\n",
                                        ["takes an instr-tl, and cuda_in_order is a sync-tl", "instr_tl=cuda_in_order_instr"]),
    "@instr coll_unit given a string": ("@instr('{d_data} = 0;', coll_unit='cuda_warp')\n"
                                        "def zero1(d: [f32][1] @ CudaSmemLinear):  # <-\n    d[0] = 0.0\n",
                                        ["@instr(coll_unit=...) takes a collective unit", "got 'cuda_warp'"]),
    "blockDim and warp_config both": ("@proc\ndef k(x: f32[4] @ CudaGmemLinear):\n"
                                      "    with CudaDeviceFunction(blockDim=64, warp_config=[CudaWarpConfig('a', 2)]):  # <-\n"
                                      "        for task in cuda_tasks(0, 1):\n            pass\n",
                                      ["not both", "or CudaDeviceFunction(warp_config=[...], clusterDim=..."]),
    "misspelt argument memory": ("@proc\ndef k(n: size, x: f32[n] @ CudaGmemLiner):  # <-\n    pass\n",
                                 ["unknown memory 'CudaGmemLiner' for 'x' (did you mean CudaGmemLinear?)"]),
    "misspelt instr parameter memory": ("@instr('{d_data} = 0;')\ndef zero1(d: [f32][1] @ CudaRmen):  # <-\n"
                                        "    d[0] = 0.0\n", ["unknown memory 'CudaRmen' for 'd' (did you mean CudaRmem?)"]),
    "@instr template naming no parameter": ("@instr('{dst_data} = 0;')\n"
                                            "def zero1(d: [f32][1] @ CudaSmemLinear):  # <-\n    d[0] = 0.0\n",
                                            ["template of zero1 names {dst_data}", "{d}, {d_data}, {d_int}"]),
    # was exo's SchedulingError ("Cannot Pass the same buffer 'a' via multiple arguments") from inside exo, no line
    "one buffer for two arguments": ("@proc\ndef sub(n: size, x: f32[n] @ DRAM, y: f32[n] @ DRAM):\n"
                                     "    for i in seq(0, n):\n        y[i] = x[i] - y[i]\n"
                                     "@proc\ndef k(n: size, a: f32[n] @ DRAM):\n    sub(n, a, a)  # <-\n",
                                     ["`sub(n, a, a)` passes a for both x and y", "aliased", "distinct buffers"]),
    "one buffer for two arguments, once through a window statement": (
        "@proc\ndef sub(x: f32[4] @ DRAM, y: f32[4] @ DRAM):\n    for i in seq(0, 4):\n        y[i] = x[i]\n"
        "@proc\ndef k(a: f32[8] @ DRAM):\n    lo = a[0:4]\n    sub(lo, a[4:8])  # <-\n",
        ["`sub(lo, a[4:8])` passes a for both x (through lo) and y", "aliased"]),
}  # fmt: skip


@pytest.mark.parametrize("case", MODULES)
def test_module_level_error_names_file_line_and_fix(tmp_path, case):
    """Mistakes in a proc's signature or an @instr's arguments, which the task-loop template cannot hold; before,
    they surfaced as exo's parse error, a ValueError inside exo's parser, or an AttributeError or KeyError from
    the analyses or the code generator at the first use."""
    body, expected = MODULES[case]
    source = "from __future__ import annotations\nfrom spork_lab import instr, proc\nfrom spork_lab.platforms.cuda import *\n" \
             "from spork_lab.platforms.Sm90 import *\n" + body
    error, path, marked = _import_failing(tmp_path, source)
    assert (error.filename, error.lineno) == (str(path), marked)
    for text in expected:
        assert text in error.message


def test_a_proc_without_source_text_says_where_to_define_it():
    with pytest.raises(SporkSyntaxError, match=r"Python has none for k: define it in a .py file or a notebook cell") as info:
        exec("@proc\ndef k(x: f32[4] @ DRAM):\n    x[0] = 1.0\n", {"proc": __import__("spork_lab").proc})
    assert (info.value.filename, info.value.lineno) == ("<string>", 1)  # the line of `@proc`


def test_a_blocks_own_message_is_not_prefixed_with_its_name_again(tmp_path):
    """Was `CudaWarps: CudaWarps(2, 1): ...` (and `CudaDeviceFunction: CudaDeviceFunction: ...`)."""
    err, path, line = _load(tmp_path, "with CudaWarps(2, 1):  # <-\n    pass")
    assert str(err) == f"{path}:{line}: CudaWarps(2, 1): need 0 <= lo < hi; write CudaWarps(lo, hi, name=...)"


def test_an_out_of_bounds_counterexample_names_only_the_users_sizes_and_iterators(tmp_path):
    """exo's counterexample also lists every buffer's strides and its own temporaries; the user sees their names."""
    body = "for tid in cuda_threads(0, 64, unit=cuda_thread):\n    x[tid + n] = 0.0  # <-"
    err, path, marked = _load(tmp_path, body, TypeError)
    lines = str(err).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{path}:{marked}:"))
    assert "x is written out-of-bounds when:" in lines[at]
    names = {pair.split(" = ")[0] for pair in lines[at + 1].strip().rstrip(".").split(", ")}
    assert names == {"n", "task", "tid"}, lines[at + 1]


def test_parse_source_errors_name_the_given_file_and_line_without_exos_frames():
    """sl.parse_source (programs built as text, e.g. examples/sm90_gemm.py's make_gemm) reports exo's type errors
    as @proc does: at `filename`, its lines counted from `first_line`."""
    text = "def f(n: size, x: f32[n] @ CudaGmemLinear):\n    for i in seq(0, n / n):\n        x[i] = 0.0"
    with pytest.raises(sl.SporkTypeError) as info:
        sl.parse_source(text, filename="kernels.py", first_line=40)
    err = info.value
    assert (err.filename, err.lineno) == ("kernels.py", 41) and "non-constant" in str(err)
    assert not [f for f in traceback.extract_tb(err.__traceback__) if "/exo/" in f.filename]


def test_parse_source_of_text_that_is_not_one_def_names_the_text():
    """Were Python's SyntaxError from ast.parse inside spork_lab, and a SporkSyntaxError naming no place."""
    with pytest.raises(SporkSyntaxError) as info:
        sl.parse_source("def k(n: size):\n    for i in seq(0 n):\n        pass\n", filename="kernels.py", first_line=40)
    assert (info.value.filename, info.value.lineno) == ("kernels.py", 41)
    assert info.value.message.startswith("the text is not Python: invalid syntax")
    with pytest.raises(SporkSyntaxError) as info:
        sl.parse_source("x = 1\n", filename="kernels.py", first_line=40)
    assert (info.value.filename, info.value.lineno) == ("kernels.py", 40)
    assert "a proc's text is exactly one function definition" in info.value.message


def test_parse_source_of_a_proc_says_to_give_its_text():
    """Was Python's TypeError from compile() inside spork_lab (audit E, I6)."""
    text = "def k(x: f32[4] @ DRAM):\n    x[0] = 1.0\n"
    with pytest.raises(sl.SporkTypeError) as info:
        sl.parse_source(sl.parse_source(text))
    assert (info.value.filename, info.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)
    assert info.value.message == ("parse_source takes the text of one def, not a Procedure; for a proc's printout "
                                  "write parse_source(str(p))")


def test_a_parameter_with_a_default_value_is_exos_parse_error_at_the_def(tmp_path):
    """exo's parser reports it at the def's `arguments` node, which has no line: our source locator raised an
    AttributeError from inside exo's parser."""
    source = ("from __future__ import annotations\nfrom spork_lab import proc\nfrom spork_lab.platforms.cuda import *\n\n"
              "@proc\ndef k(n: size, x: f32[n] @ DRAM = None):  # <-\n    pass\n")
    err, path, marked = _import_failing(tmp_path, source, ParseError)
    assert isinstance(err, sl.SporkParseError) and (err.filename, err.lineno) == (str(path), marked)
    assert "default argument values" in err.message


@pytest.mark.parametrize("call, message", [
    (lambda: sl.proc(sl.parse_source("def k(x: f32[4] @ DRAM):\n    x[0] = 1.0\n")),
     "@proc and @instr decorate a function (a def), not k, which is a proc already"),
    (lambda: sl.instr(42), "@instr needs the instruction's C template as a string: @instr(\"...\"), not 42"),
])  # fmt: skip
def test_decorators_given_something_else_name_the_users_line(call, message):
    """Were TypeErrors raised in spork_lab's frames, naming no line."""
    with pytest.raises(sl.SporkTypeError) as info:
        call()
    err = info.value
    assert (err.filename, err.lineno, err.message) == (__file__, call.__code__.co_firstlineno, message)
