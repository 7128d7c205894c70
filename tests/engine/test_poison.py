"""Poison payloads written straight into Redis: each ends with a specific reason, workers live."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from engine import Client, EngineSettings, JobState

from . import chaos_tasks as ct
from .harness import WorkerProc, read_ledger
from .helpers import sync_redis
from .test_reliability import record, wait_terminal

pytestmark = pytest.mark.chaos

PICKLED_LIST = b"\x80\x05\x95\x07\x00\x00\x00\x00\x00\x00\x00]\x94K\x01a."
POISON: dict[str, tuple[dict[str, bytes | str], str, str]] = {
    # name: (hash fields, final state, error type)
    "invalid_json": (
        {"task": "chaos.work", "args": "[1,", "kwargs": "{}"},
        "failed",
        "InvalidPayload",
    ),
    "wrong_envelope": (
        {"task": "chaos.work", "args": '{"ms": 1}', "kwargs": "[]"},
        "failed",
        "InvalidPayload",
    ),
    "no_task_field": ({"args": "[1]", "kwargs": "{}"}, "dropped", "UnknownTask"),
    "unknown_task": (
        {"task": "no.such.task", "args": "[]", "kwargs": "{}"},
        "dropped",
        "UnknownTask",
    ),
    "unbindable": (
        {"task": "chaos.work", "args": "[1, 2, 3]", "kwargs": "{}"},
        "failed",
        "InvalidArguments",
    ),
    "huge": (
        {"task": "chaos.work", "args": '["' + "x" * (50 << 20) + '"]', "kwargs": "{}"},
        "failed",
        "PayloadTooLarge",
    ),
    "pickle_bytes": (
        {"task": "chaos.work", "args": PICKLED_LIST, "kwargs": "{}"},
        "failed",
        "InvalidPayload",
    ),
    "non_utf8": (
        {"task": "chaos.work", "args": b'["\xff\xfe"]', "kwargs": "{}"},
        "failed",
        "InvalidPayload",
    ),
    "deep_json": (
        {"task": "chaos.work", "args": "[" * 5000 + "]" * 5000, "kwargs": "{}"},
        "failed",
        "InvalidPayload",
    ),
}


async def test_poison_payloads(
    client: Client, settings: EngineSettings, tmp_path: Path, procs: list[WorkerProc]
) -> None:
    keys = client.keys("default")
    normal = await client.enqueue_many([ct.work.call(1) for _ in range(1000)])
    with sync_redis(settings.redis_url) as r:
        for name, (fields, _, _) in POISON.items():
            r.hset(
                keys.job(name),
                mapping={"id": name, "state": "submitted", "priority": "0", **fields},
            )
            r.zadd(keys.submitted, {name: 0})
        r.zadd(keys.marker, {"0": 0})
    worker = WorkerProc(
        settings.redis_url, tmp_path / "ledger.jsonl", concurrency=20, unserved_drop_after_s=0.5
    ).start()
    procs.append(worker)
    start = time.monotonic()
    await wait_terminal(client, list(POISON), 5)
    poison_s = time.monotonic() - start
    for name, (_, state, kind) in POISON.items():
        job = await client.jobs.get(name, queue="default")
        assert (name, job.state.value) == (name, state)
        assert job.error is not None and job.error["type"] == kind, (name, job.error)
    await wait_terminal(client, [j.id for j in normal], 30)
    assert {(await client.jobs.get(j.id)).state for j in normal} == {JobState.COMPLETED}
    assert worker.alive()
    assert not any(x["id"] in POISON for x in read_ledger(tmp_path / "ledger.jsonl"))  # none ran
    await asyncio.sleep(0)
    record(
        "poison",
        payloads=len(POISON),
        all_terminal_s=round(poison_s, 2),
        normal_completed=1000,
        worker_exits=0,
    )
