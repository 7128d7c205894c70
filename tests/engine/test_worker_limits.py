"""Limits a worker keeps with its own settings, through real workers: every stale threshold it
renews is at least two heartbeats (lease_ms, a task's max_heartbeat_interval_s), and its
QUEUE_TIMEOUT expires a job that carries no queue timeout of its own when it claims it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import pytest

from engine import Client, ConfigError, EngineSettings, JobContext, JobState, Worker, task

from . import tasks as t
from .helpers import drain, sync_redis


@task(name="beats_often", takes_context=True, max_retries=0, max_stalls=0)
async def beats_often(job: JobContext, seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await job.heartbeat()
        await asyncio.sleep(0.02)
    return "done"


@task(name="beats_too_tight", takes_context=True, max_heartbeat_interval_s=0.5)
async def beats_too_tight(job: JobContext) -> None:
    await job.heartbeat()


def test_a_lease_shorter_than_two_heartbeats_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"lease_ms \(999 ms\) must be at least twice"):
        EngineSettings(lease_ms=999, heartbeat_interval_s=0.5)
    with pytest.raises(ConfigError, match="heartbeat_interval_s must be positive"):
        EngineSettings(heartbeat_interval_s=0)
    two_beats = EngineSettings(lease_ms=1000, heartbeat_interval_s=0.5, liveness_window_s=1)
    assert two_beats.stale_floor_s == 1
    with pytest.raises(ConfigError, match=r"lease_ms \(500 ms\)"):
        EngineSettings.from_mapping({"LEASE_MS": 500, "HEARTBEAT_INTERVAL_S": 0.3})


def test_a_worker_refuses_a_task_whose_heartbeat_limit_is_under_two_heartbeats(
    settings: EngineSettings,
) -> None:
    slow = dataclasses.replace(settings, heartbeat_interval_s=0.3)
    with pytest.raises(ConfigError) as refused:
        Worker(slow, [beats_too_tight, t.add])
    message = str(refused.value)
    assert "beats_too_tight (0.5 s)" in message and "0.6 s" in message and "add" not in message
    Worker(dataclasses.replace(settings, heartbeat_interval_s=0.25), [beats_too_tight])


async def test_a_limit_sent_with_the_call_is_raised_to_two_heartbeats(
    client: Client, settings: EngineSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """Sent below two heartbeats, the limit would lapse between renewals while the task
    heartbeats; the worker uses two heartbeats instead, and says so once."""
    worker = dataclasses.replace(
        settings, heartbeat_interval_s=0.3, lease_ms=2000, cleaner_interval_s=0.1
    )
    job = await client.enqueue(beats_often.using(max_heartbeat_interval_s=0.1), 1.0)
    keys = client.keys("default")
    leases: list[float] = []

    async def watch() -> None:
        with sync_redis(settings.redis_url) as r:
            while True:
                score = r.zscore(keys.started, job.id)
                if score is not None:
                    leases.append(score / 1000 - time.time())
                await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch())
    with caplog.at_level(logging.WARNING, logger="engine.worker"):
        await drain(worker, [beats_often])
    watcher.cancel()
    done = await client.jobs.get(job.id)
    assert done.state is JobState.COMPLETED and done.stalls == 0, done
    assert max(leases) > 0.3  # a lease of up to 0.6 s, not 0.1 s
    raised = [r.getMessage() for r in caplog.records if "raised to twice" in r.getMessage()]
    assert len(raised) == 1 and "task=beats_often" in raised[0] and "used_s=0.6" in raised[0]


async def test_the_workers_queue_timeout_expires_a_job_that_carries_none(
    client: Client, settings: EngineSettings
) -> None:
    """QUEUE_TIMEOUT set on the worker only (the producer stamped nothing): a job that waited
    past it is expired at its claim, not run; a job with its own limit, a queue with its own
    and a job that did not wait as long run."""
    assert settings.queue_timeout_s is None  # the producer's: nothing stamped
    stale = await client.enqueue(t.add, 1, 1)
    own = await client.enqueue(t.add.using(queue_timeout_s=60), 2, 2)
    roomy = await client.enqueue(t.add.using(queue="slowq"), 3, 3)
    assert (await client.jobs.get(stale.id)).queue_timeout_ms is None
    await asyncio.sleep(1.2)
    fresh = await client.enqueue(t.add, 4, 4)
    worker = dataclasses.replace(
        settings,
        queue_timeout_s=1.0,
        queue_timeouts={"slowq": {"queue_timeout_s": 60}},  # type: ignore[arg-type]
    )
    await drain(worker, [t.add], queues=["default", "slowq"])
    expired = await client.jobs.get(stale.id)
    assert expired.state is JobState.EXPIRED and expired.attempt == 0
    assert [j.id for j in await client.dead_letters.list("default")] == [stale.id]
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        reasons = [
            e["error"]
            for _, e in r.xrange(client.keys("default").events)
            if e["job"] == stale.id and e["to"] == "expired"
        ]
    assert reasons == ["queue timeout passed"]
    for job, value in ((own, 4), (roomy, 6), (fresh, 8)):
        done = await client.jobs.get(job.id)
        assert done.state is JobState.COMPLETED and done.result == value
