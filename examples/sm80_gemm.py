"""Sm80 GEMM C = A @ B (A, B row-major tf32/f16/bf16, C row-major f32), scheduled from the naive loop nest;
with `Config.b_nk`, C = A @ B^T for B given as [N, K] (tf32: both operands' fragments then load with ldmatrix);
with `Config.swap_ab` (tf32, B as [K, N]) the mma computes C^T = B^T A^T, so that B's fragments load as pairs of
adjacent words and A's with ldmatrix: as fast as the [N, K] form on the issue's layout.

The schedule is the way a CUDA expert writes this kernel on Ampere's instructions:
one CTA per BM x BN tile of C, its accumulators distributed over the warps
(warp (wm, wn) owns a WM x WN tile: D[wm, wn, ...] is declared at CTA scope);
the whole CTA stages A and B tiles with 16-byte cp.async into an S-slot
shared-memory ring, one commit group per K tile; rows padded by 16 bytes so
the fragment loads (ldmatrix) hit distinct banks; mma.sync m16n8k8 (tf32) or
m16n8k16 (f16, bf16) with f32 accumulation. Tile sizes are parameters
(`Config`). Each step of `STEPS` is one scheduling idea, so the tutorial can
replay them one at a time (`schedule(naive(cfg), cfg, upto=k)`).

Step 9 (the software pipeline) is `pipeline_loop`: it gives A_s and B_s their
ring dimension, builds prologue, steady state and epilogue and derives every
commit-group count; `sl.sync_check` checks the result. With
`Config.fragments_ahead` (the default) the first k-step's fragment loads are
a stage of their own and each time step runs in the order of the hand DB
kernel (benchmarks/sm80_hand/gemm_hand.cu): copies, products up to the last
k-step's fragment loads, wait and barrier, the next tile's first fragments,
the last k-step's products. Without it every tile's products follow its
barrier; `HAND_STEPS` build that ring by hand, the reference it is compared
with: the same CUDA but for the epilogue, which waits tile by tile instead of
once.

D is one shard of WM x WN accumulators per warp once the distributed-memory
lowering (issue 11, items 1-5) is in: the generated kernel then declares
`float D[128]` per thread (ptxas for sm_90a: f16/bf16 250 registers with
fragments ahead, 226 without, no spills); without it, every thread
would declare the whole CTA tile.

Run `python examples/sm80_gemm.py` to see the kernel and sync_check pass on it
at M = N = 256, K = 128; `benchmarks/gemm.py` times it against cuBLAS.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass

import numpy as np

import spork_lab as sl
from spork_lab.platforms.cuda import *
from spork_lab.platforms.Sm80 import *
from spork_lab.scheduling import *


@dataclass(frozen=True)
class Config:
    """dtype: "tf32" (f32 data), "f16" or "bf16"; CTA tile BM x BN x BK, warp tile WM x WN, S ring slots;
    blocks_per_sm CTAs resident on each SM (the persistent grid's size); fragments_ahead: the first k-step's
    fragments of each K tile load one pipeline stage before its products, right after the barrier that sits
    before the last k-step's products of the tile before (step 9), so the tensor cores have work across every
    barrier; b_nk: B is given as [N, K] (C = A @ B^T), K contiguous like A, so that tf32 B fragments load with
    ldmatrix as A's do (only 2-byte types have a transposing ldmatrix), unrounded (`_trunc`); swap_ab (tf32, B
    as [K, N]): the mma's operands swapped, D^T = B^T A^T, so that B's tile is the hardware's A operand and loads
    with 8-byte pairs straight into its registers, A's with ldmatrix, both unrounded; late_copy
    (without fragments_ahead): each K tile's products are issued before the copies of the
    tile S - 1 ahead (else after), so fragment loads do not queue behind them."""

    dtype: str = "f16"
    BM: int = 128
    BN: int = 256
    BK: int = 64
    WM: int = 64
    WN: int = 64
    S: int = 4
    blocks_per_sm: int = 1
    fragments_ahead: bool = True
    late_copy: bool = False
    b_nk: bool = False
    swap_ab: bool = False

    def __post_init__(self) -> None:
        """Refuses up front the combinations the schedule cannot build (they would fail deep in a step, or
        build a racy kernel), naming the parameters and why."""
        if self.dtype not in ("tf32", "f16", "bf16"):
            raise ValueError(f"dtype={self.dtype!r} is not supported: Sm80's mma.sync instrs here take "
                             f"'tf32' (f32 data), 'f16' or 'bf16'")
        if self.swap_ab and (self.dtype != "tf32" or self.b_nk):
            raise ValueError(f"swap_ab is for tf32 with B given as [K, N] (got dtype={self.dtype!r}, "
                             f"b_nk={self.b_nk}): only tf32 has the swapped-operand instrs")
        if self.b_nk and self.dtype != "tf32":
            raise ValueError(f"b_nk=True is for tf32 only (got dtype={self.dtype!r}): 2-byte B fragments load "
                             f"with ldmatrix.trans from B given as [K, N], and there is no [N, K] load for them")
        if self.S < 2:
            raise ValueError(f"S={self.S} is not supported: the ring needs S >= 2 slots (with one, the copies of "
                             f"a tile would follow the Fence that shows them to the warps: a racy kernel)")
        if self.fragments_ahead and self.S < 3:
            raise ValueError(f"fragments_ahead=True needs S >= 3 ring slots (got S={self.S}): its first "
                             f"fragment loads are a pipeline stage of their own; use fragments_ahead=False")
        if self.late_copy and self.fragments_ahead:
            raise ValueError("late_copy=True is a variant of the pipeline without fragments_ahead: pass "
                             "fragments_ahead=False")
        if self.BK % self.KS:
            raise ValueError(f"BK={self.BK} is not a multiple of {self.KS}, the K of one {self.dtype} mma "
                             f"(each K tile is whole k-steps)")
        if self.fragments_ahead and self.BK < 2 * self.KS:
            raise ValueError(f"fragments_ahead=True needs two k-steps per K tile or more (BK >= {2 * self.KS} "
                             f"for {self.dtype}, got BK={self.BK}); use fragments_ahead=False")
        # fragments load two at a time (ldmatrix.x4) along n (along m where swapped), except tf32 B as [K, N]
        pair_m, pair_n = self.swap_ab, not self.swap_ab and (self.dtype != "tf32" or self.b_nk)
        for name, warp, frag, pairs in [("WM", self.WM, self.FM, pair_m), ("WN", self.WN, self.FN, pair_n)]:
            if warp % (2 * frag if pairs else frag):
                raise ValueError(f"{name}={warp} is not a multiple of {2 * frag if pairs else frag}: a warp tile is "
                                 f"whole {self.FM} x {self.FN} mma tiles" + (", loaded two at a time" if pairs else ""))
        for name, cta, warp in [("BM", self.BM, self.WM), ("BN", self.BN, self.WN)]:
            if cta % warp:
                raise ValueError(f"{name}={cta} is not a multiple of W{name[1]}={warp}: each warp owns a "
                                 f"WM x WN tile of the CTA's BM x BN tile")
        # each pass of the CTA's threads copies whole rows of a tile (16 bytes a thread): they must divide its rows
        a_tile = (("BM", self.BM), ("BK", self.BK))
        b_tile = (("BN", self.BN), ("BK", self.BK)) if self.b_nk else (("BK", self.BK), ("BN", self.BN))
        for buf, ((rows_name, rows), (cols_name, cols)) in [("A", a_tile), ("B", b_tile)]:
            chunks = cols // self.CH
            per_pass = self.threads // chunks
            if per_pass == 0 or rows % per_pass:
                why = (f"a row's {chunks} 16-byte chunks outnumber them" if per_pass == 0 else
                       f"{chunks} 16-byte chunks a row make {per_pass} rows a pass, which do not divide {rows}")
                raise ValueError(f"{rows_name}={rows}, {cols_name}={cols}: {buf}'s tile cannot be copied in whole "
                                 f"passes of the CTA's {self.threads} threads ({why})")

    @property
    def swap(self) -> str:  # in the names of the swapped-operand instrs
        return "swap_" if self.swap_ab else ""

    @property
    def mma(self) -> str:  # the name of the mma instr
        return f"Sm80_mma_{self.swap}{self.dtype}"

    @property
    def FM(self) -> int:  # rows (m) of one mma's accumulator tile
        return 8 if self.swap_ab else 16

    @property
    def FN(self) -> int:  # columns (n) of one mma's accumulator tile
        return 16 if self.swap_ab else 8

    @property
    def elem(self) -> str:  # the element type of A and B
        return "f32" if self.dtype == "tf32" else self.dtype

    @property
    def KS(self) -> int:  # K of one mma
        return 8 if self.dtype == "tf32" else 16

    @property
    def CH(self) -> int:  # elements in 16 bytes (one cp.async, one ldmatrix row)
        return 4 if self.dtype == "tf32" else 8

    @property
    def threads(self) -> int:
        return (self.BM // self.WM) * (self.BN // self.WN) * 32

    @property
    def name(self) -> str:
        return f"sm80_gemm_{self.dtype}{'_nk' if self.b_nk else ''}{'_swap' if self.swap_ab else ''}"

    @property
    def tiles(self) -> str:  # e.g. 128x256x64_w64x64_s4_b1
        late = "_late" if self.late_copy else ""
        plain = "" if self.fragments_ahead else "_plain"
        return f"{self.BM}x{self.BN}x{self.BK}_w{self.WM}x{self.WN}_s{self.S}_b{self.blocks_per_sm}{plain}{late}"


def naive(cfg: Config):
    """The loop nest we start from; the assertions say which sizes the tiles divide (and that the K loop runs
    long enough for the pipeline's prologue)."""
    b_shape, b_elem = ("N, K", "B[j, k]") if cfg.b_nk else ("K, N", "B[k, j]")
    src = f"""
def {cfg.name}(M: size, N: size, K: size, A: {cfg.elem}[M, K] @ CudaGmemLinear, B: {cfg.elem}[{b_shape}] @ CudaGmemLinear,
               C: f32[M, N] @ CudaGmemLinear):
    assert M % {cfg.BM} == 0
    assert N % {cfg.BN} == 0
    assert K % {cfg.BK} == 0
    assert K >= {cfg.BK * (cfg.S - 1)}
    for i in seq(0, M):
        for j in seq(0, N):
            C[i, j] = 0.0
            for k in seq(0, K):
                C[i, j] += A[i, k] * {b_elem}
"""
    # statements point at the lines of the text above (hazards and errors name this file)
    lines, start = inspect.getsourcelines(naive)
    first_line = start + next(n for n, line in enumerate(lines) if line.startswith("def {"))
    return sl.parse_source(src.strip("\n"), filename=__file__, first_line=first_line)


def tile_output(p, cfg: Config):
    """1. C tiles per CTA (mt, nt), per warp (wm, wn), per mma fragment (fi, fj), elements (m, n)."""
    for it, sizes, names in [("i", (cfg.BM, cfg.WM, cfg.FM), ("mt", "wm", "fi", "m")),
                             ("j", (cfg.BN, cfg.WN, cfg.FN), ("nt", "wn", "fj", "n"))]:  # fmt: skip
        for k, size in enumerate(sizes):
            inner = names[-1] if k == len(sizes) - 1 else it
            p = divide_loop(p, it, size, [names[k], inner], perfect=True)
    for outer, inner in [("m", "nt"), ("fi", "nt"), ("wm", "nt"), ("m", "wn"), ("fi", "wn"), ("m", "fj")]:
        p = reorder_loops(p, f"{outer} {inner}")
    return p


def accumulate_in_registers(p, cfg: Config):
    """2. Each C element accumulates in a register; the CTA's registers form D[wm, wn, fi, fj, m, n],
    declared at CTA scope and distributed over the warps; zero-fill, sum and store become three loop nests."""
    window = f"C[{cfg.BM} * mt + {cfg.WM} * wm + {cfg.FM} * fi + m, {cfg.BN} * nt + {cfg.WN} * wn + {cfg.FN} * fj + n]"
    p = stage_mem(p, p.find("C[_] = 0.0").expand(0, 1), window, "D")
    for it, extent in [("n", cfg.FN), ("m", cfg.FM), ("fj", cfg.WN // cfg.FN), ("fi", cfg.WM // cfg.FM),
                       ("wn", cfg.BN // cfg.WN), ("wm", cfg.BM // cfg.WM)]:  # fmt: skip
        p = expand_dim(p, "D", extent, it)
        p = lift_alloc(p, "D")
    p = fission(p, p.find("D[_] = 0.0").after(), n_lifts=6)
    return fission(p, p.find_loop("k").after(), n_lifts=6)


def tile_k(p, cfg: Config):
    """3. K in tiles of BK (kt, outermost: the CTA's shared-memory stage) and steps of KS (kk: one mma)."""
    p = divide_loop(p, "k", cfg.BK, ["kt", "k"], perfect=True)
    p = divide_loop(p, "k", cfg.KS, ["kk", "k"], perfect=True)
    for outer in ["n", "m", "fj", "fi", "wn", "wm"]:
        p = reorder_loops(p, f"{outer} kt")
    for outer in ["n", "m", "fj", "fi"]:
        p = reorder_loops(p, f"{outer} kk")
    return p


def stage_tiles(p, cfg: Config):
    """4. The CTA stages A and B tiles in shared memory; each warp loads its fragments from there."""
    kt_body = lambda: p.find_loop("wm #1").expand(0, 0)  # noqa: E731 -- re-found after each step
    p = stage_mem(p, kt_body(), f"A[{cfg.BM} * mt:{cfg.BM} * mt + {cfg.BM}, {cfg.BK} * kt:{cfg.BK} * kt + {cfg.BK}]", "A_s")
    k_tile, n_tile = f"{cfg.BK} * kt:{cfg.BK} * kt + {cfg.BK}", f"{cfg.BN} * nt:{cfg.BN} * nt + {cfg.BN}"
    p = stage_mem(p, kt_body(), f"B[{n_tile}, {k_tile}]" if cfg.b_nk else f"B[{k_tile}, {n_tile}]", "B_s")
    p = simplify(p)
    kk_body = lambda: p.find_loop("fi #1").expand(0, 0)  # noqa: E731
    p = stage_mem(p, kk_body(), f"A_s[{cfg.WM} * wm:{cfg.WM} * wm + {cfg.WM}, {cfg.KS} * kk:{cfg.KS} * kk + {cfg.KS}]", "A_r")
    k_step, n_warp = f"{cfg.KS} * kk:{cfg.KS} * kk + {cfg.KS}", f"{cfg.WN} * wn:{cfg.WN} * wn + {cfg.WN}"
    p = stage_mem(p, kk_body(), f"B_s[{n_warp}, {k_step}]" if cfg.b_nk else f"B_s[{k_step}, {n_warp}]", "B_r")
    p = simplify(p)
    # fragments: A_r[fi, m, k] (FM x KS each; [fi, k, m] where swapped), B_r[fj, k, n] (KS x FN each)
    p = _fragments_of_rows(p, "A_r", cfg.FM, ["fi", "m"], k_first=cfg.swap_ab)
    if cfg.b_nk:  # B_r[n, k] -> B_r[fj, k, n]; loops fj, n, k
        p = _fragments_of_rows(p, "B_r", cfg.FN, ["fj", "n"], k_first=True)
    else:  # B_r[k, n] -> B_r[fj, k, n]; loops fj, k, n
        p = divide_dim(p, "B_r", 1, cfg.FN)
        p = rearrange_dim(p, "B_r", [1, 0, 2])
        p = divide_loop(p, p.find("B_r[_] = _").parent(), cfg.FN, ["fj", "n"], perfect=True)
        p = reorder_loops(p, p.find("B_r[_] = _").parent().parent().parent())
    return simplify(p)


def _fragments_of_rows(p, buf: str, rows: int, names: list, k_first: bool):
    """buf[r, k] (rows in the first dimension) -> buf[f, r, k], or buf[f, k, r] with k_first; loops f, r, k."""
    p = divide_dim(p, buf, 0, rows)
    if k_first:
        p = rearrange_dim(p, buf, [0, 2, 1])
    return divide_loop(p, p.find(f"{buf}[_] = _").parent().parent(), rows, names, perfect=True)


def use_instructions(p, cfg: Config):
    """5. Fragment loads, mma, zero-fill and store of the accumulators become mma.sync instrs; memories.
    2-byte B fragments load in pairs (one ldmatrix.x4.trans for two n8 fragments: half the instructions)."""
    # tf32 B fragments load in pairs too where B is given as [N, K] (plain ldmatrix.x4), else element by element
    # (ldmatrix transposes only 16-bit elements)
    # Swapped (swap_ab), A's fragments are the hardware's B operand, in pairs like [N, K] B's, and B's its A operand.
    tf32_nk = cfg.b_nk and cfg.dtype == "tf32"
    if cfg.swap_ab:
        p = _load_pairs(p, "A_r", Sm80_mma_load_b_pair_nk_tf32_trunc)
        p = replace(p, p.find("B_r[_] = _").parent().parent(), Sm80_mma_load_b_swap_tf32_trunc)
    else:
        load_a = "Sm80_mma_load_a_tf32_trunc" if tf32_nk else f"Sm80_mma_load_a_{cfg.dtype}"
        p = replace(p, p.find("A_r[_] = _").parent().parent(), globals()[load_a])
        if cfg.dtype == "tf32" and not cfg.b_nk:
            p = replace(p, p.find("B_r[_] = _").parent().parent(), Sm80_mma_load_b_tf32)
        else:
            load_b = "Sm80_mma_load_b_pair_nk_tf32_trunc" if tf32_nk else f"Sm80_mma_load_b_pair_{cfg.dtype}"
            p = _load_pairs(p, "B_r", globals()[load_b])
    p = replace(p, p.find("D[_] += _").parent().parent().parent(), globals()[cfg.mma])
    p = replace(p, p.find("D[_] = 0.0").parent().parent(), globals()[f"Sm80_mma_zero_d_{cfg.swap}tf32"])
    p = replace(p, p.find("C[_] = D[_]").parent().parent(), globals()[f"Sm80_mma_store_d_{cfg.swap}tf32"])
    a_mem, b_mem = (Sm80_RmemMatrixB, Sm80_RmemMatrixA) if cfg.swap_ab else (Sm80_RmemMatrixA, Sm80_RmemMatrixB)
    for buf, mem in [("D", Sm80_RmemMatrixD), ("A_r", a_mem), ("B_r", b_mem), ("A_s", CudaSmemLinear),
                     ("B_s", CudaSmemLinear)]:  # fmt: skip
        p = set_memory(p, buf, mem)
    return simplify(p)


def _load_pairs(p, buf: str, load_pair):
    """The loop over buf's fragments, in pairs, becomes load_pair (one ldmatrix.x4 for two fragments)."""
    loop = p.find(f"{buf}[_] = _").parent().parent().parent()
    p = divide_loop(p, loop, 2, [f"{loop.name()}o", f"{loop.name()}i"], perfect=True)
    return replace(p, p.find(f"{buf}[_] = _").parent().parent().parent(), load_pair)


def copy_with_cp_async(p, cfg: Config):
    """6. Thread (r, c) of the CTA copies 16-byte chunk c of rows r, r + rows_per_pass, ... with cp.async."""
    cp_async = globals()[f"Sm80_cp_async_{cfg.elem}"].instantiate(size=16)
    for n_copy, (buf, cols) in enumerate([("A_s", cfg.BK), ("B_s", cfg.BK if cfg.b_nk else cfg.BN)]):
        rows_per_pass = cfg.threads // (cols // cfg.CH)
        row_loop = p.find(f"{buf}[_] = _").parent().parent()
        p = divide_loop(p, row_loop.body()[0], cfg.CH, ["c", "e"], perfect=True)
        p = divide_loop(p, row_loop, rows_per_pass, ["q", "r"], perfect=True)
        p = reorder_loops(p, p.find(f"{buf}[_] = _").parent().parent().parent().parent())
        p = reorder_loops(p, p.find(f"{buf}[_] = _").parent().parent().parent())
        p = replace(p, p.find(f"{buf}[_] = _").parent(), cp_async)
        copy = p.find(f"{cp_async.name()}(_)", many=True)[n_copy]
        p = wrap_with_context(p, copy.parent(), CudaAsync(Sm80_cp_async_instr))
    return simplify(p)


def pad_rows(p, cfg: Config):
    """7. Rows padded by 16 bytes (tf32 B: 32), so the 8 rows of an ldmatrix (and tf32's scalar B loads)
    fall in distinct banks."""
    # (tf32 B given as [N, K] is padded like A: its fragments load with ldmatrix)
    p = resize_dim(p, "A_s", 1, cfg.BK + cfg.CH, 0)
    return resize_dim(p, "B_s", 1, cfg.BK + cfg.CH if cfg.b_nk else cfg.BN + 8, 0)


def fence_tiles(p, cfg: Config):
    """8. CTA Fences: one at the top of each K tile (every warp then sees the whole CTA's copies of the tile,
    and the products of the previous tile are done reading the slot the next copies overwrite), one after each
    task (the CTA's next task reuses the shared memory)."""
    p = insert_fence(p, p.find_loop("kt").body()[0].before(), cuda_in_order, Sm80_generic)
    return insert_fence(p, p.find_loop("nt").body()[-1].after(), cuda_in_order, cuda_in_order)


def pipeline(p, cfg: Config):
    """9. Software pipeline (`pipeline_loop`): the copies (stage 0) run S - 1 tiles ahead of the products
    (stage S - 1) through an S-slot ring of A_s and B_s; one commit group per tile, and before the Fence that
    shows tile kt to every warp each thread waits for its own copies of it. With fragments_ahead the first
    k-step's fragment loads (and the Fence) are a stage of their own, S - 2, and a time step runs (`order=`)
    the copies, the oldest tile's products up to its last fragment loads, the wait and the Fence, the next
    tile's first fragments, then the oldest tile's last products: the tensor cores have work on both sides of
    the barrier, and each wait leaves S - 2 copy groups in flight, as the hand kernel's. Without it, late_copy
    moves the steady state's products before its copies (they read another slot: exo lets them swap)."""
    if cfg.fragments_ahead:  # (Config refuses late_copy with it)
        return _pipeline_fragments_ahead(p, cfg)
    p = pipeline_loop(p, "kt", {"A_s": 0, "B_s": 0, "*": cfg.S - 1}, [0], CudaCommitGroup, barrier_name="cg")
    if cfg.late_copy:  # [Await, Fence, copy A, copy B, Arrive, products] -> [Await, Fence, products, copy A, ...]
        for k in (4, 3, 2):
            p = reorder_stmts(p, p.find_loop("kt #1").body()[k : k + 2])
    return simplify(p)


def _pipeline_fragments_ahead(p, cfg: Config):
    """Step 9 with the first k-step's fragment loads (L0) a stage ahead of the rest of the products, in the
    hand DB kernel's order: each time step copies, multiplies up to the last k-step's fragment loads (the last
    reads of the slot; each k-step's loads come before the products of the k-step before), waits and fences,
    loads the next tile's L0, then issues the last k-step's products."""
    # the first k-step and the last out of the kk loop; their fragment registers move to CTA scope, distributed
    # over the warps and allocated above the K loop (they live across the barrier)
    p = cut_loop(p, p.find_loop("kk"), 1)
    p = unroll_loop(p, p.find_loop("kk"))
    if cfg.BK > 2 * cfg.KS:
        p = cut_loop(p, p.find_loop("kk"), cfg.BK // cfg.KS - 1)
    p = unroll_loop(p, p.find_loop("kk", many=True)[-1])
    for buf in ["A_r", "B_r"]:
        allocs = p.find(f"{buf} : _", many=True)  # k-steps 0, 1 to KK - 2 (if any), KK - 1
        for alloc in (allocs[0], allocs[-1]):
            for it, extent in [("wn", cfg.BN // cfg.WN), ("wm", cfg.BM // cfg.WM)]:
                p = expand_dim(p, p.forward(alloc), extent, it)
                p = lift_alloc(p, p.forward(alloc))
            p = lift_alloc(p, p.forward(alloc))
    # K tile body: [Fence, A_s, copy A, B_s, copy B, L0, products up to the last k-step's loads, the last products]
    p = fission(p, p.find(f"{cfg.mma}(_)").parent().parent().before(), n_lifts=2)
    p = fission(p, p.find(f"{cfg.mma}(_)", many=True)[-1].parent().parent().before(), n_lifts=2)
    # in the products before the barrier each k-step's fragment loads move above the k-step before's products
    # (their latency overlaps those mma): [M0, (A_r, LA, B_r, LB, M) x (KK - 2), LA_last, LB_last] becomes
    # [A_r, LA, B_r, LB, M0, ..., LA_last, LB_last, M_(KK-2)]
    KK = cfg.BK // cfg.KS
    if KK > 2:
        p = unroll_loop(p, p.find_loop("kk"))
    warp = p.find(f"{cfg.mma}(_)").parent().parent().parent()  # the wn loop of those products
    for k in range(KK - 1):
        for j in range(4 if k < KK - 2 else 2):
            p = reorder_stmts(p, p.forward(warp).body()[5 * k + j : 5 * k + j + 2])
    # stages: copies 0; Fence and L0 S - 2; the products S - 1. A time step runs the copies, the products of its
    # oldest tile up to the last loads of its slot, then the Fence (after the wait for the next tile) and
    # that tile's L0, then the oldest tile's last products: L0's registers are read (by the first products)
    # before they are refilled in the same time step, so they need no second slot.
    S = cfg.S
    return simplify(pipeline_loop(p, "kt", [S - 2, 0, 0, 0, 0, S - 2, S - 1, S - 1], [0], CudaCommitGroup,
                                  barrier_name="cg", order=[1, 2, 3, 4, 6, 0, 5, 7]))


def map_to_gpu(p, cfg: Config):
    """10. A persistent kernel: one CTA task per C tile; warps (wm, wn); copying threads (r, c)."""
    p = set_loop_mode(p, "mt", cuda_tasks)
    p = set_loop_mode(p, "nt", cuda_tasks)
    p = wrap_with_context(p, p.find_loop("mt"), CudaDeviceFunction(blockDim=cfg.threads, blocks_per_sm=cfg.blocks_per_sm))
    for loop in p.find_loop("wm", many=True):
        p = set_loop_mode(p, loop, cuda_threads(unit=(cfg.BN // cfg.WN) * cuda_warp))
    for loop in p.find_loop("wn", many=True):
        p = set_loop_mode(p, loop, cuda_threads(unit=cuda_warp))
    for loop in p.find_loop("r", many=True):
        p = set_loop_mode(p, loop, cuda_threads(unit=loop.body()[0].hi().value() * cuda_thread))
    for loop in p.find_loop("c", many=True):
        p = set_loop_mode(p, loop, cuda_threads)
    return p


STEPS = [tile_output, accumulate_in_registers, tile_k, stage_tiles, use_instructions, copy_with_cp_async, pad_rows,
         fence_tiles, pipeline, map_to_gpu]  # fmt: skip


def schedule(p, cfg: Config, upto: int = len(STEPS), steps: list = STEPS):
    """The naive proc after the first `upto` steps."""
    for step in steps[:upto]:
        p = step(p, cfg)
    return p


# ---- The same ring built by hand: the reference pipeline_loop's is compared with (tests/test_pipeline_gemms.py,
# benchmarks/gemm.py's *_hand rows). exo 1.0's fission/fuse analyses see the ring's slots reused and its
# buffer-folding analysis cannot bound loops with symbolic trip counts: these steps need its unsafe flags.


def pipeline_by_hand(p, cfg: Config):
    """8 (by hand). Software pipeline through an S-slot ring: tile kt + S - 1 is copied while tile kt is multiplied
    (prologue: the first S - 1 copies; epilogue: the last S - 1 products); with late_copy the products come
    first in the loop body (they read another slot, so exo lets them swap). Unsafe flags: see above."""
    S, KT = cfg.S, f"K / {cfg.BK}"
    for buf in ["A_s", "B_s"]:
        p = expand_dim(p, buf, S, f"kt % {S}")
        p = lift_alloc(p, buf)
    p = fission(p, p.find_loop("kt").body()[1].after(), unsafe_disable_checks=True)
    p = cut_loop(p, p.find_loop("kt"), S - 1)
    p = cut_loop(p, p.find_loop("kt #2"), f"{KT} - {S - 1}")
    p = shift_loop(p, p.find_loop("kt #1"), 0)
    p = fuse(p, p.find_loop("kt #1"), p.find_loop("kt #2"), unsafe_disable_check=True)
    if cfg.late_copy:  # [copy A, copy B, products] -> [products, copy A, copy B]
        p = reorder_stmts(p, p.find_loop("kt #1").body()[1:3])
        p = reorder_stmts(p, p.find_loop("kt #1").body()[0:2])
    return simplify(p)


def synchronize_by_hand(p, cfg: Config):
    """9 (by hand). One commit group per tile. Before multiplying tile kt each thread waits for its own copies of it
    (all but the newest S - 2 groups); a CTA fence then shows every thread's copies to every warp, and ends
    the reads of the slot that the copies of tile kt + S - 1 overwrite next."""
    p = insert_barrier_alloc(p, p.find_loop("kt").before(), "cg", [], CudaCommitGroup)
    p = insert_arrive(p, p.find_loop("kt").body()[-1].after(), Sm80_cp_async, "cg")
    p = insert_arrive(p, p.find_loop("kt #1").body()[-1 if cfg.late_copy else 1].after(), Sm80_cp_async, "cg")
    p = insert_fence(p, p.find_loop("kt #1").body()[0].before(), cuda_in_order, Sm80_generic)
    p = insert_await(p, p.find_loop("kt #1").body()[0].before(), "cg", cuda_in_order, cfg.S - 2)
    p = insert_await(p, p.find_loop("kt #2").before(), "cg", cuda_in_order, 0)
    p = insert_fence(p, p.find_loop("kt #2").before(), cuda_in_order, cuda_in_order)
    return insert_fence(p, p.find_loop("nt").body()[-1].after(), cuda_in_order, cuda_in_order)  # next task reuses


HAND_STEPS = STEPS[:7] + [pipeline_by_hand, synchronize_by_hand, map_to_gpu]


def schedule_by_hand(cfg: Config):
    """The kernel with the ring built by hand, named `<name>_hand`."""
    if cfg.fragments_ahead:
        raise ValueError("HAND_STEPS build the ring without fragments_ahead")
    return rename(schedule(naive(cfg), cfg, steps=HAND_STEPS), f"{cfg.name}_hand")


# Tile sizes chosen on the H100 (benchmarks/sm80_gemm_notes.md): 128 x 256 CTA tiles, 64 x 64 warp tiles. tf32
# without fragments ahead: its rounding loads leave no registers for them (ptxas: 255 and a spill), and the hand
# DB kernel was no faster for tf32 (run 4). tf32 with B given as [N, K]: every fragment through ldmatrix, unrounded,
# leaves the registers for fragments ahead (session 18). tf32 with B as [K, N] and the operands swapped: the same,
# 3 slots (session 26: 211-214 TFLOP/s at 8192^3 on an H200, 4 slots 209-213).
CONFIGS = {"tf32": Config("tf32", BK=32, S=4, fragments_ahead=False), "f16": Config("f16"), "bf16": Config("bf16"),
           "tf32_nk": Config("tf32", BK=32, S=4, b_nk=True), "tf32_swap": Config("tf32", BK=32, S=3, swap_ab=True)}
_PROC_NAMES = [c.name for c in CONFIGS.values()]
PROCS: list  # the GEMMs of CONFIGS in _PROC_NAMES' order, scheduled on first use (`__getattr__`)


def __getattr__(name: str):
    """`PROCS` and `sm80_gemm_{tf32,f16,bf16,tf32_nk,tf32_swap}` are scheduled on first use (~10 s each), so that
    importing the example for its reference, its inputs or one step of its schedule stays fast."""
    if name == "PROCS":
        value = [globals().get(n) or __getattr__(n) for n in _PROC_NAMES]
    elif name in _PROC_NAMES:
        cfg = CONFIGS[name.removeprefix("sm80_gemm_")]
        value = schedule(naive(cfg), cfg)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def sync_check_kernel(dtype: str = "f16"):
    """The default tiles with BK = 32 and 3 ring slots: at M = N = 256, K = 128 (the size sync_check is run at)
    the main loop runs and reuses a slot, which the default BK = 64, S = 4 (K >= 192) would not."""
    cfg = dataclasses.replace(CONFIGS[dtype], BK=32, S=3)
    return schedule(naive(cfg), cfg)


# tf32 inputs are rounded to tf32 by the loads; f16/bf16 products are exact in f32: what is left is f32
# accumulation (and tf32 rounding). Compared with assert_allclose against the float64 product; `inputs`
# scales A and B by K^-1/4 so that C has unit variance at every K and atol stays a fixed number of standard
# deviations of the rounding error (unscaled, that error grows as sqrt(K) and a fixed atol is flaky).
TOLERANCE = dict(rtol=2e-2, atol=2e-2)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """x rounded to the nearest bfloat16 (ties to even), as the uint16 bits a bf16 argument takes."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def inputs(rng: np.random.Generator, dtype: str, M: int, N: int, K: int, b_nk: bool = False) -> tuple:
    """Random A, B as the kernel takes them (B as [N, K] if b_nk), and their values as float64."""
    scale = np.float32(K**-0.25)  # C of unit variance at every K (see TOLERANCE)
    a = rng.standard_normal((M, K), dtype=np.float32) * scale
    b = rng.standard_normal((N, K) if b_nk else (K, N), dtype=np.float32) * scale
    if dtype == "bf16":
        a, b = to_bf16_bits(a), to_bf16_bits(b)
        return a, b, from_bf16_bits(a).astype(np.float64), from_bf16_bits(b).astype(np.float64)
    if dtype == "f16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    return a, b, a.astype(np.float64), b.astype(np.float64)


def _config(proc) -> Config:
    """The configuration `proc` was scheduled with (the f16 GEMM's for None)."""
    return next((c for c in CONFIGS.values() if proc is not None and c.name == proc.name()), CONFIGS["f16"])


def reference(M: int, N: int, K: int, A: np.ndarray, B: np.ndarray, C: np.ndarray, proc=None) -> dict:
    """C = A @ B in float64, or A @ B^T for a proc of `Config.b_nk` (B's shape cannot say which where N = K)."""
    decode = from_bf16_bits if A.dtype == np.uint16 else (lambda x: x)
    b = decode(B).astype(np.float64)
    return {"C": (decode(A).astype(np.float64) @ (b.T if _config(proc).b_nk else b)).astype(np.float32)}


SHAPES = [(256, 512, 384), (512, 256, 256)]  # (M, N, K), non-square; the GPU tests run each proc at each


def make_args(rng: np.random.Generator, proc=None, n: int = 0, shape: tuple = (256, 512, 384)) -> dict:
    """Random inputs for `proc` (default: the f16 GEMM) at shape (M, N, K), or M = N = K = n; C poisoned with NaN."""
    M, N, K = (n, n, n) if n else shape
    cfg = _config(proc)
    A, B, _, _ = inputs(rng, cfg.dtype, M, N, K, cfg.b_nk)
    return {"M": M, "N": N, "K": K, "A": A, "B": B, "C": np.full((M, N), np.nan, dtype=np.float32)}


if __name__ == "__main__":
    print(sm80_gemm_f16)
    print(sl.sync_check(sync_check_kernel(), M=256, N=256, K=128))
