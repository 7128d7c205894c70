"""The no-op `django.tasks` task of the django-tasks-db path (bench/sync_enqueue.py): the
backend imports a task by its path, so it must be a module's own; import after django.setup()."""

from __future__ import annotations

from django.tasks import task


@task()
def noop(t_enqueued: float) -> None:
    """Do nothing."""
