"""A job hash in the other storage format (engine/fields.py) is read, run and kept.

A change of the hash's field names ships in two releases that both read both formats: during a
rolling deploy, or after a rollback, a job written by one is read by the other. Here the test
rewrites a job's hash into the other format, as the other release would have written it, at
each point of the job's life, and checks every operation reads it and the scripts store it back
in this release's format.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from engine import Client, EngineSettings, JobContext, JobState, Worker, task
from engine.fields import ATTRIBUTE, OTHER, STORED
from engine.seam.luasrc import _fields

from . import tasks as t
from .helpers import drain

# Names only the other format uses.
OTHER_ONLY = set(OTHER.values()) - set(STORED.values())
# The mid-run job waits on this until the test rewrote its hash.
REWRITTEN = asyncio.Event()


@task(name="format_mid_run", takes_context=True)
async def mid_run(job: JobContext) -> str:
    await job.log("before")
    await asyncio.wait_for(REWRITTEN.wait(), 10)
    await job.log("after")
    await job.set_progress(50, "half")
    await asyncio.sleep(0.3)  # heartbeats (every 0.05 s here) read the rewritten hash
    return "done"


async def _raw(client: Client, queue: str, job_id: str) -> dict[str, str]:
    return await client.redis.hgetall(client.keys(queue).job(job_id))  # type: ignore[no-any-return]


async def _to_other(client: Client, queue: str, job_id: str) -> None:
    """Rewrite a job's hash as the other format stores it (its ttl kept)."""
    key = client.keys(queue).job(job_id)
    fields = await _raw(client, queue, job_id)
    ttl_ms = await client.redis.pttl(key)
    async with client.redis.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        pipe.hset(key, mapping={OTHER.get(ATTRIBUTE.get(k, k), k): v for k, v in fields.items()})
        if ttl_ms > 0:
            pipe.pexpire(key, ttl_ms)
        await pipe.execute()
    assert OTHER["state"] in await _raw(client, queue, job_id)


def _ours(raw: dict[str, str]) -> None:
    assert raw.get("state") is not None and not OTHER_ONLY & set(raw), raw


async def test_a_queued_job_in_the_other_format_is_read_and_runs(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(t.record, label="x")
    await _to_other(client, "default", job.id)
    got = await client.get(job.id)
    assert (got.state, got.task, got.args, got.kwargs) == (
        JobState.SUBMITTED,
        "record",
        [],
        {"label": "x"},
    )
    assert (await client.job_fields("default", [job.id], ["task", "state"])) == [
        {"task": "record", "state": "submitted"}
    ]
    await drain(settings, [t.record])
    raw = await _raw(client, "default", job.id)
    _ours(raw)
    assert (raw["state"], raw["result"], raw["attempt"]) == ("completed", '"x"', "1")


async def test_cancel_promote_and_resubmit_read_the_other_format(
    client: Client, settings: EngineSettings
) -> None:
    queued = await client.enqueue(t.record, label="q")
    later = await client.enqueue(t.record.using(delay_s=0.2), label="later")
    dead = await client.enqueue(t.fails_first_time, "dead-once")
    for job in (queued, later):
        await _to_other(client, "default", job.id)
    assert await client.cancel([queued.id]) == {queued.id: "cancelled"}
    _ours(await _raw(client, "default", queued.id))
    await drain(settings, [t.record, t.fails_first_time])  # promotes `later`, buries `dead`
    assert (await _raw(client, "default", later.id))["state"] == "completed"
    assert (await client.get(dead.id)).state is JobState.FAILED
    await _to_other(client, "default", dead.id)
    assert await client.resubmit("default", [dead.id]) == 1
    await drain(settings, [t.fails_first_time])
    raw = await _raw(client, "default", dead.id)
    _ours(raw)
    assert raw["state"] == "completed"


async def test_a_running_job_rewritten_mid_run_reports_and_completes(
    client: Client, settings: EngineSettings
) -> None:
    REWRITTEN.clear()
    job = await client.enqueue(mid_run)
    fast = dataclasses.replace(settings, heartbeat_interval_s=0.05)
    worker = Worker(fast, [mid_run], burst=True)
    run = asyncio.create_task(worker.run())
    async with asyncio.timeout(10):
        while (await client.get(job.id)).logs_count != 1:
            await asyncio.sleep(0.01)
    await _to_other(client, "default", job.id)
    REWRITTEN.set()
    await asyncio.wait_for(run, 10)
    done = await client.get(job.id)
    assert (done.state, done.result, done.progress) == (JobState.COMPLETED, "done", 50.0)
    assert [line["message"] for line in done.logs] == ["before", "after"]
    _ours(await _raw(client, "default", job.id))


async def test_the_mirror_reads_hashes_and_fields_in_either_format(client: Client) -> None:
    jobs = [await client.enqueue(t.record, label=str(i)) for i in range(2)]
    await _to_other(client, "default", jobs[0].id)
    keys = client.keys("default")
    ids = [job.id for job in jobs]
    assert await client.scripts.snapshot(keys, job_ids=ids, field="task") == ["record"] * 2
    rows = await client.scripts.snapshot(keys, job_ids=ids)
    assert all(row and '"record"' in row for row in rows)


def test_a_script_naming_a_field_the_table_lacks_is_refused() -> None:
    assert _fields("HGET(k, F.state, O.state)", "x.lua") == (
        f"HGET(k, '{STORED['state']}', '{OTHER['state']}')"
    )
    with pytest.raises(RuntimeError, match=r"x\.lua: F\.stat is not a job field"):
        _fields("rcall('HGET', key, F.stat)", "x.lua")
