"""CUDA code generation on CPU: golden text, nvcc/gcc compile checks, lowering rules and errors.

Golden files live in tests/golden/test_codegen/<test>.txt; rewrite them with
SPORK_UPDATE_GOLDEN=1 pytest tests/test_codegen.py.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

import spork_lab as sl
from spork_lab import proc
from spork_lab.codegen._collectives import Collective
from spork_lab.codegen._sync import NamedBarrierIds, lower_fence, split_sync_lines
from spork_lab.core.sync_stmts import SyncSpec
from spork_lab.core.timelines import Sm80_generic as _Sm80_generic
from spork_lab.core.timelines import cuda_in_order as _cuda_in_order
from spork_lab.platforms.cuda import *

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from conftest import runnable_examples  # noqa: E402
from vec_add import vec_add  # noqa: E402

GOLDEN = ROOT / "tests" / "golden" / "test_codegen"
EXAMPLES = runnable_examples()
HOST_USES_CUDA = {"event_two_stage"}  # its host C calls the CUDA runtime (events): compiled by nvcc only


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("SPORK_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with SPORK_UPDATE_GOLDEN=1"
    assert text == path.read_text()


def device_part(cu: str) -> str:
    """The kernels and launchers (the prelude is the same for every library)."""
    return cu[cu.index("__global__") :]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_golden(name):
    mod = importlib.import_module(name)
    c, h, cu, cuh = sl.compile_procs_to_strings(mod.PROCS, name)
    check_golden(name, f"{device_part(cu)}\n// ---- host .c ----\n{c}")


@pytest.fixture(scope="module")
def example_sources(tmp_path_factory):
    out = tmp_path_factory.mktemp("examples")
    for name in EXAMPLES:
        sl.compile_procs(importlib.import_module(name).PROCS, out, name)
    return out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("gencode", ["-arch=sm_80", "-gencode=arch=compute_90a,code=sm_90a"])
def test_examples_compile_with_nvcc(example_sources, gencode):
    # examples with ARCH = "sm_90a" (clusters) stop sm_80 builds with an #error that says why
    names = [n for n in EXAMPLES if "sm_90" in gencode or not getattr(importlib.import_module(n), "ARCH", "").startswith("sm_90")]
    files = [f"{n}.cu" for n in names] + [f"{n}.c" for n in sorted(HOST_USES_CUDA)]
    res = subprocess.run(["nvcc", "-c", "-std=c++17", gencode, *files], cwd=example_sources, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    # without warnings: a student reading nvcc's output sees only their own problems (iterators a thread's body does
    # not read, barrier state a role does not use and allocations a warp-specialized branch does not touch were
    # each an "unused variable", audit H)
    assert "warning" not in res.stderr, res.stderr


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_host_c_compiles_with_gcc(example_sources):
    files = [f"{n}.c" for n in EXAMPLES if n not in HOST_USES_CUDA]
    res = subprocess.run(["gcc", "-c", "-Wall", "-Werror", *files], cwd=example_sources, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_compile_procs_writes_four_files(tmp_path):
    paths = sl.compile_procs([vec_add], tmp_path, "va")
    assert [p.name for p in paths] == ["va.c", "va.h", "va.cu", "va.cuh"]
    assert 'extern "C" int vec_add_device0_launch' in (tmp_path / "va.cuh").read_text()


@proc
def warpgroup_fences(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 256 == 0
    with CudaDeviceFunction(blockDim=256, clusterDim=2, blocks_per_sm=2):
        for task in cuda_tasks(0, n / 256):
            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                for t in cuda_threads(0, 128):
                    x[task * 256 + wg * 128 + t] = 1.0
                Fence(cuda_in_order, cuda_in_order)
            with CudaWarps(1, 3):
                Fence(cuda_in_order, cuda_in_order)
            Fence(cuda_in_order, cuda_in_order)


def test_sub_cta_and_cluster_fences_golden():
    _, _, cu, _ = sl.compile_procs_to_strings([warpgroup_fences], "wg")
    text = device_part(cu)
    assert "cudaLaunchAttributeClusterDimension" in text
    check_golden("warpgroup_fences", text)


def test_sm90_gemm_with_16bit_c_golden():
    """examples/sm90_gemm.py with an f16 C: the accumulators are stored 16 bytes per lane after the quad transpose
    (4-byte stores where rows are not 16-byte aligned)."""
    import sm90_gemm

    _, _, cu, _ = sl.compile_procs_to_strings([sm90_gemm.make_gemm("f16", out="f16")], "gemm_f16")
    text = device_part(cu)
    assert text.count("spork_quad_transpose(sm90_v);") == 1 and "spork_rot4(v, t);" in cu
    assert "*reinterpret_cast<uint4 *>(&sm90_p[" in text and "__floats2half2_rn(" in text
    check_golden("sm90_gemm_f16", text)


def test_sm90_gemm_with_64_byte_swizzle():
    """make_gemm(SW=64): K-blocks of one 64-byte swizzle row; the tensor maps and the wgmma descriptors say so."""
    import sm90_gemm

    _, _, cu, _ = sl.compile_procs_to_strings([sm90_gemm.make_gemm("f16", S=8, G=1, SW=64)], "gemm_w64")
    descriptors = set(re.findall(r"spork_wgmma_desc\([^;]*?, (\d+)u, (\d+)u\)", cu))
    maps = re.findall(r"spork_encode_tensor_map\(.*?, (\d+)\); }", cu)
    assert descriptors == {("2", "64")} and maps == ["64", "64"]


def test_sm90_accumulator_column_windows():
    """make_gemm(NW=128): two m64n128 wgmma per K step, each on 128 columns of the [64, 256] accumulator, which
    start at register column / 2 of the thread's fragment; a window starting off a multiple of 8 is refused."""
    import sm90_gemm

    _, _, cu, _ = sl.compile_procs_to_strings([sm90_gemm.make_gemm("f16", G=1, NW=128)], "gemm_m128")
    assert "spork_wgmma_m64n128k16_f16_ss(&D[(128 * j) / 2]," in cu and "m64n256k16" not in cu
    src, consts = sm90_gemm.gemm_source("f16", G=1, NW=64)
    shifted = src.replace("D[cta, wg, :, NW * j:NW * j + NW]", "D[cta, wg, :, 4 + 48 * j:4 + 48 * j + 64]")
    assert shifted != src
    with pytest.raises(sl.CodegenError, match="starts at a multiple of 8.*got column 4 \\+ 48 \\* j"):
        sl.compile_procs_to_strings([sl.parse_source(shifted, func_locals=consts)], "gemm_shifted")


def test_a_proc_not_in_a_list_is_refused_at_the_call():
    with pytest.raises(TypeError, match=r"takes a list of procs: write compile_procs_to_strings\(\[p\], ...\)") as info:
        sl.compile_procs_to_strings(warpgroup_fences, "wg")
    assert (info.value.filename, info.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)


def test_a_misspelt_api_name_gets_a_suggestion():
    with pytest.raises(AttributeError, match="has no attribute 'compile'; did you mean 'compile_procs'"):
        sl.compile  # noqa: B018


def test_cluster_kernel_for_sm80_is_a_codegen_error(tmp_path):
    with pytest.raises(sl.CodegenError, match="clusterDim=2, which needs sm_90"):
        sl.compile_procs([warpgroup_fences], tmp_path, "wg", arch="sm_80")
    with pytest.raises(sl.CodegenError, match="arch must look like") as info:
        sl.compile_procs([warpgroup_fences], tmp_path, "wg", arch="90")
    assert (info.value.filename, info.value.lineno) == (__file__, inspect.currentframe().f_lineno - 1)  # the call


@pytest.mark.parametrize("arch, message", [
    ("sm_80", "Sm90_copy_tensor_to_smem_swizzled_2f32 needs sm_90 or newer, but this is built for sm_80: build it for sm_90a"),
    ("sm_90", "Sm90_mma_async_tf32 needs sm_90a (an arch-specific feature: no other target has it), but this is built "
              "for sm_90"),
    ("sm_100a", "Sm90_mma_async_tf32 needs sm_90a"),  # wgmma is Hopper's alone
])
def test_an_instr_the_target_lacks_is_a_codegen_error_at_its_line(arch, message):
    """TMA needs sm_90 and wgmma sm_90a: said at the instr's line, not by ptxas (was: written without a word)."""
    from sm90_tma_wgmma import sm90_tma_wgmma

    with pytest.raises(sl.CodegenError, match=re.escape(message)) as info:
        sl.compile_procs_to_strings([sm90_tma_wgmma], "k", arch)
    line = info.value.lineno
    assert info.value.filename.endswith("sm90_tma_wgmma.py")
    assert message.split()[0] in Path(info.value.filename).read_text().splitlines()[line - 1]
    sl.compile_procs_to_strings([sm90_tma_wgmma], "k", "sm_90a")  # its own target


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cluster_kernel_compiles_for_sm90a_only(tmp_path):
    sl.compile_procs([warpgroup_fences], tmp_path, "wg", arch="sm_90a")

    def nvcc(gencode):
        return subprocess.run(["nvcc", "-c", "-std=c++17", gencode, "wg.cu"], cwd=tmp_path, capture_output=True, text=True)

    ok = nvcc("-gencode=arch=compute_90a,code=sm_90a")
    assert ok.returncode == 0, ok.stderr
    bad = nvcc("-arch=sm_80")  # built without arch (as sl.build does today): the kernel's #error says why
    assert bad.returncode != 0 and "needs sm_90 or newer" in bad.stderr


def _fence(first=_cuda_in_order):
    return SyncSpec("Fence", first, _cuda_in_order)


def test_fence_lowering_by_collective():
    ids = NamedBarrierIds(256)
    warp = Collective(32, tuple(((s, s + 32),) for s in range(0, 256, 32)))
    cta = Collective(256, (((0, 256),),))
    lane = Collective(1, tuple(((s, s + 1),) for s in range(256)))
    assert lower_fence(_fence(), warp, ids, 1, False, None) == ["__syncwarp();"]
    assert lower_fence(_fence(), cta, ids, 1, False, None) == ["__syncthreads();"]
    assert lower_fence(_fence(), lane, ids, 1, False, None) == []
    # one code path per warp name: the warps reach the barrier at different instructions
    assert lower_fence(_fence(), cta, ids, 1, True, None) == ['asm volatile("barrier.sync 0;" ::: "memory");']
    assert lower_fence(_fence(_Sm80_generic), cta, ids, 1, False, None) == [
        'asm volatile("cp.async.wait_all;" ::: "memory");',
        "__syncthreads();",
    ]
    assert lower_fence(_fence(), Collective(512, (((0, 512),),)), NamedBarrierIds(256), 2, False, None) == [
        "cooperative_groups::this_cluster().sync();"
    ]


def test_named_barrier_ids_do_not_collide():
    ids = NamedBarrierIds(256)
    pairs = Collective(64, tuple(((s, s + 64),) for s in range(0, 256, 64)))
    halves = Collective(128, (((0, 128),), ((128, 256),)))
    a = lower_fence(_fence(), pairs, ids, 1, False, None)[0]
    b = lower_fence(_fence(), halves, ids, 1, False, None)[0]
    assert '"r"(1 + exo_thread % 256 / 64)' in a
    assert '"r"(5 + exo_thread % 256 / 128)' in b


def test_the_same_warps_of_each_cta_of_a_cluster_fence_on_one_named_barrier():
    """Warps 1-2 of each 96-thread CTA (a consumer warp group in a cluster of 2): each CTA's collective syncs on the
    same barrier id, which counts that CTA's threads (this was "not yet supported")."""
    consumers = Collective(64, (((32, 96),), ((128, 192),)))
    assert lower_fence(_fence(), consumers, NamedBarrierIds(96), 2, True, None) == [
        'asm volatile("barrier.sync %0, %1;" :: "r"(1), "n"(64) : "memory");'
    ]
    shifted = Collective(64, (((32, 96),), ((96, 160),)))  # CTA 1's collective starts elsewhere: two ids
    with pytest.raises(sl.CodegenError, match="not yet supported"):
        lower_fence(_fence(), shifted, NamedBarrierIds(96), 2, True, None)


def test_too_many_named_barriers():
    ids = NamedBarrierIds(1024)
    pairs = Collective(64, tuple(((s, s + 64),) for s in range(0, 1024, 64)))
    with pytest.raises(sl.CodegenError, match="named barriers"):
        lower_fence(_fence(), pairs, ids, 1, False, None)


def test_scattered_collective_fence_is_rejected():
    ids = NamedBarrierIds(256)
    scattered = Collective(64, (((0, 32), (128, 160)), ((32, 64), (160, 192))))
    with pytest.raises(sl.CodegenError, match="not yet supported"):
        lower_fence(_fence(), scattered, ids, 1, False, None)


@proc
def uses_split_barrier(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            bar: barrier @ CudaMbarrier
            for t in cuda_threads(0, 32):
                x[task * 32 + t] = 0.0
            Arrive(cuda_in_order, 1) >> bar
            Await(bar, cuda_in_order, ~0)


def test_self_synchronizing_mbarrier_golden():
    _, _, cu, _ = sl.compile_procs_to_strings([uses_split_barrier], "sb")
    text = device_part(cu)
    assert "spork_mbar_init(&bar_f[i], 1u)" in text and "spork_mbar_arrive(&bar_f[" in text
    check_golden("uses_split_barrier", text)


def test_a_warp_arrives_once_on_an_mbarrier():
    info = next(iter(sl.analyze(uses_split_barrier).barriers.values()))
    arrive = next(u for u in info.uses if u.spec.is_arrive)
    assert (arrive.thread_count, arrive.arrivals, info.forward_arrivals) == (32, 1, 1)
    assert split_sync_lines(info, arrive.stmt, "0") == [
        "__syncwarp();",
        "if (threadIdx.x % 32 == 0) { spork_mbar_arrive(&bar_f[(0) * 1 + bar_fa[0] % 1u]); }",
        "++bar_fa[0];",
    ]


def test_events_lower_to_host_calls_on_the_library_stream():
    from event_two_stage import event_two_stage

    c, _, cu, cuh = sl.compile_procs_to_strings([event_two_stage], "ev")
    assert 'extern "C" void *ev_stream(void)' in cu and "ev_stream(void);" in cuh
    launch = c.index("event_two_stage_device0_launch((n)")
    record = c.index("cudaEventRecord(event_two_stage_launched[(r)], (cudaStream_t) ev_stream())")
    wait = c.index("cudaStreamWaitEvent((cudaStream_t) ev_stream(), event_two_stage_launched[(r)], 0)")
    sync = c.index("ev_record_error((int) cudaEventSynchronize(event_two_stage_done[0]));")
    destroy = c.index("cudaEventDestroy(event_two_stage_done[i])")
    assert launch < record < wait < sync < destroy


@proc
def calls_then_waits(n: size, x: f32[n] @ CudaGmemLinear, y: f32[n] @ CudaGmemLinear):
    assert n % 128 == 0
    done: barrier @ CudaEvent
    vec_add(n, x, y)
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, n / 128):
            for t in cuda_threads(0, 128):
                y[task * 128 + t] += x[task * 128 + t]
    Arrive(cuda_in_order, 1) >> done
    Await(done, cpu_in_order, 0)


def test_rewriting_a_callee_keeps_the_callers_names():
    c, _, _, _ = sl.compile_procs_to_strings([calls_then_waits], "cw")
    body = c[c.index("void calls_then_waits(") :]
    assert "vec_add(ctxt,n,x,y);" in body and "calls_then_waits_device0_launch((n)" in body
    assert "cw_record_error((int) cudaEventSynchronize(calls_then_waits_done[0]));" in body


@proc
def dram_in_kernel(n: size, x: f32[n] @ DRAM):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            for t in cuda_threads(0, 32):
                x[task * 32 + t] = 0.0


def test_host_memory_in_device_code_is_rejected():
    with pytest.raises(sl.TimelineError, match="DRAM is CPU memory: give device code CudaGmemLinear data"):
        sl.compile_procs_to_strings([dram_in_kernel], "dk")


@proc
def smem_of_runtime_size(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            tile: f32[n] @ CudaSmemLinear  # error here
            for t in cuda_threads(0, 32):
                tile[t] = x[task * 32 + t]
            Fence(cuda_in_order, cuda_in_order)


def test_a_memory_that_cannot_lower_an_allocation_is_a_codegen_error_at_the_users_line():
    """The memories refuse shapes they cannot lower with exo's MemGenError; the user gets a CodegenError
    at the allocation, with no traceback through exo's compiler."""
    with pytest.raises(sl.CodegenError, match="needs a constant shape, got \\[n\\]") as info:
        sl.compile_procs_to_strings([smem_of_runtime_size], "rs")
    src = Path(__file__).read_text().splitlines()
    line = 1 + next(i for i, text in enumerate(src) if text.endswith("@ CudaSmemLinear  # error here"))
    assert (info.value.filename, info.value.lineno) == (__file__, line)
    assert not [f for f in traceback.extract_tb(info.value.__traceback__) if "/exo/" in f.filename]


@proc
def smem_over_sm80(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            row: f32[32] @ CudaSmemLinear
            tile: f32[32, 1360] @ CudaSmemLinear  # 170 KiB: over sm_80's 163, under sm_90's 227
            for t in cuda_threads(0, 32):
                row[t] = x[task * 32 + t]
                tile[t, 0] = row[t]
            Fence(cuda_in_order, cuda_in_order)


@proc
def smem_over_every_target(n: size, x: f32[n] @ CudaGmemLinear):
    assert n % 32 == 0
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, n / 32):
            tile: f32[32, 2048] @ CudaSmemLinear  # 256 KiB
            for t in cuda_threads(0, 32):
                tile[t, 0] = x[task * 32 + t]
            Fence(cuda_in_order, cuda_in_order)


def _line(text: str) -> int:
    return 1 + Path(__file__).read_text().splitlines().index(text)


def test_shared_memory_over_the_per_cta_limit_is_a_codegen_error_at_the_largest_allocation():
    """A kernel whose CTA needs more shared memory than its target gives would fail only at launch. Without
    arch= the limit is sm_90's (no target gives more); the error names the total, the limit, and where the bytes
    go, at the largest allocation's line."""
    with pytest.raises(sl.CodegenError) as e:
        sl.compile_procs_to_strings([smem_over_every_target], "big")
    tile = _line("            tile: f32[32, 2048] @ CudaSmemLinear  # 256 KiB")
    assert (e.value.filename, e.value.lineno) == (__file__, tile)
    assert e.value.message == (
        f"the device function at line {tile - 2} needs 262144 bytes of shared memory per CTA, over the 232448 bytes "
        "(227 KiB) one CTA may use on sm_90 (no arch given: the most any target gives one CTA; pass arch= to check a "
        f"smaller target's): tile 262144 bytes (line {tile}); shrink the largest (fewer ring stages, smaller tiles)"
    )
    assert {Path(f.filename).name for f in traceback.extract_tb(e.value.__traceback__)} == {"test_codegen.py", "errors.py"}


@pytest.mark.parametrize("arch, limit", [("sm_80", 166912), ("sm_86", 101376)])
def test_the_shared_memory_limit_is_the_targets(arch, limit):
    """170 KiB fits sm_90 (and any target, so no arch=) but not sm_80's 163 KiB or sm_86's 99 KiB."""
    sl.compile_procs_to_strings([smem_over_sm80], "k")
    sl.compile_procs_to_strings([smem_over_sm80], "k", arch="sm_90a")
    with pytest.raises(sl.CodegenError) as e:
        sl.compile_procs_to_strings([smem_over_sm80], "k", arch=arch)
    row = _line("            row: f32[32] @ CudaSmemLinear")
    tile = _line("            tile: f32[32, 1360] @ CudaSmemLinear  # 170 KiB: over sm_80's 163, under sm_90's 227")
    assert e.value.lineno == tile
    assert (f"needs 174208 bytes of shared memory per CTA, over the {limit} bytes ({limit // 1024} KiB) one CTA may "
            f"use on {arch} (the arch built for): tile 174080 bytes (line {tile}), row 128 bytes (line {row});") in e.value.message


def test_api_misuse_says_what_to_write():
    with pytest.raises(TypeError, match=r"write compile_procs_to_strings\(\[p\], ...\)"):
        sl.compile_procs_to_strings(vec_add)
    with pytest.raises(sl.CodegenError, match="arch must look like sm_80 or sm_90a, got 80"):  # was re's TypeError
        sl.compile_procs_to_strings([vec_add], arch=80)
    with pytest.raises(TypeError, match="analyze takes a proc .*, not function"):
        sl.analyze(lambda: None)


def test_two_procs_of_one_name_are_refused_at_the_second():
    """A proc and a scheduled version of it keep one name until `rename`: exo's compiler raised a bare TypeError
    ("multiple procs named vec_add") from its own frames."""
    from vec_add import vec_add_wide

    from spork_lab.scheduling import rename

    other = rename(vec_add_wide, "vec_add")
    with pytest.raises(sl.CodegenError, match=r"two different procs are named vec_add .* rename\(p, \"vec_add_gpu\"\)") as e:
        sl.compile_procs_to_strings([vec_add, other])
    assert (e.value.filename, e.value.lineno) == (other._loopir_proc.srcinfo.filename, other._loopir_proc.srcinfo.lineno)
    sl.compile_procs_to_strings([vec_add, vec_add])  # the same proc twice is one function


def test_names_the_generated_code_cannot_declare_are_refused_at_the_declaration():
    """exo writes names unchanged: a buffer `new` was `float *new = ...` in the .cu, which nvcc rejects."""
    @proc
    def keyword_names(n: size, x: f32[n] @ CudaGmemLinear):
        assert n % 32 == 0
        with CudaDeviceFunction(blockDim=32):
            for task in cuda_tasks(0, n / 32):
                new: f32[32] @ CudaSmemLinear
                for t in cuda_threads(0, 32):
                    new[t] = x[32 * task + t]

    with pytest.raises(sl.CodegenError, match="'new' is a C/C.. keyword or a CUDA built-in.*rename it") as e:
        sl.compile_procs_to_strings([keyword_names])
    assert (e.value.filename, e.value.lineno) == (__file__, keyword_names.find("new : _")._impl._node.srcinfo.lineno)


def test_names_the_generated_code_declares_are_refused():
    """An iterator named exo_thread compiled to `const int exo_thread = __shfl_sync(..., exo_thread / 32, 0)`, which
    reads itself (nvcc only warns), and a buffer bar_f took the place of barrier bar's mbarriers (audit E, S2)."""

    @proc
    def generated_name(n: size, x: f32[n, 128] @ CudaGmemLinear):
        with CudaDeviceFunction(blockDim=128):
            for task in cuda_tasks(0, n):
                for exo_thread in cuda_threads(0, 4, unit=cuda_warp):
                    for t in cuda_threads(0, 32):
                        x[task, 32 * exo_thread + t] = 0.0

    @proc
    def barrier_name(n: size, x: f32[n, 32] @ CudaGmemLinear):
        with CudaDeviceFunction(blockDim=32):
            for task in cuda_tasks(0, n):
                bar_f: f32[32] @ CudaSmemLinear
                bar: barrier @ CudaMbarrier
                for t in cuda_threads(0, 32):
                    bar_f[t] = x[task, t]
                Arrive(cuda_in_order, 1) >> bar
                Await(bar, cuda_in_order, ~0)
                for t in cuda_threads(0, 32):
                    x[task, t] = bar_f[t]
                Fence(cuda_in_order, cuda_in_order)

    with pytest.raises(sl.CodegenError, match="'exo_thread' is a name the generated code declares itself") as e:
        sl.compile_procs_to_strings([generated_name])
    assert e.value.lineno == generated_name.find_loop("exo_thread")._impl._node.srcinfo.lineno
    with pytest.raises(sl.CodegenError, match="'bar_f' is a name the generated code declares itself .for the barrier bar"):
        sl.compile_procs_to_strings([barrier_name])


def test_proc_names_the_generated_code_uses_are_refused():
    """A proc named main, or like another proc's kernel or launcher (`vec_add_device0_launch` beside vec_add), gave
    gcc's error on the generated C, or exo's bare TypeError ("multiple procs named ..."; audit E, I5)."""
    from spork_lab.scheduling import rename

    with pytest.raises(sl.CodegenError, match="'main' is the C entry point's name, so it cannot name a proc") as e:
        sl.compile_procs_to_strings([rename(vec_add, "main")])
    assert e.value.filename == vec_add._loopir_proc.srcinfo.filename
    with pytest.raises(sl.CodegenError, match="'spork_add' is a name the generated code keeps for its functions"):
        sl.compile_procs_to_strings([rename(vec_add, "spork_add")])
    for name in ("vec_add_device0", "vec_add_device0_launch"):
        with pytest.raises(sl.CodegenError, match=f"'{name}' is a name the generated code gives a kernel or launcher "
                                                  "of proc vec_add: rename this proc"):
            sl.compile_procs_to_strings([vec_add, rename(vec_add, name)])
    sl.compile_procs_to_strings([rename(vec_add, "vec_add_device0")])  # alone, nothing clashes
