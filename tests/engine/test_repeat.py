"""Repeatable and cron jobs: one job per tick across schedulers, DST, run-time changes."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from engine import Client, ConfigError, EngineSettings, Job, JobState, PayloadTooLarge, Worker
from engine.periodic.scheduler import Scheduler
from engine.producing.repeatable import Repeatable
from engine.transport.connection import connect

from . import tasks as t
from .helpers import dbsize


def ticks(rep: Repeatable, start: datetime, n: int) -> list[str]:
    out, at = [], int(start.timestamp() * 1000)
    for _ in range(n):
        nxt = rep.next_after(at)
        assert nxt is not None
        out.append(datetime.fromtimestamp(nxt / 1000, rep.zone).isoformat())
        at = nxt
    return out


def cron(expr: str, tz: str) -> Repeatable:
    return Repeatable(name="c", queue="default", job={}, cron=expr, tz=tz)


def test_cron_next_fire_times_across_dst_changes() -> None:
    # Spring forward in Berlin: 02:30 does not exist on 29 March; it runs at 03:00 that day.
    assert ticks(cron("30 2 * * *", "Europe/Berlin"), datetime(2026, 3, 27, 12, tzinfo=UTC), 3) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    # Fall back in New York: a fixed-hour job runs once in the repeated hour ...
    assert ticks(
        cron("30 1 * * *", "America/New_York"), datetime(2026, 10, 31, 12, tzinfo=UTC), 3
    ) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
        "2026-11-03T01:30:00-05:00",
    ]
    # ... an hourly one runs in both passes (they are an hour apart) ...
    assert ticks(
        cron("0 * * * *", "America/New_York"), datetime(2026, 11, 1, 4, 30, tzinfo=UTC), 3
    ) == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]
    # ... and a daily 09:00 stays at 09:00 local time (13:00 UTC, then 14:00 UTC).
    daily = cron("0 9 * * *", "America/New_York")
    times = ticks(daily, datetime(2026, 10, 31, 12, tzinfo=UTC), 2)
    assert times == ["2026-10-31T09:00:00-04:00", "2026-11-01T09:00:00-05:00"]


def test_every_n_seconds_stays_on_its_grid_and_stops_at_end() -> None:
    rep = Repeatable(
        name="e", queue="default", job={}, every_s=1.5, start_at_ms=10_000, end_at_ms=14_500
    )
    assert rep.next_after(0) == 10_000
    assert rep.next_after(10_000) == 11_500
    assert rep.next_after(12_999) == 13_000  # late ticks are not replayed: the next one on the grid
    assert rep.next_after(13_000) == 14_500
    assert rep.next_after(14_500) is None


async def test_bad_definitions_fail_at_once_and_change_nothing(
    client: Client, settings: EngineSettings
) -> None:
    before = dbsize(settings)
    bad = [
        ({"cron": "61 * * * *"}, "invalid cron expression"),
        ({"cron": "every day"}, "invalid cron expression"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"every_s": -1}, "positive number"),
        ({"every_s": 0}, "positive number"),
        ({}, "exactly one of every_s and cron"),
        ({"every_s": 1, "cron": "* * * * *"}, "exactly one of every_s and cron"),
        ({"every_s": 1, "start_at": 20, "end_at": 10}, "end_at"),
    ]
    for options, message in bad:
        with pytest.raises(ConfigError, match=message):
            await client.repeats.add("bad", t.add.call(1, 2), **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="names"):
        await client.repeats.add("no spaces", t.add.call(1, 2), every_s=1)
    with pytest.raises(PayloadTooLarge):
        await client.repeats.add("big", t.add.call("x" * 2_000_000, 1), every_s=1)
    with pytest.raises(ConfigError, match="no repeatable"):
        await client.repeats.pause("default", "missing")
    assert dbsize(settings) == before


async def repeat_jobs(client: Client, name: str) -> list[str]:
    keys = client.keys("default")
    found = [k async for k in client.redis.scan_iter(match=keys.job(f"{name}@*"), count=1000)]
    return sorted(k.rsplit(":", 1)[1] for k in found)


@pytest.mark.long_window
@pytest.mark.chaos
async def test_three_schedulers_give_exactly_12_jobs_in_12_s(
    client: Client, settings: EngineSettings
) -> None:
    now = datetime.now(UTC).timestamp()
    start = int(now) + 2
    await client.repeats.add(
        "every-second", t.add.call(1, 2), every_s=1, start_at=start, end_at=start + 11.5
    )
    stopping = asyncio.Event()
    redis = [connect(settings) for _ in range(3)]
    schedulers = [Scheduler(settings, r, ["default"]) for r in redis]
    runs = [asyncio.create_task(s.run(stopping)) for s in schedulers]
    await asyncio.sleep(start + 13 - datetime.now(UTC).timestamp())
    stopping.set()
    await asyncio.gather(*runs)
    for r in redis:
        await r.aclose()
    ids = await repeat_jobs(client, "every-second")
    assert ids == [f"every-second@{(start + k) * 1000}" for k in range(12)]
    job = await client.jobs.get(ids[0])
    assert (job.task, job.args, job.repeat) == ("add", [1, 2], "every-second")
    assert (await client.queues.counts("default"))["submitted"] == 12
    print(f"FIGURES repeatable=1s schedulers=3 window_s=12 jobs={len(ids)}")


async def test_repeatables_change_at_run_time(client: Client, settings: EngineSettings) -> None:
    stopping = asyncio.Event()
    scheduler = Scheduler(settings, client.redis, ["default"])
    run = asyncio.create_task(scheduler.run(stopping))
    await client.repeats.add("r", t.add.call(1, 1), every_s=0.1)
    await asyncio.sleep(0.55)
    await client.repeats.pause("default", "r")
    first = len(await repeat_jobs(client, "r"))  # a tick may land until the pause, not after
    assert 3 <= first <= 7
    [(rep, due)] = await client.repeats.list("default")
    assert due is None and rep.paused
    await asyncio.sleep(0.4)
    assert len(await repeat_jobs(client, "r")) == first
    await client.repeats.add("r", t.add.call(5, 5), every_s=0.2)  # update: new arguments and period
    await asyncio.sleep(0.5)
    jobs = await repeat_jobs(client, "r")
    assert len(jobs) > first
    assert (await client.jobs.get(jobs[-1])).args == [5, 5]
    [(rep, due)] = await client.repeats.list("default")
    assert rep.every_s == 0.2 and due is not None
    assert await client.repeats.remove("default", "r")
    count = len(await repeat_jobs(client, "r"))
    await asyncio.sleep(0.4)
    assert len(await repeat_jobs(client, "r")) == count
    assert await client.repeats.list("default") == []
    stopping.set()
    await run


async def _jobs(client: Client, name: str) -> list[Job]:
    return [await client.jobs.get(i) for i in await repeat_jobs(client, name)]


async def test_skip_if_running_skips_ticks_while_the_last_job_runs(
    client: Client, settings: EngineSettings
) -> None:
    await client.repeats.add("slow", t.waits.call(0.5), every_s=0.1, skip_if_running=True)
    worker = Worker(settings, [t.waits], concurrency=4)
    run = asyncio.create_task(worker.run())
    async with asyncio.timeout(15):  # ticks every 0.1 s: two runs of 0.5 s, one after the other
        while sum(j.state is JobState.COMPLETED for j in await _jobs(client, "slow")) < 2:
            await asyncio.sleep(0.05)
    worker.stop()
    await run
    jobs = await _jobs(client, "slow")
    assert 2 <= len(jobs) <= 3  # one job per finished run (a third may have started)
    spans = sorted((j.started_at_ms or 0, j.completed_at_ms or 2**62) for j in jobs)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end  # never two at once
    assert all(j.state in (JobState.COMPLETED, JobState.STALLED, JobState.STARTED) for j in jobs)


def test_cron_in_a_time_zone_is_stored_and_read_back() -> None:
    rep = Repeatable(
        name="nightly", queue="default", job={"task": "add"}, cron="0 3 * * *", tz="Asia/Tokyo"
    )
    again = Repeatable.from_json(rep.to_json())
    assert again == rep and again.zone == ZoneInfo("Asia/Tokyo")


async def test_a_corrupt_definition_is_set_aside_and_the_others_still_fire(
    client: Client, settings: EngineSettings
) -> None:
    await client.repeats.add("good", t.add.call(1, 1), every_s=0.05)
    keys = client.keys("default")
    await client.redis.hset(keys.repeats, "bad", "{not json")
    await client.redis.zadd(keys.repeat_due, {"bad": 0})
    scheduler = Scheduler(settings, client.redis, ["default"])
    await asyncio.sleep(0.1)
    await scheduler.tick()
    assert len(await repeat_jobs(client, "good")) == 1
    assert await client.redis.zscore(keys.repeat_due, "bad") is None  # no longer due
    assert await client.redis.hget(keys.repeats, "bad") == "{not json"  # kept to inspect


async def test_a_run_made_by_hand_is_the_last_run_in_the_same_script(client: Client) -> None:
    await client.repeats.add("nightly", t.add.call(1, 2), cron="0 3 * * *")
    assert await client.repeats.last_runs("default", ["nightly"]) == [(None, None)]
    job = await client.repeats.run_now("default", "nightly", suffix="m")
    assert job is not None and job.id.startswith("nightly@") and job.id.endswith("m")
    assert job.state == JobState.SUBMITTED
    assert await client.repeats.last_runs("default", ["nightly"]) == [(job.id, "submitted")]
    stored = await client.jobs.get(job.id)
    assert stored.args == [1, 2] and stored.submitted_at_ms is not None
    # the schedule's own ticks are untouched: its next run is still the cron's
    ((rep, due_ms),) = await client.repeats.list("default")
    assert rep.name == "nightly" and due_ms == rep.next_after(stored.submitted_at_ms)
    assert await client.repeats.run_now("default", "nope") is None
    assert await client.jobs.missing([(job.id, "default"), ("gone", "default")]) == {"gone"}
    fields = await client.jobs.fields("default", [job.id, "gone"], ["state", "task"])
    assert fields == [{"state": "submitted", "task": job.task}, {}]


async def test_fire_until_steps_through_every_tick_at_its_own_time(
    client: Client, settings: EngineSettings
) -> None:
    # A nightly cron in Paris and an hourly one: two days later, each tick once, at its time,
    # none skipped as late (a scheduler stopped for two days would fire each once).
    start = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
    start_ms = int(start.timestamp() * 1000)
    await client.repeats.add(
        "nightly", t.add.call(1, 2), cron="0 3 * * *", tz="Europe/Paris", start_at=start
    )
    await client.repeats.add("hourly", t.add.call(3, 4), cron="0 * * * *", start_at=start)
    scheduler = Scheduler(settings, client.redis, ["default"])
    until_ms = start_ms + 2 * 86_400_000
    assert await scheduler.fire_until(until_ms) == 2 + 49  # both ends count for hourly
    nightly = sorted(await repeat_jobs(client, "nightly"))
    assert [int(i.split("@")[1]) for i in nightly] == [
        int(datetime(2027, 3, d, 3, 0, tzinfo=ZoneInfo("Europe/Paris")).timestamp() * 1000)
        for d in (2, 3)
    ]
    assert len(await repeat_jobs(client, "hourly")) == 49
    assert await scheduler.fire_until(until_ms) == 0  # nothing more is due by then
    [(_, due_ms)] = [r for r in await client.repeats.list("default") if r[0].name == "nightly"]
    assert due_ms is not None and due_ms > until_ms
    with pytest.raises(ConfigError, match="more than 10 ticks"):
        await scheduler.fire_until(until_ms + 86_400_000, most=10)
