"""sl.analyze on accepted procs: scopes, instr-tls, thread collectives (seed 000 figures), JSON."""

from __future__ import annotations

import json

import procs_analysis as P
import pytest
from exo.core.LoopIR import LoopIR

import spork_lab as sl
from spork_lab.analysis import analyze
from spork_lab.core.blocks import CudaDeviceFunction
from spork_lab.core.timelines import (
    Sm80_cp_async_instr,
    cpu_in_order_instr,
    cuda_in_order_instr,
)


def info_by_text(a, text: str):
    """The StmtInfo of the only statement whose first printed line is `text`."""
    (info,) = [info for _, info in a.stmts if info.text == text]
    return info


def test_seed_cuda_threads_figure():
    a = analyze(P.seed_threads)
    m_body = info_by_text(a, "for n in cuda_threads(0, 16):")
    assert m_body.coll_unit_text == "16 * cuda_thread"
    assert m_body.threads({"m": 0}) == [(0, 16)]
    assert m_body.threads({"m": 2}) == [(32, 48)]
    assert m_body.threads({"m": 7}) == [(112, 128)]
    write = info_by_text(a, "y[m * 16 + n] = 0.0")
    assert write.coll_unit_text == "cuda_thread"
    assert write.threads({"m": 2, "n": 1}) == [(33, 34)]
    assert write.iter_values_of(37) == {"m": 2, "n": 5}
    assert [(it.name, it.lo, it.hi, it.kind) for it in write.iters] == [
        ("task", 0, 1, "cuda_tasks"),
        ("m", 0, 8, "cuda_threads"),
        ("n", 0, 16, "cuda_threads"),
    ]


def test_seed_cuda_warps_in_warpgroups():
    a = analyze(P.seed_warpgroups)
    inner = info_by_text(a, "for t in cuda_threads(0, 32):")
    assert inner.coll_unit_text == "cuda_warp"
    assert inner.threads({"wg": 0}) == [(96, 128)]
    assert inner.threads({"wg": 1}) == [(224, 256)]
    assert inner.iter_values_of(230) == {"wg": 1}
    assert inner.iter_values_of(10) is None
    assert info_by_text(a, "with CudaWarps(3, 4):").coll_unit_text == "cuda_warpgroup"


def test_named_warps():
    a = analyze(P.named_warps)
    producer = info_by_text(a, "y[task, t] = 1.0")
    assert producer.warp_name == "producer"
    assert producer.threads({"t": 5}) == [(5, 6)]
    numbered = info_by_text(a, "with CudaWarps(1, 2):")
    assert numbered.warp_name == "consumer"
    assert numbered.threads({}) == [(32, 96)]
    consumer = info_by_text(a, "y[task, t + 32] = 2.0")
    assert consumer.warp_name == "consumer"
    assert consumer.threads({"t": 0}) == [(64, 65)]
    assert info_by_text(a, "pass").threads({}) == [(32, 64)]
    assert info_by_text(a, "with CudaWarps(name='producer'):").warp_name is None


def test_cluster_tiling():
    a = analyze(P.cluster_ctas)
    assert info_by_text(a, "for task in cuda_tasks(0, 1):").threads({}) == [(0, 256)]
    per_cta = info_by_text(a, "for t in cuda_threads(0, 128):")
    assert per_cta.coll_unit_text == "cuda_cta_in_cluster"
    assert per_cta.threads({"cta": 1}) == [(128, 256)]
    assert info_by_text(a, "y[cta, t] = 0.0").iter_values_of(130) == {"cta": 1, "t": 2}


def test_named_warps_in_cluster_span_both_ctas():
    a = analyze(P.cluster_named_warps)
    assert info_by_text(a, "pass").threads({}) == [(0, 32), (128, 160)]


def test_scopes_and_instr_tls():
    a = analyze(P.mma_and_cp_async)
    (fn,) = a.device_functions
    launch, ctx = fn.block, fn.ctx
    assert isinstance(launch, LoopIR.For) and ctx == CudaDeviceFunction(blockDim=64)
    assert [t.iter.name() for t in fn.tasks] == ["task"] and fn.body is fn.tasks[0].body
    assert a.stmt_info(launch).device_scope == "cpu" and a.stmt_info(launch).instr_tl == cpu_in_order_instr
    cp = info_by_text(a, "Sm80_cp_async_f32(A_smem[m, 2 * k:2 * k + 2], A[m, 2 * k:2 * k + 2], size=8)")
    assert (cp.device_scope, cp.instr_tl, cp.coll_unit_text) == ("cuda", Sm80_cp_async_instr, "cuda_thread")
    assert cp.device_function is ctx
    mma = info_by_text(a, "Sm80_mma_tf32(D_rmem[0:16, 0:8], A_rmem[0:16, 0:8], B_rmem[0:8, 0:8])")
    assert (mma.instr_tl, mma.coll_unit_text) == (cuda_in_order_instr, "cuda_warp")


def test_stmt_info_is_keyed_by_statement_object():
    a = analyze(P.seed_threads)
    loop = P.seed_threads._loopir_proc.body[0].body[0]
    assert a.stmt_info(loop).text == "for task in cuda_tasks(0, 1):"
    assert a.stmt_info(loop).path == (0, 0)
    with pytest.raises(KeyError):
        a.stmt_info(P.seed_warpgroups._loopir_proc.body[0])


def test_nested_tasks_and_cpu_code():
    a = analyze(P.nested_tasks)
    write = info_by_text(a, "y[i, j] = 0.0")
    assert [it.kind for it in write.iters] == ["cuda_tasks", "cuda_tasks", "cuda_threads"]
    cpu = analyze(P.cpu_only)
    write = info_by_text(cpu, "x[i] = 0.0")
    assert (write.device_scope, write.tiling, write.coll_unit_text) == ("cpu", None, None)
    assert write.iters[0].kind == "par" and str(write.iters[0].hi) == "n"
    with pytest.raises(ValueError, match="runs on the CPU"):
        write.threads({})


def test_plain_proc_call_by_one_thread():
    analyze(P.plain_call_per_thread)


def test_instrs_have_no_statements_to_analyse():
    assert analyze(P.Sm80_mma_tf32).stmts == ()


def test_json_round_trip():
    a = sl.analyze(P.named_warps)
    data = json.loads(json.dumps(a.to_json()))
    assert data["proc"] == "named_warps"
    (fn,) = data["device_functions"]
    assert fn["blockDim"] == 96 and fn["clusterDim"] == 1 and fn["warp_names"] == ["producer", "consumer"]
    assert fn["warps"][1] == {"name": "consumer", "count": 2, "setmaxnreg": None, "warps": [1, 3]}
    by_text = {s["text"]: s for s in data["statements"]}
    write = by_text["y[task, t + 32] = 2.0"]
    assert write["device_scope"] == "cuda" and write["instr_tl"] == "cuda_in_order_instr"
    assert write["coll_unit"] == "cuda_thread" and write["warp_name"] == "consumer"
    assert write["tiling"]["threadCount"] == 1
    assert [it["name"] for it in write["iters"]] == ["task", "t"]
    assert write["iters"][0]["hi"] == "n"
    launch = "with CudaDeviceFunction(warp_config=[CudaWarpConfig('producer', 1), CudaWarpConfig('consumer', 2)]):"
    assert by_text[launch]["path"] == [0] and by_text[launch]["device_scope"] == "cpu"


def test_cpu_calls_are_checked_as_procs_of_their_own():
    """A CPU proc may call a proc whose device function touches global memory; the callee's own
    errors are reported at the callee's line."""
    from test_analysis_errors import marked_line

    analyze(P.calls_kernel)
    with pytest.raises(sl.TimelineError) as err:
        analyze(P.calls_rejected_proc)
    assert err.value.lineno == marked_line("smem_lifted_to_cpu")


# ---- the analysis as named passes, computed once per proc ----


def _counting_passes(monkeypatch) -> dict:
    """Replace each pass by one that counts its runs, in the same order."""
    import spork_lab.analysis as A

    runs: dict = {}

    def counted(step):
        def run(ctx):
            runs[step.name] = runs.get(step.name, 0) + 1
            return step.run(ctx)

        return A.Pass(step.name, run)

    monkeypatch.setattr(A, "PASSES", tuple(counted(step) for step in A.PASSES))
    return runs


def test_passes_are_named_and_ordered():
    import spork_lab.analysis as A

    assert [step.name for step in A.PASSES][:4] == ["scopes", "checks", "proxy", "barriers"]
    a = analyze(P.mma_and_cp_async)
    assert a.pass_names == tuple(step.name for step in A.PASSES)
    assert a.result("scopes").stmts == a.stmts and a.result("barriers") is a.barriers


def test_a_new_pass_is_one_entry_and_reads_the_earlier_ones(monkeypatch):
    import spork_lab.analysis as A

    def count_statements(ctx):
        return len(ctx.results["scopes"].stmts)

    monkeypatch.setattr(A, "PASSES", A.PASSES + (A.Pass("count", count_statements),))
    p = sl.parse_source(str(P.seed_threads))  # a proc object the cache has not seen
    a = analyze(p)
    assert a.result("count") == len(a.stmts) > 0


def test_analysis_is_immutable():
    a = analyze(P.seed_threads)
    with pytest.raises(AttributeError):
        a.stmts = ()
    with pytest.raises(TypeError):
        a.barriers["x"] = None
    assert isinstance(a.stmts, tuple) and isinstance(a.stmts[0][1].iters, tuple)


def test_analysis_is_cached_per_proc_and_dropped_with_it(monkeypatch):
    import gc

    import spork_lab.analysis as A

    runs = _counting_passes(monkeypatch)
    p = sl.parse_source(str(P.nested_tasks))
    assert analyze(p) is analyze(p) is analyze(p._loopir_proc)
    assert runs == {step.name: 1 for step in A.PASSES}
    # exo's Procedure keeps its LoopIR alive in a table of its own; a bare LoopIR proc shows the cache's lifetime.
    ir = p._loopir_proc.update(name="nested_tasks_copy")
    a = analyze(ir)
    assert ir in A._cache and runs["scopes"] == 2
    key = id(ir)
    del ir
    gc.collect()
    assert key not in A._cache._values  # no stale entry, no leak
    assert a.stmt_info(a.stmts[0][0]) is a.stmts[0][1]  # the analysis outlives its proc, usable


def test_sync_check_and_codegen_reuse_the_analysis(monkeypatch):
    import procs_sync

    runs = _counting_passes(monkeypatch)
    ring = sl.parse_source(str(procs_sync.ring_copy))
    sl.analyze(ring)
    sl.sync_check(ring, n=256)
    sl.compile_procs_to_strings([ring], "ring")
    assert runs["scopes"] == 1 and runs["barriers"] == 1
