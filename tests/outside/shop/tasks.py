"""The shop's tasks: one django.tasks function, one engine task with engine options."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

import engine


@task(queue_name="mail")
def add(a: int, b: int) -> int:
    return a + b


@engine.task(name="shop.double", max_retries=1, expected_exceptions=(ConnectionError,))
def double(x: int) -> int:
    return 2 * x
