"""Every transition reaches its Django signal once, wherever it happened (jobsite.signals)."""

from __future__ import annotations

import asyncio
import dataclasses
import signal as os_signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.dispatch import Signal

from engine import Client, EngineSettings, Worker
from jobsite.jobs.tasks import signals
from jobsite.jobs.tasks.registry import load_tasks
from tests.engine import chaos_tasks
from tests.engine import tasks as t
from tests.engine.harness import WorkerProc

from .conftest import MODULES

KINDS = {
    "retrying": signals.job_retrying,
    "dead_lettered": signals.job_dead_lettered,
    "failed": signals.job_failed,
    "cancelled": signals.job_cancelled,
    "expired": signals.job_expired,
    "stalled": signals.job_stalled,
    "dropped": signals.job_dropped,
}


@pytest.fixture
def received() -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    """Connect a receiver to every transition signal; yield (kind, job id, kwargs) received."""
    got: list[tuple[str, str, dict[str, Any]]] = []
    receivers = []
    for kind, sig in KINDS.items():

        def receiver(sender: Any, job: Any, kind: str = kind, **kwargs: Any) -> None:
            got.append((kind, job.id, kwargs))

        sig.connect(receiver, weak=False)
        receivers.append((sig, receiver))
    yield got
    for sig, receiver in receivers:
        Signal.disconnect(sig, receiver)


def _of(got: list[tuple[str, str, dict[str, Any]]], job_id: str) -> Counter[str]:
    return Counter(kind for kind, jid, _ in got if jid == job_id)


async def _until(got: list[tuple[str, str, dict[str, Any]]], job_id: str, kind: str) -> None:
    for _ in range(1000):
        if _of(got, job_id)[kind]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind} signal for {job_id}: {got}")


async def _state(client: Client, job_id: str, state: str) -> None:
    for _ in range(1000):
        if (await client.jobs.get(job_id)).state == state:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{job_id} never {state}")


def test_every_transition_sends_its_signal_once(
    engine: EngineSettings, received: list[tuple[str, str, dict[str, Any]]]
) -> None:
    async def scenario() -> dict[str, str]:
        async with Client(engine) as client:
            # A job of a task no worker has is set aside, then dropped by the cleaner.
            quick = dataclasses.replace(engine, unserved_drop_after_s=0.5)
            worker = Worker(quick, load_tasks(MODULES), hooks=signals.WORKER_HOOKS)
            run = asyncio.create_task(worker.run())
            try:
                queued = await client.enqueue(t.add.using(delay_s=600), 1, 2)
                running = await client.enqueue(t.waits, 30)
                parent = await client.enqueue(t.boom)
                child = await client.enqueue(
                    t.step.using(depends_on=[parent], on_parent_failure="cancel"), "c"
                )
                retried = await client.enqueue(t.retry_twice)
                unknown = t.add.call(1, 2)
                unknown.task = "nobody.has.this"
                [dropped] = await client.enqueue_many([unknown])
                stale = await client.enqueue(t.add.using(delay_s=0.3, ttl_s=0.2), 1, 2)
                await _state(client, running.id, "started")
                await client.jobs.cancel([queued.id, running.id])
                await _until(received, stale.id, "dead_lettered")
                await _until(received, running.id, "cancelled")
                await _until(received, child.id, "cancelled")
                await _until(received, dropped.id, "dead_lettered")
                await client.jobs.wait(retried.id, timeout_s=10)
            finally:
                worker.stop()
                await run
        return {
            "queued": queued.id,
            "running": running.id,
            "parent": parent.id,
            "child": child.id,
            "retried": retried.id,
            "dropped": dropped.id,
            "stale": stale.id,
        }

    ids = async_to_sync(scenario)()
    assert _of(received, ids["queued"]) == {"cancelled": 1}
    assert _of(received, ids["running"]) == {"cancelled": 1}
    assert _of(received, ids["parent"]) == {"failed": 1, "dead_lettered": 1}
    assert _of(received, ids["child"]) == {"cancelled": 1}
    assert _of(received, ids["retried"]) == {"retrying": 2}
    assert _of(received, ids["dropped"]) == {"dropped": 1, "dead_lettered": 1}
    assert _of(received, ids["stale"]) == {"expired": 1, "dead_lettered": 1}
    expired = next(kw for kind, jid, kw in received if jid == ids["stale"] and kind == "expired")
    assert expired["reason"] == "deadline passed"
    assert expired["from_state"] in ("scheduled", "submitted")  # the cleaner, or a claim
    retry = next(kw for kind, jid, kw in received if kind == "retrying")
    assert retry["delay_s"] is not None and retry["error"]["attempt"] >= 1


def test_a_killed_workers_job_is_signalled_stalled_by_the_cleaner(
    engine: EngineSettings, received: list[tuple[str, str, dict[str, Any]]], tmp_path: Path
) -> None:
    async def scenario() -> str:
        async with Client(engine) as client:
            victim = WorkerProc(engine.redis_url, tmp_path / "ledger.jsonl").start()
            try:
                job = await client.enqueue(chaos_tasks.plain.using(max_stalls=0), 60_000)
                await _state(client, job.id, "started")
                victim.signal(os_signal.SIGKILL)
                victim.wait()
                cleaner = Worker(engine, [chaos_tasks.plain], hooks=signals.WORKER_HOOKS)
                run = asyncio.create_task(cleaner.run())
                await _until(received, job.id, "dead_lettered")
                cleaner.stop()
                await run
            finally:
                victim.stop()
        return job.id

    job_id = async_to_sync(scenario)()
    assert _of(received, job_id) == {"stalled": 1, "dead_lettered": 1}
