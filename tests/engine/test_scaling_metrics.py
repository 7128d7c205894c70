"""Autoscaling figures: runnable jobs (not scheduled, blocked or paused), the age of the
oldest, live worker slots and the backlog per slot, as engine.resources.metrics reads them."""

from __future__ import annotations

import asyncio
import dataclasses

from engine import Client, EngineSettings, Worker

from . import tasks as t
from .helpers import single_node

pytestmark = single_node


async def test_runnable_backlog_and_slots(client: Client, settings: EngineSettings) -> None:
    for _ in range(30):
        await client.enqueue(t.add, 1, 2)
    parent = await client.enqueue(t.add.using(delay_s=600), 1, 1)  # scheduled
    await client.enqueue(t.add.using(depends_on=[parent]), 2, 2)  # blocked
    await asyncio.sleep(0.3)
    (q,) = (await client.metrics(["default"])).queues
    assert q.runnable == 30 and q.depth["scheduled"] == 1 and q.depth["blocked"] == 1
    assert q.oldest_runnable_s >= 0.25
    assert q.worker_slots == 0 and q.runnable_per_slot == 30  # no worker: as if one slot

    await client.queues.pause("default")
    (q,) = (await client.metrics(["default"])).queues
    assert q.runnable == 0 and q.oldest_runnable_s == 0 and q.depth["submitted"] == 30

    # A live worker (it claims nothing from the paused queue) gives the queue its slots.
    worker = Worker(dataclasses.replace(settings, heartbeat_interval_s=0.05), [], concurrency=6)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(100):
            (q,) = (await client.metrics(["default"])).queues
            if q.worker_slots:
                break
            await asyncio.sleep(0.05)
        assert q.worker_slots == 6 and q.runnable_per_slot == 0
    finally:
        worker.stop()
        await running
