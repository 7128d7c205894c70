"""Import Django's task API from one place: django.tasks (Django 6.0+) or its 5.2 backport.

On Django 5.2 the same API comes from the `django-tasks` package (`pip install
jobsite[django52]`); a task module there writes `from django_tasks import task`. Nothing else in
the app imports either of them directly.
"""

from __future__ import annotations

import django
from django.core.exceptions import ImproperlyConfigured

if django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, default_task_backend, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:  # pragma: no cover - run by the Django 5.2 suite
    try:
        from django_tasks import TaskContext, default_task_backend, task, task_backends
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"Django {django.get_version()} has no django.tasks: install the backport with "
            "`pip install jobsite[django52]` (the django-tasks package)."
        ) from exc
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
