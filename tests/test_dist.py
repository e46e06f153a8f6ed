"""Distributed memory (seed 000, rules 1-4): deduction, errors, analysis data, lowering."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import procs_dist as P
import pytest

import spork_lab as sl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import dist_cluster_smem as cluster_example  # noqa: E402
import dist_gemm as gemm_example  # noqa: E402


def test_transposed_register_read_is_rejected():
    """Regression: acc[ty, tx] written, acc[tx, ty] read after a Fence passed sync_check and computed
    garbage on the GPU (each thread read registers it never wrote). Every entry point must reject it."""
    for entry in (sl.analyze, lambda p: sl.sync_check(p), lambda p: sl.compile_procs_to_strings([p], "t")):
        with pytest.raises(sl.DistributedMemoryError) as info:
            entry(P.transposed_read)
        assert "rule 3" in info.value.message


# ---------------------------------------------------------------- errors

CASES = [
    # rule 1: a shard is allocated by a whole native-unit collective
    ("smem_per_warp", 1, ["tmp @ CudaSmemLinear", "tile of 32 threads (cuda_warp)", "cuda_cta_in_cluster (128 threads)"]),
    ("fragment_per_thread", 1, ["D @ Sm80_RmemMatrixD", "tile of 1 thread", "native unit cuda_warp (32 threads)"]),
    # rule 2: leading indices are plain cuda_threads iterators chaining the allocation's tile to the native unit
    ("index_not_an_iterator", 2, ["`r[i, t]`", "index 0 (`i`) is not a plain cuda_threads iterator", "32 threads down to 1"]),
    ("index_is_an_expression", 2, ["`r[31 - t]`", "index 0 (`31 - t`)"]),
    ("iterator_outside_allocation", 2, ["`w` iterates a loop around the allocation"]),
    ("chain_stops_short", 2, ["`r[w]`", "indices run out", "tiles 32 threads down to 1", "consumed here: w: 128 -> 32"]),
    ("iterator_twice", 2, ["`w` is used twice"]),
    ("skips_a_level", 2, ["tiles 64 threads down to 32", "h: 128 -> 64, t: 32 -> 1"]),
    ("slice_of_distributed_dim", 2, ["index 0 (`t:t + 1`) is not a plain cuda_threads iterator"]),
    ("whole_buffer_argument", 2, ["`r`: the indices run out"]),
    # rule 3: one owner per shard, one set of distributed dimensions
    ("transposed_read", 3, ["`acc[tx, ty]`", "threads [16, 17) the owner of shard [0, 1]", "deduced threads [1, 2)",
                            "here tx: 16 -> 1, ty: 256 -> 16"]),
    ("retiled", 3, ["threads [16, 17) the owner of shard [1, 0]", "deduced threads [8, 9)"]),
    ("other_warps", 3, ["threads [64, 96) the owner of shard [0] of D", "deduced threads [0, 32)"]),
    ("two_shards_one_owner", 3, ["threads [32, 64) the owner of shard [1, 0] of D", "owner of shard [0, 1]",
                                 "each owner holds one shard"]),
    ("different_dim_count", 3, ["deduces 1 distributed dimension(s) (t: 128 -> 1)", "deduced 2 (w: 128 -> 32, t: 32 -> 1)"]),
]  # fmt: skip


def line_in(proc_name: str, text: str = "# error here") -> int:
    """The first line of procs_dist.py's proc `proc_name` that holds `text`."""
    lines = inspect.getsource(P).splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"def {proc_name}(")))
    return 1 + next(i for i in range(start, len(lines)) if text in lines[i])


@pytest.mark.parametrize("name, rule, fragments", CASES, ids=[c[0] for c in CASES])
def test_rejected(name, rule, fragments):
    with pytest.raises(sl.DistributedMemoryError) as info:
        sl.analyze(getattr(P, name))
    err = info.value
    assert err.message.startswith(f"distributed memory rule {rule} ")
    for fragment in fragments:
        assert fragment in err.message
    assert (err.filename, err.lineno) == (P.__file__, line_in(name))


def test_rule_3_names_the_line_it_contradicts():
    with pytest.raises(sl.DistributedMemoryError) as info:
        sl.analyze(P.transposed_read)
    assert f"but line {line_in('transposed_read', 'acc[ty, tx] = x')} (`acc[ty, tx]`)" in info.value.message


def test_every_rejected_proc_has_a_case():
    chunks = inspect.getsource(P).split("\ndef ")[1:]
    marked = {chunk.split("(")[0] for chunk in chunks if "# error here" in chunk.split("\n@")[0]}
    assert marked == {c[0] for c in CASES}


# ---------------------------------------------------------------- deduction and analysis data


def dist_of(p, name: str):
    (a,) = [a for a in sl.analyze(p).dist.values() if a.name == name]
    return a


def test_seed_example_16_by_32():
    """The seed's tile: 512 threads as 16 x 32, 8 x 4 values each; the accumulator lives across the CTA's K loop."""
    a = dist_of(gemm_example.dist_register_tile, "acc")
    assert (a.dims, a.shard_shape, a.alloc_threads, a.native_threads) == (2, [8, 4], 512, 1)
    assert [(link.iter, link.t0, link.t1) for link in a.uses[0].links] == [("m", 512, 32), ("n", 32, 1)]
    assert len(a.uses) == 3  # zeroing, the reduction inside the CTA-level seq loop over k, the store
    assert a.owners == {(m, n): ((32 * m + n, 32 * m + n + 1),) for m in range(16) for n in range(32)}


def test_permuted_chain():
    a = dist_of(P.permuted_chain, "acc")
    assert [(link.iter, link.t0, link.t1) for link in a.uses[0].links] == [("n", 32, 1), ("m", 512, 32)]
    assert a.owners[(5, 3)] == ((3 * 32 + 5, 3 * 32 + 6),)
    data = sl.analyze(P.permuted_chain).to_json()["distributed"][0]
    assert [(c["dim"], c["iter"]) for c in data["chain"]] == [(1, "m"), (0, "n")]  # chain order, CTA first


def test_mma_accumulators_at_cta_scope():
    a = dist_of(gemm_example.dist_mma_cta, "D")
    assert (a.dims, a.shard_shape, a.native_threads) == (2, [2, 4, 16, 8], 32)
    assert a.owners == {(wm, wn): ((32 * (2 * wm + wn), 32 * (2 * wm + wn) + 32),) for wm in range(2) for wn in range(2)}
    for other in ("A_s", "B_s", "A_r", "B_r"):  # allocated at their native unit's size: not distributed
        assert dist_of(gemm_example.dist_mma_cta, other).dims == 0


def test_cluster_scope_shared_memory():
    a = dist_of(cluster_example.dist_cluster_smem, "tile")
    assert (a.dims, a.shard_shape, a.alloc_threads, a.native_threads) == (1, [128], 256, 128)
    assert a.owners == {(0,): ((0, 128),), (1,): ((128, 256),)}


def test_allocation_inside_a_collective_owns_translated_shards():
    a = dist_of(P.fragments_per_warpgroup, "D")
    assert (a.dims, a.alloc_threads) == (1, 128)
    assert a.owners[(3,)] == ((96, 128),)  # in the first warpgroup's allocation
    assert a.owner_threads((3,), {"wg": 1}) == ((224, 256),)


def test_warp_specialized_uses_agree():
    a = dist_of(P.shards_under_cuda_warps, "D")
    assert len(a.uses) == 2 and a.owners[(1,)] == ((32, 64),)


def test_noop_link_is_part_of_the_chain():
    a = dist_of(P.noop_link, "r")
    assert [(link.t0, link.t1) for link in a.uses[0].links] == [(128, 32), (32, 32), (32, 1)]
    assert a.shard_shape == []


def test_examples_without_distributed_memory_are_unchanged():
    import sm80_mma_gemm

    analysis = sl.analyze(sm80_mma_gemm.sm80_mma_gemm)
    assert analysis.dist and all(a.dims == 0 for a in analysis.dist.values())
    assert analysis.to_json()["distributed"] == []


def test_analysis_json():
    data = json.loads(json.dumps(sl.analyze(gemm_example.dist_register_tile).to_json()))
    (acc,) = data["distributed"]
    assert acc["distributed_dims"] == [0, 1] and acc["non_distributed_dims"] == [2, 3]
    assert (acc["shard_shape"], acc["native_unit"], acc["owner_unit"]) == ([8, 4], "cuda_thread", "cuda_thread")
    assert acc["alloc_unit"] == "cuda_cta_in_cluster" and acc["alloc_threads"] == 512
    assert acc["chain"][0] == {"dim": 0, "iter": "m", "from": 512, "to": 32, "count": 16, "line": acc["chain"][0]["line"]}
    assert len(acc["shards"]) == 512 and acc["shards"][33] == {"index": [1, 1], "threads": [[33, 34]]}
    assert [u["iters"] for u in acc["uses"]] == [["m", "n"]] * 3


# ---------------------------------------------------------------- lowering (rule 4)


def kernel_of(p) -> str:
    _, _, cu, _ = sl.compile_procs_to_strings([p], "t")
    return cu[cu.index("__global__") :]


def test_seed_example_declares_one_8_by_4_shard_per_thread():
    k = kernel_of(gemm_example.dist_register_tile)
    assert "float acc[32];" in k and "acc[i * 4 + j] += A[" in k
    assert "acc[m" not in k and "acc[n" not in k


def test_permuted_chain_lowering():
    k = kernel_of(P.permuted_chain)
    assert "float acc[32];" in k and "= acc[i * 4 + j];" in k


def test_mma_accumulators_lowering():
    k = kernel_of(gemm_example.dist_mma_cta)
    assert k.count("float D[32];") == 1  # 2 x 4 fragments, 4 registers per lane
    assert "(&D[(i) * 16 + (j) * 4])" in k and "wm" not in k.split("float D[32];")[1].split("(&D[")[1][:20]


def test_cluster_shared_memory_declares_one_shard_per_cta():
    k = kernel_of(cluster_example.dist_cluster_smem)
    assert "char exo_smem[512];" in k  # 128 floats: one CTA's shard, not the cluster's 256
    assert "tile[t] = x[" in k and "= tile[127 - t];" in k


def test_scalar_shard_and_window_of_a_shard():
    k = kernel_of(P.noop_link)
    assert "float r;" in k and "r = 2.0f;" in k
    k = kernel_of(P.window_of_a_shard)
    assert "float r[2];" in k and "{ &r[0], { 1 } }" in k


# ---------------------------------------------------------------- the abstract machine (sync_check)


def test_distributed_examples_pass_sync_check():
    for p in gemm_example.PROCS:
        assert sl.sync_check(p, M=256, N=128, K=32).ok
    assert sl.sync_check(cluster_example.dist_cluster_smem, n=768).ok


def test_each_cta_reuses_its_own_shard_of_cluster_shared_memory():
    """Exact, not conservative: a per-CTA Fence is enough before the next task, since each shard of the
    cluster-scope tile is reused by its own CTA only; without it the free is a hazard."""
    from spork_lab.sync.mutants import without_syncs

    p = cluster_example.dist_cluster_smem
    no_read_fence, no_free_fence = without_syncs(p, [0]), without_syncs(p, [1])
    assert [h.kind for h in sl.sync_check(no_read_fence, n=512).hazards] == ["RAW"]
    hazards = sl.sync_check(no_free_fence, n=512).hazards
    assert [h.kind for h in hazards] == ["FREE"] and hazards[0].buffer == "tile"


def test_cluster_shared_memory_runs_compiled_with_the_reference_report():
    """Per-shard owners are part of the lowered program, so both engines check them (no fallback)."""
    from spork_lab.sync.mutants import without_syncs

    for p in (cluster_example.dist_cluster_smem, without_syncs(cluster_example.dist_cluster_smem, [1])):
        compiled, python = sl.sync_check(p, n=512), sl.sync_check(p, n=512, engine="python")
        assert compiled.engine == "compiled" and compiled.engine_note == ""
        assert {**compiled.to_json(), "engine": "python"} == python.to_json()


def test_mma_cta_example_mutants_are_caught():
    from spork_lab.sync.mutants import sync_cursors, without_syncs

    p = gemm_example.dist_mma_cta
    for i in range(len(sync_cursors(p))):
        assert not sl.sync_check(without_syncs(p, [i]), M=64, N=64, K=32).ok, f"Fence #{i} dropped"


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="needs nvcc")
def test_accepted_procs_compile_with_nvcc(tmp_path):
    import subprocess

    procs = [P.permuted_chain, P.fragments_per_warpgroup, P.shards_under_cuda_warps, P.noop_link, P.window_of_a_shard]
    sl.compile_procs(procs, tmp_path, "dist")
    res = subprocess.run(["nvcc", "-c", "-std=c++17", "-arch=sm_80", "dist.cu"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
