"""django.tasks functions used by the backend tests."""

from __future__ import annotations

from django.tasks import TaskContext, task


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
