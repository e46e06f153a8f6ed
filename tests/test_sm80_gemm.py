"""The Sm80 GEMM example (examples/sm80_gemm.py): its schedule replays, it is well synchronized, and each
racy mutant of its synchronization is flagged; on a GPU it matches float64 at several shapes."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from conftest import ir_equal, runnable_examples

import spork_lab as sl
from spork_lab.core.sync_stmts import sync_spec_of
from spork_lab.sync.mutants import sync_cursors, with_await_n, without_syncs

runnable_examples()  # puts examples/ on sys.path
import sm80_gemm as g  # noqa: E402

# Small tiles (4 warps of 32 x 32, BK = 32, 3 slots) so that at K = 128 the main loop runs and reuses a slot.
SMALL = g.Config("f16", BM=64, BN=64, BK=32, WM=32, WN=32, S=3)


@pytest.fixture(scope="module")
def small():
    return g.schedule(g.naive(SMALL), SMALL)


def test_steps_replay_to_the_kernel(small):
    p = g.naive(SMALL)
    for k, step in enumerate(g.STEPS):
        p = step(p, SMALL)
    assert ir_equal(p._loopir_proc, small._loopir_proc)
    text = str(small)
    assert "D: f32[2, 2, 2, 4, 16, 8] @ Sm80_RmemMatrixD" in text  # CTA-scope accumulators, one shard per warp
    assert "A_s: f16[3, 64, 40] @ CudaSmemLinear" in text  # 3-slot ring, rows padded by 16 bytes
    assert "Await(cg, cuda_in_order, 1)" in text and "Sm80_mma_load_b_pair_f16" in text


def test_issue_size_passes_sync_check():
    assert sl.sync_check(g.sync_check_kernel(), M=256, N=256, K=128).ok


def _mutants(p):
    """(description, mutant) for each sync statement dropped and each Await's N moved to wait for less."""
    for i, c in enumerate(sync_cursors(p)):
        spec = sync_spec_of(c._impl._node)
        yield f"drop #{i} {spec.kind}", without_syncs(p, [i])
        if spec.is_await:
            yield f"#{i} Await N {spec.N} -> {spec.N + 1}", with_await_n(p, i, spec.N + 1)


# The survivors are not racy: pipeline_loop also puts an Await before the products stage, which with fragments
# ahead the Await before the same tile's first fragment loads, one time step earlier, already covers.
SURVIVORS = {False: [], True: ["drop #4 Await", "#4 Await N 2 -> 3", "drop #8 Await", "#8 Await N 2 -> 3"]}


@pytest.mark.parametrize("ahead", [False, True])
def test_racy_mutants_are_flagged(ahead):
    cfg = dataclasses.replace(SMALL, fragments_ahead=ahead)
    p = g.schedule(g.naive(cfg), cfg)
    assert sl.sync_check(p, M=64, N=64, K=128).ok
    survivors = [what for what, m in _mutants(p) if sl.sync_check(m, M=64, N=64, K=128).ok]
    assert survivors == SURVIVORS[ahead]


def test_fragments_ahead_is_the_hand_db_order():
    """Step 9 with fragments_ahead (the default) in the steady state: copies and their commit group, the
    products up to the last k-step's fragment loads (each k-step's loads before the k-step before's products),
    then the wait for the next tile (S - 2 groups in flight) and the barrier, that tile's first fragments, the
    last k-step's products; no guards, and the first fragments' registers are one set (read before they are
    refilled in the time step: no ring)."""
    p = g.schedule(g.naive(SMALL), SMALL)
    assert "A_r: f16[2, 2, 2, 16, 16] @ Sm80_RmemMatrixA" in str(p) and not re.search(r"% 2\b", str(p))
    _, _, cu, _ = sl.compile_procs_to_strings([p], "gemm")
    start = cu.index("for (int kt = 0; kt < K / 32 - 2; kt++)")
    steady = cu[start : cu.index("for (int kt = K / 32 - 2;", start)]
    marks = ["cp.async.cg.shared.global", "cp.async.commit_group", "cp.async.wait_group 2", "ldmatrix",
             "mma.sync", "cp.async.wait_group 1", "__syncthreads", "ldmatrix", "mma.sync"]
    at = 0
    for mark in marks:
        at = steady.index(mark, at) + 1
    assert "if (" not in steady and steady.count("__syncthreads") == 1


def test_fragments_ahead_with_middle_k_steps_passes_sync_check():
    """Four k-steps per tile (the defaults' BK = 64, S = 4; six K tiles: every slot reused), where SMALL has two."""
    cfg = dataclasses.replace(SMALL, BK=64, S=4)
    assert sl.sync_check(g.schedule(g.naive(cfg), cfg), M=64, N=64, K=384).ok


def test_tf32_with_b_given_as_nk_loads_every_fragment_with_ldmatrix():
    """With B given as [N, K] both tf32 operands are K-contiguous in shared memory: their fragments load with
    ldmatrix (B two fragments at a time), unrounded, and the GEMM stays well synchronized."""
    cfg = dataclasses.replace(SMALL, dtype="tf32", b_nk=True)
    p = g.schedule(g.naive(cfg), cfg)
    text = str(p)
    assert "B: f32[N, K]" in text and "B_s: f32[3, 64, 36] @ CudaSmemLinear" in text  # rows padded by 16 bytes
    assert "Sm80_mma_load_a_tf32_trunc" in text and "Sm80_mma_load_b_pair_nk_tf32_trunc" in text
    assert sl.sync_check(p, M=64, N=64, K=128).ok
    _, _, cu, _ = sl.compile_procs_to_strings([p], "gemm")
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in cu and "cvt." not in cu and ".trans" not in cu
    rng = np.random.default_rng(0)
    args = g.make_args(rng, proc=p, shape=(64, 128, 64))
    assert args["B"].shape == (128, 64)
    want = args["A"].astype(np.float64) @ args["B"].astype(np.float64).T
    np.testing.assert_allclose(g.reference(**args, proc=p)["C"], want, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["tf32", "f16", "bf16", "tf32_nk"])
def test_matches_float64_at_several_shapes(dtype):
    cupy = pytest.importorskip("cupy")
    p = getattr(g, f"sm80_gemm_{dtype}")
    built = getattr(sl.build([p]), p.name())
    rng = np.random.default_rng()
    for M, N, K in [(256, 512, 384), (512, 256, 256), (384, 768, 512), (1024, 1024, 1024)]:
        args = g.make_args(rng, proc=p, shape=(M, N, K))
        want = g.reference(**args, proc=p)["C"]
        dev = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}
        built(*dev.values())
        cupy.cuda.runtime.deviceSynchronize()
        assert getattr(built.module.lib, f"{built.module.lib_name}_last_error")() == 0
        got = dev["C"].get()
        assert np.isfinite(got).all(), f"{dtype} {M}x{N}x{K}: elements left unwritten"
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < (2e-3 if dtype.startswith("tf32") else 1e-4), f"{dtype} {M}x{N}x{K}: max rel err {err:.2e}"
