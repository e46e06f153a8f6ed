"""Where the Sm90 GEMM's time per tile goes beyond the tensor-pipe floor: the final kernels timed against copies of
themselves with one part of the tile boundary or of the K-block cut or changed in their CUDA text (diagnostic
controls; the cut copies compute wrong results and are only timed).

Variants, each a text edit of the generated .cu:
- `nostore`: the epilogue's accumulator store runs only when K < 0 (never): what storing C costs;
- `nobar`: no cluster barrier at a task's end (the Fence after the K loop);
- `nodrain`: the consumers do not wait for every CTA's release of the ring's last slots at a task's end;
- `loop_only`: all three cut: the K loop, the last wgmma wait and the zero-fill are what is left;
- `prefetch`: the producer warp arrives at a task's closing cluster barrier without waiting there (it waits for
  that phase at its next task's end, before arriving again): it loads the next task's first stages while the
  consumers finish; correct where K / BK is a multiple of the ring's depth (its ring drain then waits for the stages
  it reloads first without waiting), so it is checked;
- `prefetch_nostore`: both;
- `smemstore`, `prefetch_smemstore`: the epilogue's 16-byte stores go to otherwise unused shared memory instead of C
  (conflict-free addresses; the whole tile where the ring leaves room, as with 3 stages, else 32 KB, wrapping), and
  each warpgroup fences the async proxy and syncs on a named barrier: what the consumers would still pay with an
  asynchronous (TMA) store of a staged tile, egress aside;
- `regstore`: the consumers round their accumulators into 64 registers after the K loop instead of storing them,
  and store those during their next task's first four K-blocks (a quarter after each K-block's wgmma issue; in
  `regstore16` over sixteen K-blocks), the last task's after the task loop: the register-only overlapped epilogue
  (128 x 256, 16-bit C), checked;
- `stcs`: the epilogue's 16-byte stores as `st.global.cs` (streaming: evict first), checked;
- `lane_release`: a warp's releases to the cluster's two CTAs by two lanes at once instead of one lane's loop;
- `cluster_release`, `cluster_acquire`, `cluster_scope`: the releases to the cluster's CTAs at .release.cluster,
  the producer's waits for them at .acquire.cluster, or both, instead of the default .cta scope: what ordering
  global memory between the CTAs of a cluster through these mbarriers would cost (docs/architecture.md, the
  checker's known misses).

Here (nvcc, no GPU):  [PROBE_KERNELS=a,b] python3 benchmarks/sm90_boundary_probe.py build .carry_final/sm90 DIR [VARIANT..]
On the GPU machine:    [PROBE_SHAPES=MxNxK,...] python3 benchmarks/sm90_boundary_probe.py run DIR
                       (CUDA events, L2 flushed, median of 20, each variant alternating with the unchanged kernel; the
                       unchanged one is checked first, and so are the variants in CHECKED)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemm import SOURCE_EXTS, Kernel, Runner, _time_pair  # noqa: E402

KERNELS = tuple(filter(None, os.environ.get("PROBE_KERNELS", "").split(","))) or (  # PROBE_KERNELS: a subset
    "gemm_sm90_f16_n256_s4_c2_g8_cf16", "gemm_sm90_tf32_n256_s4_c2_g8", "gemm_sm90_f16_n320_s4_c2_g8_cf16_m160_clip",
    "gemm_sm90_tf32_n320_s4_c2_g8_m160_clip")
CHECKED = ("prefetch", "stcs", "regstore", "regstore16")  # variants that must still compute the product
TASK_BARRIER = '      asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory");\n'
DRAIN = "          spork_mbar_wait(&spork_ring_r[i * 4 + k % 4u], (k / 4u) & 1u);\n"
STORE = ("            { __half *sm90_p", "            { __nv_bfloat16 *sm90_p", "            { float *sm90_p",
         "{ const int sm90_r0")  # the last: clipped
WIDE_STORE = "*reinterpret_cast<uint4 *>(&sm90_p[8 * r * sm90_ld + 32 * i + 6 * sm90_t]) = "  # f16/bf16 C, 128 x 256
WIDE_VALUE = "make_uint4(sm90_v[0], sm90_v[1], sm90_v[2], sm90_v[3]);"
RELEASE = ("if (threadIdx.x % 32 == 0) { for (unsigned c = 0; c < 2; ++c) "
           "spork_mbar_arrive_remote(&spork_ring_r[(0) * 4 + spork_ring_ra[0] % 4u], c); }")


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
    return cu.replace(wait, helper + wait, 1).replace("spork_mbar_wait(&spork_ring_r", "spork_mbar_wait_cluster(&spork_ring_r")


def _wide_store(cu: str) -> str:
    """The wide 16-bit store statement of cu's epilogue, which must hold exactly one."""
    assert cu.count(WIDE_STORE + WIDE_VALUE) == 1, "the wide 16-bit store (f16/bf16 C, 128 x 256)"
    return WIDE_STORE + WIDE_VALUE


def _prefetch(cu: str) -> str:
    producer = cu.index("// warps named 'producer'")
    at = cu.index(TASK_BARRIER, producer)
    deferred = ('      if (exo_bar_pending) asm volatile("barrier.cluster.wait.acquire;" ::: "memory");\n'
                '      asm volatile("barrier.cluster.arrive.release;" ::: "memory");\n      exo_bar_pending = 1;\n')
    cu = cu[:at] + deferred + cu[at + len(TASK_BARRIER):]
    loop = cu.index("    for (int exo_task", producer)
    cu = cu[:loop] + "    int exo_bar_pending = 0;\n" + cu[loop:]
    end = cu.index("  } else if", producer)
    return cu[:end] + '    if (exo_bar_pending) asm volatile("barrier.cluster.wait.acquire;" ::: "memory");\n' + cu[end:]


def _smem_store(cu: str) -> str:
    _wide_store(cu)
    size = int(re.search(r"dynamicSmemBytes = (\d+);", cu).group(1))
    ring = size - 1024  # the stages; 1 KB of alignment slack follows them
    region = 65536 if ring + 65536 + 1024 <= 227 * 1024 else 32768  # the whole 128 x 256 16-bit tile, or half
    offset = f"((threadIdx.x % 256) * 16 + (2 * i + r) * 4096) % {region}"
    staged = f"*reinterpret_cast<uint4 *>(exo_smem + {ring} + {offset}) = "
    cu = cu.replace(WIDE_STORE, staged)
    sync = ('            asm volatile("fence.proxy.async.shared::cta;\\n\\tbar.sync %0, 128;" :: '
            '"r"(1 + (int) (threadIdx.x / 128)) : "memory");\n')
    at = min(cu.index(start) for start in STORE[:2] if start in cu)
    cu = cu[:at] + sync + cu[at:]
    grown = ring + region + 1024
    cu = cu.replace(f", {size});", f", {grown});")
    return cu.replace(f"dynamicSmemBytes = {size};", f"dynamicSmemBytes = {grown};")


def _register_store(cu: str, steps: int = 4) -> str:
    consumer = cu.index("// warps named 'consumer'")
    loop = cu.index("    for (int exo_task", consumer)
    ctype = "__nv_bfloat16" if "{ __nv_bfloat16 *sm90_p" in cu else "__half"
    cu = cu[:loop] + f"    unsigned exo_P[64]; {ctype} *exo_Pp = nullptr; int exo_Pld = 0;\n" + cu[loop:]
    cu = cu.replace(_wide_store(cu), "for (int q = 0; q < 4; ++q) exo_P[4 * (2 * i + r) + q] = sm90_v[q];")
    end_wide = "                }\n              }\n            } else {\n"
    assert cu.count(end_wide) == 1
    cu = cu.replace(end_wide, "                }\n              }\n              exo_Pp = sm90_p; exo_Pld = sm90_ld;\n"
                              "            } else {\n")
    # the 16 stores of a tile, numbered s = 2 i + r, in `steps` K-blocks of 16 / steps each
    store = ("*reinterpret_cast<uint4 *>(&exo_Pp[8 * (s % 2) * exo_Pld + 32 * (s / 2) + 6 * (threadIdx.x % 4)]) = "
             "make_uint4(exo_P[4 * s], exo_P[4 * s + 1], exo_P[4 * s + 2], exo_P[4 * s + 3]);")
    part = 16 // steps
    spread = (f"            if (exo_Pp != nullptr && k < {steps}) {{\n"
              f"              #pragma unroll\n              for (int q = 0; q < {steps}; ++q) if (q == k) {{\n"
              f"                #pragma unroll\n                for (int s = {part} * q; s < {part} * q + {part}; ++s) {store}\n"
              f"              }}\n              if (k == {steps - 1}) exo_Pp = nullptr;\n            }}\n")
    release = "            ++spork_ring_ra[0];\n"
    at = cu.index(release, consumer) + len(release)
    cu = cu[:at] + spread + cu[at:]
    flush = f"    if (exo_Pp != nullptr) {{\n      #pragma unroll\n      for (int s = 0; s < 16; ++s) {store}\n    }}\n"
    tail = '  }\n  asm volatile("barrier.cluster.arrive.release;\\n\\tbarrier.cluster.wait.acquire;" ::: "memory");  // no CTA'
    assert cu.count(tail) == 1, "the kernel's closing cluster barrier"
    return cu.replace(tail, flush + tail)


def _streaming_store(cu: str) -> str:
    address = WIDE_STORE.removeprefix("*").removesuffix(" = ")
    return cu.replace(_wide_store(cu), f"__stcs({address}, {WIDE_VALUE.removesuffix(';')});")


def _lane_release(cu: str) -> str:
    assert cu.count(RELEASE) == 1
    return cu.replace(RELEASE, "if (threadIdx.x % 32 < 2) spork_mbar_arrive_remote(&spork_ring_r[(0) * 4 + spork_ring_ra[0] % 4u], "
                               "threadIdx.x % 32);")


VARIANTS = {
    "nostore": _cut_store,
    "nobar": _cut_barrier,
    "nodrain": _cut_drain,
    "loop_only": lambda cu: _cut_drain(_cut_barrier(_cut_store(cu))),
    "prefetch": _prefetch,
    "prefetch_nostore": lambda cu: _prefetch(_cut_store(cu)),
    "smemstore": _smem_store,
    "prefetch_smemstore": lambda cu: _prefetch(_smem_store(cu)),
    "regstore": _register_store,
    "regstore16": lambda cu: _register_store(cu, 16),
    "stcs": _streaming_store,
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
                if variant in CHECKED:
                    print(f"  {variant:10} max rel err {cut.checked(shape)[3]:.1e}", flush=True)
                ms, base_ms = _time_pair(cut.launcher(A, B, C), base.launcher(A, B, C), 20)
                print(f"  {variant:10} {flops / ms / 1e9:7.1f} TFLOP/s vs unchanged {flops / base_ms / 1e9:7.1f}: "
                      f"{base_ms / ms:.3f}x", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("build", "run") or (sys.argv[1] == "build" and len(sys.argv) < 4):
        raise SystemExit(__doc__)
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:] or list(VARIANTS))
    else:
        shapes = [tuple(map(int, s.split("x"))) for s in os.environ.get("PROBE_SHAPES", "").split(",") if s]
        run(Path(sys.argv[2]), *([shapes] if shapes else []))
