"""Each Lua script on its own, called directly against a real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine import Client, JobState
from engine.errors import (
    SCRIPT_ERRORS,
    DuplicateJob,
    JobNotFound,
    LeaseLost,
    UnknownParent,
    WrongState,
)

from . import tasks as t


async def claim_one(client: Client, worker: str = "w1", limit: int = 1) -> list[Any]:
    k = client.keys("default")
    rows = await client.scripts.claim(
        k,
        [k.job_prefix, 1000, limit, 30_000, worker, 60_000],
    )
    return rows[0] if rows else []


def test_error_table() -> None:
    assert {
        -1: JobNotFound,
        -2: LeaseLost,
        -3: WrongState,
        -4: DuplicateJob,
        -5: UnknownParent,
    } == SCRIPT_ERRORS


async def test_key_count_is_checked(client: Client) -> None:
    with pytest.raises(ValueError, match="claim takes 12 keys"):
        await client.scripts.claim(["only-one"], [])


async def test_scripts_survive_noscript(client: Client) -> None:
    await client.redis.script_flush()
    job = await client.enqueue(t.add, 1, 2)
    assert (await client.get(job.id)).state is JobState.SUBMITTED


async def test_claim_sets_lease_token_and_skips_vanished_ids(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 2)
    await client.redis.zadd(k.submitted, {"ghost": 0})  # an id without a hash
    row = await claim_one(client, limit=2)
    assert row[0] == job.id and row[5] == 1 and row[6]
    got = await client.get(job.id)
    assert got.state is JobState.STARTED and got.worker == "w1" and got.token == row[6]
    lease = await client.redis.zscore(k.started, job.id)
    assert lease is not None and lease > got.claimed_at_ms  # type: ignore[operator]
    assert await client.redis.zcard(k.submitted) == 0


async def test_claim_wakes_the_next_worker_while_jobs_remain(client: Client) -> None:
    k = client.keys("default")
    await client.enqueue_many([t.add.call(i, i) for i in range(3)])
    await client.redis.delete(k.marker)
    await claim_one(client)
    assert await client.redis.zcard(k.marker) == 1


async def test_promote_moves_only_due_jobs(client: Client) -> None:
    k = client.keys("default")
    due = await client.enqueue(t.add.using(delay_s=0.001), 1, 1)
    later = await client.enqueue(t.add.using(delay_s=60), 1, 1)
    await asyncio.sleep(0.01)
    promoted, wait_ms = await client.scripts.promote(k, [k.job_prefix, 1000, 100])
    assert promoted == 1 and 58_000 < wait_ms <= 60_000
    assert (await client.get(due.id)).state is JobState.SUBMITTED
    assert (await client.get(later.id)).state is JobState.SCHEDULED


async def test_fail_without_dlq_expires_and_with_wrong_token_is_refused(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)
    row = await claim_one(client)
    head = [k.job_prefix, 1000, "w1", job.id]
    tail = ["failed", '{"type":"X"}', "X", 5000]
    await client.redis.hset(k.job(job.id), "dlq", "0")
    assert await client.scripts.fail(k, [*head, "wrong", *tail]) == -2
    assert await client.scripts.fail(k, [*head, row[6], *tail]) == 0
    assert await client.scripts.fail(k, [*head, row[6], *tail]) == -2  # token cleared
    assert await client.redis.zscore(k.dlq, job.id) is None
    assert 0 < await client.redis.pttl(k.job(job.id)) <= 5000
    assert (await client.get(job.id)).errors == [{"type": "X"}]


async def test_retry_appends_errors_and_requeues(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)
    for n in (1, 2):
        row = await claim_one(client)
        code = await client.scripts.retry(
            k, [k.job_prefix, 1000, "w1", job.id, row[6], "", f'{{"n":{n}}}', "e", 1000]
        )
        assert code == 0
    got = await client.get(job.id)
    assert got.state is JobState.SUBMITTED and got.errors == [{"n": 1}, {"n": 2}]
    assert (
        await client.scripts.retry(k, [k.job_prefix, 1000, "w1", "nope", "1", "", "{}", "", 1])
        == -1
    )


async def test_resubmit_refuses_live_jobs(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)
    codes = await client.scripts.resubmit(
        k,
        [k.job_prefix, 1000, k.children_prefix, job.id, "nope"],
    )
    assert codes == [-3, -1]
