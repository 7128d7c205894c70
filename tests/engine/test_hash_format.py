"""Job hashes in either storage format (engine/fields.py) are read, run and kept.

A Redis records the format its job hashes are written in (engine/seam/hashformat.py): the
newest for a Redis nothing used yet, format 1 for one that releases before 0.2 used, until an
operator moves it on. Every process reads both: in a rolling deploy, or while processes that
learned the format before a move still run, a job written in one format is read by a process
of the other. Here the test rewrites a job's hash into the other format, as such a process
would have written it, at each point of the job's life, in a Redis of either format, and checks
every operation reads it and the scripts store it back in the Redis's format.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from engine import Client, ConfigError, EngineSettings, JobContext, JobState, Worker, task
from engine.cli import main
from engine.fields import ATTRIBUTE, NAMES, other
from engine.keys import hash_format_key, queues_key, worker_key, workers_key
from engine.seam.hashformat import NEWEST, OLDEST, move
from engine.seam.luasrc import _fields

from . import tasks as t
from .helpers import drain

# The mid-run job waits on this until the test rewrote its hash (one event a test: an event
# belongs to the loop it was first awaited on).
REWRITTEN: list[asyncio.Event] = []


@task(name="format_mid_run", takes_context=True)
async def mid_run(job: JobContext) -> str:
    await job.log("before")
    await asyncio.wait_for(REWRITTEN[-1].wait(), 10)
    await job.log("after")
    await job.set_progress(50, "half")
    await asyncio.sleep(0.3)  # heartbeats (every 0.05 s here) read the rewritten hash
    return "done"


@pytest.fixture(params=[OLDEST, NEWEST], ids=["format1", "format2"])
async def fmt(request: pytest.FixtureRequest, client: Client) -> int:
    """Give the test's Redis hash format `param` (as a deploy or a move would have)."""
    await client.redis.set(hash_format_key(client.settings.prefix), str(request.param))
    assert await client.scripts.raw.hash_format() == request.param
    return int(request.param)


async def _raw(client: Client, queue: str, job_id: str) -> dict[str, str]:
    """Return a job's hash by attribute name, after checking it is in the Redis's format."""
    fields: dict[str, str] = await client.redis.hgetall(client.keys(queue).job(job_id))
    ours = NAMES[await client.scripts.raw.hash_format()]
    assert ours["state"] in fields and set(fields) <= set(ours.values()), fields
    return {ATTRIBUTE[name]: value for name, value in fields.items()}


async def _to_other(client: Client, queue: str, job_id: str) -> None:
    """Rewrite a job's hash as the other format stores it (its ttl kept)."""
    theirs = NAMES[other(await client.scripts.raw.hash_format())]
    key = client.keys(queue).job(job_id)
    fields = await _raw(client, queue, job_id)
    ttl_ms = await client.redis.pttl(key)
    async with client.redis.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        pipe.hset(key, mapping={theirs[name]: value for name, value in fields.items()})
        if ttl_ms > 0:
            pipe.pexpire(key, ttl_ms)
        pipe.hget(key, theirs["state"])  # in the transaction: a running job's next script
        rewritten = (await pipe.execute())[-1]  # (its heartbeat) turns it back at once
    assert rewritten is not None


async def test_a_queued_job_in_the_other_format_is_read_and_runs(
    client: Client, settings: EngineSettings, fmt: int
) -> None:
    job = await client.enqueue(t.record, label="x")
    await _to_other(client, "default", job.id)
    got = await client.jobs.get(job.id)
    assert (got.state, got.task, got.args, got.kwargs) == (
        JobState.SUBMITTED,
        "record",
        [],
        {"label": "x"},
    )
    assert (await client.jobs.fields("default", [job.id], ["task", "state"])) == [
        {"task": "record", "state": "submitted"}
    ]
    await drain(settings, [t.record])
    raw = await _raw(client, "default", job.id)
    assert (raw["state"], raw["result"], raw["attempt"]) == ("completed", '"x"', "1")


async def test_cancel_promote_and_resubmit_read_the_other_format(
    client: Client, settings: EngineSettings, fmt: int
) -> None:
    queued = await client.enqueue(t.record, label="q")
    later = await client.enqueue(t.record.using(delay_s=0.2), label="later")
    dead = await client.enqueue(t.fails_first_time, f"dead-once-{fmt}")  # fails once a label
    for job in (queued, later):
        await _to_other(client, "default", job.id)
    assert await client.jobs.cancel([queued.id]) == {queued.id: "cancelled"}
    assert (await _raw(client, "default", queued.id))["state"] == "cancelled"
    await drain(settings, [t.record, t.fails_first_time])  # promotes `later`, buries `dead`
    assert (await _raw(client, "default", later.id))["state"] == "completed"
    assert (await client.jobs.get(dead.id)).state is JobState.FAILED
    await _to_other(client, "default", dead.id)
    assert await client.jobs.resubmit("default", [dead.id]) == 1
    await drain(settings, [t.fails_first_time])
    assert (await _raw(client, "default", dead.id))["state"] == "completed"


async def test_a_running_job_rewritten_mid_run_reports_and_completes(
    client: Client, settings: EngineSettings, fmt: int
) -> None:
    REWRITTEN.append(asyncio.Event())
    job = await client.enqueue(mid_run)
    fast = dataclasses.replace(settings, heartbeat_interval_s=0.05)
    worker = Worker(fast, [mid_run], burst=True)
    run = asyncio.create_task(worker.run())
    async with asyncio.timeout(10):
        while (await client.jobs.get(job.id)).logs_count != 1:
            await asyncio.sleep(0.01)
    await _to_other(client, "default", job.id)
    REWRITTEN[-1].set()
    await asyncio.wait_for(run, 10)
    done = await client.jobs.get(job.id)
    assert (done.state, done.result, done.progress) == (JobState.COMPLETED, "done", 50.0)
    assert [line["message"] for line in done.logs] == ["before", "after"]
    assert (await _raw(client, "default", job.id))["result"] == '"done"'


async def test_the_mirror_reads_hashes_and_fields_in_either_format(
    client: Client, fmt: int
) -> None:
    jobs = [await client.enqueue(t.record, label=str(i)) for i in range(2)]
    await _to_other(client, "default", jobs[0].id)
    keys = client.keys("default")
    ids = [job.id for job in jobs]
    assert await client.scripts.snapshot(keys, job_ids=ids, field="task") == ["record"] * 2
    rows = await client.scripts.snapshot(keys, job_ids=ids)
    assert all(row and '"record"' in row for row in rows)


def test_a_script_naming_a_field_the_table_lacks_is_refused() -> None:
    for fmt in (OLDEST, NEWEST):
        ours, theirs = NAMES[fmt]["state"], NAMES[other(fmt)]["state"]
        assert (
            _fields("HGET(k, F.state, O.state)", "x.lua", fmt) == f"HGET(k, '{ours}', '{theirs}')"
        )
    with pytest.raises(RuntimeError, match=r"x\.lua: F\.stat is not a job field"):
        _fields("rcall('HGET', key, F.stat)", "x.lua", NEWEST)


async def test_a_fresh_redis_takes_the_newest_format_and_a_used_one_the_oldest(
    client: Client, settings: EngineSettings
) -> None:
    key, prefix = hash_format_key(settings.prefix), settings.prefix
    await client.repeats.add("tick", t.record.call(label="t"), every_s=3600)  # no jobs yet
    job = await client.enqueue(t.record, label="new")
    assert await client.redis.get(key) == str(NEWEST)
    stored = await client.redis.hgetall(client.keys("default").job(job.id))
    assert stored[NAMES[NEWEST]["task"]] == "record" and "task" not in stored
    old_queue = [("sadd", (queues_key(prefix), "default")), ("incr", (client.keys("default").seq,))]
    old_worker = [
        ("zadd", (workers_key(prefix), {"host:1:old": 1})),
        ("hset", (worker_key(prefix, "host:1:old"), "id", "host:1:old")),  # no hash_formats
    ]
    for what in (old_queue, old_worker):  # what a release before 0.2 leaves
        await client.redis.flushall()
        for method, args in what:
            await getattr(client.redis, method)(*args)
        used = Client(settings)
        try:
            job = await used.enqueue(t.record, label="old")
            assert await used.redis.get(key) == str(OLDEST)
            stored = await used.redis.hgetall(used.keys("default").job(job.id))
            assert stored["task"] == "record"
        finally:
            await used.aclose()


async def test_a_move_waits_for_every_worker_to_read_the_format(
    client: Client, settings: EngineSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    key = hash_format_key(settings.prefix)
    await client.redis.set(key, str(OLDEST))
    old = {"id": "host:1:old"}  # a 0.2 worker's entry: no hash_formats
    new = {"id": "host:2:new", "hash_formats": "1,2"}
    with pytest.raises(ConfigError, match="host:1:old"):
        await move(client.redis, settings.prefix, NEWEST, [old, new])
    assert await client.redis.get(key) == str(OLDEST)
    args = ["hash-format", "--url", settings.redis_url, "--prefix", settings.prefix]
    assert await asyncio.to_thread(main, [*args, "--set", str(NEWEST)]) == 0
    assert capsys.readouterr().out == f"hash_format={NEWEST}\n"
    assert await client.redis.get(key) == str(NEWEST)
    assert await asyncio.to_thread(main, [*args, "--set", "7"]) == 2
