"""The shop's tasks: one django.tasks function, one engine task with engine options."""

from django.tasks import task

import engine


@task(queue_name="mail")
def add(a: int, b: int) -> int:
    return a + b


@engine.task(name="shop.double", max_retries=1)
def double(x: int) -> int:
    return 2 * x
