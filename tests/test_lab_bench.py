"""%%spork_bench on a machine without a GPU (CI): small fake `nvcc` and `nvidia-smi` scripts stand in for the
toolchain, so the test sees exactly what the magic asks nvcc for and what it says without a GPU."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell

from spork_lab.core.build_cache import cache_dir
from spork_lab.lab import _bench
from spork_lab.runtime._args import proc_spec

CELL = '''\
@proc
def scale(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                y[task * 128 + t] = 2.0 * x[task * 128 + t]
'''


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def toolchain(tmp_path, monkeypatch):
    """A fake nvcc that logs its arguments and writes the output file, a fake nvidia-smi, and an empty build cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "nvcc.log"
    _script(bin_dir / "nvcc", f"""if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.48"; exit 0; fi
echo "$@" >> {log}
while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then shift; touch "$1"; fi; shift; done
""")
    _script(bin_dir / "nvidia-smi", 'echo "No devices were found"; exit 6\n')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_bench, "gpu_cupy", lambda: None)  # CI has no CUDA device (and maybe a CuPy that says so)
    return log, bin_dir


@pytest.fixture
def shell():
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "spork_lab")
    sh.run_cell("from __future__ import annotations\nfrom spork_lab import proc\nfrom spork_lab.platforms.cuda import *\n"
                "from spork_lab.scheduling import *")
    yield sh
    InteractiveShell.clear_instance()


def test_load_ext_registers_spork_bench_as_line_and_cell_magic(shell):
    magics = shell.magics_manager.magics
    assert "spork_bench" in magics["line"] and "spork_bench" in magics["cell"]


def test_without_a_gpu_the_cell_is_built_and_the_output_says_so(shell, toolchain):
    log, _ = toolchain
    report = shell.run_cell_magic("spork_bench", "--sizes n=1048576 --sizes n=4096 -O 2 --maxrregcount 64", CELL)
    assert "scale" in shell.user_ns  # the cell ran in the notebook's namespace
    text = report._repr_mimebundle_()["text/plain"]
    assert "no GPU is present here" in text and "nothing was run or timed" in text and report.rows == []
    (compile_line,) = log.read_text().splitlines()
    assert "-O2" in compile_line and "-O3" not in compile_line and "--maxrregcount=64" in compile_line
    assert "-gencode=arch=compute_90a,code=sm_90a" in compile_line  # no GPU to ask: sm_90a unless --arch says
    (cu,) = cache_dir().glob("*/*.cu")  # the built sources, kept beside the library
    assert cu.read_text().count("__global__") == 1
    shell.run_cell_magic("spork_bench", "--sizes n=4096 -O 2 --maxrregcount 64", CELL)
    assert len(log.read_text().splitlines()) == 1  # same sources and flags: the cached build, no second nvcc run
    shell.run_line_magic("spork_bench", "scale --sizes n=4096 --arch sm_80")
    assert "-gencode=arch=compute_80,code=sm_80" in log.read_text().splitlines()[-1]


def test_the_report_says_what_sync_check_said_of_the_kernel(shell, toolchain):
    """A build runs the analysis only: a racy kernel was built and timed without a word (session 38's workbench
    walkthrough). The report says what the latest sl.sync_check of the proc found, or that there was none."""
    def notes(cell: str) -> str:  # the cell defines its proc again: a new proc of the same text
        return shell.run_cell_magic("spork_bench", "--sizes n=4096", cell)._repr_mimebundle_()["text/plain"]

    assert "scale has not been through sl.sync_check in this session" in notes(CELL)
    shell.run_cell("import spork_lab as sl\nsl.sync_check(scale, n=256)")
    assert "sl.sync_check passed scale at n=256" in notes(CELL)
    racy = CELL.replace("2.0 * x[task * 128 + t]", "x[task * 128 + t]\n            for t in cuda_threads(0, 128):\n"
                        "                y[task * 128 + t] += y[task * 128 + 127 - t]")
    shell.run_cell(racy + "\nsl.sync_check(scale, n=256)")
    assert "warning: sl.sync_check found 2 hazard(s) in scale at n=256: the kernel can race" in notes(racy)


def test_a_gpu_that_cupy_cannot_use_is_named(shell, toolchain):
    _, bin_dir = toolchain
    _script(bin_dir / "nvidia-smi", 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)"\n')
    text = shell.run_cell_magic("spork_bench", "--sizes n=4096", CELL).table_text()
    assert "nvidia-smi lists GPU 0: NVIDIA H100 80GB HBM3" in text and "CuPy cannot use it" in text


def test_bad_arguments_are_clear_errors(shell, toolchain):
    with pytest.raises(_bench.BenchError, match="write name=INT"):
        shell.run_cell_magic("spork_bench", "--sizes n=big", CELL)
    with pytest.raises(_bench.BenchError, match="no proc named nope"):
        shell.run_line_magic("spork_bench", "nope --sizes n=128")
    with pytest.raises(_bench.BenchError, match="defines no proc"):
        shell.run_cell_magic("spork_bench", "--sizes n=128", "x = 1\n")
    with pytest.raises(_bench.BenchError, match="no callable"):
        shell.run_cell_magic("spork_bench", "--sizes n=128 --reference missing_fn", CELL)


@pytest.mark.parametrize("sizes, message", [
    ("m=4096", "--sizes names m, which no proc here takes; their sizes are n"),
    ("n=100", "scale: assertion `n % 128 == 0` does not hold for n=100"),
    ("n=0", "scale: --sizes n=0, but n is a size: give a positive int"),  # was built, and "nothing was run"
])  # fmt: skip
def test_sizes_the_procs_refuse_are_errors_before_nvcc_runs(shell, toolchain, sizes, message):
    """Without a GPU they were accepted (the report said only that nothing ran); with one, said after the build."""
    log, _ = toolchain
    with pytest.raises(_bench.BenchError) as info:
        shell.run_cell_magic("spork_bench", f"--sizes {sizes}", CELL)
    assert info.value.message == message and not log.exists()


def test_sizes_that_misalign_a_window_are_an_error_before_nvcc_runs(shell, toolchain):
    """m = 6 moves src[task, 0:4] by 24 bytes per task, where the cp.async needs 16-byte steps: with a GPU the
    benchmark would have faulted on the address, ending the notebook's CUDA context."""
    from test_gpu_runtime_boundary import cp_row_per_task

    log, _ = toolchain
    shell.user_ns["cp_row_per_task"] = cp_row_per_task
    with pytest.raises(_bench.BenchError) as info:
        shell.run_line_magic("spork_bench", "cp_row_per_task --sizes n=64,m=6")
    assert info.value.message.startswith("cp_row_per_task: at n=64, m=6, `Sm80_cp_async_f32(buf[0:4], "
                                         "src[task, 0:0 + 4], size=16)`") and "moves by 24 bytes" in info.value.message
    assert not log.exists()


def test_no_timed_runs_is_an_error_before_nvcc_runs(shell, toolchain):
    """--reps 0 was built, then (with a GPU) a StatisticsError from the median of no times."""
    log, _ = toolchain
    with pytest.raises(_bench.BenchError) as info:
        shell.run_cell_magic("spork_bench", "--sizes n=128 --reps 0", CELL)
    assert info.value.message == "--reps 0: give at least 1 timed run" and not log.exists()


def test_a_failed_build_shows_the_compiler_output(shell, toolchain):
    _, bin_dir = toolchain
    _script(bin_dir / "nvcc", 'if [ "$1" = "--version" ]; then echo "release 13.0"; exit 0; fi\n'
                              'echo "kernel.cu(12): error: identifier \\"oops\\" is undefined" >&2; exit 1\n')
    report = shell.run_cell_magic("spork_bench", "--sizes n=128", CELL)
    assert "build failed" in report.table_text() and 'identifier "oops" is undefined' in report.table_text()


def test_a_build_racing_the_same_build_never_sees_half_a_library(toolchain):
    """Two processes building the same procs at once (a notebook and a script): the second found the first's
    library while nvcc was still writing it and loaded a file too short."""
    import threading
    import time

    from spork_lab.runtime import build_library

    _, bin_dir = toolchain
    _script(bin_dir / "nvcc", 'if [ "$1" = "--version" ]; then echo "release 13.0"; exit 0; fi\n'
                              'while [ "$1" != "-o" ]; do shift; done\n'
                              'printf head > "$2"; sleep 1; printf tail >> "$2"\n')
    sources = ("int c;", "", "int cu;", "")
    libs, loaded = [], []

    def build() -> None:  # what each build returned, read at once (as loading it would)
        libs.append(build_library(sources, "race", "sm_90a"))
        loaded.append(libs[-1].read_text())

    first = threading.Thread(target=build)
    first.start()
    time.sleep(0.4)  # the first build's nvcc is writing
    build()
    first.join()
    assert loaded == ["headtail", "headtail"]
    assert sorted(p.name for p in libs[0].parent.iterdir()) == ["librace.so", "race.c", "race.cu", "race.cuh", "race.h"]


def test_sizes_parse_with_shared_values_and_several_names():
    assert _bench.parse_sizes("M=N=K=1024") == {"M": 1024, "N": 1024, "K": 1024}
    assert _bench.parse_sizes("M=512, N=256,K=128") == {"M": 512, "N": 256, "K": 128}


def test_gemm_shaped_procs_get_cublas_and_flops():
    from stepwise_gemm import gemm_smem
    from vec_add import vec_add

    spec = proc_spec(gemm_smem._loopir_proc)
    assert _bench.gemm_names(spec) == _bench.Gemm("A", "B", "C") and _bench.gemm_names(proc_spec(vec_add._loopir_proc)) is None
    args = _bench.make_args(spec, {"M": 128, "N": 64, "K": 32}, np.random.default_rng(0))
    assert [a.shape for a in args[3:]] == [(128, 32), (32, 64), (128, 64)] and not args[5].any()  # C starts at zero
    assert _bench.work(spec, args) == (2.0 * 128 * 64 * 32, "TFLOP/s")
    with pytest.raises(_bench.BenchError, match="does not hold for"):
        _bench.make_args(spec, {"M": 100, "N": 64, "K": 32}, np.random.default_rng(0))
    a = _bench.make_args(spec, {"M": 128, "N": 64, "K": 32}, np.random.default_rng(0), small_integers=True)[3]
    assert set(np.unique(a)) == {-2, -1, 0, 1, 2}  # what the soundness fuzz runs on: exact in any summation order


def test_bf16_arguments_are_bf16_values():
    """A bf16 parameter takes bits (uint16): make_args drew random bits below 100, subnormals whose products are
    all 0, so the soundness fuzz's bf16 GEMMs compared zeros with zeros."""
    from sm90_gemm import make_gemm
    from test_dtypes import bf16_values

    spec = proc_spec(make_gemm("bf16", CL=1, G=1)._loopir_proc)
    sizes = {"M": 128, "N": 256, "K": 64}
    small = _bench.make_args(spec, sizes, np.random.default_rng(0), small_integers=True)
    assert small[3].dtype == np.uint16 and set(np.unique(bf16_values(small[3]))) == {-2, -1, 0, 1, 2}
    normal = bf16_values(_bench.make_args(spec, sizes, np.random.default_rng(0))[4])
    assert 0.5 < normal.std() < 2 and np.abs(normal).max() < 10


def test_a_gemm_with_b_transposed_is_checked_in_f32_and_timed_at_its_own_type():
    """The Sm90 GEMM computes C = A @ B^T from f16 A[M, K], B[N, K]: its reference transposes B, checks against
    the float32 product and times cuBLAS at f16 (NumPy stands in for CuPy: the same calls)."""
    from sm90_gemm import make_gemm

    spec = proc_spec(make_gemm("f16")._loopir_proc)
    gemm = _bench.gemm_names(spec)
    assert gemm == _bench.Gemm("A", "B", "C", b_nk=True) and gemm.product == "A·Bᵀ"
    sizes = {"M": 2048, "N": 256, "K": 64}
    args = _bench.make_args(spec, sizes, np.random.default_rng(0))
    assert [a.shape for a in args[3:]] == [(2048, 64), (256, 64), (2048, 256)] and args[3].dtype == np.float16
    assert _bench.work(spec, args) == (2.0 * 2048 * 256 * 64, "TFLOP/s")
    ref = _bench.reference_for(spec, None, np)
    assert ref.name == "reference (cuBLAS f16 A·Bᵀ)"
    ref.check(*args)
    want = args[3].astype(np.float64) @ args[4].astype(np.float64).T
    assert args[5].dtype == np.float32 and np.abs(args[5] - want).max() < 1e-4 * np.abs(want).max()
    ref.timed(*args)  # runs at f16, writes nothing of the proc's
    given = _bench.reference_for(spec, _bench.parse_sizes, np)
    assert given.name == "reference (parse_sizes)" and given.check is given.timed is _bench.parse_sizes


@pytest.mark.parametrize("out", ["f32", "bf16"])
def test_a_bf16_gemm_is_checked_against_the_product_of_its_values(out):
    """A bf16 parameter takes bits (uint16), so a bf16 GEMM was not GEMM-shaped: %spork_bench ran it unchecked, with no
    cuBLAS row. Its reference multiplies the bf16 values in f32 (and rounds a bf16 C); cuBLAS's bf16 GEMM times it."""
    from sm90_gemm import make_gemm
    from test_dtypes import bf16_values

    spec = proc_spec(make_gemm("bf16", CL=1, G=1, out=out)._loopir_proc)
    assert _bench.gemm_names(spec) == _bench.Gemm("A", "B", "C", b_nk=True)
    args = _bench.make_args(spec, {"M": 128, "N": 256, "K": 64}, np.random.default_rng())
    ref = _bench.reference_for(spec, None, np)
    assert ref.name == "reference (cuBLAS bf16 A·Bᵀ)"
    ref.check(*args)
    want = bf16_values(args[3]) @ bf16_values(args[4]).T
    got = bf16_values(args[5]) if out == "bf16" else args[5]
    assert np.abs(got - want).max() <= (2.0**-8 if out == "bf16" else 1e-6) * np.abs(want).max()


def test_the_report_draws_a_chart_and_a_table():
    rows = [_bench.Row("gemm_smem", {"M": 1024, "N": 1024, "K": 1024}, 1.0, 0.9, 1.1, 2.15, "TFLOP/s", 1e-6, True,
                       "reference (cuBLAS)"),
            _bench.Row("reference (other)", {"M": 1024, "N": 1024, "K": 1024}, 0.01, None, None, 215.0, "TFLOP/s"),
            _bench.Row("reference (cuBLAS)", {"M": 1024, "N": 1024, "K": 1024}, 0.05, None, None, 42.9, "TFLOP/s")]
    bundle = _bench.BenchReport(rows, device="NVIDIA H100 80GB HBM3")._repr_mimebundle_()
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["y"] == [2.15]
    assert 'src="data:image/svg+xml;base64,' in bundle["text/html"] and "5.0%" in bundle["text/html"]  # 2.15 of 42.9
    assert "M=N=K=1024" in bundle["text/plain"]


@pytest.mark.gpu
def test_on_a_gpu_the_stepwise_gemm_is_checked_against_cublas_and_timed(shell):
    shell.run_cell("import sys; sys.path.insert(0, 'examples'); from stepwise_gemm import gemm_smem")
    report = shell.run_line_magic("spork_bench", "gemm_smem --sizes M=N=K=512 --sizes M=N=K=1024 --reps 5")
    assert [r.name for r in report.rows].count("gemm_smem") == 2
    assert all(r.ok for r in report.rows if r.name == "gemm_smem") and report.device


@pytest.mark.gpu
def test_on_a_gpu_profile_runs_nsight_compute(shell):
    import shutil

    if shutil.which("ncu") is None:
        pytest.skip("Nsight Compute (ncu) is not installed here")
    shell.run_cell(CELL)
    report = shell.run_line_magic("spork_bench", "scale --sizes n=1048576 --reps 3 --profile")
    assert any("SpeedOfLight" in n or "Speed Of Light" in n or "Throughput" in n for n in report.notes), report.notes


@pytest.mark.gpu
def test_on_a_gpu_a_bf16_gemm_is_checked_and_timed_against_cublas_bf16(shell):
    shell.run_cell("import sys; sys.path.insert(0, 'examples'); from sm90_gemm import make_gemm; "
                   "g = make_gemm('bf16', CL=1, G=1, out='bf16')")
    report = shell.run_line_magic("spork_bench", "g --sizes M=N=K=1024 --reps 5")
    name = shell.user_ns["g"].name()
    [row], [ref] = ([r for r in report.rows if r.name == n] for n in (name, "reference (cuBLAS bf16 A·Bᵀ)"))
    assert row.ok and row.error < 1e-2 and ref.rate > 0, report.rows
