"""Enqueue through the client against a real redis-server: validation, states, priorities."""

from __future__ import annotations

import time

import pytest

from engine import (
    Client,
    ConfigError,
    DuplicateJob,
    EngineSettings,
    InvalidArguments,
    Job,
    JobNotFound,
    JobState,
    PayloadTooLarge,
    RedisUnavailable,
    SerializationError,
)
from engine.dev.devserver import free_port
from engine.producing.submit import job_spec, submit

from . import tasks as t
from .helpers import command_calls, dbsize, reset_stats, sync_redis


async def test_enqueue_submits_and_get_reads_back(client: Client) -> None:
    job = await client.enqueue(t.add, 1, 2)
    assert job.state is JobState.SUBMITTED
    got = await client.jobs.get(job.id)
    assert got.state is JobState.SUBMITTED and got.args == [1, 2] and got.task == "add"
    assert got.sent_at_ms and got.submitted_at_ms and got.submitted_at_ms >= got.sent_at_ms - 1000
    assert (await client.queues.counts("default"))["submitted"] == 1


async def test_unknown_id_is_not_found_never_pending(client: Client) -> None:
    with pytest.raises(JobNotFound):
        await client.jobs.get("no-such-job")
    with pytest.raises(JobNotFound):
        await client.jobs.get("no-such-job", queue="default")


async def test_a_job_is_found_in_any_known_queue(client: Client) -> None:
    jobs = {q: await client.enqueue(t.add.using(queue=q), 1, 2) for q in ("a", "b", "c")}
    for queue, job in jobs.items():
        assert (await client.jobs.get(job.id)).queue == queue
    assert (await client.queues.states(["a", "b"]))[1] == (False, await client.queues.counts("b"))
    await client.queues.pause("b")
    assert [paused for paused, _ in await client.queues.states(["a", "b", "c"])] == [
        False,
        True,
        False,
    ]


async def test_delay_and_run_at_schedule(client: Client) -> None:
    delayed = await client.enqueue(t.add.using(delay_s=30), 1, 1)
    later = await client.enqueue(t.add.using(run_at=time.time() + 60), 1, 1)
    past = await client.enqueue(t.add.using(run_at=time.time() - 5), 1, 1)
    assert delayed.state is JobState.SCHEDULED and later.state is JobState.SCHEDULED
    assert past.state is JobState.SUBMITTED
    counts = await client.queues.counts("default")
    assert counts["scheduled"] == 2 and counts["submitted"] == 1
    got = await client.jobs.get(delayed.id)
    assert got.run_at_ms is not None and got.submitted_at_ms is not None
    assert got.run_at_ms - got.submitted_at_ms == 30_000  # counted on Redis server time


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: t.add.call(1, 2, 3), InvalidArguments),
        (lambda: t.add.call(1, b={1, 2}), SerializationError),
        (lambda: t.add.call(1, b=object()), SerializationError),
        (lambda: t.add.call(1, b="x" * (2 << 20)), PayloadTooLarge),
    ],
)
async def test_bad_payloads_write_nothing(
    client: Client, settings: EngineSettings, call: object, error: type[Exception]
) -> None:
    before = dbsize(settings)
    with pytest.raises(error):
        await client.enqueue_many([call()])  # type: ignore[operator]
    assert dbsize(settings) == before


async def test_one_bad_job_rejects_the_whole_batch(
    client: Client, settings: EngineSettings
) -> None:
    with pytest.raises(SerializationError):
        await client.enqueue_many([t.add.call(1, 2), t.add.call(1, b=object())])
    assert dbsize(settings) == 0


async def test_payload_limit_is_a_setting(settings: EngineSettings) -> None:
    small = EngineSettings.from_url(settings.redis_url, max_payload_bytes=64)
    async with Client(small) as c:
        with pytest.raises(PayloadTooLarge, match="over the limit of 64 bytes"):
            await c.enqueue(t.add, 1, "y" * 100)


async def test_enqueue_many_is_one_script_call(client: Client, settings: EngineSettings) -> None:
    with sync_redis(settings.redis_url) as r:
        reset_stats(r)
        await client.enqueue_many([t.add.call(i, i) for i in range(500)])
        assert command_calls(r) == 1
    assert (await client.queues.counts("default"))["submitted"] == 500


async def test_duplicate_job_id_refused(client: Client) -> None:
    await client.enqueue(t.add.using(job_id="fixed"), 1, 2)
    with pytest.raises(DuplicateJob, match="fixed"):
        await client.enqueue(t.add.using(job_id="fixed"), 3, 4)
    assert (await client.jobs.get("fixed")).args == [1, 2]


async def test_a_job_id_off_the_rule_writes_nothing(
    client: Client, settings: EngineSettings
) -> None:
    with pytest.raises(ConfigError, match="job ids are"):
        await client.enqueue(t.add.using(job_id="../queues/default/pause?x="), 1, 2)
    renamed = t.add.call(3, 4)
    renamed.id = "a b"
    with pytest.raises(ConfigError, match="'a b'"):
        await client.enqueue_many([t.add.call(1, 2), renamed])
    by_hand = Job(id="x" * 129, task="add", args=[1, 2])
    with pytest.raises(ConfigError, match="job ids are"):
        await client.enqueue_flow([t.add.using(job_id="parent").call(1, 2), by_hand])
    assert dbsize(settings) == 0


async def test_lookups_take_any_id(client: Client, settings: EngineSettings) -> None:
    for bad in ("a b", "../x", ""):
        with pytest.raises(JobNotFound):
            await client.jobs.get(bad, queue="default")
    assert await client.jobs.cancel(["a b", "../x"], "default") == {
        "a b": "not_found",
        "../x": "not_found",
    }
    assert await client.jobs.cancel(["a b"]) == {"a b": "not_found"}
    assert await client.jobs.resubmit("default", ["a b"]) == 0
    assert await client.jobs.purge("default", ["a b"]) == 0
    # The scheduler names a repeatable's ticks <name>@<ms>, outside the rule: still found.
    await client.enqueue(t.add, 0, 0)  # names the queue for lookups without one
    keys = client.keys("default")
    tick = t.add.call(1, 2)
    tick.id = "nightly@1767225600000"
    await submit(client.scripts, settings, keys, [job_spec(tick, keys, 1 << 20)])
    assert (await client.jobs.get(tick.id)).args == [1, 2]
    assert await client.jobs.cancel([tick.id]) == {tick.id: "cancelled"}


async def test_every_submit_appends_an_event(client: Client, settings: EngineSettings) -> None:
    job = await client.enqueue(t.add, 1, 2)
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        events = r.xrange(client.keys("default").events)
    assert [(e["job"], e["from"], e["to"]) for _, e in events] == [
        (job.id, "unsubmitted", "submitted")
    ]


async def test_enqueue_fails_fast_when_redis_is_down() -> None:
    down = EngineSettings.from_url(f"redis://:pw@127.0.0.1:{free_port()}/0")
    async with Client(down) as c:
        start = time.monotonic()
        with pytest.raises(RedisUnavailable) as info:
            await c.enqueue(t.add, 1, 2)
        assert time.monotonic() - start < 1.5
        assert ":pw@" not in str(info.value) and "***" in str(info.value)
