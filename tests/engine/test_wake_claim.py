"""An idle worker's claim rides behind its BZPOPMIN: one round trip from a job to its claim.

Judged from the server's side (MONITOR) and by the jobs' states after the worker has gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import threading
from typing import Any

import pytest
import redis

from engine import Client, EngineSettings, JobState, Worker
from engine.seam.luasrc import load_sources

from . import tasks as t

STOP = "wake-claim-test:stop-monitor"


def _monitor(url: str, lines: list[dict[str, Any]], ready: threading.Event) -> None:
    with redis.Redis.from_url(url, decode_responses=True) as r, r.monitor() as monitor:
        ready.set()
        for line in monitor.listen():
            if STOP in line["command"]:
                return
            lines.append(line)


async def _idle_worker(settings: EngineSettings) -> tuple[Worker, asyncio.Task[None]]:
    worker = Worker(settings, [t.add], concurrency=5)
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.3)  # past its first empty claim: waiting on the marker
    return worker, running


def _claim_sha() -> str:
    return hashlib.sha1(load_sources()["claim"][1].encode()).hexdigest()


async def _watch_jobs(client: Client, settings: EngineSettings, count: int) -> tuple[list, list]:
    """Run `count` jobs one after another through an idle worker; return the server's command
    lines (MONITOR) and the jobs' ids."""
    if "cluster" in settings.redis_url.split("://")[0]:
        pytest.skip("a cluster worker waits on each slot's node, then claims (no pipeline)")
    lines: list[dict[str, Any]] = []
    ready = threading.Event()
    watcher = threading.Thread(target=_monitor, args=(settings.redis_url, lines, ready))
    watcher.start()
    assert ready.wait(5)
    worker, running = await _idle_worker(settings)
    ids = []
    for n in range(count):
        job = await client.enqueue(t.add, n, 2)
        assert (await client.jobs.wait(job.id, timeout_s=2)).state is JobState.COMPLETED
        ids.append(job.id)
        await asyncio.sleep(0.05)  # the worker is idle again, waiting on the marker
    worker.stop()
    await running
    await client.redis.get(STOP)
    watcher.join(5)
    return lines, ids


def _who(line: dict[str, Any]) -> str:
    return f"{line['client_address']}:{line['client_port']}"


async def test_the_claim_that_takes_a_job_comes_on_the_waiting_connection(
    client: Client, settings: EngineSettings
) -> None:
    lines, (job_id,) = await _watch_jobs(client, settings, 1)
    waiting = {_who(line) for line in lines if line["command"].startswith("BZPOPMIN")}
    submit = next(i for i, line in enumerate(lines) if job_id in line["command"])
    first_claim = next(
        line for line in lines[submit:] if line["command"].startswith(f"EVALSHA {_claim_sha()}")
    )
    assert _who(first_claim) in waiting


async def test_an_idle_worker_sends_one_claim_per_job_that_wakes_it(
    client: Client, settings: EngineSettings
) -> None:
    """After a claim on wake, the worker waits again: no plain claim that comes back empty."""
    lines, ids = await _watch_jobs(client, settings, 5)
    submits = [
        next(i for i, line in enumerate(lines) if job_id in line["command"]) for job_id in ids
    ]
    claim = f"EVALSHA {_claim_sha()}"
    between = [
        sum(1 for line in lines[start:end] if line["command"].startswith(claim))
        for start, end in itertools.pairwise(submits)
    ]
    assert between == [1, 1, 1, 1]


async def test_a_stopped_worker_claims_nothing_with_the_claim_it_had_queued(
    client: Client, settings: EngineSettings
) -> None:
    """Past the stop's fence (logged `claims=off`), a job that wakes the worker stays queued."""
    slow_wake = dataclasses.replace(settings, idle_wait_s=2.0)
    worker, running = await _idle_worker(slow_wake)
    worker.stop()  # still waiting: its claim is already queued behind the wait
    assert worker.shutdown.fencing is not None
    await worker.shutdown.fencing
    job = await client.enqueue(t.add, 2, 3)  # wakes the wait: the queued claim runs now
    await asyncio.wait_for(running, 5)
    assert (await client.jobs.get(job.id)).state is JobState.SUBMITTED
    meta = await client.redis.hgetall(client.keys("default").meta)
    assert not any(name.startswith("stop:") for name in meta)  # the fence left with it


async def test_a_server_without_the_claim_script_still_serves_an_idle_worker(
    client: Client, settings: EngineSettings
) -> None:
    worker, running = await _idle_worker(settings)
    await client.redis.script_flush()  # the queued claim is answered NOSCRIPT
    job = await client.enqueue(t.add, 3, 4)
    assert (await client.jobs.wait(job.id, timeout_s=3)).state is JobState.COMPLETED
    worker.stop()
    await running


async def test_the_cleaner_removes_the_claim_fence_of_a_dead_worker(client: Client) -> None:
    """A worker killed while it stopped leaves its fence; the reap of dead workers removes it."""
    keys = client.keys("default")
    await client.redis.hset(keys.meta, mapping={"stop:gone": "1", "stop:alive": "1"})
    await client.scripts.reap(
        keys, events_maxlen=1000, max_jobs=100, ttl_ms=1000, dead_workers=["gone"]
    )
    assert set(await client.redis.hkeys(keys.meta)) == {"stop:alive"}
