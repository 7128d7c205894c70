"""JobsiteTask: the backend's `task_class` (Django's documented extension point), so a
django.tasks function takes the engine's options in `@task(...)` and per call in `.using(...)`.

    from django.tasks import task

    @task(priority=10, max_retries=5, timeout_s=30, concurrency_key="tenants")
    def send_invoice(invoice_id: int) -> str: ...

    send_invoice.using(deduplication={"id": "invoice-7", "ttl_s": 600}).enqueue(7)

Every other part of Django's Task stays as it is. An option left at None keeps the engine's
default, or what the backend's `OPTIONS["TASK_OPTIONS"]` or `@engine_options` say (in that
order, the later winning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from engine import ConfigError, Deduplication
from jobsite.jobs.tasks.djtasks import AnyTask as DjangoTask
from jobsite.jobs.tasks.djtasks import InvalidTask

# Options Django's own `using()` takes; the rest of `using()`'s keywords are engine options.
_DJANGO_USING = ("priority", "queue_name", "run_after", "backend")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobsiteTask(DjangoTask):
    """A django Task with the engine's per-call options (None: not set here)."""

    # The function version the worker must have (a worker without it drops the job).
    version: int | None = None
    max_retries: int | None = None
    retry_delay_s: float | None = None
    backoff: str | float | list[float] | None = None
    max_retry_delay_s: float | None = None
    timeout_s: float | None = None
    max_heartbeat_interval_s: float | None = None
    max_stalls: int | None = None
    on_shutdown: str | None = None
    ttl_s: float | None = None
    good_until: datetime | None = None
    queue_timeout_s: float | None = None
    dead_letter_policy: str | None = None
    result_ttl_s: int | None = None
    deduplication: Deduplication | None = None
    concurrency_key: str | Callable[..., str] | None = None
    concurrency_limit: int | Callable[..., int] | None = None
    rate_limit: str | None = None
    # Each value of the key (or what a function of the arguments returns) gets its own
    # rate_limit budget; at the limit the job waits, is dropped or rescheduled (on_rate_limit).
    rate_key: str | Callable[..., str] | None = None
    on_rate_limit: str | None = None
    # Retention by final state: state -> seconds its hash is kept (a list of states: 0 each);
    # checked by the engine's rule with the rest (validate_task).
    cleanup_on: Mapping[str, float] | list[str] | None = None
    # Callbacks submitted with each job, in its queue, called with parent_id: a django Task,
    # a task's module path, or (either, kwargs).
    on_success: Any = None
    on_failure: Any = None

    def __post_init__(self) -> None:
        from jobsite.jobs.tasks.engine_options import callback_by_name

        for name in ("on_success", "on_failure"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, callback_by_name(getattr(self, name)))
        if self.deduplication is not None and not isinstance(self.deduplication, Deduplication):
            try:  # a dict {id, mode, ttl_s}; kept as the engine's frozen (hashable) form
                dedup = Deduplication.of(self.deduplication)
            except ConfigError as exc:
                raise InvalidTask(str(exc)) from None
            object.__setattr__(self, "deduplication", dedup)
        DjangoTask.__post_init__(self)  # the backend's validate_task checks the options too

    def using(self, **changes: Any) -> JobsiteTask:
        """Return a copy with Django's options (priority, queue_name, run_after, backend) and
        the engine's (any field of this class) changed; None leaves one as it is."""
        unknown = set(changes) - set(_DJANGO_USING) - set(ENGINE_FIELDS)
        if unknown:
            raise TypeError(f"unknown task options: {', '.join(sorted(unknown))}")
        django = {k: changes.pop(k) for k in _DJANGO_USING if k in changes}
        task = DjangoTask.using(self, **django)
        engine = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(task, **engine) if engine else task  # type: ignore[return-value]

    def engine_options(self) -> dict[str, Any]:
        """Return the engine options set on this task (version included)."""
        return {
            name: getattr(self, name) for name in ENGINE_FIELDS if getattr(self, name) is not None
        }


_DJANGO_FIELDS = {f.name for f in dataclasses.fields(DjangoTask)}
ENGINE_FIELDS = tuple(
    f.name for f in dataclasses.fields(JobsiteTask) if f.name not in _DJANGO_FIELDS
)


def engine_options_of(dtask: DjangoTask, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Return every engine option of a django Task: the backend's defaults, then the
    `@engine_options` decorator's, then its own (a JobsiteTask's fields)."""
    from jobsite.jobs.tasks.engine_options import options_of

    own = dtask.engine_options() if isinstance(dtask, JobsiteTask) else {}
    return {**defaults, **options_of(dtask), **own}
