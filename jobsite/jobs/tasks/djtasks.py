"""Import Django's task API from one place: django.tasks (Django 6.0+) or its 5.2 backport.

On Django 5.2 the same API comes from the `django-tasks` package (`pip install
jobsite[django52]`); a task module there writes `from django_tasks import task`. Django 6.0's
`@task` takes no backend options (6.1's and the backport's do): there, `task` here is the 6.1
decorator, so `@task(max_retries=5)` works on all three. Nothing else in the app imports either
task API directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import django
from django.core.exceptions import ImproperlyConfigured

# mypy checks against the installed Django (the lock's 6.1): the other branches are for the
# Django 6.0 and 5.2 suites (TYPE_CHECKING is False when running, so nothing changes there).
if TYPE_CHECKING or django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, default_task_backend, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_PRIORITY,
        DEFAULT_TASK_QUEUE_NAME,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import (
        log_task_enqueued,
        task_enqueued,
        task_finished,
        task_started,
    )
    from django.utils.json import normalize_json

    if not TYPE_CHECKING and django.VERSION < (6, 1):

        def task(
            function: Any = None,
            *,
            priority: int = DEFAULT_TASK_PRIORITY,
            queue_name: str = DEFAULT_TASK_QUEUE_NAME,
            backend: str = DEFAULT_TASK_BACKEND_ALIAS,
            takes_context: bool = False,
            **options: Any,
        ) -> Any:
            """Make a Task of the backend's task class with `options` (Django 6.1's @task)."""

            def wrapper(func: Any) -> Any:
                return task_backends[backend].task_class(
                    func=func,
                    priority=priority,
                    queue_name=queue_name,
                    backend=backend,
                    takes_context=takes_context,
                    run_after=None,
                    **options,
                )

            return wrapper(function) if function else wrapper

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
    from django_tasks.signals import (
        log_task_enqueued,
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json

if TYPE_CHECKING:
    # django-stubs makes these generic (the task's parameters and return value); Django's
    # classes are not subscriptable when running. Annotations name the task of any function.
    AnyTask = Task[..., Any]
    AnyTaskResult = TaskResult[..., Any]
    AnyTaskContext = TaskContext[..., Any]
else:
    AnyTask, AnyTaskResult, AnyTaskContext = Task, TaskResult, TaskContext

__all__ = [
    "AnyTask",
    "AnyTaskContext",
    "AnyTaskResult",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "log_task_enqueued",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
