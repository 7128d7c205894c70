"""Metrics: the counts the scripts keep, checked against what the tasks wrote in their ledger."""

from __future__ import annotations

import asyncio
import math
import signal
import time
from collections import Counter
from pathlib import Path

from engine import Client, EngineSettings, GroupLag, JobState, task
from engine.keys import event_groups_key
from engine.resources.duties.feed import GROUP_STALE_MS, EventReader, register_group
from engine.resources.metrics import parse_stats
from engine.seam.scripts import BUCKETS_MS

from . import chaos_tasks as ct
from .harness import WorkerProc, read_ledger
from .test_reliability import wait_terminal


@task(name="metrics.nobody")
async def nobody() -> None:
    """Registered here only: the workers (chaos_tasks) have no function for it."""


def test_parse_stats_builds_cumulative_histograms() -> None:
    jobs, run, wait = parse_stats(
        {
            "completed": "9",
            "waiting_turn": "0",
            "done|a|b|completed": "3",  # a task name holding the separator
            "done|x|failed": "2",
            "run|x|5": "1",
            "run|x|7": "2",  # a bound no longer listed: read into the next one up (10)
            "run|x|inf": "1",
            "run|x|sum_ms": "4000",
            "wait|x|250": "4",
            "wait|x|sum_ms": "400",
        }
    )
    assert jobs == {("a|b", "completed"): 3, ("x", "failed"): 2}
    hist = run["x"]
    assert len(hist.buckets) == len(BUCKETS_MS) + 1 and hist.buckets[-1][0] == math.inf
    assert dict(hist.buckets)[0.005] == 1 and dict(hist.buckets)[0.01] == 3
    assert hist.count == 4 and hist.sum_s == 4.0
    assert wait["x"].count == 4 and dict(wait["x"].buckets)[0.1] == 0
    assert dict(wait["x"].buckets)[0.25] == 4 and wait["x"].sum_s == 0.4


async def enqueue_mix(client: Client) -> dict[str, list[str]]:
    """Submit every kind of job of the test; return task name -> ids (plus a few named roles)."""
    expired = await client.enqueue(ct.work.using(ttl_s=0.05), 1)
    await asyncio.sleep(0.1)  # its deadline passes before any worker starts
    work = await client.enqueue_many([ct.work.call(ms) for ms in range(0, 60, 2)])
    fail_once = await client.enqueue_many([ct.fail_once.call() for _ in range(5)])
    give_up = await client.enqueue_many([ct.give_up.call() for _ in range(4)])
    dropped = await client.enqueue(nobody)
    running = await client.enqueue(ct.stop, 30)
    later = await client.enqueue_many([ct.work.using(delay_s=600).call(1) for _ in range(3)])
    parent = await client.enqueue(ct.work.using(delay_s=600), 1)
    await client.enqueue(ct.work.using(depends_on=[parent]), 1)
    await client.enqueue_many([ct.work.using(queue="idle").call(1) for _ in range(3)])
    return {
        "chaos.work": [j.id for j in work],
        "chaos.fail_once": [j.id for j in fail_once],
        "chaos.give_up": [j.id for j in give_up],
        "metrics.nobody": [dropped.id],
        "chaos.stop": [running.id],
        "expired": [expired.id],
        "later": [j.id for j in later],
    }


async def wait_started(ledger: Path, job_id: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(x["id"] == job_id and x["kind"] == "start" for x in read_ledger(ledger)):
        assert time.monotonic() < deadline, f"{job_id} never started"
        await asyncio.sleep(0.05)


def expected_from_ledger(ledger: Path, ids: dict[str, list[str]]) -> Counter[tuple[str, str]]:
    """Return (task, state) -> jobs, from the tasks' own ledger for every job a task ran."""
    lines = read_ledger(ledger)
    ended = {x["id"] for x in lines if x["kind"] == "end"}
    raised = Counter(x["id"] for x in lines if x["kind"] == "raise")
    started = {x["id"] for x in lines if x["kind"] == "start"}
    out: Counter[tuple[str, str]] = Counter()
    for name in ("chaos.work", "chaos.fail_once", "chaos.give_up", "chaos.stop"):
        for job_id in ids[name]:
            if job_id in ended:
                out[(name, "completed")] += 1
            elif raised[job_id] == ct.give_up.options.max_retries + 1:
                out[(name, "failed")] += 1
            elif job_id in started:  # began, never ended nor raised: the test cancelled it
                out[(name, "cancelled")] += 1
    return out


async def test_counts_equal_what_the_workers_did(
    client: Client, settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    ids = await enqueue_mix(client)
    cancelled = await client.jobs.cancel(ids["later"], queue="default")
    assert set(cancelled.values()) == {"cancelled"}
    for _ in range(2):  # metrics.nobody: no worker has it; dropped after 0.5 s
        proc = WorkerProc(settings.redis_url, ledger, concurrency=10, unserved_drop_after_s=0.5)
        procs.append(proc.start())
    await wait_started(ledger, ids["chaos.stop"][0])
    assert await client.jobs.cancel(ids["chaos.stop"], queue="default") == {
        ids["chaos.stop"][0]: "cancelling"
    }
    ending = [i for k, v in ids.items() if k != "later" for i in v]
    await wait_terminal(client, ending, timeout_s=30)
    assert (await client.metrics(["default"])).workers_alive == 2
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait() == 0, proc.output()

    metrics = await client.metrics(["default", "idle"])
    default, idle = metrics.queues
    expected = expected_from_ledger(ledger, ids)
    assert expected[("chaos.work", "completed")] == len(ids["chaos.work"])
    assert expected[("chaos.give_up", "failed")] == len(ids["chaos.give_up"])
    # Jobs no task ran: cancelled while queued, expired before a start, no function (dropped).
    expected[("chaos.work", "cancelled")] += len(ids["later"])
    expected[("chaos.work", "expired")] += 1
    expected[("metrics.nobody", "dropped")] += 1
    assert default.jobs == dict(expected)
    counts = await client.queues.counts("default")
    for state in ("completed", "failed", "cancelled", "dropped", "expired", "stalled"):
        assert counts[f"{state}_total"] == sum(
            n for (_, s), n in default.jobs.items() if s == state
        )

    starts = Counter(x["id"] for x in read_ledger(ledger) if x["kind"] == "start")
    for name in ("chaos.work", "chaos.fail_once"):
        assert default.run[name].count == expected[(name, "completed")]
    for name in ("chaos.work", "chaos.fail_once", "chaos.give_up", "chaos.stop"):
        assert default.wait[name].count == sum(starts[i] for i in ids[name])
    assert "chaos.give_up" not in default.run  # it never completed
    assert "metrics.nobody" not in default.wait  # never begun: set aside, then dropped
    work_run = default.run["chaos.work"]
    assert work_run.sum_s >= sum(range(0, 60, 2)) / 1000
    assert [n for _, n in work_run.buckets] == sorted(n for _, n in work_run.buckets)

    assert default.depth == {"submitted": 0, "scheduled": 1, "blocked": 1, "started": 0}
    assert default.dlq == len(ids["chaos.give_up"]) + 2  # failed, dropped, expired
    assert default.oldest_waiting_s == 0
    assert idle.depth["submitted"] == 3 and idle.oldest_waiting_s > 0
    assert metrics.workers_alive == 0


async def test_the_lag_of_every_other_group_read_lately(
    client: Client, settings: EngineSettings
) -> None:
    # The transition hooks' group holds trimming back as the mirror's does: its lag is reported.
    keys = client.keys("default")
    await client.enqueue_many([ct.work.call(1) for _ in range(4)])
    await asyncio.sleep(0.2)
    await register_group(client.redis, settings.prefix, "hooks")
    await client.redis.xgroup_create(keys.events, "hooks", id="0")
    await client.redis.xgroup_create(keys.events, "gone", id="0")  # registered long ago
    long_ago = int(time.time() * 1000) - GROUP_STALE_MS - 1000
    await client.redis.hset(event_groups_key(settings.prefix), "gone", long_ago)
    (q,) = (await client.metrics(["default"])).queues
    assert set(q.groups) == {"hooks"}  # not the mirror's (its own fields), not a stale one
    assert q.groups["hooks"].backlog == 4 and q.groups["hooks"].lag_s >= 0.2
    reader = EventReader(client.redis, settings, ["default"], "hooks", "h-1")
    await reader.ack(await reader.read(10, block_ms=10))
    (q,) = (await client.metrics(["default"])).queues
    assert q.groups["hooks"] == GroupLag(0, 0.0)


async def test_mirror_backlog_and_lag(client: Client, settings: EngineSettings) -> None:
    await client.enqueue_many([ct.work.call(1) for _ in range(5)])
    await asyncio.sleep(0.2)
    (q,) = (await client.metrics(["default"])).queues
    assert (q.stream_length, q.mirror_backlog) == (5, 5)  # no mirror yet: all of it
    assert q.mirror_lag_s >= 0.2
    reader = EventReader(client.redis, settings, ["default"])
    await reader.ensure_groups()
    first = await reader.read(3, block_ms=10)
    (q,) = (await client.metrics(["default"])).queues
    assert q.mirror_backlog == 5 and q.mirror_lag_s >= 0.2  # 3 pending + 2 undelivered
    await reader.ack(first)
    (q,) = (await client.metrics(["default"])).queues
    assert q.mirror_backlog == 2 and q.mirror_lag_s >= 0.2
    await reader.ack(await reader.read(10, block_ms=10))
    (q,) = (await client.metrics(["default"])).queues
    assert (q.stream_length, q.mirror_backlog, q.mirror_lag_s) == (5, 0, 0)


async def test_oldest_waiting_looks_at_every_priority_band(client: Client) -> None:
    old = await client.enqueue(ct.work.using(priority=-5), 1)
    await asyncio.sleep(0.3)
    await client.enqueue_many([ct.work.using(priority=p).call(1) for p in (0, 7, 0)])
    (q,) = (await client.metrics(["default"])).queues
    assert q.depth["submitted"] == 4 and q.oldest_waiting_s >= 0.3
    assert (await client.jobs.get(old.id)).state is JobState.SUBMITTED
