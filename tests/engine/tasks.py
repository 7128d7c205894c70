"""Tasks used by the engine tests (importable by worker subprocesses too)."""

from __future__ import annotations

import asyncio
import time

from engine import JobContext, Retry, RetryableError, TaskResult, task

CALLS: list[tuple[str, int]] = []


class Flaky(Exception):
    """An expected, retryable error."""


@task(name="add")
async def add(a: int, b: int) -> int:
    return a + b


@task(name="add_sync")
def add_sync(a: int, b: int) -> int:
    time.sleep(0.001)
    return a + b


@task(name="boom")
async def boom() -> None:
    raise ValueError("unexpected")


@task(name="flaky", max_retries=3, expected_exceptions=(Flaky,))
async def flaky() -> None:
    raise Flaky("try again")


@task(name="ctx", takes_context=True)
async def ctx(job: JobContext, tag: str) -> dict[str, object]:
    return {"id": job.id, "attempt": job.attempt, "tag": tag}


@task(name="retry_twice", takes_context=True, max_retries=5)
async def retry_twice(job: JobContext) -> int:
    if job.attempt < 3:
        raise Retry(delay_s=0.2)
    return job.attempt


@task(name="slow", timeout_s=0.1, max_retries=1)
async def slow() -> None:
    await asyncio.sleep(5)


@task(name="record", takes_context=True)
async def record(job: JobContext, label: str) -> str:
    CALLS.append((label, job.attempt))
    return label


@task(name="coded", retry_on={"rate_limited"}, max_retries=1)
async def coded(code: str) -> None:
    raise RetryableError(code)


@task(name="explicit_err")
async def explicit_err() -> TaskResult:
    return TaskResult.err("bad_input", "the input was bad")


@task(name="unjsonable")
async def unjsonable() -> object:
    return object()


@task(name="versioned", version=2)
async def versioned_v2() -> str:
    return "v2"


PEAK: dict[str, int] = {"now": 0, "max": 0}


@task(name="limited", max_concurrent=2)
async def limited() -> None:
    PEAK["now"] += 1
    PEAK["max"] = max(PEAK["max"], PEAK["now"])
    await asyncio.sleep(0.05)
    PEAK["now"] -= 1


@task(name="tracked")
async def tracked() -> None:
    PEAK["now"] += 1
    PEAK["max"] = max(PEAK["max"], PEAK["now"])
    await asyncio.sleep(0.05)
    PEAK["now"] -= 1


@task(name="progressing", takes_context=True)
async def progressing(job: JobContext) -> None:
    for pct in (25, 50, 100):
        await job.set_progress(pct, f"step {pct}")


@task(name="checkpointing", takes_context=True)
async def checkpointing(job: JobContext, n: int) -> int:
    """Save its place after each of `n` steps, starting where an earlier attempt left it."""
    for i in range((job.checkpointed or {}).get("next", 0), n):
        await job.checkpoint({"next": i + 1})
    return n


@task(name="waits", takes_context=True)
async def waits(job: JobContext, seconds: float) -> None:
    await asyncio.sleep(seconds)


# Labels in the order `step` jobs ran.
ORDER: list[str] = []
# (tenant, "start" | "end", monotonic time) of `tenant_work` jobs.
TENANTS: list[tuple[str, str, float]] = []
FAIL_ONCE: set[str] = set()


@task(name="step", takes_context=True)
async def step(job: JobContext, label: str) -> dict[str, object]:
    parents = await job.parent_results()
    ORDER.append(label)
    return {"label": label, "saw": sorted(str(p["label"]) for p in parents.values())}


@task(name="fails_first_time", max_retries=0)
async def fails_first_time(label: str) -> dict[str, str]:
    if label not in FAIL_ONCE:
        FAIL_ONCE.add(label)
        raise RuntimeError(f"{label} fails the first time")
    return {"label": label}


@task(
    name="tenant_work",
    concurrency_key=lambda tenant, n: tenant,
    concurrency_limit=1,
)
async def tenant_work(tenant: str, n: int) -> None:
    TENANTS.append((tenant, "start", time.monotonic()))
    await asyncio.sleep(0.03)
    TENANTS.append((tenant, "end", time.monotonic()))


@task(name="logging_async", takes_context=True, max_retries=1, expected_exceptions=(Flaky,))
async def logging_async(job: JobContext, n: int, fail_first: bool = False) -> int:
    for i in range(n):
        await job.log(f"line {i} of attempt {job.attempt}")
    if fail_first and job.attempt == 1:
        raise Flaky("once more")
    return n


@task(name="logging_sync", takes_context=True)
def logging_sync(job: JobContext, messages: list[str]) -> int:
    for message in messages:
        job.log_sync(message)
    return len(messages)


@task(name="log_then_wait", takes_context=True)
async def log_then_wait(job: JobContext, message: str, seconds: float) -> None:
    await job.log(message)
    await asyncio.sleep(seconds)


def _find(record_id: str) -> None:
    raise LookupError(f"record {record_id} not found after 3 tries")


def _find_elsewhere(record_id: str) -> None:
    raise LookupError(f"record {record_id} not found after 3 tries")


@task(name="lookup", max_retries=0)
async def lookup(record_id: str) -> None:
    """Fail with the record's id in the message (dead-letter grouping)."""
    _find(record_id)


@task(name="lookup_elsewhere", max_retries=0)
async def lookup_elsewhere(record_id: str) -> None:
    """Fail with the same message as `lookup`, raised from another function."""
    _find_elsewhere(record_id)


@task(name="divide", max_retries=0)
async def divide(a: int, b: int) -> float:
    """Divide: fails with b=0 (replay with edited arguments)."""
    return a / b


@task(name="steady_reporter", takes_context=True)
async def steady_reporter(job: JobContext, steps: int, step_s: float) -> int:
    for i in range(steps):
        await job.log(f"step {i}")
        await job.set_progress(100 * (i + 1) / steps, f"step {i}")
        await job.heartbeat()
        await asyncio.sleep(step_s)
    return steps


@task(name="steady_reporter_sync", takes_context=True)
def steady_reporter_sync(job: JobContext, steps: int, step_s: float) -> int:
    for i in range(steps):
        job.log_sync(f"step {i}")
        job.set_progress_sync(100 * (i + 1) / steps, f"step {i}")
        job.touch()
        time.sleep(step_s)
    return steps


@task(name="after", takes_context=True)
async def after(job: JobContext, parent_id: str, note: str = "") -> dict[str, object]:
    """A callback: what it sees of the job it follows."""
    return {
        "note": note,
        "parent_id": parent_id,
        "results": await job.parent_results(),
        "errors": await job.parent_errors(),
    }


@task(name="after_elsewhere", queue="elsewhere")
async def after_elsewhere(parent_id: str) -> str:
    """A callback declared on another queue (it runs in its job's queue)."""
    return parent_id
