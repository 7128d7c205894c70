"""Through a real worker: a task may return TaskResult.ok(value), a good_until must be
timezone-aware, and a retry counts its wait from when it was queued again."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from engine import Client, ConfigError, EngineSettings, JobState, Retry, TaskResult, task

from .helpers import drain


@task(name="returns_ok")
async def returns_ok(n: int) -> TaskResult:
    return TaskResult.ok({"doubled": n * 2})


@task(name="retries_once", takes_context=True, max_retries=1)
async def retries_once(job: object) -> str:
    if getattr(job, "attempt", 1) == 1:
        raise Retry(delay_s=0.3)
    return "second"


async def test_a_task_returning_ok_completes_with_its_value(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(returns_ok, 21)
    await drain(settings, [returns_ok])
    got = await client.jobs.get(job.id)
    assert (got.state, got.result) == (JobState.COMPLETED, {"doubled": 42})


def test_good_until_must_be_timezone_aware() -> None:
    with pytest.raises(ConfigError, match="timezone-aware"):
        returns_ok.using(good_until=datetime.now() + timedelta(hours=1)).call(1)
    aware = datetime.now().astimezone() + timedelta(hours=1)
    assert returns_ok.using(good_until=aware).call(1).good_until_ms is not None


async def test_a_retry_counts_its_wait_from_when_it_was_queued_again(
    client: Client, settings: EngineSettings
) -> None:
    job = await client.enqueue(retries_once)
    first = (await client.jobs.get(job.id)).submitted_at_ms
    await drain(settings, [retries_once])
    got = await client.jobs.get(job.id)
    assert got.result == "second" and got.attempt == 2
    assert first is not None and got.submitted_at_ms is not None
    assert got.submitted_at_ms - first >= 300  # queued again after its retry delay
