"""The dead-man's switch of schedules: missed without a worker, ok with one, overlap reported."""

from __future__ import annotations

import asyncio
import time

from engine import Client, EngineSettings, Worker
from engine.periodic.schedule_health import ScheduleHealth, schedule_health, swap_state

from . import tasks as t


async def _until(client: Client, queue: str, state: str, within_s: float) -> ScheduleHealth:
    deadline = time.monotonic() + within_s
    while True:
        [health] = await schedule_health(client, [queue], default_tolerance_s=60)
        if health.state == state:
            return health
        assert time.monotonic() < deadline, f"still {health.state}: {health.reasons}"
        await asyncio.sleep(0.05)


async def test_a_schedule_nobody_serves_is_missed_then_ok_once_a_worker_runs(
    settings: EngineSettings, client: Client
) -> None:
    await client.repeats.add("beat", t.add.using(queue="lonely").call(1, 2), every_s=1)
    first = await schedule_health(client, ["lonely"], default_tolerance_s=60)
    assert [(h.state, h.tolerance_s) for h in first] == [("no_worker", 1.0)]
    started = time.monotonic()
    missed = await _until(client, "lonely", "missed", within_s=3)
    assert time.monotonic() - started <= 2.5  # within two ticks of a schedule every second
    assert "has not fired: no live worker serves its queue" in missed.reasons[0]
    assert any("no live worker serves queue 'lonely'" in r for r in missed.reasons)
    assert await swap_state(client, "schedule", "lonely/beat", "missed") is None
    assert await swap_state(client, "schedule", "lonely/beat", "missed") == "missed"
    worker = Worker(settings, [t.add], queues=["lonely"])
    run = asyncio.create_task(worker.run())
    try:
        ok = await _until(client, "lonely", "ok", within_s=5)
        assert ok.reasons == [] and ok.last_job is not None
    finally:
        worker.stop()
        await run


async def test_a_run_longer_than_its_interval_is_an_overlap(
    settings: EngineSettings, client: Client
) -> None:
    long = t.waits.using(queue="slow").call(4)
    await client.repeats.add("long", long, every_s=1, skip_if_running=True)
    await client.repeats.add("alongside", t.waits.using(queue="slow").call(4), every_s=1)
    worker = Worker(settings, [t.waits], queues=["slow"])
    run = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 5
        while True:
            found = {h.name: h for h in await schedule_health(client, ["slow"], 60)}
            if all(h.state == "overlap" for h in found.values()):
                break
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.05)
        assert "skip_if_running skipped it" in found["long"].reasons[0]
        assert "a second run started alongside" in found["alongside"].reasons[0]
    finally:
        worker.stop()
        worker.stop()  # force: the long runs need not finish
        await run
