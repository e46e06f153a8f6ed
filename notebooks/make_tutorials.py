"""Write the tutorials 02_stepwise_gemm.ipynb and 03_race_debugging.ipynb, and run them headless.

02's scheduling steps are examples/stepwise_gemm.py's (part 1) and
examples/sm80_gemm.py's (part 2). In stepwise_gemm.py each `# ## title`
comment block becomes a markdown cell, and the `p = op(p, ...)` lines under
it one code cell of `wb.apply(op, ...)` calls (the last one shows the
workbench at that step); each function of sm80_gemm.py's `STEPS` becomes a
cell `wb80.apply(step, cfg)` under its docstring. To follow a new version of
either example, change it and run this file again. Part 3 replays
examples/sm90_gemm.py's `STEPS` the same way (through the module: their names
are Sm80's). 03's catalogue of bugs is written here.

Cells tagged "gpu" need a GPU. On a machine without one they print that no
GPU is present; the stored notebook keeps the outputs they had on the last GPU
run instead (cell metadata `spork_lab.recorded_on` names the device).

    python notebooks/make_tutorials.py                  # write both and execute them here (GPU cells: outputs kept),
                                                        # and execute 01_first_kernel.ipynb (written by hand) again
    python notebooks/make_tutorials.py --check          # exit 1 if the stored cells differ from what this writes
    python notebooks/make_tutorials.py --gpu-run DIR    # on a GPU machine: execute each tutorial's "gpu" cells
                                                        # (after the setup and GPU_PRELUDE) into DIR
    python notebooks/make_tutorials.py --take-gpu DIR   # keep the "gpu" cells' outputs of DIR's executed notebooks
    python notebooks/make_tutorials.py --gpu-build      # here, no GPU needed: build the "gpu" cells' CUDA (sm_90a)
                                                        # into $SPORK_LAB_CACHE, to carry to the GPU machine
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
import time
from pathlib import Path
from typing import Optional

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "stepwise_gemm.py"
SM80 = HERE.parent / "examples" / "sm80_gemm.py"
SM90 = HERE.parent / "examples" / "sm90_gemm.py"
SM80_SIZES = {"M": 256, "N": 256, "K": 320}  # two CTA tasks of 128 x 256, five K tiles of 64: the 4-slot ring wraps
SM90_CONFIG = {"G": 1, "Q": 2}  # part 3's Config: persistent on 1 x 2 clusters (the benchmark's 8 x 8 checks at 4096^2)
SM90_SIZES = {"M": 512, "N": 512, "K": 256}  # two tiles per cluster (of 2 CTAs), 4 K-blocks through the 4-slot ring
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

# the repository's example programs, for the last sections (spork_lab installed from its checkout, `pip install -e`):
# found from the package, so that a copy of this notebook runs anywhere
sys.path.insert(0, str(Path(sl.__file__).resolve().parents[1] / "examples"))"""


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


def schedule_steps(path: Path = SM80) -> list[tuple[str, str]]:
    """(function name, docstring) of each entry of a schedule module's `STEPS` list, in order; read with ast,
    since importing the example schedules its kernels (tens of seconds)."""
    tree = ast.parse(path.read_text())
    docs = {f.name: ast.get_docstring(f) or "" for f in tree.body if isinstance(f, ast.FunctionDef)}
    steps = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "STEPS")
    return [(e.id, docs[e.id]) for e in steps.elts]


def _step_cell_text(platform: str, k: int, name: str, doc: str, notes: dict) -> str:
    """The markdown above step `k` of a schedule: its docstring (less its "k." prefix) and what the views show."""
    text = " ".join(doc.split())
    text = re.sub(rf"^{k}\.\s*", "", text)
    note = notes.get(name, "")
    return f"### {platform} step {k} · `{name}`\n\n{text}" + (f"\n\n{note}" if note else "")


# What to look at after each step of examples/sm80_gemm.py (its docstrings say what the step does).
SM80_NOTES = {
    "tile_output": "Six nested tile loops replace `i` and `j`: **Steps** lists the step as one call "
                   "(`tile_output(p, cfg)`, ten scheduling operations inside); its diff is the whole loop nest.",
    "accumulate_in_registers": "The **Code** view's green gutter marks the three new loop nests (zero-fill, "
                               "sum, store) and `D`, declared once for the whole CTA.",
    "stage_tiles": "`A_s`/`B_s` (the CTA's shared tiles) and `A_r`/`B_r` (each warp's fragments) appear with "
                   "their copy loops.",
    "use_instructions": "The fragment loops collapse into `Sm80_mma_*` calls: the loop nest is much shorter.",
    "copy_with_cp_async": "The copies become `Sm80_cp_async_f16` inside `with CudaAsync(Sm80_cp_async_instr)`: "
                          "the analysis now objects to that block, since no kernel runs it yet.",
    "fence_tiles": "Two `Fence` lines; without them the sync check would report RAW hazards on `A_s`/`B_s` "
                   "(try `wb80.undo()` after step 10, or see tutorial 03).",
    "pipeline": "`pipeline_loop` rewrote the K loop into prologue, steady state and epilogue, gave `A_s` and `B_s` "
                "a ring dimension of S = 4 slots and added the commit group `cg` with its `Arrive`s and `Await`s. "
                "In the steady state, the first k-step's fragment loads (`A_r`, `B_r`) of the next tile come right "
                "after the `Await` and the `Fence`, before the last k-step's products of the tile before.",
    "map_to_gpu": "Now the proc is a kernel, and every view has something to say: the analysis passes, the sync "
                  "check runs at M = N = 256, K = 320 (two CTA tasks, five K tiles, so every ring slot is reused) "
                  "and finds no hazard; the **Tiling** view shows the warps of the selected statement; the "
                  "**Barrier timeline** has a lane per thread collective that arrives on or awaits `cg`; "
                  "**CUDA** shows the generated kernel.",
}


def stepwise_gemm() -> nbformat.NotebookNode:
    proc_src, sizes, steps, final = example_steps()
    cells = [
        new_markdown_cell(
            "# 02 · A GEMM, step by step\n\n"
            "We take the naive triple loop `C += A @ B` to the fastest GEMM spork_lab has, one scheduling step per "
            "cell, with a **workbench** that re-runs the analysis and the sync check after each step. Every cell that "
            "ends in `wb.apply(...)` shows the workbench *at that step* (later steps do not change it; its ◀ ▶ "
            "buttons browse the others): **Code** (lines the step changed have a green gutter), **Tiling**, "
            "**Barrier timeline**, **Hazards**, **Steps** and **CUDA** (the generated code, made when the tab is "
            "opened).\n\n"
            "* **Part 1** tiles the loop nest into a CUDA kernel of plain threads with shared-memory staging, one "
            "scheduling call at a time (the steps of `examples/stepwise_gemm.py`), and meets its hazards;\n"
            "* **Part 2** replays the ten steps of `examples/sm80_gemm.py` from the same naive loop nest to a "
            "tensor-core kernel (`mma.sync`, distributed accumulators, a `cp.async` ring built by `pipeline_loop`);\n"
            "* **Part 3** replays the eleven steps of `examples/sm90_gemm.py` from the naive loop nest to the Hopper "
            "kernel (TMA with multicast, `wgmma`, warp specialization, a ring built by `pipeline_loop`, persistent "
            "clusters).\n\n"
            "`%spork_bench` cells benchmark the kernels against cuBLAS; they need a GPU and show the outputs of a run "
            "on an H100 or H200 (each cell's metadata names it). This notebook is generated by "
            "`notebooks/make_tutorials.py` from those example files."),
        new_code_cell(SETUP),
        new_markdown_cell("# Part 1 · Threads and shared memory\n\n## The naive GEMM\n\nSequential Exo: `C[i, j] += A[i, k] * B[k, j]` over all `i, j, k`. "
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
    ]
    return new_notebook(cells=cells + sm80_part() + sm90_part(), metadata=_KERNEL)


def sm80_part() -> list:
    """Part 2: examples/sm80_gemm.py's STEPS replayed one per cell on the naive loop nest."""
    steps = schedule_steps()
    names = ", ".join(name for name, _ in steps)
    cells = [
        new_markdown_cell(
            "# Part 2 · Tensor cores on Sm80, step by step\n\n"
            "`examples/sm80_gemm.py` schedules the same naive loop nest (f16 `A` and `B`, f32 `C = A @ B`) into "
            "spork_lab's Ampere-style kernel: 128 × 256 CTA tiles whose accumulators are distributed over eight "
            "warps (64 × 64 each, `mma.sync` m16n8k16), A and B tiles staged with 16-byte `cp.async` into a 4-slot "
            "shared-memory ring, one commit group per K tile. Its `STEPS` are ten functions, one scheduling idea "
            "each (each makes several scheduling calls); each cell below applies one, `wb80.apply(step, cfg)`, so "
            "**Steps** has one entry per idea and **Code** marks what it changed.\n\n"
            "Steps 1–9 rewrite sequential code, so the analysis keeps its first objection (the CPU may not touch "
            "GPU memory) and nothing is checked until step 10 makes the loop nest a kernel."),
        new_code_cell(f"from sm80_gemm import CONFIGS, naive\nfrom sm80_gemm import {names}\n\n"
                      f"cfg = CONFIGS[\"f16\"]  # the tiles tuned on the H100\n"
                      f"wb80 = sl.Workbench(naive(cfg), sizes={SM80_SIZES!r})\nwb80"),
    ]
    for k, (name, doc) in enumerate(steps, 1):
        cells += [new_markdown_cell(_step_cell_text("Sm80", k, name, doc, SM80_NOTES)),
                  new_code_cell(f"wb80.apply({name}, cfg)")]
    cells += [
        new_markdown_cell(
            "### The mma and its warps\n\nSelecting the `mma.sync` call (what clicking its line does) shows, in "
            "**Tiling**, the eight warps `(wm, wn)` that each own a 64 × 64 tile of `C`, and below the grid the "
            "shards of the distributed accumulator `D`: one `D[wm, wn, ...]` per warp."),
        new_code_cell('wb80.select("Sm80_mma_f16(_)")'),
        new_markdown_cell(
            "### What `pad_rows` bought: bank conflicts\n\nStep 7 padded each row of `A_s` and `B_s` by 16 bytes. "
            "`sl.bank_conflicts` runs the kernel at small sizes access by access and groups the accesses of shared "
            "memory into the requests each warp makes (an `ldmatrix` makes one per 8 × 8 matrix): a request takes "
            "as many wavefronts as the most words it touches in one of the 32 banks. With the padding every "
            "fragment load takes one wavefront per matrix; the same schedule without step 7 takes eight, since the "
            "8 rows of a matrix, 128 bytes apart, fall in the same 4 banks. (On an H200, Nsight Compute measures "
            "the same counts: `benchmarks/results/bank_conflicts_ncu.md`.) The workbench's **Banks** tab shows this count "
            "for the step it shows, at its sizes."),
        new_code_cell("from sm80_gemm import STEPS, schedule\n\n"
                      "print(sl.bank_conflicts(wb80.proc, M=128, N=256, K=192))\n"
                      "no_padding = schedule(naive(cfg), cfg, steps=[s for s in STEPS if s is not pad_rows])\n"
                      "print(sl.bank_conflicts(no_padding, M=128, N=256, K=192))"),
        new_markdown_cell(
            "### tf32: swapping the operands\n\nWith f32 data (`CONFIGS[\"tf32\"]`) a B fragment of "
            "`mma.sync` m16n8k8 holds, in each lane, two elements of one column of `B` (rows `k` and `k + 4`): "
            "from `B` stored `[K, N]` that is a transposed load of 32-bit words, which `ldmatrix` cannot do (its "
            "`.trans` moves 16-bit elements), so every element is a load of its own. Computing `Cᵀ = Bᵀ Aᵀ` "
            "instead makes B's tile the instruction's A operand, whose rows are free to be any columns of `B`: "
            "taken in pairs, a lane's four registers are two pairs of adjacent words, two 8-byte loads "
            "(`Config(swap_ab=True)`: `Sm80_mma_load_b_swap_tf32_trunc`, `Sm80_mma_swap_tf32`). Below, the bank "
            "count of B's loads in both: the same requests and wavefronts, none in conflict, from half the load "
            "instructions (8-byte loads are served half a warp at a time: two requests each)." + tf32_result()),
        new_code_cell("for tf32 in [CONFIGS[\"tf32\"], CONFIGS[\"tf32_swap\"]]:\n"
                      "    report = sl.bank_conflicts(schedule(naive(tf32), tf32), M=128, N=256, K=128)\n"
                      "    for a in report.accesses:\n"
                      "        if a.kind == \"read\" and a.buffer == \"B_s\":\n"
                      "            print(f\"{tf32.name}: {a.instr}: {a.requests} requests, {a.wavefronts} wavefronts\")"),
        new_markdown_cell(
            "The kernel for the benchmark at the end: the proc of the last step."),
        new_code_cell("sm80_gemm_f16 = wb80.proc"),
    ]
    return cells


# What to look at after some steps of examples/sm90_gemm.py.
SM90_NOTES = {
    "share_b_tile": "Both CTAs of a cluster need the same tile of B, so CTA `c` now copies rows 128 c to 128 c + 127 "
                    "of it into every CTA's `B_s` (the loop over the destination CTAs is inside). Nothing changes "
                    "sequentially: the loads have a per-CTA loop of their own, so every `B_s` holds the whole tile "
                    "before the products read it.",
    "use_tma": "The loads now complete on a barrier: A's on its CTA's (`>> ring[cta]`), each share of B on every "
               "CTA's (`>> ring[:]`), since one multicast TMA copy writes it into both CTAs' shared memory. The "
               "analysis names the barrier, but the code is still sequential, so its first objection stays.",
    "map_to_gpu": "A kernel now, and the analysis says what is missing: a load completing on a barrier needs an "
                  "`Arrive` to close the barrier's phase. The next step derives it.",
    "software_pipeline": "`pipeline_loop` gives `A_s` and `B_s` a ring of S = 4 slots and derives every count: the "
                         "producer's `ReverseAwait` and `Arrive` around its loads, the consumers' `Await` before "
                         "their `wgmma`, and their release of the slot one K-block late, once the `wgmma` that read "
                         "it has finished (a commit group with one group in flight). **Code** marks the new lines. "
                         "The analysis passes, and the sync check, which models TMA (a load completes only through "
                         "its mbarrier, whose Arrive expects its bytes), finds no hazard; **Barrier timeline** shows "
                         "the `ring` barriers, forward and reverse, and the commit group `cg`.",
    "make_persistent": "Each of the G × Q = 1 × 2 clusters now stays on the GPU and loops over its tiles (`seq` loops "
                       "`mg` and `nq`); `A_s`, `B_s`, `D` and the barriers are allocated once, outside those loops, so "
                       "the producer runs on into the next tile's K-blocks while the consumers store this tile's "
                       "accumulators. The Fence that separated tiles moved past the tile loops: a sync statement does "
                       "nothing sequentially, so exo's `fission` lets it go, and the sync check decides whether the "
                       "parallel program still needs it there. It does not: the ring's own waits order one tile's "
                       "loads after the last tile's reads, and the check passes. The benchmarked kernel is this one "
                       "on 8 × 8 clusters (1.5-2.3% faster than one task per tile at 8192³ on the H100).",
}


# Part 3's benchmark kernel: the cell that defines it, and the GPU run's stand-in for it (GPU_PRELUDE).
SM90_BENCH_KERNEL = ("cfg_bench = sm90.Config(\"f16\")  # G = Q = 8: 8 x 8 clusters of 2\n"
                     "gemm_sm90_f16 = sm90.schedule(sm90.naive(cfg_bench), cfg_bench)  # the eleven steps, ~7 s")


def _kwargs(kw: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


def sm90_part() -> list:
    """Part 3: examples/sm90_gemm.py's STEPS replayed from its naive loop nest (C = A @ B^T), one per cell; the
    benchmark takes the kernel the same steps build on 8 x 8 clusters."""
    cells = [
        new_markdown_cell(
            "# Part 3 · Hopper: TMA, wgmma and warp specialization, step by step\n\n"
            "`examples/sm90_gemm.py` schedules the naive loop nest of `C = A @ Bᵀ` (B stored `[N, K]`, f16 inputs, "
            "f32 `C`) into spork_lab's Hopper kernel: persistent clusters of two CTAs; in each CTA a *producer* warp "
            "issues TMA loads into a 4-slot ring of mbarriers while two *consumer* warpgroups run `wgmma` on "
            "64 × 256 accumulators each. Its `STEPS` are eleven functions; its step functions share names with "
            "Sm80's, so they are used through the module (`sm90.tile_output`). Again the analysis objects until "
            "the code is a kernel."),
        new_code_cell("import sm90_gemm as sm90\n\n"
                      f"cfg90 = sm90.Config({_kwargs(SM90_CONFIG)})  # f16; 256-column tiles, 4 ring "
                      "slots, clusters of 2, persistent on G x Q of them\n"
                      f"wb90 = sl.Workbench(sm90.naive(cfg90), sizes={SM90_SIZES!r})\nwb90"),
    ]
    for k, (name, doc) in enumerate(schedule_steps(SM90), 1):
        cells += [new_markdown_cell(_step_cell_text("Sm90", k, name, doc, SM90_NOTES)),
                  new_code_cell(f"wb90.apply(sm90.{name}, cfg90)")]
    return cells + [
        new_markdown_cell(
            "### The wgmma and its warpgroups\n\nThe `wgmma` selected below; open **Tiling** to see its collectives: "
            "one per consumer warpgroup "
            "of each CTA of the cluster, while the producer warp and the three unused warps of its warpgroup are "
            "idle (hatched); below, the shards of `A_s`, `B_s` and the distributed accumulator `D`."),
        new_code_cell('wb90.select("Sm90_mma_async_f16(_)")'),
        new_markdown_cell(
            "The schedule has reached the kernel that `make_gemm` writes as source (the same instructions and "
            "sync statements: `tests/test_pipeline_gemms.py`). The benchmark takes the same steps on the "
            "benchmark's configuration, persistent on 8 × 8 clusters (G = Q = 8); the sync check above passed "
            "them on 1 × 2 clusters in a fraction of a second (8 × 8 clusters need 4096 × 4096 for four tiles "
            "a cluster, and pass there too, in ~12 s with `max_elements` raised: `tests/test_sync_tma.py`)."),
        new_code_cell(SM90_BENCH_KERNEL),
        new_markdown_cell(
            "## Benchmark: Sm80 and Sm90 against cuBLAS (GPU)\n\n"
            "Both kernels take f16 inputs and accumulate in f32. Each is checked against the float32 product and "
            "timed beside cuBLAS's f16 GEMM of the same layout (`A·B` for Sm80, `A·Bᵀ` for Sm90)."
            + measured_result()),
        new_code_cell("%spork_bench sm80_gemm_f16 gemm_sm90_f16 --sizes M=N=K=4096 --sizes M=N=K=8192",
                      metadata=copy.deepcopy(GPU)),
    ]


GEMM_RESULTS = HERE.parent / "benchmarks" / "results" / "gemm.json"


def _gemm_rows(path: Path) -> dict:
    """benchmarks/gemm.py's last measurements, by (kernel, M, N, K): the tutorials quote them, so their text
    follows the latest GPU sweep."""
    import json

    return {(r["kernel"], r["M"], r["N"], r["K"]): r for r in json.loads(path.read_text())}


def tf32_result(path: Path = GEMM_RESULTS) -> str:
    """The two tf32 kernels of `B[K, N]` at 8192^3, as last measured (quoted above the tf32 bank-count cell)."""
    rows = _gemm_rows(path)
    plain, swap = (rows[(f"sm80_gemm_{d}", 8192, 8192, 8192)] for d in ("tf32", "tf32_swap"))
    return (f" On an {swap['gpu'].removeprefix('NVIDIA ')} at M = N = K = 8192 (`benchmarks/results/gemm.json`, "
            f"{swap['date']}): {plain['tflops']:.0f} TFLOP/s with element-wise B loads, {swap['tflops']:.0f} "
            f"swapped (cuBLAS TF32: {swap['cublas_tflops']:.0f}).")


def measured_result(path: Path = GEMM_RESULTS) -> str:
    """What benchmarks/gemm.py last measured for the benchmark cell's kernels (quoted above that cell)."""
    rows = _gemm_rows(path)

    def pair(kernel: str, key: str) -> str:
        return " and ".join(f"{rows[(kernel, n, n, n)][key]:.0f}" for n in (4096, 8192))

    sm80, sm90 = "sm80_gemm_f16", "gemm_sm90_f16_n256_s4_c2_g8_q8_steps"  # gemm.py's name for the steps' kernel
    gpu, date = rows[(sm90, 8192, 8192, 8192)]["gpu"], rows[(sm90, 8192, 8192, 8192)]["date"]
    return (
        f"\n\nOn an {gpu.removeprefix('NVIDIA ')}, `benchmarks/gemm.py` measured (`benchmarks/results/gemm.json`, "
        f"{date}) the Sm80 kernel at {pair(sm80, 'tflops')} TFLOP/s for M = N = K = 4096 and 8192 (cuBLAS f16: "
        f"{pair(sm80, 'cublas_tflops')}) and the Sm90 kernel at {pair(sm90, 'tflops')} (cuBLAS f16 with f32 output: "
        f"{pair(sm90, 'cublas_tflops')}). The cell below shows, as stored, the output of the last GPU run recorded "
        "in this notebook (its metadata `spork_lab.recorded_on` names the device); run on a machine without a GPU, "
        "it replaces that with what was built and that nothing ran.")


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
     "The consumer's next Await then waits for an arrive the hung producer never makes (dashed red). The check "
     "runs on as if nothing had hung; what it sees past that point is greyed in the timeline, and its cards come "
     "folded under the deadlock's: on the GPU those threads never get there, so fix the deadlock first. "
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
     "`Fence(Sm80_generic, cuda_in_order)` waits for the copies first (`cp.async.wait_all`); the card's "
     "`Fence(Sm80_cp_async, cuda_in_order)` works as well (`Sm80_generic` is the wider sync-tl: cp.async and "
     "in-order accesses alike). The free of `buf` is reported too: nothing ever waits for the copies, and the fix "
     "below, before the reads, covers it (the card's Fence at the end of the task would be a second one).",
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
WRITTEN_BY_HAND = ["01_first_kernel.ipynb"]  # executed again as stored (its outputs follow the current views)
# What a tutorial's "gpu" cells need from the cells before them (the same procs, from the example files), so a
# GPU machine runs only those cells: device time is scarce, and the rest runs the same anywhere.
GPU_PRELUDE = {"02_stepwise_gemm.ipynb": "from stepwise_gemm import gemm_smem\nfrom sm80_gemm import sm80_gemm_f16\n"
                                         "import sm90_gemm as sm90\n\n" + SM90_BENCH_KERNEL}


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
    start = time.perf_counter()

    def progress(cell, cell_index, execute_reply) -> None:  # a GPU run's log shows where its time goes
        print(f"  [{time.perf_counter() - start:6.1f} s] cell {cell_index} done: {cell.source.splitlines()[0][:70]}",
              flush=True)

    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(HERE)}},
                   store_widget_state=False, record_timing=False,  # no state: viewers show text/html
                   on_cell_executed=progress).execute()
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
    parser.add_argument("--gpu-build", action="store_true")
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
            Path(args.gpu_run).mkdir(parents=True, exist_ok=True)
            execute(nb, Path(args.gpu_run) / name, keep_gpu=False)
            mark_gpu_cells(nb, device)
            nbformat.write(nb, Path(args.gpu_run) / name)
            for c in nb.cells[2:]:
                print(c.source, *(o.get("text") or o.get("data", {}).get("text/plain", "") for o in c.outputs), sep="\n")
        elif args.gpu_build:  # without a GPU the magic still builds, for sm_90a: the device then finds the cache
            nb = gpu_cells(nb, name)
            if nb is not None:
                execute(nb, HERE / name, keep_gpu=False)
        elif args.take_gpu:
            if not (Path(args.take_gpu) / name).exists():  # no "gpu" cells: --gpu-run wrote nothing for it
                continue
            take_gpu_outputs(Path(args.take_gpu) / name, path)
        else:
            execute(nb, path, keep_gpu=True)
            nbformat.write(nb, path)
        print(f"{name}: {'ok' if args.check else 'built' if args.gpu_build else 'written'}")
    if not (args.check or args.gpu_run or args.take_gpu or args.gpu_build):
        for name in WRITTEN_BY_HAND:
            nb = nbformat.read(HERE / name, as_version=4)
            execute(nb, HERE / name, keep_gpu=True)
            nbformat.write(nb, HERE / name)
            print(f"{name}: executed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
