"""The spork-lab command: demo, compile, and user errors as one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spork_lab.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_demo_prints_and_generates_every_example(tmp_path, capsys):
    assert main(["demo", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "with CudaDeviceFunction(blockDim=128):" in out
    assert "==== examples/scheduling_tour.py" in out
    assert (tmp_path / "vec_add.cu").read_text().count("__global__") >= 2


def test_compile_one_proc(tmp_path):
    rc = main(["compile", str(ROOT / "examples" / "vec_add.py"), "--proc", "vec_add", "-o", str(tmp_path)])
    assert rc == 0
    cu = (tmp_path / "vec_add.cu").read_text()
    assert cu.count("__global__") == 1
    assert "vec_add" in (tmp_path / "vec_add.h").read_text()


def test_compile_unknown_proc(tmp_path, capsys):
    rc = main(["compile", str(ROOT / "examples" / "vec_add.py"), "--proc", "nope", "-o", str(tmp_path)])
    assert rc == 2 and "defines no proc nope" in capsys.readouterr().err


@pytest.mark.parametrize("name, message", [("k.ipynb", " is not a Python file: give the .py file"),
                                           ("folder", " is not a Python file"), ("missing.py", ": no such file")])
def test_compile_something_other_than_a_python_file(tmp_path, capsys, name, message):
    """Was an AttributeError (no import spec for a notebook or a folder) or a FileNotFoundError, with a traceback."""
    (tmp_path / "k.ipynb").write_text("{}")
    (tmp_path / "folder").mkdir()
    rc = main(["compile", str(tmp_path / name), "-o", str(tmp_path / "out")])
    assert rc == 2 and capsys.readouterr().err.startswith(f"error: {tmp_path / name}{message}")


def test_compile_into_a_file_says_to_give_a_directory(tmp_path, capsys):
    """Was a FileExistsError traceback from mkdir."""
    (tmp_path / "out").write_text("")
    rc = main(["compile", str(ROOT / "examples" / "vec_add.py"), "-o", str(tmp_path / "out")])
    assert rc == 2 and capsys.readouterr().err == f"error: -o {tmp_path / 'out'} is a file; give a directory for the generated files\n"


@pytest.mark.parametrize("args, message", [
    (["--arch", "sm75"], "error: --arch sm75: a target looks like sm_80 or sm_90a\n"),  # was located at the console script
    (["-o", "/dev/null/x"], "error: -o /dev/null/x: cannot write the generated files there (Not a directory)\n"),
])  # fmt: skip
def test_compile_options_it_cannot_use_are_one_line(tmp_path, capsys, args, message):
    """Was a NotADirectoryError traceback (-o), or an error naming spork-lab's own script (--arch)."""
    argv = ["compile", str(ROOT / "examples" / "vec_add.py"), "-o", str(tmp_path / "out"), *args]
    assert main(argv) == 2 and capsys.readouterr().err == message


def test_compile_a_file_without_procs(tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("def k(x):\n    return x\n")
    rc = main(["compile", str(empty), "-o", str(tmp_path / "out")])
    assert rc == 2 and "defines no procs (functions decorated with @proc)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


_HEADER = (
    "from __future__ import annotations\n"
    "from spork_lab import proc\n"
    "from spork_lab.platforms.cuda import *\n"
    "@proc\n"
    "def k(x: f32[32] @ CudaGmemLinear):\n"
)


def _compile(tmp_path, body: str, *options: str) -> tuple[Path, subprocess.CompletedProcess]:
    """`spork-lab compile` on a file of one proc `k` whose body (from line 6) is `body`."""
    source = tmp_path / "k.py"
    source.write_text(_HEADER + body)
    run = subprocess.run([sys.executable, "-m", "spork_lab.cli", "compile", str(source), "-o", str(tmp_path), *options],
                         capture_output=True, text=True)
    return source, run


def test_user_error_is_one_line_with_file_and_line(tmp_path):
    bad, run = _compile(tmp_path, "    Fence(cuda_in_order)\n")
    assert run.returncode == 2
    assert run.stderr.strip() == f"error: {bad}:6: Fence takes 2 arguments, got 1: write Fence(first_sync_tl, second_sync_tl)"


def test_shared_memory_over_the_limit_is_one_line_at_the_allocation(tmp_path):
    """Found when compiling, not at launch: the CLI prints the CodegenError as one line, with no traceback."""
    big, run = _compile(
        tmp_path,
        "    with CudaDeviceFunction(blockDim=32):\n"
        "        for task in cuda_tasks(0, 1):\n"
        "            tile: f32[32, 2048] @ CudaSmemLinear\n"
        "            for t in cuda_threads(0, 32):\n"
        "                tile[t, 0] = x[t]\n",
    )
    assert run.returncode == 2
    assert run.stderr.startswith(f"error: {big}:8: the device function at line 6 needs 262144 bytes of shared memory")
    assert len(run.stderr.strip().splitlines()) == 1


def test_compile_checks_the_limits_of_the_arch_asked_for(tmp_path):
    """100 KiB of shared memory fit sm_80 and sm_90 (the default checks the most any target allows), not sm_86."""
    body = (
        "    with CudaDeviceFunction(blockDim=32):\n"
        "        for task in cuda_tasks(0, 1):\n"
        "            tile: f32[25, 1024] @ CudaSmemLinear\n"
        "            for t in cuda_threads(0, 32):\n"
        "                tile[t % 25, 0] = x[t]\n"
    )
    for ok in ((), ("--arch", "sm_80")):
        assert _compile(tmp_path, body, *ok)[1].returncode == 0
    small, run = _compile(tmp_path, body, "--arch", "sm_86")
    assert run.returncode == 2
    assert run.stderr.startswith(f"error: {small}:8: the device function at line 6 needs 102400 bytes of shared memory")
    assert "sm_86" in run.stderr
    assert _compile(tmp_path, body, "--arch", "ampere")[1].stderr.strip() == (
        "error: --arch ampere: a target looks like sm_80 or sm_90a")


def _sibling_files(tmp_path: Path, kernel_tail: str = "") -> Path:
    (tmp_path / "shapes.py").write_text("TILE = 128\n")
    main_file = tmp_path / "kernel.py"
    main_file.write_text(
        "from __future__ import annotations\n"
        "from spork_lab import proc\n"
        "from spork_lab.platforms.cuda import *\n"
        "from spork_lab.scheduling import *\n"
        "from shapes import TILE\n"
        "@proc\n"
        "def add(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):\n"
        "    assert n % 128 == 0\n"
        "    for i in seq(0, n):\n"
        "        y[i] += x[i]\n"
        "p = divide_loop(add, 'i', TILE, ['task', 'tid'], perfect=True)\n"
        "p = set_loop_mode(p, 'task', cuda_tasks)\n"
        "p = set_loop_mode(p, 'tid', cuda_threads)\n"
        "p = wrap_with_context(p, p.find_loop('task'), CudaDeviceFunction(blockDim=TILE))\n"
        "add_gpu = rename(p, 'add_gpu')\n" + kernel_tail
    )
    return main_file


def test_compile_a_file_that_imports_a_sibling(tmp_path):
    kernel = _sibling_files(tmp_path)
    run = subprocess.run([sys.executable, "-m", "spork_lab.cli", "compile", str(kernel), "--proc", "add_gpu",
                          "-o", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "__global__" in (tmp_path / "out" / "kernel.cu").read_text()


def test_compile_reports_a_scheduling_error_at_the_users_line(tmp_path):
    kernel = _sibling_files(tmp_path, "q = divide_loop(add_gpu, 'tidd', 4, ['a', 'b'])\n")
    run = subprocess.run([sys.executable, "-m", "spork_lab.cli", "compile", str(kernel), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2
    assert run.stderr.startswith(f"error: {kernel}:16: ") and "Traceback" not in run.stderr
    assert "tidd" in run.stderr and "did you mean 'tid'" in run.stderr


def test_lab_on_a_folder_works_on_copies_of_the_tutorials(tmp_path, monkeypatch, capsys):
    """A class opened the repository's own tutorials: students' edits and autosaves changed them."""
    from spork_lab.lab import _launch

    launched = []
    monkeypatch.setattr(_launch.subprocess, "call", lambda cmd, env: launched.append(cmd) or 0)
    (tmp_path / "01_first_kernel.ipynb").write_text("mine")  # a student's own copy is kept
    assert main(["lab", str(tmp_path), "--no-browser"]) == 0
    assert f"--notebook-dir={tmp_path}" in launched[0] and "--no-browser" in launched[0]
    assert (tmp_path / "01_first_kernel.ipynb").read_text() == "mine"
    tutorials = sorted(p.name for p in _launch.NOTEBOOKS_DIR.glob("*.ipynb"))
    assert sorted(p.name for p in tmp_path.glob("*.ipynb")) == tutorials and len(tutorials) == 3
    assert (tmp_path / "03_race_debugging.ipynb").read_bytes() == (_launch.NOTEBOOKS_DIR / "03_race_debugging.ipynb").read_bytes()
    assert "copied" in capsys.readouterr().out
    assert main(["lab", str(tmp_path / "01_first_kernel.ipynb")]) == 2  # a file, not a folder: one line
    assert "cannot copy the tutorials there" in capsys.readouterr().err
