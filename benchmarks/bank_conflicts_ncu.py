"""sl.bank_conflicts against the hardware: shared-memory wavefronts counted by Nsight Compute on the GPU.

For each case, the model's count (its read and write wavefronts at the case's sizes) is printed beside what
ncu measures for one launch of the kernel at the same sizes: shared-memory load and store wavefronts
(LDS and LDSM loads; STS stores) and the bank conflicts ncu reports. cp.async's shared-memory writes are not
in ncu's load/store wavefronts; the script prints the model's count of them apart.

    python benchmarks/bank_conflicts_ncu.py [CASE ...] # all cases (or those named), one ncu run each (needs ncu, a GPU)
    python benchmarks/bank_conflicts_ncu.py run CASE   # one launch of CASE (what ncu profiles)

Results: benchmarks/results/bank_conflicts_ncu.md.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import spork_lab as sl  # noqa: E402

METRICS = {  # ncu metric -> column
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "ld wavefronts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "st wavefronts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "ld conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "st conflicts",
}


def cases() -> dict:
    """name -> (make the proc, sizes, make the arguments); procs are scheduled on demand (a GEMM takes seconds)."""
    import sm80_gemm as gemm
    import smem_transpose as tr

    rng = np.random.default_rng()
    out = {}
    for p in tr.PROCS:
        out[p.name()] = (lambda p=p: p, {"M": 256, "N": 256}, lambda: tr.make_args(rng, shape=(256, 256)))

    def gemm_proc(cfg, padded: bool):
        steps = gemm.STEPS if padded else [s for s in gemm.STEPS if s is not gemm.pad_rows]
        return gemm.schedule(gemm.naive(cfg), cfg, steps=steps)

    for dtype in ("f16", "tf32", "tf32_swap"):  # tf32_swap: B's fragments through 8-byte loads
        cfg = gemm.CONFIGS[dtype]  # the tiles the benchmark runs (a tf32 Config() would not fit in shared memory)
        for padded in (True, False):
            sizes = {"M": 128, "N": 256, "K": 256}
            out[f"sm80_gemm_{dtype}" + ("" if padded else "_unpadded")] = (
                lambda cfg=cfg, padded=padded: gemm_proc(cfg, padded), sizes,
                lambda cfg=cfg, sizes=sizes: gemm.make_args(rng, gemm.naive(cfg), shape=tuple(sizes.values())))
    return out


def launch(name: str) -> None:
    import cupy

    make_proc, sizes, make_args = cases()[name]
    p = make_proc()
    args = make_args()
    built = getattr(sl.build([p]), p.name())
    built(*[cupy.asarray(v) if isinstance(v, np.ndarray) else v for v in args.values()])
    cupy.cuda.runtime.deviceSynchronize()
    module = built.module
    assert getattr(module.lib, f"{module.lib_name}_last_error")() == 0, f"{name}: CUDA error"


def measure(name: str) -> dict:
    cmd = ["ncu", "--csv", "--metrics", ",".join(METRICS), sys.executable, __file__, "run", name]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    rows = [r for r in csv.DictReader(io.StringIO(out.stdout[out.stdout.find('"ID"'):])) if r.get("Metric Name") in METRICS]
    if not rows:
        raise RuntimeError(f"ncu gave no metrics for {name}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    got = dict.fromkeys(METRICS.values(), 0)
    for r in rows:  # every kernel of the launch (one here)
        got[METRICS[r["Metric Name"]]] += int(float(r["Metric Value"].replace(",", "")))
    return got


def model(p, sizes: dict) -> dict:
    report = sl.bank_conflicts(p, **sizes)
    out = {"ld": 0, "st": 0, "cp.async st": 0}
    for a in report.accesses:
        column = "ld" if a.kind == "read" else "cp.async st" if a.instr.startswith("Sm80_cp_async") else "st"
        out[column] += a.wavefronts
    return out


def main(names: list) -> None:
    lines = ["| case | sizes | model ld | ncu ld wavefronts | model st | ncu st wavefronts | ncu ld/st conflicts | "
             "model cp.async st |", "|---|---|---|---|---|---|---|---|"]
    for name, (make_proc, sizes, _) in cases().items():
        if names and name not in names:
            continue
        m, got = model(make_proc(), sizes), measure(name)
        at = ", ".join(f"{k}={v}" for k, v in sizes.items())
        lines.append(f"| {name} | {at} | {m['ld']} | {got['ld wavefronts']} | {m['st']} | {got['st wavefronts']} | "
                     f"{got['ld conflicts']} / {got['st conflicts']} | {m['cp.async st']} |")
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        launch(sys.argv[2])
    else:
        main(sys.argv[1:])
