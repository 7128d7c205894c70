"""Tasks that save their place with `checkpoint()`; each row they process goes to an O_APPEND
ledger file ($JOBSITE_LEDGER), so a test can tell which rows ran, in which attempt and process."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import orjson

from engine import CheckpointTooLarge, JobContext, task


def note(job: JobContext, kind: str, **more: Any) -> None:
    """Append one line to $JOBSITE_LEDGER with os.write: a kill loses no line already written."""
    path = os.environ.get("JOBSITE_LEDGER")
    if not path:
        return
    line = {
        "kind": kind,
        "id": job.id,
        "attempt": job.attempt,
        # The worker's pid (its default id is "host:pid:random") and this process's: a suspect
        # runs in the worker's isolation child.
        "worker_pid": int(job.worker_id.split(":")[1]),
        "proc": os.getpid(),
        **more,
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, orjson.dumps(line) + b"\n")
    finally:
        os.close(fd)


def _first(job: JobContext) -> int:
    """Return the row to start from: the saved one, else 0."""
    saved = job.checkpointed
    return int(saved["next"]) if saved else 0


@task(
    name="ckpt.rows",
    takes_context=True,
    expected_exceptions=(ValueError,),
    max_retries=3,
    retry_delay_s=0.05,
    backoff="constant",
    on_shutdown="resubmit",
    max_stalls=3,
)
async def rows(job: JobContext, total: int, fail_at: int = -1, row_ms: int = 0) -> int:
    """Import `total` rows from the saved one; a run that began at row 0 fails at `fail_at`."""
    start = _first(job)
    note(job, "start", at=start)
    for n in range(start, total):
        if n == fail_at and start == 0:
            raise ValueError(f"row {n} could not be read")
        note(job, "row", row=n)
        await job.checkpoint({"next": n + 1})
        if row_ms:
            await asyncio.sleep(row_ms / 1000)
    note(job, "end")
    return total


@task(
    name="ckpt.rows_sync",
    takes_context=True,
    expected_exceptions=(ValueError,),
    retry_delay_s=0.05,
    backoff="constant",
)
def rows_sync(job: JobContext, total: int, fail_at: int) -> int:
    """Sync twin of rows: runs in the worker's thread pool and saves with checkpoint_sync."""
    start = _first(job)
    note(job, "start", at=start)
    for n in range(start, total):
        if n == fail_at and start == 0:
            raise ValueError(f"row {n} could not be read")
        note(job, "row", row=n)
        job.checkpoint_sync({"next": n + 1})
    note(job, "end")
    return total


@task(name="ckpt.oversize", takes_context=True)
async def oversize(job: JobContext, size: int) -> str:
    """Try to save `size` bytes, then save a small state instead; return the refusal."""
    try:
        await job.checkpoint({"data": "x" * size})
    except CheckpointTooLarge as exc:
        await job.checkpoint({"next": 1})
        return str(exc)
    return "saved"


@task(name="ckpt.oversize_uncaught", takes_context=True)
async def oversize_uncaught(job: JobContext, size: int) -> str:
    """Save `size` bytes without catching the refusal."""
    await job.checkpoint({"data": "x" * size})
    return "saved"


@task(name="ckpt.save_then_wait", takes_context=True)
async def save_then_wait(job: JobContext, flag: str) -> str:
    """Save a checkpoint, wait until the file `flag` exists, then save another; stopped while
    it waits, save that one as it stops."""
    await job.checkpoint({"owner": "first", "next": 1})
    note(job, "saved")
    try:
        end = time.monotonic() + 20
        while not Path(flag).exists() and time.monotonic() < end:
            await asyncio.sleep(0.02)
    finally:
        await job.checkpoint({"owner": "first", "next": 2})
    return "done"
