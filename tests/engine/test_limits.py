"""Rate limits per task and per queue, concurrency keys with fair turns, pause and resume."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest

from engine import Client, ConfigError, EngineSettings, JobState, Worker, explain
from engine.limits import rate_interval_ms

from . import chaos_tasks
from . import tasks as t
from .harness import WorkerProc, read_ledger


def test_rates_are_parsed_and_bad_ones_refused() -> None:
    assert rate_interval_ms("10/s") == 100
    assert rate_interval_ms("600/m") == 100
    assert rate_interval_ms("5/2s") == 400
    assert rate_interval_ms((3, 1.5)) == 500
    assert rate_interval_ms("1/d") == 86_400_000
    assert rate_interval_ms("1000000/s") == 0.001
    for bad in ("-1/s", "0/s", "10/x", "ten/s", "10/-1s", (1, 0)):
        with pytest.raises(ConfigError, match="rate_limit"):
            rate_interval_ms(bad)  # type: ignore[arg-type]
    for bad in ("1/999999999s", "1/2d", "1/infs", "inf/s", "2000000/s", (1, 1e300)):
        with pytest.raises(ConfigError, match="one start a day to 1,000,000 starts a second"):
            rate_interval_ms(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rate_limit"):
        t.add.using(rate_limit="-5/s")


@pytest.mark.long_window
@pytest.mark.chaos
async def test_a_task_rate_limit_of_10_per_s_holds_over_8_s_with_4_workers(
    client: Client, settings: EngineSettings, tmp_path: Path, procs: list[WorkerProc]
) -> None:
    ledger = tmp_path / "ledger.jsonl"
    window_s = 8
    await client.enqueue_many([chaos_tasks.rated.call() for _ in range(400)])
    for _ in range(4):
        procs.append(WorkerProc(settings.redis_url, ledger, concurrency=10).start())

    def starts() -> list[float]:
        return sorted(line["t"] for line in read_ledger(ledger) if line["kind"] == "start")

    deadline_s = asyncio.get_running_loop().time() + 60
    while not (seen := starts()) or seen[-1] < seen[0] + window_s + 0.5:
        assert asyncio.get_running_loop().time() < deadline_s, "the workers did not start"
        await asyncio.sleep(0.25)
    first = seen[0]
    in_window = [s for s in seen if s < first + window_s]
    print(f"FIGURES rate_limit=10/s workers=4 window_s={window_s} started={len(in_window)}")
    assert 10 * window_s * 0.9 <= len(in_window) <= 10 * window_s * 1.1
    assert len({line["pid"] for line in read_ledger(ledger)}) == 4  # all shared one limit
    per_second = [
        sum(1 for s in in_window if first + k <= s < first + k + 1) for k in range(window_s)
    ]
    assert max(per_second) <= 12


async def test_a_queue_rate_limit_spaces_starts_across_workers(
    client: Client, settings: EngineSettings
) -> None:
    await client.queues.set_rate_limit("default", "20/s")
    t.CALLS.clear()
    jobs = await client.enqueue_many([t.record.call(f"r{i}") for i in range(12)])
    workers = [Worker(settings, [t.record], concurrency=5) for _ in range(2)]
    runs = [asyncio.create_task(w.run()) for w in workers]
    done = [await client.jobs.wait(j.id, timeout_s=5) for j in jobs]
    for w in workers:
        w.stop()
    await asyncio.gather(*runs)
    started = sorted(j.claimed_at_ms or 0 for j in done)
    # 12 starts at 20/s take at least 11 intervals of 50 ms.
    assert started[-1] - started[0] >= 11 * 50 - 20
    await client.queues.set_rate_limit("default", None)
    more = await client.enqueue_many([t.record.call(f"s{i}") for i in range(12)])
    worker = Worker(settings, [t.record], concurrency=12, burst=True)
    await worker.run()
    fast = sorted([(await client.jobs.get(j.id)).claimed_at_ms or 0 for j in more])
    assert fast[-1] - fast[0] < 11 * 50  # lifted


async def test_two_keys_at_a_limit_of_1_take_turns_and_never_overlap(
    client: Client, settings: EngineSettings
) -> None:
    t.TENANTS.clear()
    # Tenant a's burst is submitted first; b's jobs must not wait behind all of it.
    await client.enqueue_many([t.tenant_work.call("a", i) for i in range(10)])
    await client.enqueue_many([t.tenant_work.call("b", i) for i in range(10)])
    workers = [Worker(settings, [t.tenant_work], concurrency=4, burst=True) for _ in range(2)]
    await asyncio.gather(*(w.run() for w in workers))
    starts = [tenant for tenant, kind, _ in t.TENANTS if kind == "start"]
    assert sorted(starts) == ["a"] * 10 + ["b"] * 10
    assert starts[:4] in (["a", "b", "a", "b"], ["b", "a", "b", "a"])
    running: dict[str, int] = {"a": 0, "b": 0}
    for tenant, kind, _ in sorted(t.TENANTS, key=lambda e: e[2]):
        running[tenant] += 1 if kind == "start" else -1
        assert running[tenant] <= 1  # never two jobs of one key at once, across 2 workers
    longest = max(len(list(run)) for _, run in itertools.groupby(starts))
    assert longest <= 2  # turns: neither key runs more than twice in a row


async def test_a_burst_of_one_key_does_not_starve_another_key(
    client: Client, settings: EngineSettings
) -> None:
    t.TENANTS.clear()
    keyed = t.tenant_work.using(concurrency_limit=2)
    await client.enqueue_many([keyed.call("a", i) for i in range(20)])
    await client.enqueue_many([keyed.call("b", i) for i in range(3)])
    await Worker(settings, [t.tenant_work], concurrency=2, burst=True).run()
    starts = [tenant for tenant, kind, _ in t.TENANTS if kind == "start"]
    assert "b" in starts[:4]  # b's first job waits for at most a's admitted pair
    assert sorted(starts) == ["a"] * 20 + ["b"] * 3


async def test_a_limit_per_key_can_come_from_the_arguments(client: Client) -> None:
    keyed = t.tenant_work.using(concurrency_limit=lambda tenant, n: 3 if tenant == "big" else 1)
    jobs = await client.enqueue_many(
        [keyed.call("big", i) for i in range(5)] + [keyed.call("small", i) for i in range(5)]
    )
    assert [j.concurrency_limit for j in jobs] == [3] * 5 + [1] * 5
    counts = await client.queues.counts("default")
    assert (counts["submitted"], counts["waiting_turn"]) == (10, 10 - 3 - 1)
    assert await client.queues.concurrency_keys("default") == [
        {"key": "small", "waiting": 4, "active": 1},
        {"key": "big", "waiting": 2, "active": 3},
    ]
    assert await client.jobs.cancel([jobs[4].id, jobs[0].id]) == {
        jobs[4].id: "cancelled",
        jobs[0].id: "cancelled",
    }
    counts = await client.queues.counts("default")  # a waiting one left; an admitted one let one in
    assert (counts["submitted"], counts["waiting_turn"]) == (8, 4)
    # a key with nobody waiting is not listed
    assert await client.queues.concurrency_keys("default") == [
        {"key": "small", "waiting": 4, "active": 1}
    ]
    with pytest.raises(ConfigError, match="concurrency_limit must be an integer >= 1"):
        t.tenant_work.using(concurrency_limit=0)
    with pytest.raises(ConfigError, match="concurrency_limit must be an integer >= 1"):
        t.tenant_work.using(concurrency_limit=lambda tenant, n: -1).call("x", 1)


async def test_a_paused_queue_is_not_claimed_from_and_its_jobs_stay(
    client: Client, settings: EngineSettings
) -> None:
    workers = [Worker(settings, [t.waits], concurrency=2) for _ in range(2)]
    runs = [asyncio.create_task(w.run()) for w in workers]
    await client.enqueue_many([t.waits.call(0.05) for _ in range(200)])
    async with asyncio.timeout(30):  # the workers claim (a loaded host starts them slowly)
        while (await client.queues.counts("default"))["submitted"] == 200:
            await asyncio.sleep(0.02)
    await client.queues.pause("default")
    paused_at_ms = int(time.time() * 1000)
    await asyncio.sleep(1.0)
    waiting = (await client.queues.counts("default"))["submitted"]
    assert waiting > 0
    keys = client.keys("default")
    for job_id in await client.redis.zrange(keys.submitted, 0, -1):
        job = await client.jobs.get(job_id)
        assert job.state is JobState.SUBMITTED and job.claimed_at_ms is None
    claims = [e for _, e in await client.redis.xrange(keys.events) if e["to"] == "started"]
    assert claims and [e for e in claims if int(e["at"]) > paused_at_ms + 5] == []  # none after
    assert (await client.queues.counts("default"))["submitted"] == waiting  # the jobs stay put
    await client.queues.resume("default")
    await asyncio.sleep(1.0)
    assert (await client.queues.counts("default"))["submitted"] < waiting
    for w in workers:
        w.stop()
    await asyncio.gather(*runs)


async def test_a_queue_cap_holds_across_workers_and_lifts(
    client: Client, settings: EngineSettings
) -> None:
    await client.queues.set_max_running("default", 3)
    assert await client.queues.max_running("default") == 3
    t.PEAK.update(now=0, max=0)
    jobs = await client.enqueue_many([t.tracked.call() for _ in range(30)])
    # Two workers with room for 20 at once between them, claiming 10 at a time.
    workers = [Worker(settings, [t.tracked], concurrency=10) for _ in range(2)]
    runs = [asyncio.create_task(w.run()) for w in workers]
    done = [await client.jobs.wait(j.id, timeout_s=20) for j in jobs]
    assert {j.state for j in done} == {JobState.COMPLETED}
    assert t.PEAK["max"] == 3  # never more, and the cap was reached
    assert sum(w.counters["completed"] for w in workers) == 30
    await client.queues.set_max_running("default", None)
    assert await client.queues.max_running("default") is None
    t.PEAK.update(now=0, max=0)
    more = await client.enqueue_many([t.tracked.call() for _ in range(30)])
    assert {(await client.jobs.wait(j.id, timeout_s=20)).state for j in more} == {
        JobState.COMPLETED
    }
    assert t.PEAK["max"] > 3  # lifted: the workers' own concurrency again
    for w in workers:
        w.stop()
    await asyncio.gather(*runs)


async def test_a_job_waiting_for_a_full_queue_says_so(
    client: Client, settings: EngineSettings
) -> None:
    await client.queues.set_max_running("default", 1)
    first, second = await client.enqueue_many([t.waits.call(30), t.waits.call(30)])
    worker = Worker(settings, [t.waits], concurrency=5)
    run = asyncio.create_task(worker.run())
    try:
        while (await client.jobs.get(first.id)).state is not JobState.STARTED:
            await asyncio.sleep(0.02)
        reasons = await explain(client, second.id)
        assert [r.code for r in reasons] == ["queue_full"]
        assert "runs its most at once (1 of max_running 1)" in reasons[0].message
        assert (await client.jobs.get(second.id)).state is JobState.SUBMITTED
    finally:
        await client.jobs.cancel([first.id, second.id])
        worker.stop()
        await run


async def test_a_queue_cap_below_one_is_refused(client: Client) -> None:
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ConfigError, match="max_running must be a whole number"):
            await client.queues.set_max_running("default", bad)  # type: ignore[arg-type]
    assert await client.queues.max_running("default") is None
