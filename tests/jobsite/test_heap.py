"""runworker keeps the garbage collector's full walks rare (jobsite.jobs.heap)."""

from __future__ import annotations

import gc

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engine import EngineSettings
from jobsite.jobs.heap import FROZEN_AT_START, FULL_EVERY, worker_heap
from jobsite.jobs.history.mirror import Mirror


def _walked(obj: object) -> bool:
    """Return whether the collector's generations hold `obj` (frozen objects are left out)."""
    return any(o is obj for o in gc.get_objects())


def test_objects_alive_at_entry_are_frozen_and_full_walks_rarer_for_the_block_only() -> None:
    thresholds = gc.get_threshold()
    before: list[int] = [1]
    assert gc.get_freeze_count() <= FROZEN_AT_START and _walked(before)
    with worker_heap():
        during: list[int] = [2]
        assert gc.get_freeze_count() > FROZEN_AT_START
        assert not _walked(before)
        assert _walked(during)  # made inside: collected as usual
        assert gc.get_threshold() == (*thresholds[:2], max(thresholds[2], FULL_EVERY))
    assert gc.get_freeze_count() == 0  # gc.unfreeze() empties the permanent generation
    assert _walked(before)
    assert gc.get_threshold() == thresholds


def test_a_heap_frozen_by_someone_else_is_left_frozen() -> None:
    gc.freeze()
    try:
        # Frozen objects can still be freed (another thread's), so the count may only drop a
        # little: never to 0 (unfrozen), never above it (frozen again).
        count = gc.get_freeze_count()
        with worker_heap():
            assert count * 0.99 < gc.get_freeze_count() <= count
        assert count * 0.99 < gc.get_freeze_count() <= count
    finally:
        gc.unfreeze()


def test_runworker_runs_its_loops_in_the_worker_heap_and_leaves_it_even_when_one_crashes(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []

    async def step(self: Mirror, block_ms: int = 1000) -> int:
        seen.append((gc.get_freeze_count(), gc.get_threshold()[2]))
        raise KeyError("a bug in the mirror")

    monkeypatch.setattr(Mirror, "step", step)
    thresholds = gc.get_threshold()
    with pytest.raises(CommandError, match="loop mirror crashed"):
        call_command("runworker", "--only", "mirror")
    assert seen and seen[0][0] > FROZEN_AT_START and seen[0][1] >= FULL_EVERY
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS"))
    return int(line.split()[1])


def test_give_back_returns_freed_pages_a_batch_held() -> None:
    from jobsite.jobs import heap

    if heap._malloc_trim is None:
        pytest.skip("no glibc malloc_trim here")
    batch = [bytes(1024) + bytes([i % 256]) for i in range(100_000)]  # ~100 MiB from malloc
    pin = bytes(1024) + b"pin"  # above them on the heap: freeing them cannot shrink the heap
    held = _rss_kib()
    del batch
    freed = _rss_kib()
    heap.give_back()
    given = _rss_kib()
    assert pin and freed > held - 20_000  # freed, but still the process's
    assert given < freed - 50_000, (held, freed, given)
