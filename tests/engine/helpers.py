"""Helpers for engine tests."""

from __future__ import annotations

from collections.abc import Iterable

from engine import EngineSettings, Task, Worker


async def drain(settings: EngineSettings, tasks: Iterable[Task], **kwargs: object) -> Worker:
    """Run a burst worker until the queues are empty; return it for its counters."""
    worker = Worker(settings, tasks, burst=True, **kwargs)  # type: ignore[arg-type]
    await worker.run()
    return worker
