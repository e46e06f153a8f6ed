"""Write the tutorials 02_stepwise_gemm.ipynb and 03_race_debugging.ipynb, and run them headless.

02's scheduling steps are examples/stepwise_gemm.py's: each `# ## title`
comment block there becomes a markdown cell, and the `p = op(p, ...)` lines
under it one code cell of `wb.apply(op, ...)` calls (the last one shows the
workbench at that step). To follow a new version of the example (or another
step-by-step script in the same form), change it and run this file again.
03's catalogue of bugs is written here.

Cells tagged "gpu" need a GPU. On a machine without one they print that no
GPU is present; the stored notebook keeps the outputs they had on the last GPU
run instead (cell metadata `spork_lab.recorded_on` names the device).

    python notebooks/make_tutorials.py                  # write both and execute them here (GPU cells: outputs kept)
    python notebooks/make_tutorials.py --check          # exit 1 if the stored cells differ from what this writes
    python notebooks/make_tutorials.py --gpu-run DIR    # on a GPU machine: execute each tutorial's "gpu" cells
                                                        # (after the setup and GPU_PRELUDE) into DIR
    python notebooks/make_tutorials.py --take-gpu DIR   # keep the "gpu" cells' outputs of DIR's executed notebooks
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
from pathlib import Path
from typing import Optional

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "stepwise_gemm.py"
GPU = {"tags": ["gpu"]}

SETUP = """\
from __future__ import annotations

%load_ext spork_lab

import sys
from pathlib import Path

import spork_lab as sl
from spork_lab import proc
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.scheduling import *

sys.path.insert(0, str(Path.cwd().parent / "examples"))  # the example programs, for the last sections"""


def example_steps(path: Path = EXAMPLE) -> tuple[str, dict, list[tuple[str, str, list[str]]], str]:
    """(the naive proc's source, the sizes, [(title, text, [apply lines])], the final rename line) of a
    step-by-step script: `# ## title` comment blocks, each followed by `p = op(p, ...)` lines."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    proc_src, sizes, final = "", {}, ""
    steps: list[tuple[str, str, list[str]]] = []
    for node in tree.body:
        text = ast.get_source_segment(source, node)
        if isinstance(node, ast.FunctionDef) and not proc_src and any(
                isinstance(d, ast.Name) and d.id == "proc" for d in node.decorator_list):
            start = min(d.lineno for d in node.decorator_list) if node.decorator_list else node.lineno
            proc_src = "\n".join(lines[start - 1 : node.end_lineno])
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "SIZES":
            sizes = ast.literal_eval(node.value)
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "p" and isinstance(node.value, ast.Call):
            comment = _comment_above(lines, node.lineno)
            if comment is not None:
                title, body = comment
                steps.append((title, body, []))
            call = node.value
            args = [ast.get_source_segment(source, a) for a in call.args[1:]]
            args += [f"{k.arg}={ast.get_source_segment(source, k.value)}" for k in call.keywords]
            args = [re.sub(r"\bp\.", "wb.proc.", a) for a in args]
            steps[-1][2].append(f"wb.apply({', '.join([ast.get_source_segment(source, call.func), *args])})")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and "rename" in text:
            final = re.sub(r"\(p,", "(wb.proc,", text)
    return proc_src, sizes, steps, final


def _comment_above(lines: list[str], lineno: int):
    """(title, text) of a `# ## title` comment block ending right above line `lineno`, or None."""
    block = []
    k = lineno - 2
    while k >= 0 and lines[k].startswith("#"):
        block.insert(0, lines[k][1:].strip() if lines[k].startswith("# ") else lines[k][1:])
        k -= 1
    if not block or not block[0].startswith("## "):
        return None
    return block[0][3:], " ".join(block[1:])


def stepwise_gemm() -> nbformat.NotebookNode:
    proc_src, sizes, steps, final = example_steps()
    cells = [
        new_markdown_cell(
            "# 02 · A GEMM, step by step\n\n"
            "We take the naive triple loop `C += A @ B` to a tiled CUDA kernel one scheduling step per cell, with a "
            "**workbench** that re-runs the analysis and the sync check after each step. Every cell that ends in "
            "`wb.apply(...)` shows the workbench *at that step* (later steps do not change it; its ◀ ▶ buttons browse "
            "the others): **Code** (lines the step changed have a green gutter), **Tiling**, **Barrier timeline**, "
            "**Hazards**, **Steps** and **CUDA** (the generated code, made when the tab is opened).\n\n"
            "The steps are those of `examples/stepwise_gemm.py` (this notebook is generated from it by "
            "`notebooks/make_tutorials.py`). The last sections benchmark the result and the fastest GEMM spork_lab "
            "has, the Sm80 tensor-core kernel, against cuBLAS with `%%spork_bench`; those cells need a GPU and "
            "show the outputs of a run on an H100."),
        new_code_cell(SETUP),
        new_markdown_cell("## The naive GEMM\n\nSequential Exo: `C[i, j] += A[i, k] * B[k, j]` over all `i, j, k`. "
                          "The matrices live in GPU global memory, but nothing runs on the GPU yet."),
        new_code_cell(proc_src + "\n\ngemm"),
        new_markdown_cell(f"## A workbench\n\nThe sync check runs the program on the abstract machine at "
                          f"`{', '.join(f'{k}={v}' for k, v in sizes.items())}`. Until the code is inside a "
                          f"`CudaDeviceFunction` the analysis reports that the CPU may not touch GPU memory."),
        new_code_cell(f"wb = sl.Workbench(gemm, sizes={sizes!r})\nwb"),
    ]
    for k, (title, text, applies) in enumerate(steps):
        cells += [new_markdown_cell(f"## {title}\n\n{text}"), new_code_cell("\n".join(applies))]
        if k == 3:  # after the K-tile reorders: what a failed step looks like
            cells += [
                new_markdown_cell(
                    "## A step that fails\n\nA scheduling call that cannot apply shows its error in the workbench, "
                    "names what does exist, and leaves the session at the previous step. Here the loops are named "
                    "in the wrong order:"),
                new_code_cell('wb.apply(reorder_loops, "ko mt")'),
            ]
    cells += [
        new_markdown_cell("## The session as a script\n\n`wb.script()` replays the session (cursors are written "
                          "the way a person finds them: `p.find_loop(\"ti\")`), and `rename` gives the kernel a name."),
        new_code_cell(f"print(wb.script())\n{final}"),
        new_markdown_cell(
            "## Benchmark it (GPU)\n\n`%spork_bench` builds the named procs with nvcc (cached by content), runs them "
            "at each `--sizes`, checks the result against cuBLAS (automatic for GEMM-shaped procs: `C` starts at "
            "zero, so `C += A @ B` and `C = A @ B` agree) and charts TFLOP/s. Without a GPU it still generates and "
            "compiles the CUDA, and says so."),
        new_code_cell("%spork_bench gemm_smem --sizes M=N=K=1024 --sizes M=N=K=2048 --sizes M=N=K=4096", metadata=copy.deepcopy(GPU)),
        new_markdown_cell(
            "## The fastest GEMM spork_lab has: Sm80 tensor cores\n\n"
            "`examples/sm80_mma_gemm.py` computes the same product with warp-cooperative `mma.sync` (tf32, m16n8k8): "
            "each CTA's four warps own 32 × 32 warp tiles, stage A and B with `cp.async` and order them with "
            "warp-scope Fences. Its **Tiling** view shows the warp collectives (colour by *unit of wm*). Its steps "
            "are not yet in step-by-step form; when they are, this notebook takes them from there."),
        new_code_cell("from sm80_mma_gemm import sm80_mma_gemm\n\n"
                      "sm80 = sl.Workbench(sm80_mma_gemm, sizes={'M': 64, 'N': 64, 'K': 32})\n"
                      "sm80.select(\"Sm80_mma_tf32(_)\")"),
        new_markdown_cell("Both kernels against cuBLAS's FP32 GEMM. On the H100 run stored below, the tiled SIMT "
                          "kernel reaches about 8 TFLOP/s, the tf32 tensor-core kernel about 36, and cuBLAS about 52 "
                          "(`benchmarks/results/spork_bench_tutorial_gemm.txt`); with TF32 tensor cores "
                          "(`CUPY_TF32=1`) cuBLAS goes much further (`benchmarks/sm80_mma_gemm_results.txt`). "
                          "The tf32 kernel's error against FP32 cuBLAS is about 3e-4 of max |C|."),
        new_code_cell("%spork_bench gemm_smem sm80_mma_gemm --sizes M=N=K=2048 --sizes M=N=K=4096", metadata=copy.deepcopy(GPU)),
    ]
    return new_notebook(cells=cells, metadata=_KERNEL)


_KERNEL = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
           "language_info": {"name": "python"}}

def ring(name: str, consumer_await: str, release: str) -> str:
    """A producer/consumer ring on mbarriers (examples/mbarrier_ring_tasks.py) with the consumer's Await and
    ReverseArrive lines given: the catalogue's barrier bugs are variants of it."""
    return f"""\
@proc
def {name}(n: size, src: f32[n] @ CudaGmemLinear, dst: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(warp_config=warps):
        for task in cuda_tasks(0, n / 256):
            buf: f32[2, 32] @ CudaSmemLinear
            bar: barrier[2] @ CudaMbarrier
            for it in seq(0, 8):
                with CudaWarps(name="producer"):
                    ReverseAwait(bar[it % 2], cuda_in_order, ~1)
                    for t in cuda_threads(0, 32):
                        buf[it % 2, t] = src[task * 256 + it * 32 + t]
                    Arrive(cuda_in_order, 1) >> bar[it % 2]
                with CudaWarps(name="consumer"):
                    {consumer_await}
                    for t in cuda_threads(0, 32):
                        dst[task * 256 + it * 32 + t] = 2.0 * buf[it % 2, t]
                    {release}
            Fence(cuda_in_order, cuda_in_order)
"""


def reverse(name: str, after_copy: str, task_end: str) -> str:
    """examples/reverse_tiles.py with the lines after the copy into `tile` and at the task's end given."""
    return f"""\
@proc
def {name}(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear
            for tid in cuda_threads(0, 256):
                tile[tid] = x[task * 256 + tid]
            {after_copy}
            for tid in cuda_threads(0, 256):
                y[task * 256 + tid] = tile[255 - tid]
            {task_end}
"""


FENCE = "Fence(cuda_in_order, cuda_in_order)"
REVERSE_MISSING_FENCE = reverse("reverse_missing_fence", "# the bug: no Fence(cuda_in_order, cuda_in_order) here", FENCE)
REVERSE_MISSING_END_FENCE = reverse("reverse_missing_end_fence", FENCE,
                                    "# the bug: no Fence before the task ends and tile is reused")
RELEASE = "ReverseArrive(cuda_in_order, 1) >> bar[it % 2]"
RING_WRONG_LAG = ring("ring_wrong_lag", "Await(bar[it % 2], cuda_in_order, ~1)  # the bug: lag ~1 instead of ~0", RELEASE)
RING_MISSING_RELEASE = ring("ring_missing_release", "Await(bar[it % 2], cuda_in_order, ~0)",
                            "if it < 4:  # the bug: the slots are released only in the first four iterations\n"
                            "                        " + RELEASE)
RING_RELEASED = ring("ring_released", "Await(bar[it % 2], cuda_in_order, ~0)",
                     RELEASE + "  # the fix: every iteration releases its slot")

RACES = [
    ("## 1 · A missing Fence: RAW",
     "Thread `t` reads `tile[255 - t]`, written by another thread, and nothing orders the write first. The hazard "
     "card marks the write and the read, shows both accesses side by side, and gives the Fence that would order "
     "them as a scheduling call.",
     REVERSE_MISSING_FENCE + """
wb1 = sl.Workbench(reverse_missing_fence, sizes={"n": 512})
wb1""",
     'wb1.apply(insert_fence, wb1.proc.find_loop("tid #1").before(), cuda_in_order, cuda_in_order)'),
    ("## 2 · A missing end-of-task Fence: WAR at the free",
     "Without the last Fence, `tile` is freed at the end of the task while other threads may still read it; the "
     "CTA's next task writes it again (a write after read). The checker reports it at the free (kind FREE): the "
     "end of an allocation's scope is a write by the whole CTA, which must see every earlier access.",
     REVERSE_MISSING_END_FENCE + """
wb2 = sl.Workbench(reverse_missing_end_fence, sizes={"n": 512})
wb2""",
     'wb2.apply(insert_fence, wb2.proc.find_loop("tid #1").after(), cuda_in_order, cuda_in_order)'),
    ("## 3 · A wrong Await count: the consumer reads a slot before it is filled",
     "In a producer/consumer ring on mbarriers (`warp_config`: a producer warp and a consumer warp), an Await's "
     "`N` is its lag. The consumer wrote `~1` where `~0` was meant, so each Await pairs with the *previous* "
     "arrive: open the **Barrier timeline** — each consumer await (W) has its line to the arrive one behind — "
     "and the RAW card on `buf`. (Lag `0` would not even pass the analysis: mbarriers pair by lag.)",
     "warps = [CudaWarpConfig(\"producer\", 1), CudaWarpConfig(\"consumer\", 1)]\n\n" + RING_WRONG_LAG + """
wb3 = sl.Workbench(ring_wrong_lag, sizes={"n": 256})
wb3""",
     "from mbarrier_ring_tasks import mbarrier_ring_tasks  # the same ring with Await(..., ~0)\n\n"
     "sl.Workbench(mbarrier_ring_tasks, sizes={\"n\": 256})"),
    ("## 4 · A missing reverse arrive: deadlock",
     "Here the consumer stops releasing the slots after four iterations. The producer's `ReverseAwait` then waits "
     "for a release that never comes: on the GPU the kernel hangs. The workbench opens on the **Barrier "
     "timeline**, at that event (red): it waits for reverse arrive #3 of `bar[0]`, and only two happened. "
     "The fix releases the slot in every iteration; the timeline then pairs each producer's reverse await with "
     "the consumer's release two iterations earlier (the ring has two slots).",
     RING_MISSING_RELEASE + """
wb4 = sl.Workbench(ring_missing_release, sizes={"n": 256})
wb4""",
     RING_RELEASED + """
sl.Workbench(ring_released, sizes={"n": 256})"""),
    ("## 5 · A warp-scope Fence where a CTA one is needed",
     "The Fence sits inside the warp loop, so each warp runs it for itself: it orders the warp's own 32 threads "
     "(a `__syncwarp()`), but thread `t` reads what thread `255 - t` wrote, in another warp. The card's hint asks "
     "for a *CTA-scope* Fence between the two loops.",
     """\
@proc
def reverse_warp_fence(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256):
        for task in cuda_tasks(0, n / 256):
            tile: f32[256] @ CudaSmemLinear
            for w in cuda_threads(0, 8, unit=cuda_warp):
                for l in cuda_threads(0, 32):
                    tile[32 * w + l] = x[task * 256 + 32 * w + l]
                Fence(cuda_in_order, cuda_in_order)  # the bug: warp scope
            for w in cuda_threads(0, 8, unit=cuda_warp):
                for l in cuda_threads(0, 32):
                    y[task * 256 + 32 * w + l] = tile[255 - 32 * w - l]
            Fence(cuda_in_order, cuda_in_order)

wb5 = sl.Workbench(reverse_warp_fence, sizes={"n": 512})
wb5""",
     'wb5.apply(insert_fence, wb5.proc.find_loop("w #1").before(), cuda_in_order, cuda_in_order)'),
    ("## 6 · cp.async without its wait",
     "`cp.async` copies run asynchronously: their writes are visible to no thread until a synchronization on "
     "their timeline completes them. `Fence(cuda_in_order, cuda_in_order)` is only a `__syncthreads()`; the "
     "witness says why it does not help (its first sync-tl does not include `Sm80_cp_async_instr`). "
     "`Fence(Sm80_generic, cuda_in_order)` waits for the copies first (`cp.async.wait_all`). The free of `buf` "
     "is reported too: nothing ever waits for the copies.",
     """\
@proc
def cp_async_no_wait(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            buf: f32[128] @ CudaSmemLinear
            for t in cuda_threads(0, 128):
                with CudaAsync(Sm80_cp_async_instr):
                    Sm80_cp_async_f32(buf[t:t + 1], x[task * 128 + t:task * 128 + t + 1], size=4)
            Fence(cuda_in_order, cuda_in_order)  # the bug: does not wait for the cp.async copies
            for t in cuda_threads(0, 128):
                y[task * 128 + t] = buf[127 - t]
            Fence(cuda_in_order, cuda_in_order)

wb6 = sl.Workbench(cp_async_no_wait, sizes={"n": 256})
wb6""",
     'wb6.apply(insert_fence, wb6.proc.find_loop("t #1").before(), Sm80_generic, cuda_in_order)'),
]


def race_debugging() -> nbformat.NotebookNode:
    cells = [
        new_markdown_cell(
            "# 03 · Debugging races: the classic bugs\n\n"
            "Each section is a small kernel with one classic synchronization bug. The workbench finds it — in the "
            "**Hazards** view (each card marks the two statements, shows a witness: which threads, which "
            "iterations, which timelines, what made the write visible or not, and which Fence would order them) or "
            "in the **Barrier timeline** (lanes per collective, each await linked to the arrive it pairs with) — "
            "and the next cell fixes it. Nothing here needs a GPU: the checker runs the program on the abstract "
            "machine of the Spork user guide."),
        new_code_cell(SETUP),
    ]
    for title, text, broken, fix in RACES:
        cells += [new_markdown_cell(f"{title}\n\n{text}"), new_code_cell(broken)]
        if fix:
            cells.append(new_code_cell(fix))
    return new_notebook(cells=cells, metadata=_KERNEL)


NOTEBOOKS = {"02_stepwise_gemm.ipynb": stepwise_gemm, "03_race_debugging.ipynb": race_debugging}
# What a tutorial's "gpu" cells need from the cells before them (the same procs, from the example files), so a
# GPU machine runs only those cells: device time is scarce, and the rest runs the same anywhere.
GPU_PRELUDE = {"02_stepwise_gemm.ipynb": "from stepwise_gemm import gemm_smem\nfrom sm80_mma_gemm import sm80_mma_gemm"}


def gpu_cells(nb, name: str) -> Optional[nbformat.NotebookNode]:
    """A notebook of the setup, GPU_PRELUDE[name] and the "gpu" cells of `nb` (None if it has none)."""
    cells = [copy.deepcopy(c) for c in nb.cells if "gpu" in c.metadata.get("tags", [])]
    if not cells:
        return None
    return new_notebook(cells=[new_code_cell(SETUP), new_code_cell(GPU_PRELUDE.get(name, "")), *cells], metadata=_KERNEL)


def _sources(nb) -> list:
    return [(c.cell_type, c.source) for c in nb.cells]


def execute(nb, path: Path, keep_gpu: bool) -> None:
    """Run the notebook in a fresh kernel; with `keep_gpu`, cells tagged "gpu" keep the
    outputs recorded on a GPU (from the notebook stored at `path`)."""
    from nbclient import NotebookClient

    stored = nbformat.read(path, as_version=4) if path.exists() else None
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(HERE)}},
                   store_widget_state=False, record_timing=False).execute()  # no state: viewers show text/html
    if keep_gpu and stored is not None:
        recorded = {c.source: c for c in stored.cells if "gpu" in c.metadata.get("tags", []) and
                    c.metadata.get("spork_lab", {}).get("recorded_on")}
        for c in nb.cells:
            if c.source in recorded:
                c.outputs = recorded[c.source].outputs
                c.metadata["spork_lab"] = recorded[c.source].metadata["spork_lab"]


def mark_gpu_cells(nb, device: str) -> None:
    """Record, on each "gpu" cell of a notebook just executed on a GPU, the device its outputs come from."""
    for c in nb.cells:
        if "gpu" in c.metadata.get("tags", []):
            c.metadata["spork_lab"] = {"recorded_on": device}


def take_gpu_outputs(executed: Path, path: Path) -> None:
    """Copy the outputs of the "gpu" cells of `executed` (run with --gpu-run) into the notebook stored at `path`."""
    ran, stored = nbformat.read(executed, as_version=4), nbformat.read(path, as_version=4)
    by_source = {c.source: c for c in ran.cells if c.metadata.get("spork_lab", {}).get("recorded_on")}
    for c in stored.cells:
        if "gpu" in c.metadata.get("tags", []) and c.source in by_source:
            c.outputs = by_source[c.source].outputs
            c.metadata["spork_lab"] = by_source[c.source].metadata["spork_lab"]
    nbformat.write(stored, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--gpu-run", metavar="DIR")
    parser.add_argument("--take-gpu", metavar="DIR")
    args = parser.parse_args(argv)
    for name, make in NOTEBOOKS.items():
        path = HERE / name
        nb = make()
        if args.check:
            stored = nbformat.read(path, as_version=4)
            if _sources(stored) != _sources(nb):
                print(f"{name} differs from what make_tutorials.py writes: run python notebooks/make_tutorials.py")
                return 1
        elif args.gpu_run:
            import subprocess

            nb = gpu_cells(nb, name)
            if nb is None:
                continue
            device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                    text=True, check=True).stdout.splitlines()[0].strip()
            execute(nb, Path(args.gpu_run) / name, keep_gpu=False)
            mark_gpu_cells(nb, device)
            nbformat.write(nb, Path(args.gpu_run) / name)
            for c in nb.cells[2:]:
                print(c.source, *(o.get("text") or o.get("data", {}).get("text/plain", "") for o in c.outputs), sep="\n")
        elif args.take_gpu:
            if not (Path(args.take_gpu) / name).exists():  # no "gpu" cells: --gpu-run wrote nothing for it
                continue
            take_gpu_outputs(Path(args.take_gpu) / name, path)
        else:
            execute(nb, path, keep_gpu=True)
            nbformat.write(nb, path)
        print(f"{name}: {'ok' if args.check else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
