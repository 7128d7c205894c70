"""Through real workers: retention by final state (cleanup_on), repeat limits, scheduled flows,
the notes of ignored duplicates and debounces, and the timeout settings."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from engine import Client, ConfigError, EngineSettings, HookEvent, Job, JobState, Worker
from engine.keys import event_groups_key
from engine.periodic.cleaner import Cleaner
from engine.periodic.scheduler import Scheduler
from engine.periodic.transitions import dead_lettered
from engine.task import TaskOptions
from engine.transport.connection import connect

from . import tasks as t
from .helpers import drain


async def test_cleanup_on_keeps_each_final_state_its_own_time(
    client: Client, settings: EngineSettings
) -> None:
    """Failures kept a week outside the DLQ, completed jobs dropped at once."""
    week_s = 7 * 86_400
    cleanup = {"failed": week_s, "completed": 0}
    done = await client.enqueue(t.add.using(cleanup_on=cleanup), 1, 2)
    failed = await client.enqueue(t.boom.using(cleanup_on=cleanup, max_retries=0))
    plain = await client.enqueue(t.add, 3, 4)
    await drain(settings, [t.add, t.boom])
    keys = client.keys("default")
    assert not await client.redis.exists(keys.job(done.id))  # dropped at once
    assert (await client.jobs.get(failed.id)).state is JobState.FAILED
    assert week_s * 1000 - 60_000 < await client.redis.pttl(keys.job(failed.id)) <= week_s * 1000
    assert [
        j.id for j in await client.dead_letters.list("default")
    ] == []  # its retention, not the DLQ's
    assert 0 < await client.redis.pttl(keys.job(plain.id)) <= 86_400_000  # result_ttl_s as before


@pytest.mark.parametrize(
    "bad", [{"done": 5}, {"failed": -1}, {"failed": "7d"}, {"completed": True}, "failed"]
)
def test_cleanup_on_refuses_unknown_states_and_bad_values(bad: object) -> None:
    with pytest.raises(ConfigError, match="cleanup_on"):
        TaskOptions(cleanup_on=bad)  # type: ignore[arg-type]


def test_cleanup_on_takes_a_list_of_states_as_drop_at_once() -> None:
    assert TaskOptions(cleanup_on=["completed", "cancelled"]).cleanup_on == {
        "completed": 0,
        "cancelled": 0,
    }


async def run_scheduler_until(settings: EngineSettings, client: Client, done: object) -> None:
    """Run a scheduler until `done()` (an async condition) holds, within 10 s."""
    stopping = asyncio.Event()
    scheduler = Scheduler(settings, client.redis, ["default"])
    run = asyncio.create_task(scheduler.run(stopping))
    try:
        deadline = time.monotonic() + 10
        while not await done():  # type: ignore[operator]
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    finally:
        stopping.set()
        await run


async def tick_ids(client: Client, name: str) -> list[str]:
    """Return the ids of the jobs of schedule `name` Redis holds (a cluster's slot too)."""
    found: list[str] = []
    cursor = None
    while cursor != 0:
        cursor, ids = await client.jobs.scan_ids("default", cursor or 0)
        found += [i for i in ids if i.startswith(f"{name}@")]
    return sorted(set(found))


async def test_repeat_every_at_enqueue_with_a_limit_fires_n_times_then_ends(
    client: Client, settings: EngineSettings
) -> None:
    first = await client.enqueue(t.add.using(repeat_every=0.05, repeat_limit=3), 2, 3)
    name = first.repeat
    assert name and first.id.startswith(f"{name}@") and first.state is JobState.SCHEDULED

    async def three() -> bool:
        return len(await tick_ids(client, name)) >= 3

    await run_scheduler_until(settings, client, three)
    await asyncio.sleep(0.2)  # would be 4 or more ticks without the limit
    await Scheduler(settings, client.redis, ["default"]).tick()
    ids = await tick_ids(client, name)
    assert len(ids) == 3 and ids[0] == first.id
    assert (await client.jobs.get(first.id)).args == [2, 3]
    [(rep, due)] = await client.repeats.list("default")
    assert rep.repeat_limit == 3 and due is None  # ended
    assert await client.repeats.fired("default", [name]) == [3]
    await client.repeats.resume("default", name)  # a resume does not start it again
    assert (await client.repeats.list("default"))[0][1] is None


@pytest.mark.parametrize(
    "options",
    [{"repeat_limit": 2}, {"repeat_every": -1}, {"repeat_every": 1, "repeat_limit": 0}],
)
def test_repeat_options_are_checked(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="repeat"):
        t.add.using(**options)


async def test_a_repeating_job_is_enqueued_alone(client: Client) -> None:
    with pytest.raises(ConfigError, match="alone"):
        await client.enqueue_many([t.add.using(repeat_every=1).call(1, 1), t.add.call(1, 1)])
    assert await client.repeats.list("default") == []


async def test_a_scheduled_flow_submits_the_whole_graph_each_tick(
    client: Client, settings: EngineSettings
) -> None:
    """Each tick of a scheduled flow submits every job of the flow, parents first."""
    extract = t.add.call(1, 1)
    load = t.add.using(depends_on=[extract.id]).call(2, 2)
    report = t.add.using(depends_on=[extract.id, load.id]).call(3, 3)
    await client.repeats.add("nightly", [report, load, extract], every_s=0.05, repeat_limit=2)

    async def two_flows() -> bool:
        return len(await tick_ids(client, "nightly")) >= 6

    await run_scheduler_until(settings, client, two_flows)
    ids = await tick_ids(client, "nightly")
    assert len(ids) == 6
    roots = [i for i in ids if "." not in i]
    assert len(roots) == 2
    for root in roots:
        first, second, third = [await client.jobs.get(i) for i in (root, f"{root}.1", f"{root}.2")]
        assert [j.args for j in (first, second, third)] == [[1, 1], [2, 2], [3, 3]]
        assert first.flow_id == second.flow_id == third.flow_id == root
        assert second.parents == [root] and third.parents == [root, f"{root}.1"]
        assert first.state is JobState.SUBMITTED and third.state is JobState.BLOCKED
    await drain(settings, [t.add])
    assert {(await client.jobs.get(i)).state for i in ids} == {JobState.COMPLETED}
    made_by_hand = await client.repeats.run_now("default", "nightly")
    assert made_by_hand is not None
    assert (await client.jobs.get(f"{made_by_hand.id}.2")).parents == [
        made_by_hand.id,
        f"{made_by_hand.id}.1",
    ]


async def test_bad_flow_schedules_are_refused_and_change_nothing(client: Client) -> None:
    outside = t.add.using(depends_on=["some-other-job"]).call(1, 1)
    with pytest.raises(ConfigError, match="only on jobs of the flow"):
        await client.repeats.add("f", [outside], every_s=1)
    a = t.add.call(1, 1)
    with pytest.raises(ConfigError, match="one queue"):
        other = t.add.using(queue="q2", depends_on=[a.id]).call(2, 2)
        await client.repeats.add("f", [a, other], every_s=1)
    with pytest.raises(ConfigError, match="too long"):
        await client.repeats.add("x" * 113, [a, t.add.call(2, 2)], every_s=1)
    assert await client.repeats.list("default") == []


async def test_ignored_duplicates_and_debounces_leave_a_note_in_the_stream_and_fire_hooks(
    client: Client, settings: EngineSettings
) -> None:
    seen: list[HookEvent] = []
    worker = Worker(settings, [t.add], hooks=[seen.append], concurrency=2)
    run = asyncio.create_task(worker.run())
    try:
        keys = client.keys("default")
        deadline = time.monotonic() + 10
        while not await client.redis.hexists(event_groups_key(settings.prefix), "hooks"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        simple = t.add.using(deduplication={"id": "s"}, delay_s=60)
        held = await client.enqueue(simple, 1, 1)
        ignored = t.add.using(deduplication={"id": "s"}, delay_s=60).call(2, 2)
        ignored_id = ignored.id
        [again] = await client.enqueue_many([ignored])
        assert again.id == held.id  # the submit was folded into the holder
        debounced = t.add.using(debounce={"id": "d"}, delay_s=60)
        old = await client.enqueue(debounced, 3, 3)
        new = await client.enqueue(debounced, 4, 4)
        entries = await client.redis.xrange(keys.events)
        notes = [(f["job"], f["note"], f["other"]) for _, f in entries if "note" in f]
        assert notes == [(held.id, "deduplicated", ignored_id), (old.id, "debounced", new.id)]
        while len([e for e in seen if e.kind in ("deduplicated", "debounced")]) < 2:
            assert time.monotonic() < deadline + 10
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await run
    kinds = [(e.kind, e.job.id, e.other_job) for e in seen if e.kind != "cancelled"]
    assert kinds == [("deduplicated", held.id, ignored_id), ("debounced", old.id, new.id)]
    assert [e.job.id for e in seen if e.kind == "cancelled"] == [old.id]  # once, not twice


async def test_worker_timeout_and_queue_timeout_settings_apply_where_tasks_set_none(
    client: Client, settings: EngineSettings
) -> None:
    """The timeout settings: globals, per queue, and the task's own wins."""
    limited = dataclasses.replace(
        settings,
        worker_timeout_s=0.1,
        queue_timeouts={"slowq": {"worker_timeout_s": 10}},  # type: ignore[arg-type]
    )
    assert limited.queue_timeouts == (("slowq", 10, None),)
    async with Client(limited) as producer:
        cut = await producer.enqueue(t.waits.using(max_retries=0), 1.0)
        own = await producer.enqueue(t.waits.using(timeout_s=5), 0.3)
        roomy = await producer.enqueue(t.waits.using(queue="slowq"), 0.3)
    await drain(limited, [t.waits], queues=["default", "slowq"])
    failed = await client.jobs.get(cut.id)
    assert failed.state is JobState.FAILED and failed.errors[-1]["code"] == "TIMEOUT"
    assert "0.1" in failed.errors[-1]["message"]
    assert (await client.jobs.get(own.id)).state is JobState.COMPLETED  # the call's own wins
    assert (await client.jobs.get(roomy.id)).state is JobState.COMPLETED  # its queue's 10 s
    waiting = dataclasses.replace(
        settings,
        queue_timeout_s=0.2,
        queue_timeouts={"slowq": {"queue_timeout_s": 60}},  # type: ignore[arg-type]
    )
    async with Client(waiting) as producer:
        stale = await producer.enqueue(t.add, 1, 1)
        kept = await producer.enqueue(t.add.using(queue_timeout_s=60), 1, 1)
        other = await producer.enqueue(t.add.using(queue="slowq"), 1, 1)
    assert (await client.jobs.get(stale.id)).queue_timeout_ms == 200
    assert (await client.jobs.get(other.id)).queue_timeout_ms == 60_000
    await asyncio.sleep(0.3)
    deadline = time.monotonic() + 10
    while (await client.jobs.get(stale.id)).state is not JobState.EXPIRED:
        assert time.monotonic() < deadline
        r = connect(settings)
        try:
            await Cleaner(settings, r, ["default", "slowq"]).tick()
        finally:
            await r.aclose()
    assert (await client.jobs.get(kept.id)).state is JobState.SUBMITTED
    assert (await client.jobs.get(other.id)).state is JobState.SUBMITTED


@pytest.mark.parametrize(
    "bad",
    [
        {"worker_timeout_s": -1},
        {"queue_timeout_s": "2h"},
        {"queue_timeouts": {"q": {"timeout": 5}}},
        {"queue_timeouts": {"q": {"worker_timeout_s": 0}}},
    ],
)
def test_timeout_settings_are_checked(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        EngineSettings(**bad)  # type: ignore[arg-type]


def test_no_dead_letter_hook_for_a_state_cleanup_on_keeps_out_of_the_dlq() -> None:
    kept_out = Job(id="x", task="t", cleanup_ms='{"failed": 604800000}')
    assert not dead_lettered(kept_out, "failed") and dead_lettered(kept_out, "stalled")
    assert not dead_lettered(Job(id="y", task="t", dlq="0"), "failed")
    assert dead_lettered(Job(id="z", task="t"), "failed")
