"""Checkpoints: a task saves its place, and its next attempt resumes from it.

Real workers (in this process, or `python -m engine worker` subprocesses that a test stops or
kills) on the test redis-server; the tasks' own ledger (tests/engine/checkpoint_tasks.py) tells
which rows each run processed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine import (
    CheckpointTooLarge,
    Client,
    EngineSettings,
    Job,
    JobContext,
    JobState,
    SerializationError,
    Worker,
)
from engine.seam.scripts import CompleteJob

from . import checkpoint_tasks as ct
from .harness import WorkerProc, read_ledger
from .helpers import STORED, drain

TASKS = [
    ct.rows,
    ct.rows_sync,
    ct.oversize,
    ct.oversize_uncaught,
    ct.save_then_wait,
]


@pytest.fixture(autouse=True)
def ledger_env(ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give in-process workers (and their isolation children) this test's ledger."""
    monkeypatch.setenv("JOBSITE_LEDGER", str(ledger))


def rows_by_run(ledger: Path, job_id: str) -> list[tuple[int, list[int], set[int]]]:
    """Return per run of `job_id`, in order: the row it started at, the rows it processed, and
    the pids it ran in (a run starts with its `start` line)."""
    runs: list[tuple[int, list[int], set[int]]] = []
    for line in read_ledger(ledger):
        if line["id"] != job_id:
            continue
        if line["kind"] == "start":
            runs.append((line["at"], [], set()))
        if line["kind"] in ("start", "row"):
            runs[-1][2].add(line["proc"])
        if line["kind"] == "row":
            runs[-1][1].append(line["row"])
    return runs


async def stored_checkpoint(client: Client, job_id: str) -> Any:
    """Return the checkpoint the job's hash holds, as `Job` reads it."""
    return (await client.jobs.get(job_id)).checkpoint


async def wait_rows(ledger: Path, job_id: str, count: int, timeout_s: float = 15) -> None:
    """Wait until the ledger has `count` rows of `job_id`."""
    for _ in range(int(timeout_s / 0.02)):
        if sum(len(r) for _, r, _ in rows_by_run(ledger, job_id)) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {count} rows of {job_id}: {read_ledger(ledger)}")


async def test_a_retried_task_resumes_from_its_checkpoint_and_processes_each_row_once(
    client: Client, settings: EngineSettings, ledger: Path
) -> None:
    job = await client.enqueue(ct.rows, 6, 3)
    await drain(settings, TASKS)
    done = await client.jobs.get(job.id)
    assert done.state is JobState.COMPLETED and done.attempt == 2 and done.result == 6
    first, second = rows_by_run(ledger, job.id)
    assert first[:2] == (0, [0, 1, 2])  # None on the first run: it began at row 0
    assert second[:2] == (3, [3, 4, 5])
    # Completed: the result is the truth now, and the checkpoint is gone from the hash.
    assert done.checkpoint is None
    assert await client.redis.hget(client.keys("default").job(job.id), STORED.checkpoint) is None


async def test_a_sync_task_checkpoints_from_its_thread_and_resumes(
    client: Client, settings: EngineSettings, ledger: Path
) -> None:
    job = await client.enqueue(ct.rows_sync, 5, 2)
    await drain(settings, TASKS)
    done = await client.jobs.get(job.id)
    assert done.state is JobState.COMPLETED and done.attempt == 2
    assert [r[:2] for r in rows_by_run(ledger, job.id)] == [(0, [0, 1]), (2, [2, 3, 4])]


async def test_a_suspect_run_alone_in_its_child_process_reads_and_saves_its_checkpoint(
    client: Client, settings: EngineSettings, ledger: Path
) -> None:
    job = await client.enqueue(ct.rows, 6, 3)
    # A suspect (an earlier run's process died): the worker runs it in its isolation child.
    await client.redis.hset(client.keys("default").job(job.id), STORED.stalls, "1")
    await drain(settings, TASKS)
    done = await client.jobs.get(job.id)
    assert done.state is JobState.COMPLETED and done.attempt == 2
    lines = read_ledger(ledger)
    worker_pid = lines[0]["worker_pid"]
    (at1, rows1, procs1), (at2, rows2, procs2) = rows_by_run(ledger, job.id)
    # The first child run saved its place through the worker; the second child read it back.
    assert (at1, rows1, at2, rows2) == (0, [0, 1, 2], 3, [3, 4, 5])
    assert worker_pid not in procs1 | procs2


async def test_a_checkpoint_survives_the_dead_letters_and_a_resubmit(
    client: Client, settings: EngineSettings, ledger: Path
) -> None:
    job = await client.enqueue(ct.rows.using(max_retries=0), 5, 2)  # to the dead letters
    await drain(settings, TASKS)
    dead = await client.jobs.get(job.id)
    assert dead.state is JobState.FAILED and dead.checkpoint == {"next": 2}
    assert [j.id for j in await client.dead_letters.list("default")] == [job.id]
    assert await client.jobs.resubmit("default", [job.id]) == 1
    assert await stored_checkpoint(client, job.id) == {"next": 2}
    await drain(settings, TASKS)
    assert (await client.jobs.get(job.id)).state is JobState.COMPLETED
    assert [r[:2] for r in rows_by_run(ledger, job.id)] == [(0, [0, 1]), (2, [2, 3, 4])]


@pytest.mark.long_window
async def test_a_checkpoint_survives_a_graceful_stop_hand_back(
    client: Client, settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    job = await client.enqueue(ct.rows, 40, -1, 100)
    tasks = "tests.engine.checkpoint_tasks"
    first = WorkerProc(settings.redis_url, ledger, concurrency=2, tasks=tasks).start()
    procs.append(first)
    await wait_rows(ledger, job.id, 3)
    first.signal(signal.SIGTERM)  # on_shutdown="resubmit": handed back after the grace
    assert first.wait(timeout_s=15) == 0, first.output()
    handed = await client.jobs.get(job.id)
    assert handed.state is JobState.SUBMITTED and handed.attempt == 0
    [(_, done_rows, _)] = rows_by_run(ledger, job.id)
    assert handed.checkpoint == {"next": done_rows[-1] + 1}
    procs.append(WorkerProc(settings.redis_url, ledger, concurrency=2, tasks=tasks).start())
    done = await client.jobs.wait(job.id, timeout_s=30)
    assert done.state is JobState.COMPLETED and done.checkpoint is None
    (at1, rows1, _), (at2, rows2, _) = rows_by_run(ledger, job.id)
    assert at1 == 0 and at2 == rows1[-1] + 1
    assert sorted(rows1 + rows2) == list(range(40))  # each row once


@pytest.mark.long_window
async def test_a_checkpoint_survives_a_stall_when_the_worker_process_is_killed(
    client: Client, settings: EngineSettings, ledger: Path, procs: list[WorkerProc]
) -> None:
    job = await client.enqueue(ct.rows, 30, -1, 100)
    tasks = "tests.engine.checkpoint_tasks"
    first = WorkerProc(settings.redis_url, ledger, concurrency=2, tasks=tasks).start()
    procs.append(first)
    await wait_rows(ledger, job.id, 3)
    first.signal(signal.SIGKILL)
    first.wait()
    saved = await stored_checkpoint(client, job.id)
    assert saved is not None and saved["next"] >= 3
    procs.append(WorkerProc(settings.redis_url, ledger, concurrency=2, tasks=tasks).start())
    done = await client.jobs.wait(job.id, timeout_s=30)
    assert done.state is JobState.COMPLETED and done.stalls == 1 and done.checkpoint is None
    (at1, rows1, _), (at2, rows2, procs2) = rows_by_run(ledger, job.id)
    assert at1 == 0 and at2 == saved["next"]
    # The kill may land between a row and its checkpoint: that one row runs again, no other.
    assert at2 in (rows1[-1], rows1[-1] + 1)
    counts = Counter(rows1 + rows2)
    again = {n for n, c in counts.items() if c > 1}
    assert set(counts) == set(range(30)) and max(counts.values()) <= 2
    assert again == ({at2} if at2 == rows1[-1] else set())
    # A suspect now: its resumed run was alone in the new worker's isolation child.
    assert not procs2 & {line["worker_pid"] for line in read_ledger(ledger)}


async def test_a_worker_whose_lease_was_taken_cannot_overwrite_the_checkpoint(
    client: Client,
) -> None:
    job = await client.enqueue(ct.rows, 3)
    k = client.keys("default")

    async def claim(worker: str) -> str:
        [row] = await client.scripts.claim(
            k, events_maxlen=1000, max_jobs=1, lease_ms=30_000, worker_id=worker, result_ttl_ms=1
        )
        return row.token

    async def save(token: str, state: bytes, job_id: str = job.id) -> int:
        return await client.scripts.checkpoint(k, job_id=job_id, token=token, state=state)

    old = await claim("w1")
    assert await save(old, b'{"next":1}') == 0
    # w1's lease is taken: the job went back and w2 claimed it with a new token.
    assert (
        await client.scripts.release(
            k, events_maxlen=1000, worker_id="w1", job_id=job.id, token=old, reason="test"
        )
        == 0
    )
    new = await claim("w2")
    assert await save(old, b'{"next":9}') == -2  # lease lost
    assert await save(new, b'{"next":2}') == 0
    assert await save(old, b"") == -2  # nor delete it
    assert await stored_checkpoint(client, job.id) == {"next": 2}
    assert await save(new, b"") == 0  # the owner may delete it
    assert await stored_checkpoint(client, job.id) is None
    assert await save("any", b"{}", "no-such-job") == -1
    assert await client.redis.exists(k.job("no-such-job")) == 0
    assert await save(new, b'{"next":3}') == 0
    done = await client.scripts.complete(
        k, events_maxlen=1000, worker_id="w2", jobs=[CompleteJob(job.id, new, b"3", 60_000)]
    )
    assert done == [0]
    assert await stored_checkpoint(client, job.id) is None  # completed: cleared
    assert await save(new, b'{"next":4}') == -2  # finished: no token holds it any more


async def test_a_refused_checkpoint_of_a_lost_job_is_counted_as_a_late_write(
    client: Client, settings: EngineSettings, ledger: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flag = ledger.with_name("flag")
    job = await client.enqueue(ct.save_then_wait, str(flag))
    k = client.keys("default")
    worker = Worker(settings, TASKS)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(500):
            if any(line["kind"] == "saved" for line in read_ledger(ledger)):
                break
            await asyncio.sleep(0.02)
        assert await stored_checkpoint(client, job.id) == {"owner": "first", "next": 1}
        # Another worker takes the job: the hash gets its token, and it saves its own place.
        await client.redis.hset(k.job(job.id), STORED.token, "taken")
        assert (
            await client.scripts.checkpoint(
                k, job_id=job.id, token="taken", state=b'{"owner":"second"}'
            )
            == 0
        )
        with caplog.at_level(logging.WARNING, logger="engine.worker"):
            flag.touch()
            for _ in range(500):
                if "write=checkpoint" in caplog.text:
                    break
                await asyncio.sleep(0.02)
        assert f"lease lost job={job.id}" in caplog.text and "write=checkpoint" in caplog.text
        assert worker.counters["lease_lost"] >= 1
        assert await stored_checkpoint(client, job.id) == {"owner": "second"}
    finally:
        worker.stop()
        await asyncio.wait_for(running, 15)


async def test_an_oversize_checkpoint_is_refused_with_a_clear_error_and_the_worker_goes_on(
    client: Client, settings: EngineSettings
) -> None:
    small = EngineSettings.from_url(
        settings.redis_url, checkpoint_max_bytes=1024, scheduler_interval_s=0.05, idle_wait_s=0.2
    )
    caught = await client.enqueue(ct.oversize, 5000)
    uncaught = await client.enqueue(ct.oversize_uncaught, 5000)
    after = await client.enqueue(ct.rows, 3)
    worker = await drain(small, TASKS)
    refusal = (await client.jobs.get(caught.id)).result
    assert "checkpoint is 5011 bytes of JSON, over checkpoint_max_bytes (1024 bytes)" in refusal
    failed = await client.jobs.get(uncaught.id)
    assert failed.state is JobState.FAILED and failed.checkpoint is None  # nothing was saved
    assert failed.error is not None and failed.error["type"] == "CheckpointTooLarge"
    assert "over checkpoint_max_bytes (1024 bytes)" in failed.error["message"]
    # The same worker ran the next job to its end.
    assert (await client.jobs.get(after.id)).state is JobState.COMPLETED
    assert worker.crashed is None


async def test_the_context_refuses_what_is_not_json_and_keeps_what_it_saved() -> None:
    written: list[bytes] = []

    async def writer(_: Job, state: bytes) -> None:
        written.append(state)

    ctx = JobContext(Job(id="j", task="x"), "w1", _checkpoint=writer, checkpoint_max_bytes=64)
    assert ctx.checkpointed is None
    with pytest.raises(SerializationError, match=r"^checkpoint: value is not JSON"):
        await ctx.checkpoint({"at": object()})
    with pytest.raises(CheckpointTooLarge, match="over checkpoint_max_bytes"):
        await ctx.checkpoint(["x" * 100])
    state = {"next": 3}
    await ctx.checkpoint(state)
    state["next"] = 99  # the task's own object: what was saved stays
    assert ctx.checkpointed == {"next": 3}
    await ctx.checkpoint(None)
    assert ctx.checkpointed is None and written == [b'{"next":3}', b""]
    # Without a worker (inline mode) the state is only kept on the context.
    alone = JobContext(Job(id="j", task="x"), "w1")
    alone.checkpoint_sync({"next": 1})
    assert alone.checkpointed == {"next": 1}
