"""django.tasks functions used by the backend tests."""

from __future__ import annotations

from datetime import UTC, datetime

from django.tasks import TaskContext, task

from jobsite.jobs.options import engine_options


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
