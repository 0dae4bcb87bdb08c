"""The heap that exists before the trainer run is out of the run's garbage collections, and only for the run
(trl_doctor/facts/trainer_run/heap.py)."""

from __future__ import annotations

import gc
import weakref

import pytest

from trl_doctor.facts.trainer_run.heap import frozen_heap

pytestmark = pytest.mark.release_free


class _Node:
    pass


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # garbage only the cyclic collector frees
    return weakref.ref(a)


def test_garbage_from_before_the_run_waits_for_its_end_and_the_runs_own_does_not():
    if gc.get_freeze_count():
        pytest.skip("this process froze its heap already")
    before = _cycle()
    with frozen_heap():
        assert gc.get_freeze_count() > 0
        during = _cycle()
        gc.collect()
        assert before() is not None  # frozen: the run's collections do not walk it
        assert during() is None  # what the run made is collected as before
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before() is None  # unfrozen after the run: nothing is lost


def test_a_heap_frozen_before_stays_frozen():
    gc.freeze()
    try:
        with frozen_heap():
            pass
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
