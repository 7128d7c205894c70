"""Engine options for django.tasks functions: retries, backoff, timeouts, limits and the rest.

    from django.tasks import task
    from jobsite.jobs.tasks.engine_options import engine_options

    @task(priority=10)
    @engine_options(max_retries=5, timeout_s=30, concurrency_key="invoice:{0}")
    def send_invoice(invoice_id: int) -> str: ...

`@task` keeps the queue, the priority and `run_after`; `engine_options` takes any option of the
engine's `@task` (see docs/features.md). The worker applies them when it runs the function and
the backend when it enqueues a call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from engine import task_ref
from jobsite.jobs.tasks import djtasks
from jobsite.jobs.tasks.djtasks import AnyTask as DjangoTask

F = TypeVar("F", bound=Callable[..., Any])
_ATTRIBUTE = "__jobsite_engine_options__"
# Django's own Task fields: set through @task or .using(), never here.
_DJANGO_OWNED = {"queue", "priority", "takes_context"}


def engine_options(**options: Any) -> Callable[[F], F]:
    """Attach engine options to a function (place it below `@task`); checked at once."""
    owned = _DJANGO_OWNED & set(options)
    if owned:
        raise TypeError(f"set {', '.join(sorted(owned))} with @task or .using(), not here")
    for name in ("on_success", "on_failure"):
        if options.get(name) is not None:
            options[name] = callback_by_name(options[name])
    task_ref("jobsite.options-check", **options)  # ConfigError now, not at the first enqueue

    def attach(fn: F) -> F:
        setattr(fn, _ATTRIBUTE, dict(options))
        return fn

    return attach


def callback_by_name(value: Any) -> Any:
    """Return a callback with a django Task named by its module path (the engine's name)."""
    if isinstance(value, tuple | list) and len(value) == 2:
        return (callback_by_name(value[0]), value[1])
    return value.module_path if isinstance(value, djtasks.Task) else value


def options_of(dtask: DjangoTask) -> dict[str, Any]:
    """Return the engine options attached to a django Task's function."""
    return dict(getattr(dtask.func, _ATTRIBUTE, {}))
