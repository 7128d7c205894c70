"""Hooks: code a project runs around each job (error reporting, audit), never failing it.

A hook is a callable taking a `HookEvent`; it may be a coroutine function. Hooks run in the
worker's event loop, so a sync hook must be quick (hand slow work to a thread). A hook that
raises is logged with its traceback; the job goes on as if it had not run.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from ..job import Job

log = logging.getLogger("engine.hooks")

HookKind = Literal[
    "before_run",
    "after_run",
    "retry",
    "dead_letter",
    "expired",
    "stalled",
    "dropped",
    "cancelled",
    "failed",
    "deduplicated",
    "debounced",
]


@dataclass(frozen=True, slots=True)
class HookEvent:
    """What happened to a job: about to run or ended (the worker that ran it), or a transition
    from the event stream wherever it happened (engine/periodic/transitions.py): retrying, expired,
    stalled, dropped, cancelled, failed, dead-lettered."""

    kind: HookKind
    job: Job
    worker_id: str
    # after_run, retry, dead_letter: the outcome: "completed", "failed", "retry", "cancelled",
    # "dropped", "stalled" or "release" (handed back unrun),
    # and the attempt's error record (type, message, exception, traceback), if any.
    outcome: str | None = None
    error: dict[str, Any] | None = None
    # retry: seconds until the next attempt.
    delay_s: float | None = None
    # Transitions from the event stream: the state it left, the event's reason ("deadline
    # passed", "parent p1 ended failed", "cancelled by user"...) and when, in ms.
    from_state: str | None = None
    reason: str = ""
    at_ms: int | None = None
    # deduplicated: the job whose submit was ignored for this one; debounced: the job that
    # replaced it.
    other_job: str | None = None


Hook = Callable[[HookEvent], Awaitable[None] | None]


class Hooks:
    """The hooks of one worker, called in the order given."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        self.hooks = list(hooks)

    async def emit(self, event: HookEvent) -> None:
        """Call every hook with `event`; log those that raise."""
        for hook in self.hooks:
            try:
                returned = hook(event)
                if inspect.isawaitable(returned):
                    await returned
            except Exception:
                log.exception(
                    "hook failed hook=%s event=%s job=%s", _name(hook), event.kind, event.job.id
                )


def _name(hook: Hook) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)
