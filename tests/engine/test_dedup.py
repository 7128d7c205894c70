"""Job identity and deduplication: simple, throttle and debounce, and a race of 50 submits."""

from __future__ import annotations

import asyncio

import pytest

from engine import Client, ConfigError, EngineSettings, JobState

from . import tasks as t
from .helpers import drain


async def live_jobs(client: Client) -> int:
    counts = await client.queues.counts("default")
    return sum(counts[s] for s in ("submitted", "scheduled", "blocked", "started"))


async def test_simple_ignores_duplicates_until_the_first_finishes(
    client: Client, settings: EngineSettings
) -> None:
    dedup = t.add.using(deduplication={"id": "sum-1", "mode": "simple"})
    first = await client.enqueue(dedup, 1, 1)
    second = await client.enqueue(dedup, 2, 2)
    assert second.id == first.id and second.state is JobState.SUBMITTED
    assert await live_jobs(client) == 1
    await drain(settings, [t.add])
    assert (await client.jobs.get(first.id)).result == 2
    third = await client.enqueue(dedup, 3, 3)  # the first finished: a new job
    assert third.id != first.id and third.state is JobState.SUBMITTED


async def test_the_id_can_come_from_the_arguments(client: Client) -> None:
    per_user = t.add.using(deduplication={"id": lambda a, b: f"user-{a}"})
    jobs = [await client.enqueue(per_user, a, b) for a, b in [(1, 1), (1, 2), (2, 1)]]
    assert jobs[0].id == jobs[1].id != jobs[2].id
    assert await live_jobs(client) == 2


async def test_throttle_ignores_duplicates_for_its_ttl_even_after_the_first_finished(
    client: Client, settings: EngineSettings
) -> None:
    # A TTL a drain fits in on a busy cluster; then the throttle lapses on its own, no later.
    throttled = t.add.using(deduplication={"id": "t", "mode": "throttle", "ttl": 3})
    loop = asyncio.get_running_loop()
    started_s = loop.time()
    first = await client.enqueue(throttled, 1, 1)
    await drain(settings, [t.add])
    again = await client.enqueue(throttled, 1, 1)
    assert again.id == first.id and again.state is JobState.COMPLETED
    while (later := await client.enqueue(throttled, 1, 1)).id == first.id:
        assert loop.time() - started_s < 10, "the throttle never lapsed"
        await asyncio.sleep(0.1)
    assert later.state is JobState.SUBMITTED
    assert loop.time() - started_s >= 2.9  # not before its TTL


async def test_debounce_replaces_the_waiting_job_and_restarts_its_delay(
    client: Client, settings: EngineSettings
) -> None:
    debounced = t.add.using(deduplication={"id": "d", "mode": "debounce"}, delay_s=0.3)
    first = await client.enqueue(debounced, 1, 1)
    await asyncio.sleep(0.15)
    second = await client.enqueue(debounced, 2, 2)
    assert second.id != first.id and second.state is JobState.SCHEDULED
    old, new = await client.jobs.get(first.id), await client.jobs.get(second.id)
    assert old.state is JobState.CANCELLED
    assert old.errors[-1] == {
        "type": "Debounced",
        "message": f"replaced by {second.id}",
        "attempt": 0,
        "at_ms": old.completed_at_ms,
    }
    assert new.run_at_ms is not None and old.run_at_ms is not None
    assert new.run_at_ms - old.run_at_ms >= 140  # the delay restarted
    await asyncio.sleep(0.35)
    await drain(settings, [t.add])
    assert (await client.jobs.get(second.id)).result == 4


@pytest.mark.parametrize("mode", ["simple", "throttle", "debounce"])
async def test_fifty_concurrent_submits_give_exactly_one_job(
    settings: EngineSettings, mode: str
) -> None:
    dedup = {"id": "race", "mode": mode, "ttl": 30}
    clients = [Client(settings) for _ in range(50)]
    try:
        # Connected one by one first: the race is of the submits. Fifty cluster clients learning
        # the cluster at once keep the loop busy for seconds on a slow host, and a reply that has
        # arrived then waits past the socket timeout (5 s) to be read.
        for c in clients:
            await c.ping()
        jobs = await asyncio.gather(
            *(
                c.enqueue(t.add.using(deduplication=dedup, delay_s=5), i, i)
                for i, c in enumerate(clients)
            )
        )
        counts = await clients[0].queues.counts("default")
        live = counts["scheduled"]
        assert live == 1
        if mode == "debounce":  # each newer one replaced the waiting one: the last one stands
            assert counts["cancelled_total"] == 49
            assert len({j.id for j in jobs}) == 50
        else:
            assert counts["cancelled_total"] == 0
            assert len({j.id for j in jobs}) == 1
    finally:
        for c in clients:
            await c.aclose()


def test_bad_deduplication_is_refused() -> None:
    with pytest.raises(ConfigError, match="mode must be one of simple, throttle, debounce"):
        t.add.using(deduplication={"id": "x", "mode": "sometimes"})
    with pytest.raises(ConfigError, match="throttle' needs a ttl"):
        t.add.using(deduplication={"id": "x", "mode": "throttle"})
    with pytest.raises(ConfigError, match="ttl must be positive"):
        t.add.using(deduplication={"id": "x", "ttl": -1})
    with pytest.raises(ConfigError, match="takes id, mode and ttl"):
        t.add.using(deduplication={"key": "x"})
    with pytest.raises(ConfigError, match="non-empty string"):
        t.add.using(deduplication={"id": lambda a, b: None}).call(1, 2)


async def test_debounce_is_the_shorthand_and_the_key_can_be_read_and_freed(
    client: Client,
) -> None:
    debounced = t.add.using(debounce={"id": "report-7"}, delay_s=60)
    first = await client.enqueue(debounced, 1, 1)
    second = await client.enqueue(debounced, 2, 2)
    assert (await client.jobs.get(first.id)).state is JobState.CANCELLED  # replaced, as debounce
    assert await client.jobs.dedup_holder("default", "report-7") == second.id
    assert await client.jobs.free_dedup("default", "report-7") is True
    assert await client.jobs.dedup_holder("default", "report-7") is None
    third = await client.enqueue(debounced, 3, 3)  # nothing holds the id: a job of its own
    assert (await client.jobs.get(second.id)).state is JobState.SCHEDULED
    assert (await client.jobs.get(third.id)).state is JobState.SCHEDULED
    assert await client.jobs.free_dedup("default", "nobody") is False
    with pytest.raises(ConfigError, match="not both"):
        t.add.using(debounce={"id": "x"}, deduplication={"id": "y"})


async def test_max_running_caps_a_task_across_workers(
    client: Client, settings: EngineSettings
) -> None:
    capped = t.tracked.using(max_running=2)
    jobs = await client.enqueue_many([capped.call() for _ in range(12)])
    assert {(j.concurrency_key, j.concurrency_limit) for j in jobs} == {("task:tracked", 2)}
    t.PEAK.update(now=0, max=0)
    # Two workers of 10 slots each: the task's own key lets 2 run at once, never more.
    await asyncio.gather(*(drain(settings, [t.tracked], concurrency=10) for _ in range(2)))
    assert t.PEAK["max"] == 2
    assert {(await client.jobs.get(j.id)).state for j in jobs} == {JobState.COMPLETED}
    with pytest.raises(ConfigError, match="max_running"):
        t.tenant_work.using(max_running=1).call("a", 1)
