"""pipeline_loop derives the GEMM scripts' rings (issue 13): the same kernel as the ring built by hand.

examples/sm80_gemm.py pipelines its K loop with `pipeline_loop` (step 9); its
`HAND_STEPS` build the same S-slot cp.async ring by hand (exo's cut/shift/fuse
with unsafe flags, hand-placed commit groups). The generated CUDA of the two
is the same text but for the reviewed epilogue difference below. The
pipelined kernel passes `sl.sync_check` at the script's test sizes, and every
racy mutant of it is flagged (tests/test_sm80_gemm.py).

examples/sm90_gemm.py's cluster ring is not derived yet (docs/language.md,
pipeline_loop: barrier arrays, per-CTA stages, release after wgmma reads).
"""

from __future__ import annotations

import dataclasses
import difflib

import pytest
from conftest import runnable_examples

import spork_lab as sl

runnable_examples()  # puts examples/ on sys.path
import sm80_gemm as g  # noqa: E402

SMALL = g.Config("f16", BM=64, BN=64, BK=32, WM=32, WN=32, S=3)
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
