"""Every transition reaches the hooks once, wherever it happened (periodic/transitions.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
from collections import Counter
from pathlib import Path

from engine import Client, EngineSettings, HookEvent, Worker
from engine.periodic.transitions import GROUP
from engine.resources.duties.feed import live_groups

from . import chaos_tasks
from . import tasks as t
from .harness import WorkerProc


class Seen:
    """A hook recording (kind, job id, from state, reason) of each transition event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None, str]] = []

    def __call__(self, event: HookEvent) -> None:
        if event.kind not in ("before_run", "after_run"):
            self.events.append((event.kind, event.job.id, event.from_state, event.reason))

    def of(self, job_id: str) -> Counter[str]:
        return Counter(kind for kind, jid, _, _ in self.events if jid == job_id)

    async def until(self, job_id: str, kind: str) -> None:
        for _ in range(1000):
            if self.of(job_id)[kind]:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {kind} hook for {job_id}: {self.events}")


async def _state(client: Client, job_id: str, state: str) -> None:
    for _ in range(1000):
        if (await client.jobs.get(job_id)).state == state:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{job_id} never {state}")


async def test_each_transition_fires_its_hook_once_across_two_workers(
    settings: EngineSettings, client: Client
) -> None:
    seen = Seen()
    tasks = [t.add, t.boom, t.retry_twice, t.waits, t.step]
    # A job of a task no worker has is set aside, then dropped by the cleaner (task versions).
    settings = dataclasses.replace(settings, unserved_drop_after_s=0.5)
    workers = [Worker(settings, tasks, hooks=[seen], concurrency=4) for _ in range(2)]
    runs = [asyncio.create_task(w.run()) for w in workers]
    try:
        later = await client.enqueue(t.add.using(delay_s=600), 1, 2)  # cancelled while queued
        running = await client.enqueue(t.waits, 30)  # cancelled while it runs
        parent = await client.enqueue(t.boom)  # fails: dead letter; its children end
        cancelled_child = await client.enqueue(
            t.step.using(depends_on=[parent], on_parent_failure="cancel"), "c"
        )
        failed_child = await client.enqueue(
            t.step.using(depends_on=[parent], on_parent_failure="fail"), "f"
        )
        blocked = await client.enqueue(t.step.using(depends_on=[running]), "b")
        retried = await client.enqueue(t.retry_twice)
        unknown = t.add.call(1, 2)
        unknown.task = "nobody.has.this"
        [dropped] = await client.enqueue_many([unknown])
        stale = await client.enqueue(t.add.using(delay_s=0.3, ttl_s=0.2), 1, 2)
        await _state(client, running.id, "started")
        await client.jobs.cancel([later.id, blocked.id, running.id])
        for job_id, kind in [
            (later.id, "cancelled"),
            (blocked.id, "cancelled"),
            (running.id, "cancelled"),
            (parent.id, "dead_letter"),
            (cancelled_child.id, "cancelled"),
            (failed_child.id, "dead_letter"),
            (dropped.id, "dead_letter"),
            (stale.id, "dead_letter"),
        ]:
            await seen.until(job_id, kind)
        await client.jobs.wait(retried.id, timeout_s=10)
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*runs)
    assert seen.of(later.id) == {"cancelled": 1}
    assert seen.of(blocked.id) == {"cancelled": 1}
    assert seen.of(running.id) == {"cancelled": 1}
    assert seen.of(parent.id) == {"failed": 1, "dead_letter": 1}
    assert seen.of(cancelled_child.id) == {"cancelled": 1}
    assert seen.of(failed_child.id) == {"failed": 1, "dead_letter": 1}
    assert seen.of(dropped.id) == {"dropped": 1, "dead_letter": 1}
    assert seen.of(stale.id) == {"expired": 1, "dead_letter": 1}
    assert seen.of(retried.id) == {"retry": 2}
    reasons = {jid: (frm, why) for kind, jid, frm, why in seen.events if kind == "cancelled"}
    assert reasons[later.id] == ("scheduled", "cancelled by user")
    assert reasons[blocked.id] == ("blocked", "cancelled by user")
    assert reasons[cancelled_child.id] == ("blocked", f"parent {parent.id} ended failed")
    assert reasons[running.id][0] == "started"
    assert await live_groups(client.redis, settings.prefix) == [GROUP]


async def test_the_cleaner_of_another_worker_reports_a_killed_workers_job_stalled(
    settings: EngineSettings, client: Client, tmp_path: Path
) -> None:
    seen = Seen()
    victim = WorkerProc(settings.redis_url, tmp_path / "ledger.jsonl", queues="doomed").start()
    try:
        job = await client.enqueue(chaos_tasks.plain.using(queue="doomed", max_stalls=0), 60_000)
        await _state(client, job.id, "started")
        victim.signal(signal.SIGKILL)
        victim.wait()
        # Another worker's cleaner finds the lease expired and the worker dead: stalled.
        cleaner = Worker(settings, [chaos_tasks.plain], queues=["doomed"], hooks=[seen])
        sweep = asyncio.create_task(cleaner.run())
        await seen.until(job.id, "dead_letter")
        cleaner.stop()
        await sweep
    finally:
        victim.stop()
    assert (await client.jobs.get(job.id)).state == "stalled"
    assert seen.of(job.id) == {"stalled": 1, "dead_letter": 1}
