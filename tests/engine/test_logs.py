"""Per-job log lines: `job.log` / `job.log_sync`, the caps, the token fence, the job's lifetime."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import orjson
import pytest

from engine import Client, EngineSettings, Job, JobContext, JobState
from engine.running.context import LOG_MESSAGE_MAX_CHARS
from engine.running.isolate import Isolation, Lanes
from engine.running.runner import Kind
from engine.seam.scripts import CompleteJob

from . import tasks as t
from .helpers import STORED, drain, sync_redis


def log_events(settings: EngineSettings, job_id: str) -> list[dict[str, str]]:
    """Return the stream entries of `job_id` that carry a log line."""
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        entries = r.xrange(f"{settings.prefix}:{{default}}:events")
    return [f for _, f in entries if f.get("job") == job_id and "log" in f]


async def claimed(client: Client, task: Any = t.add) -> tuple[Job, str]:
    """Enqueue a job and claim it as worker w1; return it and its token."""
    job = await client.enqueue(task, 1, 2)
    k = client.keys("default")
    [row] = await client.scripts.claim(
        k, events_maxlen=1000, max_jobs=1, lease_ms=30_000, worker_id="w1", result_ttl_ms=60_000
    )
    return job, row.token


async def write(client: Client, job: Job, token: str, message: str, *caps: int) -> int:
    """Run log-1.lua for `job` with `token`; caps are (max lines, max bytes)."""
    k = client.keys("default")
    lines, size = caps or (200, 65_536)
    return await client.scripts.log(
        k,
        events_maxlen=1000,
        job_id=job.id,
        token=token,
        message=message,
        worker_id="w1",
        max_lines=lines,
        max_bytes=size,
    )


async def test_async_task_lines_are_stored_in_order_and_evented(
    client: Client, settings: EngineSettings
) -> None:
    before_ms = int(time.time() * 1000)
    job = await client.enqueue(t.logging_async, 5)
    await drain(settings, [t.logging_async])
    got = await client.jobs.get(job.id)
    assert got.state is JobState.COMPLETED
    assert [line["message"] for line in got.logs] == [f"line {i} of attempt 1" for i in range(5)]
    assert {line["attempt"] for line in got.logs} == {1}
    stamps = [line["at_ms"] for line in got.logs]
    assert stamps == sorted(stamps) and before_ms - 1000 <= stamps[0] <= time.time() * 1000
    assert got.logs_count == 5 and not got.logs_dropped
    events = log_events(settings, job.id)
    assert [e["log"] for e in events] == [line["message"] for line in got.logs]
    assert {(e["from"], e["to"], e["attempt"]) for e in events} == {("started", "started", "1")}


async def test_sync_task_logs_from_its_thread(client: Client, settings: EngineSettings) -> None:
    messages = ["plain", 'quotes " and \\ and ,{"at_ms":1}', "accents é, emoji 🚀", "x" * 3000]
    job = await client.enqueue(t.logging_sync, messages)
    await drain(settings, [t.logging_sync])
    got = await client.jobs.get(job.id)
    assert got.state is JobState.COMPLETED and got.result == 4
    want = [*messages[:3], "x" * LOG_MESSAGE_MAX_CHARS]
    assert [line["message"] for line in got.logs] == want


async def test_lines_of_each_attempt_are_kept_with_their_attempt(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(t.logging_async, 2, True)
    await drain(settings, [t.logging_async])
    got = await client.jobs.get(job.id)
    assert got.state is JobState.COMPLETED and got.attempt == 2
    assert [(line["attempt"], line["message"]) for line in got.logs] == [
        (1, "line 0 of attempt 1"),
        (1, "line 1 of attempt 1"),
        (2, "line 0 of attempt 2"),
        (2, "line 1 of attempt 2"),
    ]


async def test_count_cap_keeps_the_newest_lines(client: Client, settings: EngineSettings) -> None:
    capped = dataclasses.replace(settings, job_log_max_lines=5)
    job = await client.enqueue(t.logging_async, 12)
    await drain(capped, [t.logging_async])
    got = await client.jobs.get(job.id)
    assert [line["message"] for line in got.logs] == [
        f"line {i} of attempt 1" for i in range(7, 12)
    ]
    assert got.logs_count == 5 and got.logs_dropped == 7
    assert len(log_events(settings, job.id)) == 12  # every line is evented, kept or not


async def test_byte_cap_keeps_the_newest_lines_that_fit(client: Client) -> None:
    job, token = await claimed(client)
    # Messages that look like the boundary between lines must not confuse the trimming.
    messages = [f'{i:02d} ,{{"at_ms":0}} ' + "y" * 40 for i in range(30)]
    for message in messages:
        assert await write(client, job, token, message, 1000, 400) == 0
    raw = await client.redis.hget(client.keys("default").job(job.id), STORED.logs)
    assert raw is not None and len(raw) <= 400
    got = await client.jobs.get(job.id)
    kept = [line["message"] for line in got.logs]
    assert kept == messages[-len(kept) :] and 2 <= len(kept) < 30
    assert got.logs_count == len(kept) and got.logs_dropped == 30 - len(kept)


async def test_a_line_over_the_byte_cap_alone_is_dropped_and_counted(client: Client) -> None:
    job, token = await claimed(client)
    assert await write(client, job, token, "small", 10, 200) == 0
    assert await write(client, job, token, "z" * 300, 10, 200) == 0
    got = await client.jobs.get(job.id)
    assert got.logs == [] and got.logs_count == 0 and got.logs_dropped == 2
    assert await write(client, job, token, "after", 10, 200) == 0
    got = await client.jobs.get(job.id)
    assert [line["message"] for line in got.logs] == ["after"] and got.logs_dropped == 2


async def test_only_the_owner_of_the_running_attempt_writes(client: Client) -> None:
    job, token = await claimed(client)
    key = client.keys("default").job(job.id)
    assert await write(client, job, "stale-token", "from a stale worker") == -2
    assert await client.redis.hget(key, STORED.logs) is None
    assert await write(client, job, token, "from the owner") == 0
    k = client.keys("default")
    done = await client.scripts.complete(
        k, events_maxlen=1000, worker_id="w1", jobs=[CompleteJob(job.id, token, b"3", 60_000)]
    )
    assert done == [0]
    assert await write(client, job, token, "after the end") == -2  # the token is cleared
    assert [line["message"] for line in (await client.jobs.get(job.id)).logs] == ["from the owner"]
    ghost = Job(id="no-such-job", task="add")
    assert await write(client, ghost, token, "nobody") == -2
    assert await client.redis.exists(k.job("no-such-job")) == 0


async def test_lines_expire_and_are_deleted_with_the_job(
    client: Client, settings: EngineSettings
) -> None:
    kept = await client.enqueue(t.logging_async, 3)
    short = await client.enqueue(t.logging_async.using(result_ttl_s=1), 3)
    await drain(settings, [t.logging_async])
    for job in (kept, short):
        assert len((await client.jobs.get(job.id)).logs) == 3
    assert await client.jobs.purge("default", [kept.id]) == 1
    assert [key async for key in client.redis.scan_iter(match=f"*{kept.id}*")] == []
    await asyncio.sleep(1.1)
    assert [key async for key in client.redis.scan_iter(match=f"*{short.id}*")] == []


async def test_resubmit_keeps_the_lines_of_the_earlier_series(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(t.logging_async.using(max_retries=0), 1, True)
    await drain(settings, [t.logging_async])
    assert (await client.jobs.get(job.id)).state is JobState.FAILED
    assert await client.jobs.resubmit("default", [job.id]) == 1
    await drain(settings, [t.logging_async])
    got = await client.jobs.get(job.id)  # attempts count from 1 again: it failed again
    assert got.state is JobState.FAILED and got.attempt == 1
    assert [line["message"] for line in got.logs] == ["line 0 of attempt 1"] * 2


async def test_context_cuts_long_messages_and_lone_surrogates() -> None:
    seen: list[str] = []

    async def writer(_: Job, message: str) -> None:
        seen.append(message)

    ctx = JobContext(Job(id="j", task="x"), "w1", _log=writer)
    await ctx.log("a" * (LOG_MESSAGE_MAX_CHARS + 5))
    await ctx.log("bad \ud800 half")
    assert seen == ["a" * LOG_MESSAGE_MAX_CHARS, "bad ? half"]
    await JobContext(Job(id="j", task="x"), "w1").log("no writer: nothing happens")


async def test_an_isolated_run_sends_its_lines_to_the_worker(
    capfd: pytest.CaptureFixture[str],
) -> None:
    isolation = Isolation.for_tasks([t.logging_async])
    assert isolation is not None
    lanes = Lanes(isolation, "host:1:abc", 1 << 20, 1)
    lines: list[str] = []

    async def progress(pct: float, message: str) -> None:
        pass

    async def on_log(message: str) -> None:
        lines.append(message)

    job = Job(id="j1", task="logging_async", state=JobState.STARTED, args=[3], attempt=1, stalls=1)
    try:
        outcome = await lanes.run(job, None, lambda: None, progress, on_log)
    finally:
        await lanes.close()
    assert outcome.kind == Kind.COMPLETE and orjson.loads(outcome.result) == 3
    assert lines == [f"line {i} of attempt 1" for i in range(3)]
    # The child writes to the worker's stderr: nothing but its own log (no runpy warning).
    assert "Warning" not in capfd.readouterr().err
