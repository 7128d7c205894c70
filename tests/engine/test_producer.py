"""An engine task enqueues itself: `await task.enqueue()`, `task.delay()` from sync code."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from engine import Client, ConfigError, EngineSettings, JobState, configure, producer

from . import tasks as t
from .helpers import drain


@pytest.fixture
def configured(settings: EngineSettings) -> Iterator[EngineSettings]:
    saved = (producer._settings, producer._installed)
    configure(settings)
    yield settings
    producer._settings, producer._installed = saved


async def test_a_task_enqueues_itself(client: Client, configured: EngineSettings) -> None:
    job = await t.add.enqueue(2, 3)
    later = await t.add.using(delay_s=60).enqueue(1, 1)
    made = await asyncio.to_thread(t.add.delay, 4, 5)  # sync code, as a script or a view
    assert (await client.jobs.get(later.id)).state is JobState.SCHEDULED
    await client.jobs.cancel([later.id])  # a burst worker would wait for it
    await drain(configured, [t.add])
    assert (await client.jobs.get(job.id)).result == 5
    assert (await client.jobs.get(made.id)).result == 9


def test_without_settings_it_says_what_to_do() -> None:
    saved = (producer._settings, producer._installed)
    producer._settings, producer._installed = None, None
    try:
        with pytest.raises(ConfigError, match=r"engine.configure\(settings\)"):
            t.add.delay(1, 2)
    finally:
        producer._settings, producer._installed = saved
