"""The abstract machine on TMA (issue 12 item 5): loads complete only through the mbarriers they trail, with
expect-tx accounting; multicast loads and arrives across a cluster; TMA stores on bulk commit groups; the
free of shared memory that peer CTAs write. Every Sm90 example passes; each error is reported at the user's
line, by both engines (tests/test_sync_engines.py compares them on every proc here and every example)."""

from __future__ import annotations

import re
import sys

import numpy as np
import procs_tma as T
import pytest
from conftest import EXAMPLES_DIR
from gpu_vs_cpu import assert_gpu_matches_cpu
from procs_sync import line_of

import spork_lab as sl
from spork_lab.codegen import compile_procs_to_strings
from spork_lab.sync.checker import ENGINES
from spork_lab.sync.mutants import sync_cursors, without_syncs

sys.path.insert(0, str(EXAMPLES_DIR))

import sm90_gemm  # noqa: E402
import sm90_persistent_store  # noqa: E402
import sm90_rmem_a  # noqa: E402
import sm90_tma_store  # noqa: E402
import sm90_tma_wgmma  # noqa: E402

GEMM_SIZES = dict(M=512, N=768, K=256)


def _gemm_line(text: str) -> int:
    """The line of examples/sm90_gemm.py holding `text` (once)."""
    lines = (EXAMPLES_DIR / "sm90_gemm.py").read_text().splitlines()
    (line,) = [i + 1 for i, s in enumerate(lines) if text in s]
    return line


@pytest.mark.parametrize("p, sizes", [
    (sm90_tma_wgmma.sm90_tma_wgmma, dict(M=128, N=256, K=64)),
    (sm90_rmem_a.sm90_rmem_a, dict(M=128, N=128, K=64)),
    (sm90_tma_store.sm90_tma_store, dict(M=128, N=64)),
    (sm90_persistent_store.sm90_persistent_store, dict(T=16)),
    (sm90_gemm.PROCS[0], GEMM_SIZES),
    (sm90_gemm.make_gemm("f16", CL=2, G=1), GEMM_SIZES),
    (sm90_gemm.make_gemm("f16", G=8, out="f16"), dict(M=2048, N=256, K=128)),
    (sm90_gemm.make_gemm("bf16", BN=128, S=5, CL=2, G=1), GEMM_SIZES),
    (sm90_gemm.make_gemm("f16", S=8, CL=2, G=1, SW=64), GEMM_SIZES),
    (sm90_gemm.make_gemm("f16", out="f16", G=2, Q=2), dict(M=1024, N=1024, K=256)),
    (sm90_gemm.make_gemm("f16", BN=128, CL=2, G=1, Q=2, clip=True), dict(M=300, N=700, K=200)),
    (T.tma_tile_copy, dict(n=16)),
    (T.tma_multicast_halves, {}),
    (T.tma_store_waits, {}),
], ids=lambda v: v.name() if hasattr(v, "name") else "")  # fmt: skip
def test_sm90_programs_pass(p, sizes):
    report = sl.sync_check(p, **sizes)
    assert report.ok and report.engine == "compiled", report


def _only(report, kind: str):
    kinds = [h.kind for h in report.hazards]
    assert kind in kinds, report
    return report.hazards[kinds.index(kind)]


def test_a_wrong_tx_count_is_reported_at_the_await():
    """Only CTA 0 multicasts: its barrier's phase expects its 8 KiB tile twice (once per CTA of the slice) plus
    its own rows, and gets it once; CTA 1's phase expects its rows only and also gets CTA 0's tile."""
    for engine in ENGINES:
        h = _only(sl.sync_check(T.tma_multicast_one_cta, engine=engine), "TX")
        assert h.access.stmt.line == line_of(T.tma_multicast_one_cta, "Await(ring[cta], wgmma_async_smem, ~0)")
        assert "procs_tma.py" in h.access.stmt.file and "Arrive(tma_to_smem_async, 1)" in h.other.stmt.text
        assert "expects 17408 bytes" in h.message and "deliver 9216 bytes" in h.message


def test_data_arrives_only_through_the_barrier_its_load_trails():
    for engine in ENGINES:
        h = sl.sync_check(T.tma_wrong_barrier, engine=engine).hazards[0]
        assert (h.kind, h.buffer, h.index) == ("RAW", "tile", (8, 0))
        assert h.access.stmt.line == line_of(T.tma_wrong_barrier, "dst[i, j] = tile[i, j]")
        assert "tile[8:16, :]" in h.other.stmt.text and ">> bar[1]" in h.other.stmt.text


def test_a_cta_may_not_release_shared_memory_its_peer_still_writes():
    """The multicast destination is written by both CTAs: ending the task with a per-CTA Fence lets a CTA
    exit (or reuse the tile) while its peer's multicast may still land in it: a FREE hazard at the tile. And
    the next task's multicast may land in the peer's ring slot before the peer awaited its phase: a DEADLOCK."""
    for engine in ENGINES:
        h, slot = sl.sync_check(T.tma_multicast_no_cluster_sync, engine=engine).hazards
        assert (h.kind, h.buffer) == ("FREE", "tile") and slot.kind == "DEADLOCK"
        assert "not ordered after the Await of the slot's last arrive in the barrier's previous scope" in slot.message
        assert h.access.stmt.line == line_of(T.tma_multicast_no_cluster_sync, "tile: f32[2, 64, 32]")
        assert "other CTAs of its cluster" in h.message


def test_a_tma_store_reads_its_tile_until_the_bulk_wait():
    for engine in ENGINES:
        (h,) = sl.sync_check(T.tma_store_reuse, engine=engine).hazards
        assert (h.kind, h.buffer) == ("WAR", "t_s")
        assert h.access.stmt.line == line_of(T.tma_store_reuse, "t_s[i, j] = src[i, j]")
        assert "Sm90_copy_tensor_to_gmem_linear_2f32" in h.other.stmt.text


def test_a_fence_completes_the_tma_stores_it_names_by_committing_them_first():
    """PTX's cp.async.bulk.wait_group waits for committed bulk groups only: a Fence whose first sync-tl names the
    TMA store commits the stores issued since the last commit, then waits (run on the GPU below)."""
    for engine in ENGINES:
        assert sl.sync_check(T.tma_store_completed_by_fence, T=3, engine=engine).ok
    cu = compile_procs_to_strings([T.tma_store_completed_by_fence], "fenced", "sm_90a")[2]
    assert re.search(r'"cp\.async\.bulk\.commit_group;".*\n\s*asm volatile\("cp\.async\.bulk\.wait_group 0;"', cu)


def test_a_tma_load_of_global_memory_written_by_ordinary_stores_waits_behind_a_proxy_fence():
    """The consumer's await before a TMA load of y, which the producer warp wrote with ordinary stores, gets
    fence.proxy.async; the Sm90 GEMM's producer (its consumers store C, which no tensor map reads) still gets none."""
    for engine in ENGINES:
        assert sl.sync_check(T.tma_load_of_generic_writes, n=3, engine=engine).ok
    cu = compile_procs_to_strings([T.tma_load_of_generic_writes], "generic_y", "sm_90a")[2]
    assert re.search(r"spork_mbar_wait\(&spork_bar_f\[.*\n(.*\n){1,3}\s*asm volatile\(\"fence\.proxy\.async;", cu), cu
    gemm = compile_procs_to_strings([sm90_gemm.PROCS[0]], "gemm", "sm_90a")[2]
    assert "fence.proxy.async" not in gemm


@pytest.mark.gpu
def test_the_gpu_computes_the_fenced_store_and_the_load_of_ordinary_stores_as_written():
    """tma_store_completed_by_fence (4 tiles of 64 rows) and tma_load_of_generic_writes (16 tiles of 8 rows)
    against run_cpu; the arrays they write start as NaN."""
    pytest.importorskip("cupy")
    rng = np.random.default_rng()  # fresh inputs every run

    def rows(n: int, fill=None) -> np.ndarray:
        return rng.standard_normal((n, 32), dtype=np.float32) if fill is None else np.full((n, 32), fill, np.float32)

    assert_gpu_matches_cpu(T.tma_store_completed_by_fence, "sm_90a", T=4, A=rows(256), C=rows(256, np.nan),
                           Z=rows(256, np.nan))
    assert_gpu_matches_cpu(T.tma_load_of_generic_writes, "sm_90a", n=16, x=rows(128), y=rows(128, np.nan),
                           z=rows(128, np.nan))


def test_gemm_consumers_must_come_after_every_ctas_loads():
    """In the sequential program, CTA 0's consumers reading stage k before CTA 1 multicast its half of B read
    data that has not landed: their Await would complete before the bytes the phase expects (a TX hazard),
    and the peer's load overwrites what they read (WAR)."""
    src, consts = sm90_gemm.gemm_source("tf32", CL=2, G=1)
    split = "                        for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):\n                            with CudaWarps(name=\"consumer\"):"
    assert split in src
    joined = src.replace(split, "                            with CudaWarps(name=\"consumer\"):")
    p = sl.parse_source(joined, filename=sm90_gemm.__file__, first_line=sm90_gemm._FIRST_LINE, func_locals=consts)
    report = sl.sync_check(p, **GEMM_SIZES)
    h = _only(report, "TX")
    assert "ring[0]" in h.message and h.access.stmt.file == sm90_gemm.__file__
    assert "B_s" in {x.buffer for x in report.hazards if x.kind == "WAR"}


@pytest.mark.parametrize("p", [sm90_gemm.PROCS[0], sm90_gemm.make_gemm("tf32", CL=2, G=1, NW=128)], ids=["NW=BN", "NW=128"])
def test_gemm_without_its_wgmma_fence_is_reported_at_the_gemms_line(p):
    """The wgmma reads the zero-filled accumulator without the warpgroup's one wgmma fence: RAW at the wgmma's line
    of the file (NW=128 writes the same statement as a loop on the same lines)."""
    (i,) = [k for k, c in enumerate(sync_cursors(p)) if "wgmma_fence_1" in str(c._impl._node.f.name)]
    h = sl.sync_check(without_syncs(p, [i]), **GEMM_SIZES).hazards[0]
    assert h.buffer == "D" and h.access.stmt.file == sm90_gemm.__file__
    assert h.access.stmt.line == _gemm_line("Sm90_mma_async_{w}(D[cta, wg, :, :], A_s[cta, k % S")


def test_the_gemm_mutation_script_kills_all_but_the_safe_survivors(monkeypatch):
    """benchmarks/mutation_test_sm90.py: nothing is refused any more, and the only mutants the checker passes
    are the two that wait more than needed and the final cluster Fence moved after the epilogue's stores (the
    script's results file says why each is safe)."""
    sys.path.insert(0, str(EXAMPLES_DIR.parent / "benchmarks"))
    import mutation_test_sm90 as M

    monkeypatch.setattr(M, "SIZES", dict(M=256, N=256, K=256))  # one task, 8 K-blocks: every ring slot reused
    mutants = M.all_mutants()
    for m in mutants:
        M.check(m)
    survivors = sorted(m.description for m in mutants if m.verdict not in ("static error", "hazard"))
    assert survivors == ["N -4 -> -3 in sync #1 `ReverseAwait(ring[cta], tma_to_smem_async, ~3)`",
                         "N 1 -> 0 in sync #5 `Await(cg, cuda_in_order, 1)`",
                         "move sync #8 `Fence(cuda_in_order, cuda_in_order)` one statement later"], survivors
    assert len(mutants) - len(survivors) == 28


def test_the_benchmarked_gemm_itself_passes_with_several_tiles_per_cluster():
    """The f16 kernel benchmarks/gemm.py times first (persistent on 8 x 8 clusters, C f16), not a smaller grid
    of its text: at 4096 x 4096 x 512 each cluster runs four tiles of eight K-blocks, so the ring wraps within a
    tile and runs on across tiles. Its 21M argument elements are over the default limit (a guard against sizes
    typed for the GPU); tracked, they take ~12 s and ~0.2 GB here."""
    p = sm90_gemm.make_gemm("f16", **sm90_gemm.CONFIGS["f16"][0])
    assert "_q8" in str(p.name())
    report = sl.sync_check(p, M=4096, N=4096, K=512, max_elements=21_000_000)
    assert report.ok, report.hazards[:3]


@pytest.mark.parametrize("dt, kw, sizes", [("tf32", sm90_gemm.CONFIGS["tf32"][1], dict(M=300, N=700, K=200)),
                                           ("f16", dict(CL=2, G=1, NW=128), dict(M=512, N=512, K=128))])
def test_the_gemm_with_several_wgmma_per_k_step_passes(dt, kw, sizes):
    """NW < BN: each K step's wgmma is a loop over NW-column windows of the accumulator, `D[..., NW * j:NW * j + NW]`,
    the same registers or apart ones at every run, which PTX needs no wait between (it refused every such kernel,
    cuBLAS's 128 x 320 tile among them, until session 35)."""
    p = sm90_gemm.make_gemm(dt, **kw)
    assert "for j in seq(0, BN / NW)" in sm90_gemm.gemm_source(dt, **kw)[0]
    report = sl.sync_check(p, **sizes)
    assert report.ok, report.hazards[:3]


def test_the_persistent_gemm_mutation_script_kills_all_but_the_two_that_wait_more(monkeypatch):
    """`mutation_test_sm90.py --persistent`: the GEMM benchmarks/gemm.py times (each cluster loops over its tiles):
    with two tiles per cluster, every mutant is killed but the two that wait more than needed; the task's one
    Fence, moved before the tile loop or deleted, frees the ring under the last tile's loads."""
    sys.path.insert(0, str(EXAMPLES_DIR.parent / "benchmarks"))
    import mutation_test_sm90 as M

    monkeypatch.setattr(M, "CONFIG", M.CONFIGS["persistent"])
    monkeypatch.setattr(M, "SIZES", dict(M=512, N=768, K=128))  # 3 clusters, 2 tiles each: every slot reused
    mutants = M.all_mutants()
    for m in mutants:
        M.check(m)
    survivors = sorted(m.description for m in mutants if m.verdict not in ("static error", "hazard"))
    assert survivors == ["N -4 -> -3 in sync #1 `ReverseAwait(ring[cta], tma_to_smem_async, ~3)`",
                         "N 1 -> 0 in sync #5 `Await(cg, cuda_in_order, 1)`"], survivors
    fence = [m for m in mutants if "`Fence(cuda_in_order, cuda_in_order)`" in m.description]
    assert len(fence) == 2 and all(m.verdict == "hazard" and m.detail.startswith("FREE") for m in fence)
    assert len(mutants) - len(survivors) == 28


def _persistent_store_with(old: str, new: str):
    """examples/sm90_persistent_store.py with one statement edited, its lines kept."""
    path = EXAMPLES_DIR / "sm90_persistent_store.py"
    text = path.read_text()
    src = text[text.index("def sm90_persistent_store("):text.index("\n\n\nPROCS")]
    assert src.count(old) == 1, old
    first_line = text[:text.index("def sm90_persistent_store(")].count("\n") + 1
    return sl.parse_source(src.replace(old, new), filename=str(path), first_line=first_line,
                           func_locals={"CTAS": sm90_persistent_store.CTAS})


def test_a_persistent_tasks_staging_slot_is_reused_only_after_its_store_read_it():
    """Waiting for all but two stores lets tile it + 2 overwrite the slot tile it's store may still be reading."""
    assert sl.sync_check(sm90_persistent_store.sm90_persistent_store, T=16).ok
    p = _persistent_store_with("Await(cg, cuda_in_order, 1)", "Await(cg, cuda_in_order, 2)")
    for engine in ENGINES:
        h = _only(sl.sync_check(p, T=16, engine=engine), "WAR")
        assert h.buffer == "out_s" and h.access.stmt.file.endswith("sm90_persistent_store.py")
        assert "out_s[it % 2, t / 2, 16 * (t % 2) + j] =" in h.access.stmt.text
        assert "Sm90_copy_tensor_to_gmem_linear_2f32" in h.other.stmt.text


def test_a_persistent_task_drains_its_stores_before_its_shared_memory_ends():
    p = _persistent_store_with("                Await(cg, cuda_in_order, 0)\n", "                pass\n")
    for engine in ENGINES:
        h = _only(sl.sync_check(p, T=16, engine=engine), "FREE")
        assert h.buffer == "out_s"


def test_a_persistent_gemm_frees_its_ring_only_after_a_cluster_fence():
    """The GEMM persistent by hand (Q) has no barrier between its tiles: the ring and the accumulator's own syncs
    order one tile after the next on the same threads, so only the end of the task needs the cluster Fence, without
    which a CTA could exit while its peer's multicast still lands in its B_s."""
    src, consts = sm90_gemm.gemm_source("f16", BN=128, CL=2, G=1, Q=2)
    last = src.rstrip().rsplit("\n", 1)
    assert last[1].strip() == "Fence(cuda_in_order, cuda_in_order)" and src.count("Fence(cuda_in_order, cuda_in_order)") == 1
    sizes = dict(M=512, N=512, K=256)  # two tiles per cluster, four K-blocks each: the ring runs on across tiles
    assert sl.sync_check(sm90_gemm.make_gemm("f16", BN=128, CL=2, G=1, Q=2), **sizes).ok
    p = sl.parse_source(last[0], filename=sm90_gemm.__file__, first_line=sm90_gemm._FIRST_LINE, func_locals=consts)
    for engine in ENGINES:
        report = sl.sync_check(p, engine=engine, **sizes)
        assert {h.buffer for h in report.hazards if h.kind == "FREE"} == {"A_s", "B_s"}, report


@pytest.mark.parametrize("p, sizes", [(sm90_gemm.PROCS[2], dict(M=256, N=768, K=256)),
                                      (sm90_gemm.PROCS[3], dict(M=300, N=700, K=200))], ids=["whole", "clip"])
def test_every_sync_of_the_persistent_gemm_is_needed(p, sizes):
    """With no barrier between its tiles, the persistent GEMM relies on each of its syncs: dropping any one is a
    hazard or a static error (tiles skipped past M and N, and K-blocks past K, included)."""
    for i in range(len(sync_cursors(p))):
        try:
            report = sl.sync_check(without_syncs(p, [i]), **sizes)
        except sl.SporkError:
            continue
        assert not report.ok, f"sync #{i} dropped: {report}"


def test_an_arrive_on_a_barrier_tma_loads_complete_on_is_not_multicast():
    """Its expect-tx (the phase's bytes) was dropped by the code generator; only sync_check's run refused it."""
    p = T.tma_multicast_arrive
    with pytest.raises(sl.SyncError) as info:
        sl.compile_procs_to_strings([p], "t")
    err = info.value
    assert "arrive on this CTA's barrier (ring[cta]), not a slice" in err.message, str(err)
    assert "Arrive(tma_to_smem_async, 1) >> ring[:]" in str(p).splitlines()[err.lineno - 1], str(err)  # parsed text
