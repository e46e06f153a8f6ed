"""Sm90a GEMM C = A @ B^T (tf32, f16 or bf16 A and B, f32 accumulation; C f32, or f16/bf16 rounded from the
f32 accumulators): persistent and warp-specialized.

Structure (the hand kernel benchmarks/sm90_hand/ measured it first):
* a cluster of CL CTAs (CL = 1, 2 or 4; an H100 holds only 30 clusters of 4
  at once: sm90_gemm_notes.md, run 20) takes one task: CL x 128 rows of C by BN
  columns; tasks go in groups of G cluster-rows, so neighbouring clusters share
  columns of B in L2;
* warp_config: one "producer" warp (setmaxnreg 40) whose first thread issues
  TMA loads into a ring of S stages, three idle warps to fill its warpgroup,
  and two "consumer" warpgroups (setmaxnreg 232), each owning 64 rows of the
  CTA's tile as a [64, BN] wgmma accumulator (distributed memory:
  `D[cta, wg, :, :]`), zero-filled and fenced (wgmma.fence) once per tile;
* per K-block the producer waits (ReverseAwait) until the consumers of every
  CTA released the stage, loads its CTA's A tile and its 1/CL share of the B
  tile, multicast to the whole cluster (`>> ring[:]`; a cluster of one CTA
  loads its whole B tile with a plain copy), and arrives with the stage's
  bytes; then (in program order: the sequential program must read
  what it loaded, so every CTA's loads come before any CTA's consumers, as
  sl.sync_check checks) the consumers await the stage, run BK / k wgmma per
  warpgroup, and release the previous stage once its wgmma finished (a wgmma
  commit group with N = 1), on the barriers of every CTA of the cluster;
* after the last K-block a cluster-wide Fence: the producer may then load the
  next task's stages while the consumers store their accumulators.

`make_gemm(dt, BN, S, CL, G, out, SW, NW)` returns the proc (see gemm_source);
`PROCS` holds the configurations the tests and benchmarks/gemm.py build.

By schedule (the tutorial's replay): `scheduled_gemm` derives make_gemm's ring
with `pipeline_loop` from `unpipelined` (same CUDA), and `schedule(naive(cfg),
cfg)` runs `STEPS` from the naive loop nest to the same kernel (B multicast,
persistent on G x Q clusters as make_gemm(..., Q=Q)).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import spork_lab as sl
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm90 import *
from spork_lab.scheduling import *

DTYPES = {"tf32": ("f32", "tf32", 8), "f16": ("f16", "f16", 16), "bf16": ("bf16", "bf16", 16)}

WARPS = [
    CudaWarpConfig("producer", 1, setmaxnreg=40),
    CudaWarpConfig("unused", 3, setmaxnreg=40),
    CudaWarpConfig("consumer", 8, setmaxnreg=232),
]

_SOURCE = '''
def gemm_sm90_{name}(M: size, N: size, K: size, A: {t}[M, K] @ CudaGmemLinear, B: {t}[N, K] @ CudaGmemLinear,
                     C: {c}[M, N] @ CudaGmemLinear):
    assert M % CM == 0
    assert N % BN == 0
    assert K % BK == 0
    A_tm = A[:, :] @ Sm90_tensorMap({sw}, 128, BK)
    B_tm = B[:, :] @ Sm90_tensorMap({sw}, BNC, BK)
    with CudaDeviceFunction(clusterDim=CL, warp_config=WARPS):
        for mg in cuda_tasks(0, M / CM):
            for nt in cuda_tasks(0, N / BN):
                for mi in cuda_tasks(0, G):
                    # (partial tiles: `_clipped` puts its task guard on this line)
                    A_s: {t}[CL, S, 128, BK] @ Sm90_SmemSwizzled({sw})
                    B_s: {t}[CL, S, BN, BK] @ Sm90_SmemSwizzled({sw})
                    D: f32[CL, 2, 64, BN] @ Sm90_RmemMatrixD
                    ring: barrier[CL] @ CudaMbarrier
                    cg: barrier @ CudaCommitGroup
                    for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                        with CudaWarps(name="consumer"):
                            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                                Sm90_zero_scale_d_f32(D[cta, wg, :, :], N=BN)
                                Fence(wgmma_fence_1, wgmma_fence_2)
                    for k in seq(0, K / BK):
                        for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                            with CudaWarps(name="producer"):
                                for t in cuda_threads(0, 1):
                                    ReverseAwait(ring[cta], tma_to_smem_async, ~(S - 1))
                                    with CudaAsync(tma_to_smem_async_instr):
                                        Sm90_copy_tensor_to_smem_swizzled_2{t}(
                                            A_s[cta, k % S, :, :],
                                            A_tm[128 * (CL * (G * mg + mi) + cta):128 * (CL * (G * mg + mi) + cta) + 128,
                                                 BK * k:BK * k + BK],
                                            box=(128, BK)) >> ring[cta]
                                        Sm90_multicast_copy_tensor_to_smem_swizzled_2{t}(
                                            B_s[:, k % S, BNC * cta:BNC * cta + BNC, :],
                                            B_tm[BN * nt + BNC * cta:BN * nt + BNC * cta + BNC, BK * k:BK * k + BK],
                                            box=(BNC, BK), ncta=CL) >> ring[:]
                                    Arrive(tma_to_smem_async, 1) >> ring[cta]
                        for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                            with CudaWarps(name="consumer"):
                                Await(ring[cta], wgmma_async_smem, ~0)
                                for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                                    with CudaAsync(wgmma_async_instr):
                                        for kk in seq(0, KK):
                                            Sm90_mma_async_{w}(D[cta, wg, :, :], A_s[cta, k % S, 64 * wg:64 * wg + 64, KS * kk:KS * kk + KS],
                                                               B_s[cta, k % S, :, KS * kk:KS * kk + KS], N=BN)
                                    Arrive(wgmma_async, 1) >> cg
                                    Await(cg, cuda_in_order, 1)
                                ReverseArrive(cuda_in_order, 1) >> ring[:]
                    for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                        with CudaWarps(name="consumer"):
                            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                                Await(cg, cuda_in_order, 0)
                    Fence(cuda_in_order, cuda_in_order)
                    for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                        with CudaWarps(name="consumer"):
                            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                                Sm90_mma_store_d_row_major_{c}(
                                    C[128 * (CL * (G * mg + mi) + cta) + 64 * wg:128 * (CL * (G * mg + mi) + cta) + 64 * wg + 64,
                                      BN * nt:BN * nt + BN],
                                    D[cta, wg, :, :], N=BN)
'''


def gemm_source(dt: str = "f16", BN: int = 256, S: int = 4, CL: int = 2, G: int = 8, out: str = "f32",
                SW: int = 128, NW: int = 0, clip: bool = False, Q: int = 0, tma_store: int = 0) -> tuple:
    """(source text, constants) of the GEMM for element type dt ("tf32", "f16", "bf16"), BN columns per task,
    S stages, a cluster of CL, groups of G, C of type out ("f32", or "f16"/"bf16": the f32 accumulators rounded,
    as cuBLAS writes a 16-bit product), K-blocks of one SW-byte swizzle row (128, 64 or 32), and wgmma NW
    columns wide (0: BN, one wgmma per K step; else BN / NW of them, each on its columns of the accumulator,
    and so the zero-fill and the store where BN is past wgmma's 256); `clip`: any M and N, K a multiple of 16
    bytes (partial tiles, see `_clipped`); `Q`: persistent by hand, G x Q clusters looping over their tiles (see
    `_persistent`); `tma_store`: the persistent GEMM's tiles stored by TMA from that many slots of shared memory
    per warpgroup (see `_tma_epilogue`; 0: stored from the registers). The mutation test edits the text before
    parsing it."""
    t, w, ks = DTYPES[dt]
    NW = NW or BN
    suffix = ("" if out == "f32" else f"_c{out}") + ("" if SW == 128 else f"_w{SW}") + ("" if NW == BN else f"_m{NW}")
    suffix += ("_clip" if clip else "") + (f"_q{Q}" if Q else "") + (f"_ts{tma_store}" if tma_store else "")
    src = _SOURCE.format(name=f"{dt}_n{BN}_s{S}_c{CL}_g{G}{suffix}", t=t, w=w, c=out, sw=SW).strip("\n")
    if clip:
        src = _clipped(src)
    if CL == 1:
        src = _single_cta(src)
    if NW != BN:
        src = _column_windows(src, BN > 256)
    if Q:
        src = _persistent(src, clip)
    if tma_store:
        if not Q or clip or NW != BN:
            raise ValueError("tma_store: the staged epilogue is written for the persistent GEMM (Q > 0) of whole tiles "
                             "(clip=False) and one wgmma per K step (NW = BN)")
        if BN % _store_chunk(out):
            raise ValueError(f"tma_store: BN = {BN} is not a multiple of the {_store_chunk(out)}-column chunks the "
                             f"epilogue stores a C of {out} in (its last columns would be left unstored)")
        src = _tma_epilogue(src, out, tma_store)
    bk = SW // (4 if dt == "tf32" else 2)  # one swizzle row of K
    consts = {"BN": BN, "S": S, "CL": CL, "G": G, "BK": bk, "KA": 4 if dt == "tf32" else 8, "KS": ks, "KK": bk // ks,
              "CM": 128 * CL * G, "BNC": BN // CL, "NW": NW, "WARPS": WARPS, "Q": Q, "NQ": BN * Q, "SBK": S * bk,
              "NC": _store_chunk(out), "SL": tma_store}
    return src, consts


def _store_chunk(out: str) -> int:
    """The columns of one TMA epilogue store: 64 rows of C of type `out` in 8 KB."""
    return 8192 // (64 * (4 if out == "f32" else 2))


def _persistent(src: str, clip: bool) -> str:
    """The text of a GEMM persistent by hand: G x Q tasks, one per cluster (a constant grid, so that tile
    indices stay affine), each looping over its tiles (cluster row G * mg + mi, column tile Q * nq + q). A_s, B_s,
    the accumulator and the barriers are allocated once per cluster, outside that loop, so the ring runs on from
    tile to tile (each tile's K-blocks a multiple of S, so its slots start at 0) and no barrier separates tiles:
    the abstract machine sees the next tile's loads and stores as the same threads' program order. One cluster
    Fence at the end frees the ring. `clip` (the text of `_clipped`): a tile past M or N is skipped, and each
    tile runs its K-blocks up to the next multiple of S, those past K loading TMA's zeros. The grid's static share
    is balanced only where G divides the cluster rows and Q the column tiles (else some clusters get twice the
    tiles of others: run 18). The tile body keeps its lines in this file (one lower with `clip`); the allocations
    stand two lines higher, the final Fence past the end."""
    lines = src.split("\n")
    first = next(n for n, line in enumerate(lines) if "for mg in cuda_tasks(0, " in line)
    inner = " " * (24 if clip else 20)  # the tile body's indentation (`_clipped`'s guard adds a level)
    allocs, body = lines[first + 4:first + 9], lines[first + 9:]
    assert [line.split(":")[0].strip() for line in allocs] == ["A_s", "B_s", "D", "ring", "cg"], allocs
    tile_end = body.index(inner + "Fence(cuda_in_order, cuda_in_order)")
    body[tile_end] = ""  # no barrier between tiles: the ring and the accumulator's own syncs order them
    head = [line.replace("assert N % BN == 0", "assert N % NQ == 0").replace("assert K % BK == 0", "assert K % SBK == 0")
            for line in lines[:first]]
    loops = [" " * 8 + "for mi in cuda_tasks(0, G):", " " * 12 + "for q in cuda_tasks(0, Q):"]
    rows, cols = ("(M + CM - 1) / CM", "(N + NQ - 1) / NQ") if clip else ("M / CM", "N / NQ")
    tiles = [" " * 16 + f"for mg in seq(0, {rows}):", " " * 20 + f"for nq in seq(0, {cols}):"]
    if clip:
        assert lines[first + 3].strip() == "if 128 * CL * (G * mg + mi) < M:", lines[first + 3]
        tiles.append(" " * 24 + "if 128 * CL * (G * mg + mi) < M and BN * (Q * nq + q) < N:")
    body = ["    " + line.replace("BN * nt", "BN * (Q * nq + q)") if line else line for line in body]
    body = [line.replace("seq(0, (K + BK - 1) / BK)", "seq(0, S * ((K + SBK - 1) / SBK))") for line in body]
    return "\n".join(head + loops + [line[len(inner) - 16:] for line in allocs] + tiles + body
                      + [" " * 16 + "Fence(cuda_in_order, cuda_in_order)"])


def _tma_epilogue(src: str, out: str, slots: int) -> str:
    """The persistent text with its accumulators stored through shared memory: each consumer warpgroup writes
    its tile in NC-column chunks (8 KB) into `slots` staging slots of its own, in turn, and one of its threads
    issues each chunk's TMA store on a bulk commit group, waiting for the store slots - 1 chunks back (whose slot
    the next chunk takes: the tile's chunk count a multiple of `slots`, so the next tile starts where this one left
    off). The last chunk's store runs while the next tile's K loop does. Measured slower than the stores from
    registers on an H200 (sm90_gemm_notes.md, run 25: its shared memory leaves room for two slots only beside a
    4-stage ring, and the staging writes make the producer's awaits take a proxy fence): kept in gemm.py's sweep.
    The tasks drain their stores before the final Fence frees the slots. Lines past the store point past
    _SOURCE's end (the epilogue has no lines there)."""
    lines = src.split("\n")
    store = next(n for n, line in enumerate(lines) if "Sm90_mma_store_d_row_major_" in line)
    ind = lines[store][: len(lines[store]) - len(lines[store].lstrip())]
    rows = "128 * (CL * (G * mg + mi) + cta) + 64 * wg"
    cols = "BN * (Q * nq + q) + NC * h"
    chunk = [
        "for h in seq(0, BN / NC):",
        f"    Sm90_mma_store_d_row_major_{out}(C_s[cta, wg, h % SL, :, :], D[cta, wg, :, NC * h:NC * h + NC], N=NC)",
        "    Fence(cuda_in_order, tma_to_gmem_async)",
        "    for t in cuda_threads(0, 1):",
        "        with CudaAsync(tma_to_gmem_async_instr):",
        f"            Sm90_copy_tensor_to_gmem_linear_2{out}(C_tm[{rows}:{rows} + 64, {cols}:{cols} + NC],",
        "                                                  C_s[cta, wg, h % SL, :, :], box=(64, NC))",
        "        Arrive(tma_to_gmem_async, 1) >> cs",
        "        Await(cs, cuda_in_order, SL - 1)",
        "    Fence(cuda_in_order, cuda_in_order)",
    ]
    assert lines[store + 3].rstrip().endswith("N=BN)"), lines[store + 3]
    lines[store:store + 4] = [ind + line for line in chunk]
    tm = next(n for n, line in enumerate(lines) if line.strip().startswith("B_tm = "))
    lines.insert(tm + 1, "    C_tm = C[:, :] @ Sm90_tensorMap(0, 64, NC)")
    cg = next(n for n, line in enumerate(lines) if line.strip() == "cg: barrier @ CudaCommitGroup")
    pad = lines[cg][: len(lines[cg]) - len(lines[cg].lstrip())]
    lines[cg + 1:cg + 1] = [pad + f"C_s: {out}[CL, 2, SL, 64, NC] @ CudaSmemLinear", pad + "cs: barrier @ CudaCommitGroup"]
    assert lines[-1].strip() == "Fence(cuda_in_order, cuda_in_order)", lines[-1]
    drain = ["for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):", "    with CudaWarps(name=\"consumer\"):",
             "        for wg in cuda_threads(0, 2, unit=cuda_warpgroup):", "            for t in cuda_threads(0, 1):",
             "                Await(cs, cuda_in_order, 0)"]
    lines[-1:-1] = [pad + line for line in drain]
    return "\n".join(lines)


def _single_cta(src: str) -> str:
    """The text for clusters of one CTA: the B tile is a plain TMA copy and each CTA releases only its own
    ring (a slice `ring[:]` of one CTA is the point `ring[0]`, and a multicast to one CTA a plain copy);
    every statement keeps its line in this file."""
    for old, new in [("Sm90_multicast_copy_", "Sm90_copy_"), ("B_s[:, ", "B_s[cta, "), (", ncta=CL) >> ring[:]", ") >> ring[cta]"),
                     (">> ring[:]", ">> ring[cta]")]:  # fmt: skip
        src = src.replace(old, new)
    return src


def _clipped(src: str) -> str:
    """The text for any M and N, and K a multiple of KA (TMA's rows are 16-byte aligned): as many tasks and
    K-blocks as cover them, the last ones partial. The TMA loads take their box at (row, column) of the whole
    tensor map and fill what lies past the matrix's edge with zeros (which add nothing to the products), and the
    store leaves out the rows and columns past C's edge. A task whose cluster's rows all lie past M (the last raster
    group of G clusters is cut short where M is not a multiple of CM) does nothing: without that guard it would run
    its whole K loop on zeros. Every statement keeps its line in this file."""
    cta_row = "128 * (CL * (G * mg + mi) + cta)"
    edits = [
        ("    assert M % CM == 0\n", "\n"), ("    assert N % BN == 0\n", "\n"), ("assert K % BK == 0", "assert K % KA == 0"),
        ("cuda_tasks(0, M / CM)", "cuda_tasks(0, (M + CM - 1) / CM)"), ("cuda_tasks(0, N / BN)", "cuda_tasks(0, (N + BN - 1) / BN)"),
        ("seq(0, K / BK)", "seq(0, (K + BK - 1) / BK)"),
        ("Sm90_copy_tensor_to_smem_swizzled_2", "Sm90_copy_tensor_clipped_to_smem_swizzled_2"),
        ("Sm90_multicast_copy_tensor_to_smem_swizzled_2", "Sm90_multicast_copy_tensor_clipped_to_smem_swizzled_2"),
        ("B_tm[BN * nt + BNC * cta:BN * nt + BNC * cta + BNC, BK * k:BK * k + BK],", "B_tm[0:N, 0:K],"),
        (f"A_tm[{cta_row}:{cta_row} + 128,", "A_tm[0:M,"),
        ("BK * k:BK * k + BK],\n", "0:K],\n"),  # the A window's second line
        ("Sm90_mma_store_d_row_major_", "Sm90_mma_store_d_clipped_row_major_"),
        (f"C[{cta_row} + 64 * wg:{cta_row} + 64 * wg + 64,", "C[0:M,"),
        ("BN * nt:BN * nt + BN],", "0:N],"),
    ]
    for old, new in edits:
        assert old in src, old
        src = src.replace(old, new)
    head, body = src.split("# (partial tiles: `_clipped` puts its task guard on this line)\n")
    body = "\n".join("    " + line if line.strip() else line for line in body.split("\n"))
    src = f"{head}if 128 * CL * (G * mg + mi) < M:\n{body}"
    for call, args in [("Sm90_copy_tensor_clipped_to_smem_swizzled_2", f"M, K, {cta_row}, BK * k,"),
                       ("Sm90_multicast_copy_tensor_clipped_to_smem_swizzled_2", "N, K, BN * nt + BNC * cta, BK * k,"),
                       ("Sm90_mma_store_d_clipped_row_major_", f"M, N, {cta_row} + 64 * wg, BN * nt,")]:
        head, rest = src.split(call, 1)
        name, rest = rest.split("(", 1)
        src = f"{head}{call}{name}({args}{rest}"
    return src


def _column_windows(src: str, zero_and_store: bool) -> str:
    """The text with the wgmma (and, if asked, the zero-fill and the store) in `for j` loops over NW-column windows
    of the accumulator, each loop on its statement's own lines: every statement keeps its line in this file."""
    edits = [("Sm90_mma_async_", "B_s[cta, k % S, :, ", "B_s[cta, k % S, NW * j:NW * j + NW, ")]
    if zero_and_store:
        edits += [("Sm90_zero_scale_d_f32(", "", ""),
                  ("Sm90_mma_store_d_row_major_", "BN * nt:BN * nt + BN]", "BN * nt + NW * j:BN * nt + NW * j + NW]"),
                  ("Sm90_mma_store_d_clipped_row_major_", "BN * nt,", "BN * nt + NW * j,")]
    lines = src.split("\n")
    for call, old, new in edits:
        first = next((n for n, line in enumerate(lines) if line.strip().startswith(call)), None)
        if first is None:
            continue
        last = next(n for n in range(first, len(lines)) if lines[n].rstrip().endswith("N=BN)"))
        lines[first] = lines[first].replace(call, f"for j in seq(0, BN / NW): {call}", 1)
        for n in range(first, last + 1):
            lines[n] = lines[n].replace("D[cta, wg, :, :]", "D[cta, wg, :, NW * j:NW * j + NW]").replace("N=BN)", "N=NW)")
            lines[n] = lines[n].replace(old, new)
    return "\n".join(lines)


def make_gemm(dt: str = "f16", BN: int = 256, S: int = 4, CL: int = 2, G: int = 8, out: str = "f32", SW: int = 128,
              NW: int = 0, clip: bool = False, Q: int = 0, tma_store: int = 0):
    """The GEMM proc (see gemm_source); statements point at this file's lines."""
    src, consts = gemm_source(dt, BN, S, CL, G, out, SW, NW, clip, Q, tma_store)
    return sl.parse_source(src, filename=__file__, first_line=_FIRST_LINE, func_locals=consts)


# The line of `def gemm_sm90_...` in this file: reports (sync_check, errors) name the lines of _SOURCE.
_FIRST_LINE = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.startswith("def gemm_sm90_"))


CONFIGS = {  # make_gemm's arguments per input type for benchmarks/gemm.py: persistent by hand on 8 x 8 clusters (Q = 8:
    # 1.7-2.3% faster than the same tiles as cuda_tasks, benchmarks/sm90_gemm_notes.md, run 18; M and N multiples of
    # 2048, K of 256) with C of the input type (as cuBLAS) and C f32, and cuBLAS's own 128 x 320 tile with partial
    # tiles (any M and N: faster where the shape leaves few tiles in the last wave; run 12)
    "tf32": [dict(Q=8), dict(BN=320, NW=160, clip=True)],
    "f16": [dict(out="f16", Q=8), dict(Q=8), dict(BN=320, NW=160, out="f16", clip=True)],
    "bf16": [dict(out="bf16", Q=8), dict(Q=8), dict(BN=320, NW=160, out="bf16", clip=True)],
}


# ---- The same GEMM by a schedule: its ring derived by pipeline_loop (issue 13), the tutorial's replay ----
#
# `unpipelined` is the kernel without its ring: one slot of A_s and B_s per CTA, the TMA loads completing on
# the CTA's barrier (A) and on every CTA's (B, multicast), then (second per-CTA loop) the consumers' wgmma;
# no Arrive, Await, ring
# dimension or lag count. `pipeline` derives them (tests/test_pipeline_gemms.py pins that the result is
# make_gemm's kernel, the same CUDA text).

_UNPIPELINED = '''
def gemm_sm90_{name}(M: size, N: size, K: size, A: {t}[M, K] @ CudaGmemLinear, B: {t}[N, K] @ CudaGmemLinear,
                     C: {c}[M, N] @ CudaGmemLinear):
    assert M % CM == 0
    assert N % BN == 0
    assert K % BK == 0
    A_tm = A[:, :] @ Sm90_tensorMap(128, 128, BK)
    B_tm = B[:, :] @ Sm90_tensorMap(128, BNC, BK)
    with CudaDeviceFunction(clusterDim=CL, warp_config=WARPS):
        for mg in cuda_tasks(0, M / CM):
            for nt in cuda_tasks(0, N / BN):
                for mi in cuda_tasks(0, G):
                    A_s: {t}[CL, 128, BK] @ Sm90_SmemSwizzled(128)
                    B_s: {t}[CL, BN, BK] @ Sm90_SmemSwizzled(128)
                    D: f32[CL, 2, 64, BN] @ Sm90_RmemMatrixD
                    ring: barrier[CL] @ CudaMbarrier
                    for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                        with CudaWarps(name="consumer"):
                            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                                Sm90_zero_scale_d_f32(D[cta, wg, :, :], N=BN)
                                Fence(wgmma_fence_1, wgmma_fence_2)
                    for k in seq(0, K / BK):
                        for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                            with CudaWarps(name="producer"):
                                for t in cuda_threads(0, 1):
                                    with CudaAsync(tma_to_smem_async_instr):
                                        Sm90_copy_tensor_to_smem_swizzled_2{t}(
                                            A_s[cta, :, :],
                                            A_tm[128 * (CL * (G * mg + mi) + cta):128 * (CL * (G * mg + mi) + cta) + 128,
                                                 BK * k:BK * k + BK],
                                            box=(128, BK)) >> ring[cta]
                                        Sm90_multicast_copy_tensor_to_smem_swizzled_2{t}(
                                            B_s[:, BNC * cta:BNC * cta + BNC, :],
                                            B_tm[BN * nt + BNC * cta:BN * nt + BNC * cta + BNC, BK * k:BK * k + BK],
                                            box=(BNC, BK), ncta=CL) >> ring[:]
                        for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                            with CudaWarps(name="consumer"):
                                for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                                    with CudaAsync(wgmma_async_instr):
                                        for kk in seq(0, KK):
                                            Sm90_mma_async_{w}(D[cta, wg, :, :], A_s[cta, 64 * wg:64 * wg + 64, KS * kk:KS * kk + KS],
                                                               B_s[cta, :, KS * kk:KS * kk + KS], N=BN)
                    Fence(cuda_in_order, cuda_in_order)
                    for cta in cuda_threads(0, CL, unit=cuda_cta_in_cluster):
                        with CudaWarps(name="consumer"):
                            for wg in cuda_threads(0, 2, unit=cuda_warpgroup):
                                Sm90_mma_store_d_row_major_{c}(
                                    C[128 * (CL * (G * mg + mi) + cta) + 64 * wg:128 * (CL * (G * mg + mi) + cta) + 64 * wg + 64,
                                      BN * nt:BN * nt + BN],
                                    D[cta, wg, :, :], N=BN)
'''
with open(__file__) as _f:  # the line of `_UNPIPELINED = `: the text's statements point at this file's lines
    _UNPIPELINED_LINE = next(n for n, line in enumerate(_f, 1) if line.startswith("_UNPIPELINED = "))


def unpipelined(dt: str = "f16", BN: int = 256, S: int = 4, CL: int = 2, G: int = 8, out: str = "f32"):
    """The GEMM before its software pipeline (S is the ring depth `pipeline` will give it)."""
    t, w, _ = DTYPES[dt]
    _, consts = gemm_source(dt, BN, S, CL, G, out)
    suffix = "" if out == "f32" else f"_c{out}"
    src = _UNPIPELINED.format(name=f"{dt}_n{BN}_s{S}_c{CL}_g{G}{suffix}", t=t, w=w, c=out).strip("\n")
    if CL == 1:
        src = _single_cta(src)
    return sl.parse_source(src, filename=__file__, func_locals=consts, first_line=_UNPIPELINED_LINE + 1)


def pipeline(p, S: int):
    """Software pipeline of the K loop on the CTAs' `ring` barriers: the producer (stage 0) runs S - 1
    K-blocks ahead of the consumers (stage S - 1) through S slots of A_s and B_s in each CTA; pipeline_loop
    derives the ReverseAwait/Arrive around the loads, the consumers' Await (wgmma_async_smem: wgmma reads the
    slot) and their release of the slot to every CTA (`>> ring[:]`: B arrives by multicast), one K-block
    late: the wgmma that read it must be done (its commit group, one group left in flight), so the producer
    waits S - 1 releases back; a final wait on that group after the loop."""
    return pipeline_loop(p, "k", [0, S - 1], [0], "ring", release_with=CudaCommitGroup, reads_in_flight=1)


def scheduled_gemm(dt: str = "f16", BN: int = 256, S: int = 4, CL: int = 2, G: int = 8, out: str = "f32"):
    """make_gemm's kernel, reached by the schedule."""
    return pipeline(unpipelined(dt, BN, S, CL, G, out), S)


# ---- From the naive loop nest, step by step (the tutorial replays `STEPS`) ----
#
# `naive(cfg)` is C = A @ B^T as three loops. Each step of `STEPS` is one scheduling idea; the tenth is
# `pipeline` above, and the result is make_gemm's kernel (the same instrs and sync statements; index
# expressions in exo's forms). Multicast needs the order of step 5: while one per-CTA loop runs each CTA's loads
# and then its products, CTA 0's products would read the share of B that CTA 1 loads after them, so the loads
# go to a per-CTA loop of their own first (tests/test_pipeline_gemms.py runs that counterexample).


@dataclass(frozen=True)
class Config:
    """dt: "tf32", "f16" or "bf16"; BN columns per task, S ring slots, clusters of CL CTAs, groups of G; Q: the
    last step makes the kernel persistent on G x Q clusters (0: it stays one task per tile)."""

    dt: str = "f16"
    BN: int = 256
    S: int = 4
    CL: int = 2
    G: int = 8
    Q: int = 8

    @property
    def consts(self) -> dict:
        return gemm_source(self.dt, self.BN, self.S, self.CL, self.G, Q=self.Q)[1]

    @property
    def name(self) -> str:
        return f"gemm_sm90_{self.dt}_n{self.BN}_s{self.S}_c{self.CL}_g{self.G}" + (f"_q{self.Q}" if self.Q else "")


def naive(cfg: Config):
    """The loop nest we start from; the assertions say which sizes the tiles divide."""
    t, c = DTYPES[cfg.dt][0], cfg.consts
    src = f"""
def {cfg.name}(M: size, N: size, K: size, A: {t}[M, K] @ CudaGmemLinear, B: {t}[N, K] @ CudaGmemLinear,
               C: f32[M, N] @ CudaGmemLinear):
    assert M % {c["CM"]} == 0
    assert N % {c["NQ"] if cfg.Q else cfg.BN} == 0
    assert K % {c["SBK"] if cfg.Q else c["BK"]} == 0
    for i in seq(0, M):
        for j in seq(0, N):
            C[i, j] = 0.0
            for k in seq(0, K):
                C[i, j] += A[i, k] * B[j, k]
"""
    lines, start = inspect.getsourcelines(naive)
    first_line = start + next(n for n, line in enumerate(lines) if line.startswith("def {"))  # statements point at the lines of the text above
    return sl.parse_source(src.strip("\n"), filename=__file__, first_line=first_line)


def tile_output(p, cfg: Config):
    """1. Rows of C per task group (mg: G clusters), cluster (mi), CTA (cta: 128 rows), warpgroup (wg: 64 rows);
    columns per task (nt: BN). Tasks go mg, nt, mi: the G clusters of a group share B's columns in L2."""
    c = cfg.consts
    for it, size, names in [("i", c["CM"], ["mg", "i"]), ("i", 128 * cfg.CL, ["mi", "i"]), ("i", 128, ["cta", "i"]),
                            ("i", 64, ["wg", "m"]), ("j", cfg.BN, ["nt", "n"])]:  # fmt: skip
        p = divide_loop(p, it, size, names, perfect=True)
    for outer in ["m", "wg", "cta", "mi"]:
        p = reorder_loops(p, f"{outer} nt")
    return p


def accumulate_in_registers(p, cfg: Config):
    """2. Each warpgroup accumulates its 64 x BN tile in wgmma registers: D[cta, wg, m, n], declared per task and
    distributed over the CTAs and warpgroups; zero-fill, sum and store become three loop nests."""
    c = cfg.consts
    row = f"{c['CM']} * mg + {128 * cfg.CL} * mi + 128 * cta + 64 * wg + m"
    p = stage_mem(p, p.find("C[_] = 0.0").expand(0, 1), f"C[{row}, {cfg.BN} * nt + n]", "D")
    for it, extent in [("n", cfg.BN), ("m", 64), ("wg", 2), ("cta", cfg.CL)]:
        p = expand_dim(p, "D", extent, it)
        p = lift_alloc(p, "D")
    p = fission(p, p.find("D[_] = 0.0").after(), n_lifts=4)
    return fission(p, p.find_loop("k").after(), n_lifts=4)


def tile_k(p, cfg: Config):
    """3. K in blocks of BK (k, outermost in the sum: one shared-memory stage) and steps of KS (kk: one wgmma)."""
    c = cfg.consts
    p = divide_loop(p, "k", c["BK"], ["k", "ki"], perfect=True)
    p = divide_loop(p, "ki", c["KS"], ["kk", "ki"], perfect=True)
    for outer in ["n", "m", "wg", "cta"]:
        p = reorder_loops(p, f"{outer} k")
    for outer in ["n", "m"]:
        p = reorder_loops(p, f"{outer} kk")
    return p


def stage_tiles(p, cfg: Config):
    """4. Each CTA stages its 128 x BK tile of A and the BN x BK tile of B in shared memory, per K-block."""
    c = cfg.consts
    rows, BK = f"{c['CM']} * mg + {128 * cfg.CL} * mi + 128 * cta", c["BK"]
    for buf, window in [("A_s", f"A[{rows}:{rows} + 128, {BK} * k:{BK} * k + {BK}]"),
                        ("B_s", f"B[{cfg.BN} * nt:{cfg.BN} * nt + {cfg.BN}, {BK} * k:{BK} * k + {BK}]")]:  # fmt: skip
        p = simplify(stage_mem(p, p.find_loop("wg #1"), window, buf))
        p = expand_dim(p, buf, cfg.CL, "cta")
        p = lift_alloc(p, buf, n_lifts=2)
    return simplify(p)


def share_b_tile(p, cfg: Config):
    """5. Every CTA's loads come before any CTA's products (a per-CTA loop each), and the cluster shares B's tile:
    its CL CTAs need the same BN x BK tile, so CTA c loads its rows BNC * c up to BNC * (c + 1) into every CTA's
    B_s (a loop over the destination CTAs inside the loop over shares: one multicast copy in step 7). Sequentially
    nothing changes: every B_s holds the whole tile before any product reads it."""
    p = fission(p, p.find("B_s[_] = _").parent().parent().after())
    if cfg.CL == 1:
        return p
    p = fission(p, p.find("A_s[_] = _").parent().parent().after())
    p = divide_loop(p, p.find("B_s[_] = _").parent().parent(), cfg.consts["BNC"], ["c", "i0"], perfect=True)
    return reorder_loops(p, p.find("B_s[_] = _").parent().parent().parent().parent())


def use_instructions(p, cfg: Config):
    """6. Zero-fill, wgmma (64 x BN x KS per warpgroup) and the accumulator store become instrs; D lives in
    wgmma registers, A_s and B_s in 128-byte-swizzled shared memory (one swizzle row of K per tile row)."""
    p = replace(p, p.find("D[_] = 0.0").parent().parent(), Sm90_zero_scale_d_f32.instantiate(N=cfg.BN))
    p = replace(p, p.find("C[_] = D[_]").parent().parent(), Sm90_mma_store_d_row_major_f32.instantiate(N=cfg.BN))
    wgmma = globals()[f"Sm90_mma_async_{DTYPES[cfg.dt][1]}"].instantiate(N=cfg.BN)
    p = replace(p, p.find("D[_] += _").parent().parent().parent(), wgmma)
    for buf, mem in [("D", Sm90_RmemMatrixD), ("A_s", Sm90_SmemSwizzled(128)), ("B_s", Sm90_SmemSwizzled(128))]:
        p = set_memory(p, buf, mem)
    return p


def use_tma(p, cfg: Config):
    """7. The tile loads become TMA copies from tensor maps of A and B, completing on the barriers of a new array
    `ring` (one mbarrier per CTA of the cluster): A's on its CTA's, each share of B multicast to every CTA and
    completing on every CTA's (`>> ring[:]`); the per-CTA loops of the two loads become one."""
    BK, BNC, t = cfg.consts["BK"], cfg.consts["BNC"], DTYPES[cfg.dt][0]
    p = insert_barrier_alloc(p, p.find_loop("k").before(), "ring", [cfg.CL], CudaMbarrier)
    copy = globals()[f"Sm90_copy_tensor_to_smem_swizzled_2{t}"]
    loads = [("A_s", copy.instantiate(box=(128, BK)), 2, "ring[cta]")]  # (buffer, instr, loops it replaces, barrier)
    if cfg.CL == 1:
        loads.append(("B_s", copy.instantiate(box=(cfg.BN, BK)), 2, "ring[cta]"))
    else:
        multicast = globals()[f"Sm90_multicast_copy_tensor_to_smem_swizzled_2{t}"]
        loads.append(("B_s", multicast.instantiate(box=(BNC, BK), ncta=cfg.CL), 3, "ring[:]"))
    for buf, instr, n_loops, barrier in loads:
        nest = p.find(f"{buf}[_] = _")
        for _ in range(n_loops):
            nest = nest.parent()
        p = replace(p, nest, instr)
        p = complete_on(p, p.find(f"{instr.name()}(_)"), barrier)
    if cfg.CL > 1:
        p = fuse(p, *p.find_loop("k").body()[0:2])
    p = make_tensor_map(p, "A", "A_tm", 128, (128, BK))
    p = make_tensor_map(p, "B", "B_tm", 128, (BNC, BK))
    return simplify(p)


def warp_specialize(p, cfg: Config):
    """8. One producer thread issues the loads (asynchronous: TMA); the consumer warpgroups fence their
    registers once, after the zero-fill (in the K loop wgmma follow wgmma only), and issue the wgmma
    asynchronously; a CTA Fence after the K loop (the next task's loads)."""
    p = wrap_with_context(p, p.find_loop("k").body()[0].body()[0:2], CudaAsync(tma_to_smem_async_instr))
    p = single_thread(p, p.find_loop("k").body()[0].body()[0:1], "t")
    p = wrap_with_context(p, p.find_loop("t").expand(0, 0), CudaWarps(name="producer"))
    zero = Sm90_zero_scale_d_f32.instantiate(N=cfg.BN).name()
    p = insert_fence(p, p.find(f"{zero}(_)").after(), wgmma_fence_1, wgmma_fence_2)
    p = wrap_with_context(p, p.find_loop("kk").expand(0, 0), CudaAsync(wgmma_async_instr))
    for wg in p.find_loop("wg", many=True):
        p = wrap_with_context(p, wg.expand(0, 0), CudaWarps(name="consumer"))
    return insert_fence(p, p.find_loop("k").after(), cuda_in_order, cuda_in_order)


def map_to_gpu(p, cfg: Config):
    """9. On the GPU: task loops (mg, nt, mi), one CTA of the cluster per `cta`, one warpgroup per `wg`,
    in a device function of clusters of CL with the producer/consumer warps of WARPS."""
    for it in ["mg", "nt", "mi"]:
        p = set_loop_mode(p, it, cuda_tasks)
    for loop in p.find_loop("cta", many=True):
        p = set_loop_mode(p, loop, cuda_threads(unit=cuda_cta_in_cluster))
    for loop in p.find_loop("wg", many=True):
        p = set_loop_mode(p, loop, cuda_threads(unit=cuda_warpgroup))
    return wrap_with_context(p, p.find_loop("mg").expand(0, 0), CudaDeviceFunction(clusterDim=cfg.CL, warp_config=WARPS))


def software_pipeline(p, cfg: Config):
    """10. The ring (`pipeline` above): S slots, the producer S - 1 K-blocks ahead, every count derived."""
    return pipeline(p, cfg.S)


def make_persistent(p, cfg: Config):
    """11. Persistent (`_persistent`'s kernel): G x Q clusters, each looping over its tiles
    (cluster row G * mg + mi, column tile Q * nq + q). The ring, tiles and accumulator are allocated once per
    cluster, so the ring runs on from tile to tile; the Fence between tiles goes (a sync statement does nothing
    sequentially, so exo lets fission move it out of the tile loops) for one at the end. Q = 0: one task per tile."""
    if not cfg.Q:
        return p
    p = divide_loop(p, "nt", cfg.Q, ["nq", "q"], perfect=True)
    for pair in ["q mi", "nq mi", "mg mi", "nq q", "mg q"]:  # mg nq q mi -> mi q mg nq
        p = reorder_loops(p, pair)
    for it in ["mg", "nq"]:
        p = set_loop_mode(p, it, "seq")
    for buf in ["D", "A_s", "B_s", "ring", "cg"]:
        p = lift_alloc(p, buf, n_lifts=2)
    fence = "Fence(cuda_in_order, cuda_in_order)"
    p = reorder_stmts(p, p.find(fence).expand(0, 1))  # past the store: the tile's last statement
    p = fission(p, p.find(fence).before(), n_lifts=2)
    p = remove_loop(p, p.find(fence).parent().parent())
    return remove_loop(p, p.find(fence).parent())


STEPS = [tile_output, accumulate_in_registers, tile_k, stage_tiles, share_b_tile, use_instructions, use_tma,
         warp_specialize, map_to_gpu, software_pipeline, make_persistent]  # fmt: skip


def schedule(p, cfg: Config, upto: int = len(STEPS)):
    """The naive proc after the first `upto` steps."""
    for step in STEPS[:upto]:
        p = step(p, cfg)
    return p


# The runnable-example tests feed these float32 inputs (make_args; Q = 3: its N is three 256-column tiles).
PROCS = [make_gemm("tf32", CL=2, G=1), make_gemm("tf32", CL=2, G=1, clip=True), make_gemm("tf32", CL=2, G=1, Q=3),
         make_gemm("tf32", CL=2, G=1, Q=3, clip=True)]
ARCH = "sm_90a"  # TMA, wgmma, setmaxnreg, clusters


def sanitized_procs() -> list:
    """What benchmarks/sanitize_examples.py runs: PROCS and the kernel the tutorial's steps build for make_args'
    shapes (renamed `..._steps`: it has PROCS[2]'s name). Scheduled on call (seconds), not at import."""
    cfg = Config("tf32", G=1, Q=3)
    return PROCS + [rename(schedule(naive(cfg), cfg), cfg.name + "_steps")]
TOLERANCE = dict(rtol=2e-2, atol=2e-2)  # tf32 reads 10 mantissa bits (truncated); f16 inputs are exact


def reference(M: int, N: int, K: int, A: np.ndarray, B: np.ndarray, C: np.ndarray) -> dict:
    return {"C": (A.astype(np.float64) @ B.astype(np.float64).T).astype(np.float32)}


def make_args(rng: np.random.Generator, n: int = 512, dtype=np.float32, proc=None) -> dict:
    """M = n, N = n + 256, K = n / 2: not square, so swapped indices show (n a multiple of 512); for a GEMM with
    partial tiles (`clip`) sizes that no tile divides (K a multiple of 4: TMA's rows are 16-byte aligned)."""
    M, N, K = (n - 83, n + 173, n // 2 + 20) if proc is not None and "_clip" in str(proc.name()) else (n, n + 256, n // 2)
    scale = np.float32(K**-0.25)  # C of unit variance at every K: TOLERANCE's atol stays a fixed number of sigmas
    A = (rng.standard_normal((M, K), dtype=np.float32) * scale).astype(dtype)
    B = (rng.standard_normal((N, K), dtype=np.float32) * scale).astype(dtype)
    return {"M": M, "N": N, "K": K, "A": A, "B": B, "C": np.full((M, N), np.nan, dtype=np.float32)}


if __name__ == "__main__":
    print(PROCS[0])
