"""Where the Sm90 GEMM's time per tile goes beyond the tensor-pipe floor: the final kernels timed against copies of
themselves with one part of the tile boundary or of the K-block cut or changed in their CUDA text (diagnostic
controls; the cut copies compute wrong results and are only timed).

Variants, each a text edit of the generated .cu:
- `nostore`: the epilogue's accumulator store runs only when K < 0 (never): what storing C costs;
- `nobar`: no cluster barrier at a task's end (the Fence after the K loop);
- `nodrain`: the consumers do not wait for every CTA's release of the ring's last slots at a task's end;
- `loop_only`: all three cut: the K loop, the last wgmma wait and the zero-fill are what is left;
- `lane_release`: a warp's releases to the cluster's two CTAs by two lanes at once instead of one lane's loop;
- `cluster_release`, `cluster_acquire`, `cluster_scope`: the releases to the cluster's CTAs at .release.cluster,
  the producer's waits for them at .acquire.cluster, or both, instead of the default .cta scope: what ordering
  global memory between the CTAs of a cluster through these mbarriers would cost (docs/architecture.md, the
  checker's known misses).

Here (nvcc, no GPU):  python3 benchmarks/sm90_boundary_probe.py build .carry_final/sm90 DIR [VARIANT ...]
On the GPU machine:    python3 benchmarks/sm90_boundary_probe.py run DIR   (CUDA events, L2 flushed, median of 20,
                       each variant alternating with the unchanged kernel; the unchanged one is checked first)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemm import SOURCE_EXTS, Kernel, Runner, _time_pair  # noqa: E402

KERNELS = ("gemm_sm90_f16_n256_s4_c2_g8_cf16", "gemm_sm90_tf32_n256_s4_c2_g8")
TASK_BARRIER = '      asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory");\n'
DRAIN = "          spork_mbar_wait(&ring_r[i * 4 + k % 4u], (k / 4u) & 1u);\n"
STORE = "            { __half *sm90_p", "            { float *sm90_p"
RELEASE = ("if (threadIdx.x % 32 == 0) { for (unsigned c = 0; c < 2; ++c) "
           "spork_mbar_arrive_remote(&ring_r[(0) * 4 + ring_ra[0] % 4u], c); }")


def _cut_store(cu: str) -> str:
    for start in STORE:
        if start in cu:
            return cu.replace(start, "            if (K < 0) " + start.strip(), 1)
    raise SystemExit("no epilogue store found")


def _cut_barrier(cu: str) -> str:
    assert cu.count(TASK_BARRIER) == 3, cu.count(TASK_BARRIER)
    return cu.replace(TASK_BARRIER, "")


def _cut_drain(cu: str) -> str:
    consumer = cu.index("// warps named 'consumer'")
    at = cu.index(DRAIN, consumer)
    return cu[:at] + "          ;\n" + cu[at + len(DRAIN):]


def _cluster_release(cu: str) -> str:
    remote = "mbarrier.arrive.shared::cluster.b64"
    assert remote in cu
    return cu.replace(remote, "mbarrier.arrive.release.cluster.shared::cluster.b64")


def _cluster_acquire(cu: str) -> str:
    wait = "__device__ __forceinline__ void spork_mbar_wait("
    assert wait in cu
    helper = (
        "__device__ __forceinline__ void spork_mbar_wait_cluster(unsigned long long *bar, unsigned parity) {\n"
        "  unsigned done = 0;\n"
        "  while (!done) {\n"
        '    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "\n'
        '                 "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(spork_smem_addr(bar)), "r"(parity) : "memory");\n'
        "  }\n"
        "}\n"
    )
    return cu.replace(wait, helper + wait, 1).replace("spork_mbar_wait(&ring_r", "spork_mbar_wait_cluster(&ring_r")


def _lane_release(cu: str) -> str:
    assert cu.count(RELEASE) == 1
    return cu.replace(RELEASE, "if (threadIdx.x % 32 < 2) spork_mbar_arrive_remote(&ring_r[(0) * 4 + ring_ra[0] % 4u], "
                               "threadIdx.x % 32);")


VARIANTS = {
    "nostore": _cut_store,
    "nobar": _cut_barrier,
    "nodrain": _cut_drain,
    "loop_only": lambda cu: _cut_drain(_cut_barrier(_cut_store(cu))),
    "lane_release": _lane_release,
    "cluster_release": _cluster_release,
    "cluster_acquire": _cluster_acquire,
    "cluster_scope": lambda cu: _cluster_acquire(_cluster_release(cu)),
}


def build(src: Path, out: Path, variants: list) -> None:
    from spork_lab.runtime import build_library

    out.mkdir(parents=True, exist_ok=True)
    index = {e["name"]: e for e in json.loads((src / "index.json").read_text())["kernels"]}
    entries = []
    for name in KERNELS:
        sources = [(src / f"{name}.{ext}").read_text() for ext in SOURCE_EXTS]
        for variant in ["base", *variants]:
            edit = VARIANTS.get(variant, lambda cu: cu)
            text = list(sources)
            text[2] = edit(text[2])
            print(f"building {name} {variant}", flush=True)
            shutil.copy(build_library(tuple(text), name, "sm_90a"), out / f"lib{name}__{variant}.so")
        entries.append(index[name])
    (out / "index.json").write_text(json.dumps({"kernels": entries, "variants": variants}, indent=1) + "\n")


def run(folder: Path, shapes=((8192, 8192, 8192), (4096, 4096, 4096))) -> None:
    import spork_lab as sl
    from spork_lab.codegen import lib_name
    from spork_lab.runtime import BuiltModule
    from spork_lab.runtime._args import proc_spec

    index = json.loads((folder / "index.json").read_text())
    for entry in index["kernels"]:
        k = Kernel(schedule=None, **entry)
        spec = proc_spec(sl.parse_source(k.signature)._loopir_proc)
        load = lambda v: getattr(BuiltModule(folder / f"lib{k.name}__{v}.so", lib_name(k.name), [spec]), spec.name)  # noqa: E731
        base = Runner(k, load("base"))
        for shape in shapes:
            A, B, C, err = base.checked(shape)
            print(f"{k.name} {'x'.join(map(str, shape))}: unchanged kernel max rel err {err:.1e}", flush=True)
            flops = 2 * shape[0] * shape[1] * shape[2]
            for variant in index["variants"]:
                cut = Runner(k, load(variant))
                ms, base_ms = _time_pair(cut.launcher(A, B, C), base.launcher(A, B, C), 20)
                print(f"  {variant:10} {flops / ms / 1e9:7.1f} TFLOP/s vs unchanged {flops / base_ms / 1e9:7.1f}: "
                      f"{base_ms / ms:.3f}x", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("build", "run") or (sys.argv[1] == "build" and len(sys.argv) < 4):
        raise SystemExit(__doc__)
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:] or list(VARIANTS))
    else:
        run(Path(sys.argv[2]))
