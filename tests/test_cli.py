"""The spork-lab command: demo, compile, and user errors as one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_user_error_is_one_line_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from __future__ import annotations\n"
        "from spork_lab import proc\n"
        "from spork_lab.platforms.cuda import *\n"
        "@proc\n"
        "def k(x: f32[32] @ CudaGmemLinear):\n"
        "    Fence(cuda_in_order)\n"
    )
    run = subprocess.run([sys.executable, "-m", "spork_lab.cli", "compile", str(bad), "-o", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == f"error: {bad}:6: Fence takes 2 arguments, got 1: write Fence(first_sync_tl, second_sync_tl)"
