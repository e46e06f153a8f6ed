"""Random schedules of the examples (hypothesis): users' mistakes are user errors, and plain steps keep the verdict.

Each case starts from an example kernel, or one of its mutants with a sync
statement deleted, and applies up to three scheduling steps drawn at random
with random targets (loops, gaps, allocations, sync statements of the current
proc; the steps are in tests/schedule_steps.py):

- every step, and `analyze`, `sync_check` and the code generator on the
  result, either succeed or raise exo's SchedulingError or a SporkError that
  names the user's file and line, never another exception (an internal error);
- steps that change neither loop modes nor sync statements (renaming,
  simplifying, reordering, dividing, unrolling, cutting or fissioning
  sequential loops) keep the sync_check verdict of the starting proc.

HYPOTHESIS_EXAMPLES=500 python -m pytest tests/test_schedule_fuzz.py runs a longer search.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import check_sizes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedule_steps import OTHER, PLAIN, STARTS, NoTarget, user_error

import spork_lab as sl
from spork_lab.errors import SporkError
from spork_lab.scheduling import SchedulingError

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "40"))


def _verdict(p, sizes: dict):
    """sync_check's verdict (True: hazard-free), or the user error that stops it (analysis, sizes)."""
    try:
        return sl.sync_check(p, max_events=0, **sizes).ok
    except (SchedulingError, SporkError) as e:
        assert user_error(e), f"internal error: {type(e).__name__}: {e}"
        return type(e).__name__


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_schedules(data):
    name, start = data.draw(st.sampled_from(STARTS), label="start")
    sizes = check_sizes(start)
    before = _verdict(start, sizes)
    p, plain = start, True
    for _ in range(data.draw(st.integers(1, 3), label="steps")):
        step, apply = data.draw(st.sampled_from(PLAIN + OTHER), label="step")
        try:
            p = apply(data, p)
        except NoTarget:
            continue
        except Exception as e:  # noqa: BLE001 -- anything but a user error fails the test
            assert user_error(e), f"{step} on {name}: internal error {type(e).__name__}: {e}"
            continue
        plain = plain and (step, apply) in PLAIN
    after = _verdict(p, sizes)
    if plain:
        assert after == before, f"{name}: plain steps changed the verdict from {before} to {after}\n{p}"
    try:
        sl.compile_procs_to_strings([p], "fuzz")
    except Exception as e:  # noqa: BLE001
        assert user_error(e), f"codegen on {name}: internal error {type(e).__name__}: {e}"


def test_the_starts_cover_both_verdicts():
    verdicts = {_verdict(p, check_sizes(p)) for _, p in STARTS}
    assert True in verdicts and False in verdicts


@pytest.mark.parametrize("step", [s for s, _ in PLAIN])
def test_each_plain_step_applies_to_some_example(step):
    """The plain steps are not vacuous: each changes some example's proc."""
    apply = dict(PLAIN)[step]

    class Draw:  # the first target and argument of each kind (every step draws with sampled_from)
        def draw(self, strategy, label=None):
            return strategy.elements[0]

    for _, p in STARTS:
        try:
            if str(apply(Draw(), p)) != str(p):
                return
        except (NoTarget, SchedulingError, SporkError):
            continue
    pytest.fail(f"{step} applies to no example")


def test_soundness_fuzz_cases_are_reproducible():
    """benchmarks/soundness_fuzz.py names its cases by seed: a seed makes the same proc and verdict every time."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from soundness_fuzz import make_case

    cases = [make_case(seed) for seed in range(3)]
    assert any(c["verdict"] == "passes" for c in cases), [c["verdict"] for c in cases]
    assert cases == [make_case(seed) for seed in range(3)]
