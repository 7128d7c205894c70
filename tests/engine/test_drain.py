"""Draining a queue: every job waiting when the drain began is cancelled, in chunks, with
progress; jobs enqueued during the drain stay."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from engine import Client, EngineSettings, JobState, Worker, drain, task_ref

from . import tasks as t
from .helpers import STORED, single_node
from .test_reliability import record

pytestmark = single_node

READY, SCHEDULED, BLOCKED = 19_000, 500, 500


async def states(client: Client, ids: list[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for start in range(0, len(ids), 5000):
        async with client.redis.pipeline(transaction=False) as pipe:
            for job_id in ids[start : start + 5000]:
                pipe.hget(client.keys("default").job(job_id), STORED.state)
            out.update(await pipe.execute())
    return out


async def test_drain_cancels_what_waited_and_keeps_what_came_during(client: Client) -> None:
    old: list[str] = []
    for start in range(0, READY, 1000):
        jobs = await client.enqueue_many([t.add.call(i, i) for i in range(start, start + 1000)])
        old += [j.id for j in jobs]
    parent = await client.enqueue(t.add.using(delay_s=600), 0, 0)
    later = [t.add.using(delay_s=600).call(i, i) for i in range(SCHEDULED - 1)]
    old += [parent.id] + [j.id for j in await client.enqueue_many(later)]
    kids = [t.add.using(depends_on=[parent]).call(i, i) for i in range(BLOCKED)]
    old += [j.id for j in await client.enqueue_many(kids)]
    assert await drain.waiting_total(client, "default") == len(old)

    began = await drain.begin(client, "default", by="test")
    assert began is not None and int(began["waiting"]) == len(old)
    assert await drain.begin(client, "default", by="again") is None  # one at a time
    new: list[str] = []
    progress: list[int] = []
    started = time.monotonic()
    running = asyncio.create_task(drain.run(client, "default", chunk=500))
    while not running.done():
        new.append((await client.enqueue(t.add, -1, -1)).id)
        progress.append(int((await drain.status(client, "default"))["cancelled"]))
        await asyncio.sleep(0.01)
    cancelled = await running
    elapsed_s = time.monotonic() - started
    assert cancelled == len(old)
    assert await states(client, old) == {JobState.CANCELLED.value: len(old)}
    assert await states(client, new) == {JobState.SUBMITTED.value: len(new)}
    assert len(new) >= 2 and progress == sorted(progress)
    assert any(0 < p < len(old) for p in progress)  # progress seen along the way
    done = await drain.status(client, "default")
    assert done["state"] == "done" and int(done["cancelled"]) == len(old)
    counts = await client.queues.counts("default")
    assert counts["submitted"] == len(new) and counts["scheduled"] == counts["blocked"] == 0
    record(
        "drain",
        jobs=len(old),
        enqueued_during=len(new),
        seconds=f"{elapsed_s:.2f}",
        jobs_per_s=int(len(old) / elapsed_s),
    )


async def test_drain_reaches_every_waiting_structure(
    client: Client, settings: EngineSettings
) -> None:
    """Priority bands, scheduled ties (small chunks walk them by score and offset), a
    concurrency key's turn and jobs set aside for a task version: all cancelled."""
    aside = [(await client.enqueue(task_ref("elsewhere", version=7))).id for _ in range(4)]
    await Worker(settings, [t.add], burst=True).run()  # sets them aside: it lacks that version
    assert (await client.queues.counts("default"))["waiting_version"] == 4
    bands = [t.add.using(priority=p).call(p, p) for p in (-5, 0, 0, 9, 50)]
    run_at = time.time() + 600
    tied = [t.add.using(run_at=run_at).call(i, i) for i in range(23)]
    keyed = [t.add.using(concurrency_key="k", concurrency_limit=1).call(i, i) for i in range(6)]
    ids = [j.id for j in await client.enqueue_many([*bands, *tied, *keyed])] + aside
    counts = await client.queues.counts("default")
    assert counts["waiting_turn"] == 5 and counts["scheduled"] == 23
    assert await drain.begin(client, "default", by="test") is not None
    cancelled = await drain.run(client, "default", chunk=4)
    left = [j for j in ids if (await client.jobs.get(j)).state is not JobState.CANCELLED]
    assert not left, [await client.jobs.get(j) for j in left]
    assert cancelled == len(ids)
    assert await states(client, ids) == {JobState.CANCELLED.value: len(ids)}
    counts = await client.queues.counts("default")
    assert counts["submitted"] == counts["scheduled"] == counts["waiting_turn"] == 0
    assert counts["waiting_version"] == 0
