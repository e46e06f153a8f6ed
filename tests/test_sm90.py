"""Sm90a on CPU: tensor maps, TMA with trailing mbarriers, wgmma, clusters; their lowering and their static errors."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import spork_lab as sl
from spork_lab import proc
from spork_lab.core.tensor_maps import TensorMapSpec
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from sm90_tma_wgmma import sm90_tma_wgmma  # noqa: E402

SOURCE = str(sm90_tma_wgmma)


def _variant(old: str, new: str):
    """The example with one piece of its source replaced (parsed as the user would write it)."""
    assert old in SOURCE
    return sl.parse_source(SOURCE.replace(old, new, 1))


def _cu(p) -> str:
    return sl.compile_procs_to_strings([p], "k", "sm_90a")[2]


def test_tensor_map_spec_is_checked():
    assert Sm90_tensorMap(128, 64, 32) == TensorMapSpec(128, (64, 32))
    with pytest.raises(ValueError, match="swizzle must be one of 0, 32, 64, 128"):
        Sm90_tensorMap(100, 64, 32)
    with pytest.raises(ValueError, match=r"box is 1 to 5 ints in \[1, 256\]"):
        Sm90_tensorMap(128, 512, 32)


def test_swizzled_memory_is_one_class_per_swizzle_and_prints_as_written():
    assert Sm90_SmemSwizzled(128) is Sm90_SmemSwizzled(128)
    assert Sm90_SmemSwizzled(128).name() == "Sm90_SmemSwizzled(128)"
    assert "@ Sm90_SmemSwizzled(128)" in SOURCE and "@ Sm90_tensorMap(128, 64, 32)" in SOURCE
    assert ">> bar" in SOURCE and "box=(64, 32)" in SOURCE


def test_tma_and_wgmma_lowering():
    cu = _cu(sm90_tma_wgmma)
    # the host encodes each tensor map with the driver entry point, innermost dimension first
    assert "cudaGetDriverEntryPointByVersion(\"cuTensorMapEncodeTiled\"" in cu
    assert "spork_encode_tensor_map(&A_tm_map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, A_tm_data, d, s, b, (int) sizeof(float), 128)" in cu
    assert "const __grid_constant__ CUtensorMap A_tm" in cu
    # TMA coordinates are the window's lower bounds, innermost first; both loads complete on the phase's slot
    loads = re.findall(r'cp\.async\.bulk\.tensor\.2d[^;]*;".*?"r"\(\(int\) \(([^)]*)\)\), "r"\(\(int\) \(([^)]*)\)\)', cu)
    assert loads == [("32 * k", "64 * mt"), ("32 * k", "128 * nt")]
    assert cu.count("spork_sm90_smem(&spork_bar_f[(0) * 1 + spork_bar_fa[0] % 1u])") == 2
    # the Arrive expects the bytes of both loads: (64 + 128) rows of 128 bytes
    assert "spork_mbar_arrive_expect_tx(&spork_bar_f[(0) * 1 + spork_bar_fa[0] % 1u], 24576u);" in cu
    # TMA writes and wgmma reads are both async proxy: no proxy fence after the await
    await_at = cu.index("spork_mbar_wait(&spork_bar_f")
    assert "fence.proxy.async" not in cu[await_at : cu.index("wgmma.fence", await_at)]
    assert "spork_wgmma_m64n128k8_tf32_ss(&D[0], spork_wgmma_desc(&A_s[8 * kk], 1u, 128u), spork_wgmma_desc(&B_s[8 * kk], 1u, 128u));" in cu
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in cu
    # swizzled tiles sit on 1024-byte boundaries
    assert "% 1024u)) % 1024u);" in cu and "exo_smem + 8192" in cu


def test_tma_load_needs_a_trailing_barrier():
    with pytest.raises(sl.SyncError, match=r"completes on an mbarrier: write `Sm90_copy_tensor_to_smem_swizzled_2f32\(\.\.\.\) >> bar"):
        sl.analyze(_variant("box=(64, 32)) >> bar", "box=(64, 32))"))


def test_loads_must_be_closed_by_an_arrive_in_their_block():
    p = _variant("                        Arrive(tma_to_smem_async, 1) >> bar\n", "")
    with pytest.raises(sl.SporkError, match="no Arrive on bar follows it in this block"):
        sl.analyze(p)


def test_the_arrive_closing_loads_orders_tma():
    p = _variant("Arrive(tma_to_smem_async, 1) >> bar", "Arrive(cuda_in_order, 1) >> bar")
    with pytest.raises(sl.SyncError, match="first sync-tl must include tma_to_smem_async"):
        sl.analyze(p)


def test_only_tma_takes_a_trailing_barrier():
    with pytest.raises(sl.SporkSyntaxError, match="does not complete on a barrier"):
        _variant("Sm90_zero_scale_d_f32(D, N=128)", "Sm90_zero_scale_d_f32(D, N=128) >> bar")


def test_tma_reads_tensor_maps_only():
    p = _variant("A_tm[64 * mt : 64 * mt + 64, 32 * k : 32 * k + 32]".replace(" : ", ":"), "A[64 * mt:64 * mt + 64, 32 * k:32 * k + 32]")
    with pytest.raises(sl.TimelineError, match="src must be a window of a tensor map"):
        sl.analyze(p)


@pytest.mark.parametrize("operand, error, message", [
    ("B[0:128, 8 * kk:8 * kk + 8]", sl.MemoryMismatchError, "B is in CudaGmemLinear, but Sm90_mma_async_tf32 takes B in "
                                                            "Sm90_SmemSwizzled"),
    ("B_tm[0:128, 8 * kk:8 * kk + 8]", sl.TimelineError, "B_tm is a tensor map: only TMA instrs"),
])
def test_a_wgmma_operand_outside_shared_memory_is_refused_at_its_line(operand, error, message):
    """The descriptor's layout check ran before the memory check and met a row pitch of no constant (a
    TypeError out of sl.analyze: audit of session 38)."""
    p = _variant("B_s[0:128, 8 * kk:8 * kk + 8],", f"{operand},")
    with pytest.raises(error, match=re.escape(message)) as e:
        sl.analyze(p)
    assert e.value.lineno == next(i for i, line in enumerate(str(p).splitlines(), 1) if "Sm90_mma_async_tf32" in line)


def test_a_box_may_be_written_as_a_list():
    """`box=[64, 32]` raised "unhashable type: 'list'" at the call (audit of session 38)."""
    p = _variant("box=(64, 32)", "box=[64, 32]")
    assert str(p) == str(sm90_tma_wgmma) and sl.analyze(p)


def test_box_of_the_copy_must_match_its_tensor_map():
    """Only code generation refused it: sl.analyze and sync_check passed it, the checker counting the instr's bytes
    (audit G, G1)."""
    p = _variant("A_tm = A[0:M, 0:K] @ Sm90_tensorMap(128, 64, 32)", "A_tm = A[0:M, 0:K] @ Sm90_tensorMap(128, 32, 32)")
    with pytest.raises(sl.MemoryMismatchError, match=r"needs a tensor map made with Sm90_tensorMap\(128, 64, 32\)"):
        sl.analyze(p)


@proc
def tma_load_of_a_4d_map(T: size, x: f32[T, 8, 64, 32] @ CudaGmemLinear, y: f32[T, 8, 64, 32] @ CudaGmemLinear):
    x_tm = x[:, :, :, :] @ Sm90_tensorMap(0, 64, 32)
    with CudaDeviceFunction(blockDim=128):
        for task in cuda_tasks(0, T):
            for it in seq(0, 8):
                tile: f32[64, 32] @ CudaSmemLinear
                bar: barrier @ CudaMbarrier
                for t in cuda_threads(0, 1):
                    with CudaAsync(tma_to_smem_async_instr):
                        Sm90_copy_tensor_to_smem_linear_2f32(tile, x_tm[task, it, :, :], box=(64, 32)) >> bar
                    Arrive(tma_to_smem_async, 1) >> bar
                Await(bar, cuda_in_order, ~0)
                for t in cuda_threads(0, 128):
                    for q in seq(0, 16):
                        y[task, it, t / 2, 16 * (t % 2) + q] = tile[t / 2, 16 * (t % 2) + q]
                Fence(cuda_in_order, cuda_in_order)


@proc
def tma_store_to_a_3d_map(M: size, A: f32[M, 32] @ CudaGmemLinear, C: f32[M, 2, 32] @ CudaGmemLinear):
    assert M % 64 == 0
    C_tm = C[:, :, :] @ Sm90_tensorMap(0, 64, 32)
    with CudaDeviceFunction(blockDim=128):
        for mt in cuda_tasks(0, M / 64):
            t_s: f32[64, 32] @ CudaSmemLinear
            cg: barrier @ CudaCommitGroup
            for t in cuda_threads(0, 1):
                for i in seq(0, 64):
                    for j in seq(0, 32):
                        t_s[i, j] = A[64 * mt + i, j]
                Fence(cuda_in_order, tma_to_gmem_async)
                with CudaAsync(tma_to_gmem_async_instr):
                    Sm90_copy_tensor_to_gmem_linear_2f32(C_tm[64 * mt:64 * mt + 64, 1, :], t_s, box=(64, 32))
                Arrive(tma_to_gmem_async, 1) >> cg
                Await(cg, cuda_in_order, 0)
            Fence(cuda_in_order, cuda_in_order)


@pytest.mark.parametrize("p, name, rank", [(tma_load_of_a_4d_map, "x_tm", 4), (tma_store_to_a_3d_map, "C_tm", 3)])
def test_a_2d_tma_copy_of_a_map_of_more_dimensions_is_refused_at_its_line(p, name, rank):
    """sync_check passed them, then code generation failed with a ValueError from inside spork_lab (new-user
    walkthrough of session 39)."""
    with pytest.raises(sl.MemoryMismatchError, match=f"box of a 2-D tensor map, but {name} maps {rank} dimensions") as e:
        sl.analyze(p)
    assert e.value.lineno == next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
                                  if f"({'tile' if rank == 4 else name}" in line and "_2f32(" in line)


@pytest.mark.parametrize("copy", [Sm90_copy_tensor_to_gmem_linear_2f32, Sm90_copy_tensor_to_smem_linear_2f32,
                                  Sm90_reduce_tensor_to_gmem_linear_2f16])
def test_a_tma_box_has_rows_of_16_byte_multiples(copy):
    """A box of 8-byte rows passed sl.sync_check and failed the launch: cuTensorMapEncodeTiled refuses a box whose
    rows are not a multiple of 16 bytes (audit 33)."""
    with pytest.raises(sl.SporkTypeError, match="a TMA box's rows are a multiple of 16 bytes, got 2 x") as e:
        copy.instantiate(box=(8, 2))
    assert e.value.filename == __file__  # the caller's line (a bare ValueError from spork_lab before: audit 33)
    assert copy.instantiate(box=(8, 8)).name().endswith("_8x8")


def test_wgmma_fence_is_a_warpgroup_instruction():
    assert 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");' in _cu(sm90_tma_wgmma)


def test_setmaxnreg_budget_must_fit_the_ctas_registers():
    """384 threads start with 168 registers each (64512 in all, not the SM's 65536): 48 / 232 / 232 hung the H200
    at the second consumer warpgroup's setmaxnreg.inc (session 19's audit); 40 / 232 / 232 fits exactly."""
    from spork_lab.analysis.config import check_device_function

    producer = CudaWarpConfig("producer", 4, setmaxnreg=40)
    check_device_function(CudaDeviceFunction(warp_config=[producer, CudaWarpConfig("consumer", 8, setmaxnreg=232)]), None)
    for warps, need in [([producer, CudaWarpConfig("consumer", 8, setmaxnreg=240)], 66560),
                        ([CudaWarpConfig("producer", 4, setmaxnreg=48), CudaWarpConfig("consumer", 8, setmaxnreg=232)], 65536)]:
        with pytest.raises(sl.SporkError, match=f"need {need} registers, more than the 64512 the CTA holds at launch"):
            check_device_function(CudaDeviceFunction(warp_config=warps), None)


def test_every_warp_of_a_warpgroup_runs_one_setmaxnreg():
    """Warpgroup 0 holds two warp names: each name's branch had its own setmaxnreg, so its warps ran two different
    instructions, where PTX wants the same one from every warp of the warpgroup. Theirs is now one instruction
    before the branches; a name with whole warpgroups keeps its own in its branch (ptxas budgets the code after it).
    (256 threads start with 255 registers each, so 232 is a decrease.)"""
    src = """
def split_warpgroup(n: size, x: f32[n, 128] @ CudaGmemLinear, y: f32[n, 128] @ CudaGmemLinear):
    with CudaDeviceFunction(warp_config=[CudaWarpConfig("load", 2, setmaxnreg=40), CudaWarpConfig("store", 2, setmaxnreg=40),
                                         CudaWarpConfig("math", 4, setmaxnreg=232)]):
        for task in cuda_tasks(0, n):
            with CudaWarps(name="math"):
                for t in cuda_threads(0, 128):
                    y[task, t] = x[task, t] + 1.0
"""
    cu = _cu(sl.parse_source(src))
    before = cu[: cu.index("// warps named 'load'")]
    # warpgroup 0: no `>= 0` test (threadIdx.x is unsigned, and nvcc warns of a pointless comparison)
    assert re.findall(r"if \((?:threadIdx.x / 128 >= (\d) && )?threadIdx.x / 128 < (\d)\) asm volatile\(\"setmaxnreg\."
                      r"(\w+)\.sync\.aligned\.u32 (\d+);", before) == [("", "1", "dec", "40")]
    math = cu[cu.index("// warps named 'math'") :]
    assert cu.count("setmaxnreg.") == 2 and 'asm volatile("setmaxnreg.dec.sync.aligned.u32 232;");' in math


def _producer_wait(cu: str) -> str:
    """The producer's ReverseAwait on the ring and what follows it up to its first TMA load."""
    at = cu.index("spork_mbar_wait(&spork_ring_r")
    return cu[at : cu.index("cp.async.bulk.tensor", at)]


def test_the_staged_tma_store_epilogue_passes_and_its_waits_are_checked():
    """The persistent GEMM storing its tiles by TMA from two staging slots per warpgroup (`tma_store=2`, benchmarks
    run 25): sync_check passes it; a chunk waiting one store less (lag 2 of 2 slots) overwrites a slot a store
    still reads (WAR), and without the drain the last stores read shared memory the task frees."""
    from sm90_gemm import gemm_source

    src, consts = gemm_source("f16", out="f16", G=2, Q=2, tma_store=2)
    check = lambda text: sl.sync_check(sl.parse_source(text, func_locals=consts), M=1024, N=1024, K=256)  # noqa: E731
    assert check(src).hazards == []
    lag, drain = "Await(cs, cuda_in_order, SL - 1)", "                Await(cs, cuda_in_order, 0)\n"
    assert lag in src and drain in src
    assert {h.kind for h in check(src.replace(lag, "Await(cs, cuda_in_order, SL)")).hazards} == {"WAR"}
    assert "FREE" in {h.kind for h in check(src.replace(drain, "")).hazards}


def test_a_tma_store_epilogue_that_would_leave_columns_unstored_is_refused():
    """BN = 96 with C f16 is one 64-column store chunk and a half: the epilogue's `for h in seq(0, BN / NC)` would
    store columns 0-63 only (sequentially too, so no checker sees it), so gemm_source refuses it; BN = 128 is two."""
    from sm90_gemm import gemm_source

    with pytest.raises(ValueError, match="BN = 96 is not a multiple of the 64-column chunks"):
        gemm_source("f16", BN=96, out="f16", Q=1, tma_store=1)
    assert "for h in seq(0, BN / NC)" in gemm_source("f16", BN=128, out="f16", Q=1, tma_store=1)[0]


def test_release_after_wgmma_reads_needs_no_proxy_fence_but_generic_writes_do():
    """The consumers release a stage that only wgmma (async proxy) read: the producer's next TMA
    write needs no fence.proxy.async. Once a releasing thread also writes shared memory with
    ordinary stores, the await is followed by the fence, over the cluster's shared memory only: no generic
    access reaches global memory under a tensor map (the fence over every state space waits like a GPU-scope
    membar, 15% of the GEMM: sm90_gemm_notes.md, run 25; test_sync_tma has the other side)."""
    from sm90_gemm import gemm_source, make_gemm

    assert "fence.proxy.async" not in _producer_wait(_cu(make_gemm("tf32", CL=2, G=1)))
    src, consts = gemm_source("tf32", CL=2, G=1)
    arrive = "                                ReverseArrive(cuda_in_order, 1) >> ring[:]\n"
    ring = "                    ring: barrier[CL] @ CudaMbarrier\n"
    assert arrive in src and ring in src
    src = src.replace(ring, ring + "                    flag: f32[CL, 8] @ CudaSmemLinear\n").replace(
        arrive,
        "                                for t in cuda_threads(0, 1):\n"
        "                                    flag[cta, 0] = 1.0\n" + arrive,
    )
    written = sl.parse_source(src, func_locals=consts)
    assert 'asm volatile("fence.proxy.async.shared::cluster;" ::: "memory");' in _producer_wait(_cu(written))
    assert "fence.proxy.async;" not in _cu(written)


def test_a_swizzled_operand_moved_to_linear_smem_is_an_error_at_the_users_line():
    """exo checks call-argument memories only while generating code, with a TypeError; we check them in analysis."""
    import sm90_gemm
    from exo.core.LoopIR import LoopIR

    from spork_lab.scheduling import set_memory
    from spork_lab.core.ir import stmt_cursors

    p = sm90_gemm.make_gemm("tf32")
    swizzled = next(c for c in stmt_cursors(p)
                    if isinstance(c._impl._node, LoopIR.Alloc) and c._impl._node.mem is Sm90_SmemSwizzled(128))
    with pytest.raises(sl.MemoryMismatchError, match=r"is in CudaSmemLinear, but Sm90_copy_tensor_to_smem") as e:
        sl.analyze(set_memory(p, swizzled, CudaSmemLinear))
    assert Path(e.value.filename).name == "sm90_gemm.py"


def test_simplify_keeps_the_gemm_checkable():
    """exo's simplify writes `ring[cta:cta + 1]` as `ring[cta:1 + cta]`; it is still one barrier."""
    import sm90_gemm

    from spork_lab.scheduling import simplify

    sl.analyze(simplify(sm90_gemm.make_gemm("tf32")))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_the_bf16_gemm_host_code_compiles(tmp_path):
    """exo's window structs have no bf16 entry; the tensor-map windows of a bf16 GEMM need one."""
    import sm90_gemm

    c, h, _, _ = sl.compile_procs_to_strings([sm90_gemm.make_gemm("bf16")], "gemm_bf16")
    (tmp_path / "gemm_bf16.c").write_text(c)
    (tmp_path / "gemm_bf16.h").write_text(h)
    done = subprocess.run(["gcc", "-c", "-Wall", "-Werror", "gemm_bf16.c"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("how", ["make_gemm", "scheduled", "stepwise"])
def test_the_gemm_in_clusters_of_one_cta_is_checked_and_compiled(how):
    """CL=1: no multicast and no cluster rank (each CTA loads its whole B tile and releases its own ring), by
    each of the example's three routes; sync_check finds nothing and the kernel compiles for sm_90a."""
    import sm90_gemm

    cfg = sm90_gemm.Config("tf32", CL=1, G=1, Q=2)
    p = {"make_gemm": lambda: sm90_gemm.make_gemm("tf32", CL=1, G=1),
         "scheduled": lambda: sm90_gemm.scheduled_gemm("tf32", CL=1, G=1),
         "stepwise": lambda: sm90_gemm.schedule(sm90_gemm.naive(cfg), cfg)}[how]()  # fmt: skip
    assert sl.sync_check(p, M=256, N=512, K=256).hazards == []
    cu = _cu(p)
    kernel = cu[cu.index("__global__") :]
    assert "cp.async.bulk.tensor" in kernel
    for cluster_only in ("multicast", "spork_mbar_arrive_remote(", "this_cluster()", "barrier.cluster"):
        assert cluster_only not in kernel


def test_a_multicast_barrier_slice_over_one_cta_names_both_uses():
    """make_gemm's clusters-of-two text with CL=1: `>> ring[:]` slices one CTA, a point, where the other uses
    index the ring by the CTA's iterator; the error says where each is and why the slice is not a multicast."""
    import sm90_gemm

    src, _ = sm90_gemm.gemm_source("tf32", CL=2, G=1)
    _, consts = sm90_gemm.gemm_source("tf32", CL=1, G=1)
    p = sl.parse_source(src, filename=sm90_gemm.__file__, first_line=sm90_gemm._FIRST_LINE, func_locals=consts)
    lines = Path(sm90_gemm.__file__).read_text().splitlines()
    first = 1 + next(i for i, s in enumerate(lines) if "ReverseAwait(ring[cta]" in s)
    multicast = 1 + next(i for i, s in enumerate(lines) if s.strip().startswith("Sm90_multicast_copy_tensor_to_smem"))
    with pytest.raises(sl.SyncError, match=rf"this use indexes so dimensions \[\], the use at line {first} dimensions "
                                           r"\[0\]; dimension 0 has extent 1, so a slice `:` of it is the one point 0") as e:
        sl.analyze(p)
    assert (e.value.filename, e.value.lineno) == (sm90_gemm.__file__, multicast)


def test_a_gemm_ring_over_the_shared_memory_limit_is_refused_when_compiled():
    """make_gemm(S=6): six 48 KiB ring slots do not fit sm_90's 227 KiB; the error is at B_s's line and says where
    the bytes go. Four (the default) fit."""
    import sm90_gemm

    _cu(sm90_gemm.make_gemm())
    with pytest.raises(sl.CodegenError) as e:
        sl.compile_procs_to_strings([sm90_gemm.make_gemm(S=6)], "gemm_s6")
    lines = Path(sm90_gemm.__file__).read_text().splitlines()
    a_s, b_s, fn = (1 + next(i for i, s in enumerate(lines) if s.strip().startswith(text))
                    for text in ("A_s: {t}[CL, S", "B_s: {t}[CL, S", "with CudaDeviceFunction(clusterDim=CL"))
    assert (e.value.filename, e.value.lineno) == (sm90_gemm.__file__, b_s)
    assert e.value.message == (
        f"the device function at line {fn} needs 296024 bytes of shared memory per CTA, over the 232448 bytes (227 KiB) "
        "one CTA may use on sm_90 (no arch given: the most any target gives one CTA; pass arch= to check a smaller "
        f"target's): B_s 196608 bytes (line {b_s}), A_s 98304 bytes (line {a_s}), mbarriers 88 bytes, alignment 1024 "
        "bytes; shrink the largest (fewer ring stages, smaller tiles)"
    )


# ---- partial tiles: clipped TMA loads and accumulator stores ----


def _clip_gemm_text(dt: str = "tf32", **kw) -> tuple:
    import sm90_gemm

    return sm90_gemm.gemm_source(dt, CL=2, G=1, clip=True, **kw)


def _parse_clip(src: str, consts: dict):
    import sm90_gemm

    return sl.parse_source(src, filename=sm90_gemm.__file__, first_line=sm90_gemm._FIRST_LINE, func_locals=consts)


def test_the_clipped_gemm_is_checked_at_sizes_no_tile_divides():
    """Partial tiles in M, N and K pass; the checker reads the stores' guards: two warpgroups storing overlapping
    rows (64 * wg -> 32 * wg, both within C) is a WAW on C, and rows past C's edge are not accessed at all."""
    src, consts = _clip_gemm_text()
    assert sl.sync_check(_parse_clip(src, consts), M=300, N=500, K=200).hazards == []
    overlap = src.replace("cta) + 64 * wg, BN * nt,", "cta) + 32 * wg, BN * nt,")
    assert overlap != src
    report = sl.sync_check(_parse_clip(overlap, consts), M=300, N=500, K=200)
    assert [h.kind for h in report.hazards][:1] == ["WAW"] and report.hazards[0].buffer == "C"


def test_the_clipped_gemm_skips_the_tasks_past_m():
    """Where M is not a multiple of CM the last raster group is cut short: each warp role's task loop guards off a
    task whose cluster's rows all lie past M (it would run its whole K loop on zeros)."""
    import sm90_gemm

    lines = _cu(sm90_gemm.make_gemm("f16", CL=2, G=8, clip=True)).splitlines()
    after_mi = [lines[n + 1].strip() for n, line in enumerate(lines) if "const int mi = exo_task %" in line]
    assert len(after_mi) >= 2 and set(after_mi) == {"if (128 * 2 * (8 * mg + mi) < M) {"}, after_mi


def test_a_guarded_instr_access_is_recorded_under_its_guard():
    """instr_accesses: the clipped load reads `src` only inside the tensor (its `if`) and writes every `dst`
    element (both branches), so the write carries no guard."""
    from spork_lab.sync.lower import instr_accesses

    load = Sm90_copy_tensor_clipped_to_smem_swizzled_2f32.instantiate(box=(64, 32))
    reads, writes = instr_accesses(load._loopir_proc.body)
    assert (str(reads[0]), str(writes[0])) == ("src", "dst")
    assert [str(c) for c, holds in reads[4] if holds] == ["r0 + r < n and c0 + c < k"]
    assert writes[4] == ()


def test_clipped_tma_and_store_lowering():
    """The clipped load's coordinates are (c0, r0); the store takes the unclipped path for a whole aligned tile,
    else one guarded element at a time."""
    import sm90_gemm

    cu = _cu(sm90_gemm.make_gemm("f16", CL=2, G=1, out="f16", clip=True))
    assert '"r"((int) (64 * k)), "r"((int) (128 * (2 * (1 * mg + mi) + cta))) : "memory");' in cu  # A: (c0, r0)
    assert '"r"((int) (64 * k)), "r"((int) (256 * nt + 128 * cta)) : "memory");' in cu  # B, multicast
    assert "const int exo_count_1 = ((long long) N + 256 - 1) / 256;" in cu  # the last task column is partial (N + 255: 64-bit)
    # the unclipped store writes pairs: the tile's start and the row pitch (2 bytes x sm90_ld) 4-byte aligned
    assert ("if (sm90_r0 + 64 <= sm90_rows && sm90_c0 + 256 <= sm90_cols && "
            "((reinterpret_cast<unsigned long long>(sm90_p) | 2ull * sm90_ld) & 3) == 0)") in cu
    assert ("if (sm90_r0 + sm90_r < sm90_rows && sm90_c0 + sm90_c < sm90_cols) "
            "sm90_p[(long long) sm90_r * sm90_ld + sm90_c] = __float2half_rn(sm90_d[4 * j + e]);") in cu


def test_a_clipped_load_of_a_window_is_a_codegen_error():
    """Zeros past the edge are TMA's only at the tensor map's own edge: the load takes the whole map and its shape."""
    src, consts = _clip_gemm_text()
    short = src.replace("B_tm[0:N, 0:K],", "B_tm[0:N - 1, 0:K],").replace("(N, K, BN * nt", "(N - 1, K, BN * nt")
    short = short.replace("assert K % KA == 0", "assert K % KA == 0\n    assert N >= 2")
    with pytest.raises(sl.CodegenError, match=r"reads the box at \(r0, c0\) of the whole tensor map T, and n, k are T's "
                                              r"shape .*got a window at \(0, 0\) of shape \(N - 1, K\) of a map of "
                                              r"shape \(N, K\)"):
        _cu(_parse_clip(short, consts))


def test_a_clipped_store_into_a_window_that_does_not_start_at_the_origin_is_a_codegen_error():
    """The clipped store takes the whole matrix (its rows and columns are where it clips), at the user's line."""
    import sm90_gemm

    src, consts = _clip_gemm_text()
    shifted = src.replace("C[0:M,", "C[1:M,").replace("(M, N, 128 * (CL", "(M - 1, N, 128 * (CL")
    shifted = shifted.replace("assert K % KA == 0", "assert K % KA == 0\n    assert M >= 2")
    with pytest.raises(sl.CodegenError, match=r"stores into the whole matrix C of shape \(rows, cols\); got a window "
                                              r"at \(1, 0\)") as e:
        _cu(_parse_clip(shifted, consts))
    lines = Path(sm90_gemm.__file__).read_text().splitlines()
    store = 1 + next(i for i, s in enumerate(lines) if s.strip().startswith("Sm90_mma_store_d_row_major_"))
    assert (e.value.filename, e.value.lineno) == (sm90_gemm.__file__, store + 1)  # one line added above it


def test_a_wgmma_operand_whose_rows_are_not_consecutive_swizzle_rows_is_refused_at_its_line():
    """The descriptor holds the operand's first address and its swizzle only: B_s[0:8, 0, :] (the first row of each
    of eight atoms) was read as rows 0-7 of atom 0 (audit of session 33: 407 of 512 elements wrong on an H200)."""
    import procs_wgmma as W
    from procs_sync import line_of

    p = W.wgmma_b_rows_of_atoms
    with pytest.raises(sl.MemoryMismatchError) as info:
        sl.analyze(p)
    err = info.value
    assert err.filename.endswith("procs_wgmma.py") and err.lineno == line_of(p, "Sm90_mma_async_tf32("), str(err)
    assert ("reads B through a wgmma descriptor, which takes its rows to be consecutive rows of B_s, 32 elements "
            "(one 128-byte swizzle row) apart, but the rows of `B_s[0:8, 0, 8 * kk:8 * kk + 8]` are 256 elements "
            "apart in B_s: take its rows from B_s's second-to-last dimension") in err.message, err.message


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("rmem_a", [False, True])
def test_every_wgmma_declares_its_descriptor_operands(dt, rmem_a):
    """A and B (SS), B only (RS: A in registers) are read through descriptors, so checked as such."""
    from spork_lab.core.instrs import instr_info_by_name

    wt = {"f32": "tf32", "f16": "f16", "bf16": "bf16"}[dt]
    p = globals()[f"Sm90_mma_async_{wt}"].instantiate(N=8, rmem_a=rmem_a)
    assert instr_info_by_name(p.name()).smem_desc == ((("B", 16),) if rmem_a else (("A", 16), ("B", 16)))


@pytest.mark.parametrize("a, b", [
    ("A_s[:, 8 * kk : 8 * kk + 8]", "B_s[3, :, 8 * kk : 8 * kk + 8]"),  # the rows of one atom
    ("A_s[:, 4 * kk + 4 : 4 * kk + 12]", "B_s[3, :, 4:12]"),  # K offsets of 16 bytes (correct on an H200)
])
def test_wgmma_operands_of_consecutive_swizzle_rows_pass(a, b):
    import procs_wgmma as W

    assert sl.sync_check(W.wgmma_b_rows_of_atoms_reading(a, b)).ok


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_a_wgmma_operand_starting_between_16_byte_units_is_refused(engine):
    """The descriptor holds the address in 16-byte units: the analysis refuses a start its bounds decide,
    sync_check one an iterator decides."""
    import procs_wgmma as W
    from procs_sync import line_of

    line = line_of(W.wgmma_b_rows_of_atoms, "Sm90_mma_async_tf32(")
    with pytest.raises(sl.MemoryMismatchError, match=r"needs A to start at a multiple of 16 bytes, but "
                                                     r"`A_s\[0:64, 2:10\]` starts 8 bytes past one") as info:
        sl.analyze(W.wgmma_b_rows_of_atoms_reading("A_s[:, 2:10]", "B_s[3, :, 0:8]"))
    assert info.value.lineno == line
    p = W.wgmma_b_rows_of_atoms_reading("A_s[:, 6 * kk : 6 * kk + 8]", "B_s[3, :, 0:8]")
    sl.analyze(p)
    with pytest.raises(sl.SyncError, match="a wgmma's shared-memory operand at 16 bytes") as info:
        sl.sync_check(p, engine=engine)
    assert info.value.lineno == line
