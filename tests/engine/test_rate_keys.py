"""Rate keys (a budget of the task's rate per key value) and on_rate_limit (wait, drop,
reschedule), through a real worker on a real Redis; each task writes its own ledger of starts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from engine import Client, ConfigError, EngineSettings, Job, JobState, Worker, explain, task
from engine.job import by_attribute

from . import tasks as t


def _stamp(ledger: str, key: str) -> None:
    with open(ledger, "a", encoding="utf-8") as out:
        out.write(json.dumps({"key": key, "t_ms": time.time() * 1000}) + "\n")


@task(name="rate_keys.per_customer", rate_limit="5/s", rate_key=lambda ledger, customer: customer)
async def per_customer(ledger: str, customer: str) -> None:
    _stamp(ledger, customer)


@task(name="rate_keys.stamp", rate_limit="1/m", rate_key="k")
async def stamp(ledger: str, key: str) -> None:
    _stamp(ledger, key)


def starts(ledger: Path) -> list[dict[str, float | str]]:
    if not ledger.exists():
        return []
    lines = ledger.read_text(encoding="utf-8").splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda s: float(s["t_ms"]))


async def run_until_done(settings: EngineSettings, client: Client, jobs: Iterable[Job]) -> None:
    """Run a worker until every job of `jobs` ended (scheduled ones included)."""
    worker = Worker(settings, [per_customer, stamp, t.add], concurrency=8)
    run = asyncio.create_task(worker.run())
    try:
        for job in jobs:
            await client.jobs.wait(job.id, timeout_s=15)
    finally:
        worker.stop()
        await run


async def hash_fields(client: Client, job: Job) -> set[str]:
    raw = await client.redis.hgetall(client.keys(job.queue).job(job.id))
    return set(by_attribute(raw))


async def events_of(client: Client, job: Job) -> list[tuple[str, str, str]]:
    entries = await client.redis.xrange(client.keys(job.queue).events)
    return [(e["from"], e["to"], e["error"]) for _, e in entries if e["job"] == job.id]


def test_rate_key_and_on_rate_limit_are_checked() -> None:
    with pytest.raises(ConfigError, match="need a rate_limit"):
        t.add.using(rate_key="k")
    with pytest.raises(ConfigError, match="need a rate_limit"):
        t.add.using(on_rate_limit="drop")
    with pytest.raises(ConfigError, match="on_rate_limit must be one of wait, drop, reschedule"):
        t.add.using(rate_limit="1/s", on_rate_limit="later")
    with pytest.raises(ConfigError, match="rate_key must be a non-empty string"):
        t.add.using(rate_limit="1/s", rate_key="")
    job = per_customer.call("ledger", "acme")
    assert (job.rate_key, job.on_rate_limit, job.rate_interval_ms) == ("acme", None, 200.0)
    assert stamp.using(on_rate_limit="reschedule").call("l", "k").on_rate_limit == "reschedule"


async def test_two_rate_keys_each_get_their_own_rate(
    settings: EngineSettings, client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    # Key a's burst is submitted first: with one budget for the task, b would wait behind it.
    jobs = [per_customer.call(str(ledger), "a") for _ in range(6)]
    jobs += [per_customer.call(str(ledger), "b") for _ in range(6)]
    await client.enqueue_many(jobs)
    await run_until_done(settings, client, jobs)
    seen = starts(ledger)
    assert sorted(str(s["key"]) for s in seen) == ["a"] * 6 + ["b"] * 6
    assert {"a", "b"} <= {s["key"] for s in seen[:4]}  # b is not starved by a's burst
    for key in ("a", "b"):
        times = [float(s["t_ms"]) for s in seen if s["key"] == key]
        # 5/s: one start every 200 ms per key; 6 starts span 5 intervals (with room for jitter).
        assert times[-1] - times[0] >= 5 * 200 * 0.8
    # Two budgets: both keys together started faster than one budget of 5/s would allow.
    all_times = [float(s["t_ms"]) for s in seen]
    assert all_times[-1] - all_times[0] < 11 * 200
    budget = client.keys("default").rate("a")
    assert await client.redis.pttl(budget) <= 200  # an idle key's budget expires (gone: -2)


async def test_a_job_without_a_rate_key_writes_the_fields_it_wrote_before(
    settings: EngineSettings, client: Client
) -> None:
    plain = await client.enqueue(t.add, 1, 2)
    rated = await client.enqueue(t.add.using(rate_limit="10/s"), 1, 2)
    assert rated.rate_limited_until_ms is None and rated.state is JobState.SUBMITTED
    assert await hash_fields(client, rated) == await hash_fields(client, plain) | {
        "rate_interval_ms"
    }
    await run_until_done(settings, client, [plain, rated])
    keys = client.keys("default")
    assert await client.redis.hexists(keys.meta, "tat:add")  # the task's budget, as before
    pattern = keys.base.replace("{", "\\{").replace("}", "\\}") + ":rate:*"
    assert [k async for k in client.redis.scan_iter(match=pattern)] == []
    assert await events_of(client, rated) == [
        ("unsubmitted", "submitted", ""),
        ("submitted", "started", ""),
        ("started", "completed", ""),
    ]


async def test_wait_holds_a_job_until_its_keys_slot_and_names_the_key(
    settings: EngineSettings, client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    first = await client.enqueue(stamp, str(ledger), "k")
    other = await client.enqueue(stamp.using(rate_key="other"), str(ledger), "other")
    second = await client.enqueue(stamp, str(ledger), "k")
    assert second.state is JobState.SUBMITTED  # wait: nothing decided at submit
    worker = Worker(settings, [stamp], concurrency=4)
    run = asyncio.create_task(worker.run())
    try:
        await client.jobs.wait(first.id, timeout_s=5)
        await client.jobs.wait(other.id, timeout_s=5)  # its own budget: not held behind k
        for _ in range(500):
            if (await client.jobs.get(second.id)).state is JobState.SCHEDULED:
                break
            await asyncio.sleep(0.01)
        waiting = await client.jobs.get(second.id)
        assert waiting.state is JobState.SCHEDULED
        assert ("submitted", "scheduled", "rate limited") in await events_of(client, second)
        [reason] = [r for r in await explain(client, second.id) if r.code == "rate_limited"]
        assert "rate key 'k'" in reason.message
        assert reason.until_ms is not None and reason.until_ms == waiting.run_at_ms
        # The key's budget lives until its next free slot (two intervals: second holds one).
        assert 100_000 <= await client.redis.pttl(client.keys("default").rate("k")) <= 120_000
    finally:
        worker.stop()
        await run
    assert sorted(str(s["key"]) for s in starts(ledger)) == ["k", "other"]
    assert await client.jobs.cancel([second.id]) == {second.id: "cancelled"}


async def test_drop_ends_a_job_over_its_keys_limit_at_submit_and_tells_the_caller(
    settings: EngineSettings, client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    dropping = stamp.using(on_rate_limit="drop")
    first = await client.enqueue(dropping, str(ledger), "k")
    dropped = await client.enqueue(dropping, str(ledger), "k")
    elsewhere = await client.enqueue(dropping.using(rate_key="k2"), str(ledger), "k2")
    assert first.state is JobState.SUBMITTED and first.rate_limited_until_ms is None
    assert elsewhere.state is JobState.SUBMITTED  # another key, another budget
    assert dropped.state is JobState.CANCELLED and dropped.rate_limited_until_ms is not None
    stored = await client.jobs.get(dropped.id)
    assert stored.state is JobState.CANCELLED and stored.rate_key == "k"
    assert stored.errors[-1]["type"] == "RateLimited"
    assert stored.errors[-1]["message"] == "rate limited"
    assert stored.rate_limited_until_ms is None  # a client-side note: the hash has none
    slot = dropped.rate_limited_until_ms - (stored.completed_at_ms or 0)
    assert 50_000 <= slot <= 60_000  # the key's next free slot: a minute after the first start
    assert await events_of(client, dropped) == [("unsubmitted", "cancelled", "rate limited")]
    await run_until_done(settings, client, [first, elsewhere])
    assert sorted(str(s["key"]) for s in starts(ledger)) == ["k", "k2"]  # never ran
    assert (await client.jobs.get(dropped.id)).state is JobState.CANCELLED


async def test_drop_of_a_delayed_job_is_decided_at_its_claim(
    settings: EngineSettings, client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    dropping = stamp.using(on_rate_limit="drop")
    first = await client.enqueue(dropping, str(ledger), "k")
    later = await client.enqueue(dropping.using(delay_s=0.2), str(ledger), "k")
    assert later.state is JobState.SCHEDULED and later.rate_limited_until_ms is None
    await run_until_done(settings, client, [first, later])
    ended = await client.jobs.get(later.id)
    assert ended.state is JobState.CANCELLED and ended.errors[-1]["type"] == "RateLimited"
    assert ("submitted", "cancelled", "rate limited") in await events_of(client, later)
    assert [s["key"] for s in starts(ledger)] == ["k"]


async def test_reschedule_moves_a_job_to_its_keys_next_slot_and_tells_the_caller_when(
    settings: EngineSettings, client: Client, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    moving = stamp.using(rate_limit="2/s", on_rate_limit="reschedule")
    jobs = [await client.enqueue(moving, str(ledger), "k") for _ in range(3)]
    assert jobs[0].state is JobState.SUBMITTED and jobs[0].rate_limited_until_ms is None
    for job in jobs[1:]:
        assert job.state is JobState.SCHEDULED
        assert job.rate_limited_until_ms is not None and job.run_at_ms == job.rate_limited_until_ms
        stored = await client.jobs.get(job.id)
        assert stored.state is JobState.SCHEDULED and stored.run_at_ms == job.run_at_ms
    slots = [job.rate_limited_until_ms or 0 for job in jobs[1:]]
    assert 400 <= slots[1] - slots[0] <= 600  # one interval of 500 ms apart
    await run_until_done(settings, client, jobs)
    times = [float(s["t_ms"]) for s in starts(ledger)]
    assert len(times) == 3 and times[-1] - times[0] >= 2 * 500 * 0.8
    for job in jobs[1:]:
        # It kept the slot it was given: the claim did not limit it a second time.
        assert ("submitted", "scheduled", "rate limited") not in await events_of(client, job)
        assert ("unsubmitted", "scheduled", "") in await events_of(client, job)
