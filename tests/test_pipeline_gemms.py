"""pipeline_loop derives the GEMM scripts' rings (issue 13): the same kernel as the ring built by hand.

examples/sm80_gemm.py pipelines its K loop with `pipeline_loop` (step 9); its
`HAND_STEPS` build the same S-slot cp.async ring by hand (exo's cut/shift/fuse
with unsafe flags, hand-placed commit groups). The generated CUDA of the two
is the same text but for the reviewed epilogue difference below. The
pipelined kernel passes `sl.sync_check` at the script's test sizes, and every
racy mutant of it is flagged (tests/test_sm80_gemm.py).

examples/sm90_gemm.py's cluster ring is derived too: `scheduled_gemm` pipelines
its `unpipelined` kernel (TMA loads on the CTAs' barrier array, multicast B,
wgmma consumers; no Arrive, Await or ring dimension) into make_gemm's kernel,
the same CUDA text. Its `STEPS` take the naive loop nest to the same kernel,
B multicast and persistent as make_gemm(..., Q=Q), whose sequential meaning is the naive one's. Off-by-one
variants of the derived counts must be flagged by sl.sync_check, which needs the checker's TMA model
(`_sm90_check`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re

import numpy as np
import pytest
from conftest import runnable_examples
from spork_lab import run_cpu

import spork_lab as sl
from spork_lab.core.sync_stmts import sync_spec_of
from spork_lab.sync.mutants import sync_cursors, without_syncs

runnable_examples()  # puts examples/ on sys.path
import sm80_gemm as g  # noqa: E402
import sm90_gemm as h  # noqa: E402

SMALL = g.Config("f16", BM=64, BN=64, BK=32, WM=32, WN=32, S=3, fragments_ahead=False)  # the ring HAND_STEPS build
CASES = {"S3": SMALL, "S4": dataclasses.replace(SMALL, S=4), "S3_late_copy": dataclasses.replace(SMALL, late_copy=True)}


def _changed_lines(before: str, after: str) -> tuple:
    """(lines only `before` has, lines only `after` has), stripped, in order."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    body = [d for d in diff if not d.startswith(("---", "+++", "@@"))]
    return [d[1:].strip() for d in body if d[0] == "-"], [d[1:].strip() for d in body if d[0] == "+"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_sm80_pipelined_ring_is_the_hand_built_kernel(case):
    """Prologue and steady state are the same CUDA text. The reviewed difference is the epilogue's: by hand it
    waits for every copy once (wait_group 0, __syncthreads) before the last S - 1 products; pipeline_loop keeps
    the steady state's per-tile wait (wait_group S - 2, __syncthreads, an empty commit group) and drains after."""
    cfg = CASES[case]
    piped, hand = g.schedule(g.naive(cfg), cfg), g.schedule(g.naive(cfg), cfg, steps=g.HAND_STEPS)
    _, _, cu_piped, _ = sl.compile_procs_to_strings([piped], "gemm")
    _, _, cu_hand, _ = sl.compile_procs_to_strings([hand], "gemm")
    removed, added = _changed_lines(cu_hand, cu_piped)
    assert removed == ['asm volatile("cp.async.wait_group 0;" ::: "memory");', "__syncthreads();"]
    assert added == [
        f'asm volatile("cp.async.wait_group {cfg.S - 2};" ::: "memory");',
        "__syncthreads();",
        'asm volatile("cp.async.commit_group;" ::: "memory");',
        'asm volatile("cp.async.wait_group 0;" ::: "memory");',
    ]
    kernel = cu_piped[cu_piped.index("__global__") :]
    epilogue = kernel[kernel.index(f"for (int kt = K / {cfg.BK} - {cfg.S - 1}; kt < K / {cfg.BK}; kt++)") :]
    assert epilogue.index(f"cp.async.wait_group {cfg.S - 2};") < epilogue.index("mma.sync")  # waits in the loop


def test_sm80_late_copy_passes_sync_check():
    """The pipelined ring with the products moved before the copies (late_copy) is still well synchronized."""
    cfg = CASES["S3_late_copy"]
    assert sl.sync_check(g.schedule(g.naive(cfg), cfg), M=64, N=64, K=128).ok


# ---- Sm90: the cluster ring (barrier arrays, multicast release, wgmma reads released one K-block late) ----

SM90_CASES = {"tf32_c2_s4": ("tf32", 256, 4, 2, 1), "f16_c2_s3_g8": ("f16", 256, 3, 2, 8),
              "bf16_n128_s2_cbf16": ("bf16", 128, 2, 2, 4, "bf16")}


@pytest.mark.parametrize("case", sorted(SM90_CASES))
def test_sm90_pipelined_ring_is_the_hand_built_kernel(case):
    """The same CUDA text, every line: the ring dimensions, ReverseAwait ~(S - 1), the expect-tx Arrive, the
    wgmma_async_smem Await, the wgmma commit group (N = 1), the multicast release and the final drain."""
    args = SM90_CASES[case]
    piped, hand = h.scheduled_gemm(*args), h.make_gemm(*args)
    assert piped.name() == hand.name()
    _, _, cu_piped, _ = sl.compile_procs_to_strings([piped], "gemm")
    _, _, cu_hand, _ = sl.compile_procs_to_strings([hand], "gemm")
    assert _changed_lines(cu_hand, cu_piped) == ([], [])


def test_sm90_derived_statements():
    """What pipeline_loop wrote, as the user reads it (the drain runs in the consumers' warpgroups)."""
    text = " ".join(str(h.scheduled_gemm("tf32", 256, 4, 2, 1)).split())  # as one line: the printer wraps
    for line in ["A_s: f32[2, 4, 128, 32]", "B_s: f32[2, 4, 256, 32]", "ReverseAwait(ring[cta], tma_to_smem_async, ~3)",
                 "Arrive(tma_to_smem_async, 1) >> ring[cta]", "Await(ring[cta], wgmma_async_smem, ~0)",
                 "Arrive(wgmma_async, 1) >> cg", "Await(cg, cuda_in_order, 1)", "ReverseArrive(cuda_in_order, 1) >> ring[:]",
                 "A_s[cta, k % 4, 0:128, 0:32]", "B_s[0:2, k % 4, 128 * cta:128 * cta + 128, 0:32]"]:
        assert line in text, line
    drain = text[text.index("Await(cg, cuda_in_order, 0)") - 200 : text.index("Await(cg, cuda_in_order, 0)")]
    assert "cuda_cta_in_cluster" in drain and "CudaWarps(name='consumer')" in drain and "cuda_warpgroup" in drain


SM90_SIZES = dict(M=512, N=1024, K=256)  # 8 K-blocks through 4 slots: every slot reused; 4 tiles per cluster (Q = 2)
STEPWISE = h.Config("tf32", 256, 4, 2, 1, Q=2)


@functools.cache
def stepwise_gemm():
    """examples/sm90_gemm.py's STEPS from the naive loop nest."""
    return h.schedule(h.naive(STEPWISE), STEPWISE)


def _sm90_check(p):
    """sl.sync_check of a GEMM at SM90_SIZES."""
    return sl.sync_check(p, **SM90_SIZES)


def _sm90_flagged(p) -> bool:
    """Whether sl.sync_check reports a hazard in p (a report that is not ok, or a SyncError naming one; a refusal
    to model a construct is not a finding)."""
    try:
        return not _sm90_check(p).ok
    except sl.SyncError as e:
        return "does not model" not in str(e)


def _inputs(M: int, N: int, K: int) -> dict:
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((N, K), dtype=np.float32)
    return dict(M=M, N=N, K=K, A=A, B=B, C=np.zeros((M, N), np.float32))


def test_stepwise_gemm_computes_the_naive_loop_nest():
    """Every step keeps the sequential meaning (exo's checks): the scheduled kernel, run sequentially on the
    CPU, computes the naive loop nest's C."""
    args = _inputs(256, 512, 128)
    want = run_cpu(h.naive(STEPWISE), **args)["C"]
    np.testing.assert_allclose(run_cpu(stepwise_gemm(), **args)["C"], want, rtol=1e-5, atol=1e-4)


def _kernel_outline(text: str) -> dict:
    """What makes a GEMM's kernel, read from its proc text with index expressions left out: the allocations,
    the instrs in order with their boxes, multicast widths and trailing barriers, and the sync statements."""
    text = " ".join(text.split())
    return {
        "allocs": sorted(re.findall(r"(\w+): (\w+\[[^\]]*\]) @ (\w+)", text)),
        "instrs": re.findall(r"(Sm90_\w+)\(", text),
        "boxes": re.findall(r"box=\([^)]*\)(?:, ncta=\d+)?\)(?: >> \w+\[[^\]]*\])?", text),
        "syncs": re.findall(r"(?:Reverse)?A(?:rrive|wait)\([^)]*\)(?: >> \w+\[[^\]]*\])?|Fence\([^)]*\)", text),
    }


@pytest.mark.parametrize("CL", [2, 1, 4])
def test_stepwise_gemm_is_make_gemm(CL):
    """The schedule reaches make_gemm's kernel: the same allocations, instrs (B's 1/CL share multicast to the
    cluster, `>> ring[:]`, in clusters of two and four; a plain copy of the whole tile in a cluster of one) and sync
    statements with the same counts in the same places, persistent too (the last step, make_persistent, reaches
    `_persistent`'s text). In a cluster of one the CTA dimension of A_s and B_s has extent 1 and is not
    distributed, so pipeline_loop puts the ring's dimension before it (the same layout: `[4, 1, ...]`)."""
    cfg = dataclasses.replace(STEPWISE, CL=CL)
    derived = stepwise_gemm() if CL == 2 else h.schedule(h.naive(cfg), cfg)
    hand = h.make_gemm("tf32", 256, 4, CL, 1, Q=2)
    want, got = _kernel_outline(str(hand)), _kernel_outline(str(derived))
    if CL == 1:
        ring_first = {"f32[4, 1, 128, 32]": "f32[1, 4, 128, 32]", "f32[4, 1, 256, 32]": "f32[1, 4, 256, 32]"}
        got["allocs"] = sorted((name, ring_first.get(shape, shape), mem) for name, shape, mem in got["allocs"])
    assert got == want
    if CL == 2:
        assert "Sm90_multicast_copy_tensor_to_smem_swizzled_2f32(" in str(derived)
        assert "box=(128, 32)) >> ring[:]" in str(derived) and "Sm90_tensorMap(128, 128, 32)" in str(derived)


def test_make_persistent_loops_each_cluster_over_its_tiles():
    """The last step: tasks are the G x Q clusters only, each running its tiles in `seq` loops (row G * mg + mi,
    column tile Q * nq + q) with the ring, tiles and accumulator allocated once; the one Fence left is after the
    tile loops, and without it the check reports the ring freed under the last tile's loads. Q = 0 keeps the
    one-task-per-tile kernel."""
    text = str(stepwise_gemm())
    loops = re.findall(r"for (\w+) in (cuda_tasks|seq)\(", text)
    assert loops[:4] == [("mi", "cuda_tasks"), ("q", "cuda_tasks"), ("mg", "seq"), ("nq", "seq")], loops
    head, tiles = text.split("for mg in seq(")
    assert all(f"{buf}: " in head for buf in ["D", "A_s", "B_s", "ring", "cg"])
    assert "256 * (2 * nq + q)" in tiles and tiles.count("Fence(cuda_in_order, cuda_in_order)") == 1
    assert tiles.rstrip().endswith("Fence(cuda_in_order, cuda_in_order)")
    fence = next(i for i, c in enumerate(sync_cursors(stepwise_gemm()))
                 if sync_spec_of(c._impl._node).source() == "Fence(cuda_in_order, cuda_in_order)")
    report = _sm90_check(without_syncs(stepwise_gemm(), [fence]))
    assert not report.ok and {hazard.buffer for hazard in report.hazards} >= {"A_s", "B_s"}
    one_per_tile = dataclasses.replace(STEPWISE, Q=0)
    piped = h.schedule(h.naive(one_per_tile), one_per_tile, upto=10)
    assert str(h.make_persistent(piped, one_per_tile)).count("cuda_tasks") == 3


def test_multicast_in_one_per_cta_loop_is_not_sequentially_the_gemm():
    """The counterexample that split make_gemm's K loop: with one per-CTA loop around producers and consumers,
    CTA 0's consumers read the share of B that CTA 1's producer loads later in the loop, so the sequential
    meaning is not the GEMM for CTA 0's rows (on the GPU the barrier waits for every CTA's bytes); sync_check
    must flag it, and does."""
    text = h._UNPIPELINED.format(name="tf32_n256_s4_c2_g1", t="f32", w="tf32", c="f32").strip("\n")
    lines = text.split("\n")
    k = next(i for i, line in enumerate(lines) if line.strip() == 'with CudaWarps(name="consumer"):'
             and "CudaAsync(wgmma_async_instr)" in lines[i + 2])
    assert "cuda_cta_in_cluster" in lines[k - 1]
    one_loop = sl.parse_source("\n".join(lines[: k - 1] + lines[k:]), func_locals=h.gemm_source("tf32", 256, 4, 2, 1)[1])
    p = h.pipeline(one_loop, 4)
    args = _inputs(256, 512, 128)
    want = args["A"].astype(np.float64) @ args["B"].astype(np.float64).T
    got = run_cpu(p, **args)["C"]
    assert not np.allclose(got[0:128], want[0:128], atol=1e-2) and np.allclose(got[128:256], want[128:256], atol=1e-3)
    assert _sm90_flagged(p)


@pytest.mark.parametrize("which", ["stepwise", "multicast"])
def test_sm90_pipelined_passes_sync_check(which):
    report = _sm90_check(stepwise_gemm() if which == "stepwise" else h.scheduled_gemm("tf32", 256, 4, 2, 1))
    assert report.ok, "\n".join(map(str, report.hazards))


@pytest.mark.parametrize("which", ["ReverseAwait", "Await ring", "Await cg"])
def test_sm90_off_by_one_counts_are_flagged(which):
    """Each derived wait, waiting for one arrive too few, is a hazard: the producer refilling a slot one
    K-block early (lag S), the consumers reading a slot one phase early (lag 1), the release while one more
    wgmma may still read the slot (N = 2)."""
    from spork_lab.sync.mutants import with_await_n

    q = stepwise_gemm()
    kind, _, bar = which.partition(" ")
    found = [
        (i, spec) for i, c in enumerate(sync_cursors(q))
        if (spec := sync_spec_of(c._impl._node)).kind == kind and (not bar or str(c._impl._node.args[0].name) == bar)
        and spec.N != 0
    ]  # fmt: skip  (the drain's Await(cg, ..., 0) is not a derived pipeline count)
    assert len(found) == 1, found
    i, spec = found[0]
    loosened = with_await_n(q, i, spec.N + 1 if spec.N >= 0 else ~(~spec.N + 1))
    assert _sm90_flagged(loosened)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["tf32", "f16"])
@pytest.mark.parametrize("how", ["stepwise", "multicast", "one_cta_clusters"])
def test_sm90_scheduled_gemm_matches_float64(dt, how):
    """The GEMM scheduled from the naive loop nest (stepwise), the multicast one pipelined from `unpipelined`,
    and make_gemm's clusters of one CTA (M = 512: four one-CTA tasks of 128 rows), on the H100, against a
    float64 NumPy product on fresh random inputs."""
    cupy = pytest.importorskip("cupy")
    cfg = h.Config(dt, 256, 4, 2, 1, Q=3)  # make_args' 512 x 768: one column tile per cluster, two row tiles each
    p = {"stepwise": lambda: h.schedule(h.naive(cfg), cfg), "multicast": lambda: h.scheduled_gemm(dt, 256, 4, 2, 1),
         "one_cta_clusters": lambda: h.make_gemm(dt, CL=1, G=1)}[how]()
    built = getattr(sl.build([p], arch=h.ARCH), p.name())
    args = h.make_args(np.random.default_rng(), n=512, dtype=np.float32 if dt == "tf32" else np.float16)
    want = h.reference(**args)["C"]
    dev = {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    built(*dev.values())
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_allclose(dev["C"].get(), want, **h.TOLERANCE)
