"""sl.bank_conflicts: shared-memory requests and the wavefronts they take (benchmarks/results/bank_conflicts_ncu.md
compares the counts with Nsight Compute's on an H200)."""

from __future__ import annotations

import json

import pytest
import smem_transpose

import spork_lab as sl
from spork_lab import instr, proc
from spork_lab.platforms.cuda import *


def test_a_column_read_of_a_32_float_tile_is_32_way_and_padding_removes_it():
    report = sl.bank_conflicts(smem_transpose.transpose, M=64, N=64)
    write, read = sorted(report.accesses, key=lambda a: a.kind, reverse=True)
    assert (write.kind, write.buffer, write.requests, write.wavefronts, write.needed) == ("write", "tile", 128, 128, 128)
    # 4 tasks x 8 warps x 4 rows each: 128 requests, every one 32 words in one bank
    assert (read.kind, read.requests, read.wavefronts, read.needed, read.worst_ways) == ("read", 128, 4096, 128, 32)
    assert report.conflicts == [read] and not report.ok
    assert "tile[lane, 8 * q + w]" in read.stmt.text
    assert "bank 0 holds 32 words of the request: tile[0, 0], tile[1, 0], tile[2, 0], tile[3, 0], ... (32 in all)" in str(read)
    padded = sl.bank_conflicts(smem_transpose.transpose_padded, M=64, N=64)
    assert padded.ok and [a.wavefronts for a in padded.accesses] == [128, 128]
    assert "4096 wavefronts where 128 would do (32.00x; at worst 32-way)" in str(report)
    json.dumps(report.to_json())


@proc
def lane_patterns(x: f32[64] @ CudaGmemLinear, h: f16[64] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            s: f32[64] @ CudaSmemLinear
            s16: f16[64] @ CudaSmemLinear
            for t in cuda_threads(0, 32):
                s[t] = x[t]
                s[32 + t] = x[32 + t]
                s16[t] = h[t]
            Fence(cuda_in_order, cuda_in_order)
            for t in cuda_threads(0, 32):
                x[t] = s[2 * t]  # words 0, 2, ..., 62: two in each even bank
                h[t] = s16[t]  # two lanes per word
                x[32 + t] = s[5]  # one word for every lane
            Fence(cuda_in_order, cuda_in_order)


def test_lanes_of_a_word_share_it_and_a_stride_of_two_is_two_way():
    report = sl.bank_conflicts(lane_patterns)
    found = {(a.stmt.text.split(" = ")[1], a.kind): (a.requests, a.wavefronts, a.needed) for a in report.accesses}
    assert found["s[2 * t]  # words 0, 2, ..., 62: two in each even bank", "read"] == (1, 2, 1)
    assert found["s16[t]  # two lanes per word", "read"] == (1, 1, 1)
    assert found["s[5]  # one word for every lane", "read"] == (1, 1, 1)
    assert found["x[t]", "write"] == (1, 1, 1) and found["h[t]", "write"] == (1, 1, 1)
    assert [a.stmt.text for a in report.conflicts] == ["x[t] = s[2 * t]  # words 0, 2, ..., 62: two in each even bank"]


@instr("warp_copy({dst_data}, {src_data});", coll_unit=cuda_warp)
def warp_copy(dst: [f32][32] @ CudaGmemLinear, src: [f32][32] @ CudaSmemLinear):
    for i in seq(0, 32):
        dst[i] = src[i]


@instr("warp_copy_8({dst_data}, {src_data});", coll_unit=cuda_warp, smem_blocks=(("src", (8,)),))
def warp_copy_8(dst: [f32][32] @ CudaGmemLinear, src: [f32][32] @ CudaSmemLinear):
    for i in seq(0, 32):
        dst[i] = src[i]


@proc
def warp_instrs(x: f32[64] @ CudaGmemLinear):
    with CudaDeviceFunction(blockDim=32):
        for task in cuda_tasks(0, 1):
            s: f32[256] @ CudaSmemLinear
            for t in cuda_threads(0, 32):
                for k in seq(0, 8):
                    s[32 * k + t] = x[t]
            Fence(cuda_in_order, cuda_in_order)
            for w in cuda_threads(0, 1, unit=cuda_warp):
                warp_copy(x[0:32], s[0:32])
                warp_copy_8(x[32:64], s[0:32])
            Fence(cuda_in_order, cuda_in_order)


def test_a_warp_instr_is_counted_per_declared_block_and_listed_otherwise():
    report = sl.bank_conflicts(warp_instrs)
    reads = [a for a in report.accesses if a.kind == "read"]
    assert [(a.instr, a.requests, a.wavefronts, a.needed) for a in reads] == [("warp_copy_8", 4, 4, 4)]
    (stmt, why), = report.not_modeled
    assert "warp_copy(x[0:32], s[0:32])" in stmt.text and "smem_blocks" in why
    assert "not modeled:" in str(report)
    write, = [a for a in report.accesses if a.kind == "write"]
    assert (write.requests, write.wavefronts) == (8, 8)  # one request per k: the k loop separates them


def test_smem_blocks_must_name_a_parameter_and_match_its_rank():
    with pytest.raises(sl.SporkSyntaxError, match="names srcs, not a parameter"):
        @instr("f({dst_data}, {src_data});", coll_unit=cuda_warp, smem_blocks=(("srcs", (8,)),))
        def bad_name(dst: [f32][32] @ CudaGmemLinear, src: [f32][32] @ CudaSmemLinear):
            for i in seq(0, 32):
                dst[i] = src[i]
    with pytest.raises(sl.SporkSyntaxError, match=r"gives src the block \(8, 4\); it takes a tuple of 1 positive"):
        @instr("f({dst_data}, {src_data});", coll_unit=cuda_warp, smem_blocks=(("src", (8, 4)),))
        def bad_rank(dst: [f32][32] @ CudaGmemLinear, src: [f32][32] @ CudaSmemLinear):
            for i in seq(0, 32):
                dst[i] = src[i]


def test_smem_blocks_need_a_window_of_constant_shape():
    with pytest.raises(sl.SporkSyntaxError, match="names src, whose shape is not constant"):
        @instr("f({dst_data}, {src_data});", coll_unit=cuda_warp, smem_blocks=(("src", (8,)),))
        def sized(n: size, dst: [f32][n] @ CudaGmemLinear, src: [f32][n] @ CudaSmemLinear):
            for i in seq(0, n):
                dst[i] = src[i]


def test_tma_into_shared_memory_is_not_modeled():
    from procs_tma import tma_tile_copy

    report = sl.bank_conflicts(tma_tile_copy, n=16)
    assert any("asynchronous proxy" in why for _, why in report.not_modeled)


def test_sizes_are_checked_as_sync_check_checks_them():
    with pytest.raises(sl.SizesError, match=r"bank_conflicts needs a value for N: bank_conflicts\(p, N=\.\.\.\)") as info:
        sl.bank_conflicts(smem_transpose.transpose, M=64)
    assert info.value.filename == __file__
    with pytest.raises(sl.SporkTypeError, match="bank_conflicts takes a proc"):
        sl.bank_conflicts("transpose", M=64, N=64)


@pytest.mark.parametrize("dtype,ways", [("f16", {"A_s": 8, "B_s": 8}), ("tf32", {"A_s": 8, "B_s": 4})])
def test_the_tutorial_gemm_fragment_loads_are_conflict_free_only_with_pad_rows(dtype, ways):
    """examples/sm80_gemm.py's pad_rows step: without it, each ldmatrix matrix's 8 rows (f16: 128 bytes apart;
    tf32: 4 rows of B 1 KiB apart for the scalar loads) share their banks."""
    import sm80_gemm as g

    cfg = g.Config(dtype=dtype)
    sizes = {"M": 128, "N": 256, "K": 192}
    padded = sl.bank_conflicts(g.schedule(g.naive(cfg), cfg), **sizes)
    assert padded.ok and {a.buffer for a in padded.accesses} == {"A_s", "B_s"}
    unpadded = sl.bank_conflicts(g.schedule(g.naive(cfg), cfg, steps=[s for s in g.STEPS if s is not g.pad_rows]),
                                 **sizes)
    assert {a.buffer: a.worst_ways for a in unpadded.conflicts} == ways
    assert all(a.kind == "read" and a.instr.startswith("Sm80_mma_load") for a in unpadded.conflicts)
