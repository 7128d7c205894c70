"""Lifecycle features through real workers: progress, limits, registry, expiry, retention."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from engine import Client, EngineSettings, JobState, Worker
from engine.periodic.cleaner import Cleaner
from engine.running.runner import StopReason
from engine.transport.connection import connect

from . import tasks as t
from .helpers import command_calls, drain, reset_stats, sync_redis


async def sweep(settings: EngineSettings) -> None:
    r = connect(settings)
    try:
        await Cleaner(settings, r, ["default"]).tick()
    finally:
        await r.aclose()


async def test_progress_is_stored_and_evented(client: Client, settings: EngineSettings) -> None:
    job = await client.enqueue(t.progressing)
    await drain(settings, [t.progressing])
    got = await client.jobs.get(job.id)
    assert got.progress == 100 and got.progress_message == "step 100"
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        events = r.xrange(client.keys("default").events)
    assert [e["progress"] for _, e in events if "progress" in e] == ["25.0", "50.0", "100.0"]


async def test_max_concurrent_per_task(client: Client, settings: EngineSettings) -> None:
    t.PEAK.update(now=0, max=0)
    jobs = await client.enqueue_many([t.limited.call() for _ in range(10)])
    await drain(settings, [t.limited], concurrency=10)
    assert t.PEAK["max"] == 2
    for job in jobs:  # parked jobs waited without using an attempt
        got = await client.jobs.get(job.id)
        assert got.state is JobState.COMPLETED and got.attempt == 1


async def test_concurrency_limit_per_queue(client: Client, settings: EngineSettings) -> None:
    t.PEAK.update(now=0, max=0)
    await client.enqueue_many([t.tracked.call() for _ in range(12)])
    await drain(settings, [t.tracked], concurrency=10, queue_concurrency={"default": 3})
    assert t.PEAK["max"] == 3


async def test_worker_registry(client: Client, settings: EngineSettings) -> None:
    fast = dataclasses.replace(settings, heartbeat_interval_s=0.1)
    job = await client.enqueue(t.waits, 1.0)
    worker = Worker(fast, [t.waits], queues=["default"], concurrency=4)
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 10  # registered once it started (its children spawn first)
    while not (infos := await client.workers.list()) or not infos[0]["current_jobs"]:
        assert time.monotonic() < deadline, infos
        await asyncio.sleep(0.05)
    [info] = infos
    assert info["id"] == worker.id and info["queues"] == "default" and info["concurrency"] == 4
    assert info["current_jobs"] == [{"id": job.id, "queue": "default", "task": "waits"}]
    assert abs(info["heartbeat_at_ms"] - time.time() * 1000) < 1000
    worker.stop()
    await running
    assert await client.workers.list() == []


async def test_ttl_good_until_and_queue_timeout_expire(
    client: Client, settings: EngineSettings
) -> None:
    ttl = await client.enqueue(t.add.using(ttl_s=0.1), 1, 1)
    until = await client.enqueue(t.add.using(good_until=time.time() + 0.1), 1, 1)
    waiting = await client.enqueue(t.add.using(queue_timeout_s=0.1, delay_s=0.05), 1, 1)
    fresh = await client.enqueue(t.add.using(ttl_s=60), 1, 1)
    await asyncio.sleep(0.3)
    await sweep(settings)
    for job in (ttl, until, waiting):
        got = await client.jobs.get(job.id)
        assert got.state is JobState.EXPIRED
    assert (await client.jobs.get(fresh.id)).state is JobState.SUBMITTED
    assert {j.id for j in await client.dead_letters.list("default")} == {
        ttl.id,
        until.id,
        waiting.id,
    }


async def test_expired_at_claim_never_runs(client: Client, settings: EngineSettings) -> None:
    t.CALLS.clear()
    job = await client.enqueue(t.record.using(ttl_s=0.05), "late")
    await asyncio.sleep(0.1)
    await drain(settings, [t.record])
    assert (await client.jobs.get(job.id)).state is JobState.EXPIRED and t.CALLS == []


async def test_finished_jobs_and_their_children_sets_expire_with_the_result_ttl(
    client: Client, settings: EngineSettings
) -> None:
    """Nothing indexes finished jobs: each hash, and the SET of jobs that waited for it, expire."""
    parent = t.add.using(result_ttl_s=60, ttl_s=600).call(1, 1)
    child = t.add.using(depends_on=[parent.id], result_ttl_s=60).call(2, 2)
    failed = t.boom.using(dead_letter_policy="none", result_ttl_s=60).call()
    orphan = t.add.using(depends_on=[failed.id], on_parent_failure="cancel").call(3, 3)
    await client.enqueue_flow([parent, child])
    await client.enqueue_flow([failed, orphan])
    await drain(settings, [t.add, t.boom])
    keys = client.keys("default")
    for job in (parent, child, failed):
        assert 50_000 < await client.redis.pttl(keys.job(job.id)) <= 60_000
    for job in (parent, failed):  # the SET of its waiting jobs is gone, or goes with it
        assert await client.redis.pttl(keys.children(job.id)) in (-2, *range(50_001, 60_001))
    assert (await client.jobs.get(orphan.id)).state is JobState.CANCELLED
    assert await client.redis.pttl(keys.job(orphan.id)) > 0
    assert await client.redis.zscore(keys.deadlines, parent.id) is None  # ended: no deadline
    lone = await client.enqueue(t.boom.using(dead_letter_policy="none", result_ttl_s=60))
    await drain(settings, [t.boom])  # ended with no child: no SET of children yet
    orphaned = t.add.using(depends_on=[lone.id], on_parent_failure="cancel")
    late = await client.enqueue(orphaned, 4, 4)
    assert (await client.jobs.get(late.id)).state is JobState.CANCELLED  # its parent already ended
    parent_left_ms = await client.redis.pttl(keys.job(lone.id))
    assert 0 < await client.redis.pttl(keys.children(lone.id)) <= parent_left_ms
    assert (await client.jobs.resubmit("default", [orphan.id])) == 1  # its parent is still dead:
    assert (await client.jobs.get(orphan.id)).state is JobState.CANCELLED  # cancelled again, kept
    assert await client.redis.pttl(keys.job(orphan.id)) > 0
    assert [
        k
        for k in await client.redis.keys("*")
        if await client.redis.pttl(k) == -1 and (":job:" in k or ":children:" in k)
    ] == []


async def test_retention_and_dlq_trim(client: Client, settings: EngineSettings) -> None:
    kept = dataclasses.replace(settings, dlq_max_len=2)
    done = await client.enqueue(t.add.using(result_ttl_s=1), 1, 1)
    failed = await client.enqueue_many([t.boom.call() for _ in range(5)])
    await drain(settings, [t.add, t.boom])
    await asyncio.sleep(1.1)
    await sweep(kept)
    keys = client.keys("default")
    assert not await client.redis.exists(keys.job(done.id))  # expired by Redis (result_ttl_s)
    remaining = {j.id for j in await client.dead_letters.list("default")}
    assert len(remaining) == 2 and remaining <= {j.id for j in failed}


async def test_cancel_scheduled_and_unknown(client: Client) -> None:
    later = await client.enqueue(t.add.using(delay_s=60), 1, 1)
    result = await client.jobs.cancel([later.id, "nobody"])
    assert result == {later.id: "cancelled", "nobody": "not_found"}
    assert await client.redis.zcard(client.keys("default").scheduled) == 0
    assert await client.jobs.cancel([later.id]) == {later.id: "finished"}


async def test_cancel_sends_at_most_500_ids_per_script_call(
    client: Client, settings: EngineSettings
) -> None:
    jobs = await client.enqueue_many([t.add.using(delay_s=60).call(i, 1) for i in range(1_190)])
    ids = [j.id for j in jobs] + [f"nobody-{i}" for i in range(10)]
    with sync_redis(settings.redis_url) as r:
        reset_stats(r)
        result = await client.jobs.cancel(ids, "default")
        calls = command_calls(r)
    assert calls == 3
    assert result == {
        **{j.id: "cancelled" for j in jobs},
        **{f"nobody-{i}": "not_found" for i in range(10)},
    }
    assert (await client.queues.counts("default"))["cancelled_total"] == 1_190


async def test_pause_stops_claiming_and_resume_restarts_it(
    client: Client, settings: EngineSettings
) -> None:
    await client.queues.pause("default")
    assert await client.queues.is_paused("default")
    jobs = await client.enqueue_many([t.add.call(i, i) for i in range(5)])
    worker = Worker(settings, [t.add], concurrency=5)
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.5)
    assert (await client.queues.counts("default"))["submitted"] == 5  # nothing claimed while paused
    await client.queues.resume("default")
    done = [await client.jobs.wait(j.id, timeout_s=2) for j in jobs]
    assert {j.state for j in done} == {JobState.COMPLETED}
    worker.stop()
    await running


async def test_a_job_cancelled_before_its_first_step_still_finishes(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(t.waits, 5)
    worker = Worker(settings, [t.waits], concurrency=1)
    [rec], error = await worker.claimer.claim(1)
    assert error is None
    await worker.claimer.admit([rec])  # the task exists but has not run a single step yet
    rec.stop(StopReason.CANCELLED)
    for _ in range(3):  # the cancellation, then the task's done callbacks
        await asyncio.sleep(0)
    assert worker.book.active == {} and len(worker.flusher.queued) == 1
    await worker.writer.write(worker.flusher.queued)
    assert (await client.jobs.get(job.id)).state is JobState.CANCELLED
    await worker.redis.aclose()
    await worker.blocking.aclose()


async def test_after_an_outage_the_cleaner_judges_leases_only_once_a_lease_has_passed(
    client: Client, settings: EngineSettings
) -> None:
    # Writes refused (as when a master has lost the replica min-replicas-to-write asks for, in a
    # failover) while a claimed job's lease lapses: its live worker could not renew it either.
    # Once writes go through again the cleaner leaves it a whole lease, then (no worker having
    # renewed it: this one is gone) hands it back.
    with sync_redis(settings.redis_url) as admin:
        if admin.info("server").get("redis_mode") == "cluster":
            pytest.skip("min-replicas-to-write is set per node; the test Redis is one server")
    fast = dataclasses.replace(
        settings,
        lease_ms=2000,
        heartbeat_interval_s=0.3,
        liveness_window_s=0.5,
        cleaner_interval_s=0.05,
    )
    job = await client.enqueue(t.add, 1, 2)
    keys = client.keys("default")
    await client.scripts.claim(
        keys, events_maxlen=1000, max_jobs=1, lease_ms=2000, worker_id="gone", result_ttl_ms=60_000
    )
    r = connect(fast)
    stopping = asyncio.Event()
    cleaner = Cleaner(fast, r, ["default"])
    running = asyncio.create_task(cleaner.run(stopping))
    try:
        with sync_redis(settings.redis_url) as admin:
            admin.config_set("min-replicas-to-write", 1)
            try:
                await asyncio.sleep(2.3)  # the lease lapses; every tick is refused
                assert (await client.jobs.get(job.id)).state is JobState.STARTED
            finally:
                admin.config_set("min-replicas-to-write", 0)
        back_at = time.monotonic()
        while (await client.jobs.get(job.id)).state is JobState.STARTED:
            assert time.monotonic() - back_at < 10, "the job was never handed back"
            await asyncio.sleep(0.02)
        # A lease (2 s) after writes came back; the ticks' backoff alone waits under 1 s.
        assert time.monotonic() - back_at >= 1.8
        assert (await client.jobs.get(job.id)).state is JobState.SUBMITTED
    finally:
        stopping.set()
        await running
        await r.aclose()
