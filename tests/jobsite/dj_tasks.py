"""django.tasks functions used by the backend tests."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import orjson

from jobsite.jobs.tasks.djtasks import TaskContext, task
from jobsite.jobs.tasks.engine_options import engine_options
from jobsite.jobs.tasks.registry import JobTaskContext


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def explode() -> None:
    raise ValueError("kaboom")


@task(takes_context=True)
def which_attempt(context: TaskContext) -> int:
    return context.attempt


@task
async def async_double(x: int) -> int:
    return x * 2


@task
def when() -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC)  # not JSON as Django defines it


@task
@engine_options(max_retries=1, retry_delay_s=0, expected_exceptions=(RuntimeError,))
def fails_twice() -> None:
    raise RuntimeError("again")


@task
@engine_options(max_retries=0, expected_exceptions=(RuntimeError,))
def fails_once() -> None:
    raise RuntimeError("once")


@task(takes_context=True)
def stamp(context: TaskContext, path: str) -> None:
    """Append what this run saw to the file `path`: its job id and the time (ms), one JSON line."""
    line = orjson.dumps({"id": context.task_result.id, "at_ms": int(time.time() * 1000)})
    with Path(path).open("ab") as ledger:
        ledger.write(line + b"\n")


@task(max_retries=0, timeout_s=0.2)
async def sleepy(seconds: float) -> str:
    import asyncio

    await asyncio.sleep(seconds)
    return "woke"


@task(concurrency_key="reports", rate_limit="50/s", version=1)
def report(n: int) -> int:
    return n


@task(takes_context=True)
def import_rows(context: JobTaskContext, rows: int) -> int:
    """Report progress and log lines through Django's own context (sync)."""
    for n in range(1, rows + 1):
        context.set_progress(100 * n / rows, f"row {n} of {rows}")
        context.log(f"imported row {n}")
        context.heartbeat()
    return rows if not context.cancelled else -1


@task(takes_context=True)
async def aimport_rows(context: JobTaskContext, rows: int) -> int:
    """Async twin of import_rows."""
    for n in range(1, rows + 1):
        await context.aset_progress(100 * n / rows, f"row {n} of {rows}")
        await context.alog(f"imported row {n}")
        await context.aheartbeat()
    return rows


def _row_done(path: str, attempt: int, row: int) -> None:
    """Append the row a run processed to the file `path` (one JSON line)."""
    with Path(path).open("ab") as ledger:
        ledger.write(orjson.dumps({"attempt": attempt, "row": row}) + b"\n")


@task(takes_context=True)
@engine_options(max_retries=1, retry_delay_s=0, expected_exceptions=(RuntimeError,))
def resume_rows(context: JobTaskContext, rows: int, fail_at: int, path: str) -> int:
    """Import `rows` rows from the saved one, saving its place after each (sync); a run that
    began at row 0 fails at `fail_at`."""
    start = context.checkpointed["next"] if context.checkpointed else 0
    for n in range(start, rows):
        if n == fail_at and start == 0:
            raise RuntimeError(f"row {n} could not be read")
        _row_done(path, context.attempt, n)
        context.checkpoint({"next": n + 1})
    return rows


@task(takes_context=True)
@engine_options(max_retries=1, retry_delay_s=0, expected_exceptions=(RuntimeError,))
async def aresume_rows(context: JobTaskContext, rows: int, fail_at: int, path: str) -> int:
    """Async twin of resume_rows."""
    start = context.checkpointed["next"] if context.checkpointed else 0
    for n in range(start, rows):
        if n == fail_at and start == 0:
            raise RuntimeError(f"row {n} could not be read")
        _row_done(path, context.attempt, n)
        await context.acheckpoint({"next": n + 1})
    return rows


@task(takes_context=True)
@engine_options(max_retries=0, expected_exceptions=(RuntimeError,))
def saves_then_fails(context: JobTaskContext, state: dict[str, int]) -> None:
    """Save `state`, then fail for good: the job keeps it for whoever looks."""
    context.checkpoint(state)
    raise RuntimeError("stopped after saving its place")


@task
def note_parent(parent_id: str, why: str = "") -> str:
    """A callback: says which job it followed."""
    return f"{why}:{parent_id}"
