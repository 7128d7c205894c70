"""Why a job has not started: one job waiting for each reason, as engine.resources.explain says."""

from __future__ import annotations

import asyncio

from engine import Client, EngineSettings, Worker, explain

from . import tasks as t


async def _until_state(client: Client, job_id: str, state: str) -> None:
    for _ in range(500):
        if (await client.jobs.get(job_id)).state == state:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"job {job_id} never reached {state}")


async def test_each_waiting_job_says_why_it_waits(settings: EngineSettings, client: Client) -> None:
    await client.queues.pause("held")
    await client.queues.set_rate_limit("rated", "1/m")
    worker = Worker(settings, [t.add, t.waits], queues=["ex", "held", "rated"], concurrency=4)
    run = asyncio.create_task(worker.run())
    try:
        for _ in range(500):
            if await client.workers.list():
                break
            await asyncio.sleep(0.01)
        keyed = t.waits.using(queue="ex", concurrency_key="k", concurrency_limit=1)
        holder = await client.enqueue(keyed, 30)
        await _until_state(client, holder.id, "started")
        turn = await client.enqueue(keyed, 0)
        child = await client.enqueue(t.add.using(queue="ex", depends_on=[holder]), 1, 2)
        later = await client.enqueue(t.add.using(queue="ex", delay_s=3600), 1, 2)
        paused = await client.enqueue(t.add.using(queue="held"), 1, 2)
        first = await client.enqueue(t.add.using(queue="rated"), 1, 2)
        await client.jobs.wait(first.id, timeout_s=5)
        rated = await client.enqueue(t.add.using(queue="rated"), 1, 2)
        await _until_state(client, rated.id, "scheduled")
        unbuilt = await client.enqueue(t.versioned_v2.using(queue="ex"))  # no worker has it
        lonely = await client.enqueue(t.add.using(queue="lonely"), 1, 2)
        stale = await client.enqueue(t.add.using(queue="lonely", ttl_s=0.05), 1, 2)
        await asyncio.sleep(0.1)

        async def why(job_id: str) -> list[tuple[str, str, list[str]]]:
            return [(r.code, r.target, r.jobs) for r in await explain(client, job_id)]

        assert await why(paused.id) == [("paused", "queue", [])]
        assert await why(turn.id) == [("concurrency", "job", [holder.id])]
        assert await why(child.id) == [("parents", "job", [holder.id])]
        assert await why(later.id) == [("scheduled", "job", [later.id])]
        assert await why(lonely.id) == [("no_worker", "workers", [])]
        [version] = await explain(client, unbuilt.id)
        assert version.code == "no_version" and "runs versioned@2" in version.message
        assert await why(stale.id) == [("no_worker", "workers", []), ("expired", "job", [stale.id])]
        assert await why(holder.id) == []  # started: nothing to explain
        [limit] = await explain(client, rated.id)
        assert limit.code == "rate_limited" and limit.until_ms is not None
        done = await client.jobs.get(first.id)
        assert done.claimed_at_ms is not None
        assert 59_000 <= limit.until_ms - done.claimed_at_ms <= 61_000  # one minute after
        assert (await explain(client, later.id))[0].message.startswith("scheduled to run at")
    finally:
        worker.stop()
        await client.jobs.cancel([holder.id])
        await run
