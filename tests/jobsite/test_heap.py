"""The start-up heap of runworker stays out of the garbage collector's walks (jobsite.jobs.heap)."""

from __future__ import annotations

import gc

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engine import EngineSettings
from jobsite.jobs.heap import frozen_heap
from jobsite.jobs.mirror import Mirror


def _walked(obj: object) -> bool:
    """Return whether the collector's generations hold `obj` (frozen objects are left out)."""
    return any(o is obj for o in gc.get_objects())


def test_objects_alive_at_entry_are_frozen_for_the_block_only() -> None:
    before: list[int] = [1]
    assert gc.get_freeze_count() == 0 and _walked(before)
    with frozen_heap():
        during: list[int] = [2]
        assert gc.get_freeze_count() > 0
        assert not _walked(before)
        assert _walked(during)  # made inside: collected as usual
    assert gc.get_freeze_count() == 0
    assert _walked(before)


def test_a_heap_frozen_by_someone_else_is_left_frozen() -> None:
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with frozen_heap():
            assert gc.get_freeze_count() == count
        assert gc.get_freeze_count() == count
    finally:
        gc.unfreeze()


def test_runworker_runs_its_loops_frozen_and_unfreezes_even_when_one_crashes(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen: list[int] = []

    async def step(self: Mirror, block_ms: int = 1000) -> int:
        frozen.append(gc.get_freeze_count())
        raise KeyError("a bug in the mirror")

    monkeypatch.setattr(Mirror, "step", step)
    with pytest.raises(CommandError, match="loop mirror crashed"):
        call_command("runworker", "--only", "mirror")
    assert frozen and frozen[0] > 0
    assert gc.get_freeze_count() == 0
