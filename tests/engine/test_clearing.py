"""Clearing a queue's finished jobs of one state (engine/resources/clearing.py, purge-2.lua)."""

from __future__ import annotations

import pytest

from engine import Client, ConfigError, JobState

from . import tasks as t


async def test_clear_state_deletes_only_finished_jobs_of_that_state(client: Client) -> None:
    cancelled = [await client.enqueue(t.add, i, i) for i in range(5)]
    await client.jobs.cancel([j.id for j in cancelled])
    waiting = await client.enqueue(t.add, 9, 9)
    later = await client.enqueue(t.add.using(delay_s=600), 9, 9)
    other = client.keys("other")
    await client.enqueue(t.add.using(queue="other"), 1, 1)
    (left,) = await client.jobs.cancel(
        [(await client.enqueue(t.add.using(queue="other"), 2, 2)).id]
    )

    assert await client.queues.clear_state("default", "cancelled", dry_run=True) == 5
    assert await client.queues.clear_state("default", "completed") == 0
    assert await client.queues.clear_state("default", "cancelled") == 5

    for job in cancelled:
        assert not await client.redis.exists(client.keys("default").job(job.id))
    assert (await client.jobs.get(waiting.id)).state is JobState.SUBMITTED
    assert (await client.jobs.get(later.id)).state is JobState.SCHEDULED
    assert await client.redis.exists(other.job(left))  # another queue's: untouched
    assert await client.queues.clear_state("default", "cancelled", dry_run=True) == 0


@pytest.mark.parametrize("state", ["submitted", "scheduled", "started", "blocked", "nonsense"])
async def test_live_states_are_refused(client: Client, state: str) -> None:
    job = await client.enqueue(t.add, 1, 1)
    with pytest.raises(ConfigError, match="only finished jobs"):
        await client.queues.clear_state("default", state)
    assert (await client.jobs.get(job.id)).state is JobState.SUBMITTED


async def test_purge_with_a_state_leaves_jobs_of_another(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)
    await client.jobs.cancel([job.id])
    assert await client.scripts.purge(k, state="failed", job_ids=[job.id, "ghost"]) == [-3, -1]
    assert await client.scripts.purge(k, state="cancelled", job_ids=[job.id]) == [0]
