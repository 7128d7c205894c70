"""Schedule calls of the API clients (jobsite.client), sync and async: the same requests.

A schedule is named by its queue and its name. Timing options: `every_s` or `cron` (with `tz`),
`skip_if_running`, `start_at`, `end_at`, `paused`, `repeat_limit` (ticks it fires, then it ends).
A flow schedule submits a whole flow each tick (`create_flow_schedule`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

# (method, path, JSON body or None, query parameters or None)
Request = tuple[str, str, Any, dict[str, str] | None]


def _path(queue: str, name: str, action: str = "") -> str:
    # Queue and schedule names never hold "/" or dot segments; encode them all the same.
    return f"/schedules/{quote(queue, safe='')}/{quote(name, safe='')}{action}"


def _definition(
    task: str, args: tuple[Any, ...], kwargs: dict[str, Any], timing: dict[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {"task": task, "args": list(args), "kwargs": kwargs}
    for key, value in timing.items():
        if value is not None:
            body[key] = value.isoformat() if isinstance(value, datetime) else value
    return body


def list_request(queue: str | None) -> Request:
    return ("GET", "/schedules", None, None if queue is None else {"queue": queue})


def create_request(
    name: str, task: str, args: tuple[Any, ...], kwargs: dict[str, Any], timing: dict[str, Any]
) -> Request:
    return ("POST", "/schedules", {"name": name, **_definition(task, args, kwargs, timing)}, None)


def edit_request(
    queue: str,
    name: str,
    task: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timing: dict[str, Any],
) -> Request:
    return ("PUT", _path(queue, name), _definition(task, args, kwargs, timing), None)


# Timing options and their defaults, as both clients take them (keyword only).
TIMING = (
    "queue",
    "every_s",
    "cron",
    "tz",
    "skip_if_running",
    "start_at",
    "end_at",
    "paused",
    "repeat_limit",
)


def _timing(options: dict[str, Any], with_queue: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split `**kwargs` of a create/edit call into timing options and the task's kwargs."""
    timing = {k: options.pop(k) for k in TIMING if k in options}
    if not with_queue and "queue" in timing:
        raise TypeError("a schedule's queue is fixed: delete it and create it in another queue")
    return timing, options


class ScheduleCalls:
    """The schedule operations; a client supplies `_send(method, path, body, params)`.

    The sync client's `_send` returns the answer, the async client's an awaitable of it, so
    the same methods serve both (`await api.schedules()` on the async one).
    """

    def _send(self, method: str, path: str, body: Any, params: dict[str, str] | None) -> Any:
        raise NotImplementedError

    def _request(self, request: Request) -> Any:
        return self._send(*request)

    def schedules(self, queue: str | None = None) -> Any:
        """Return every schedule the caller may see (of `queue` only, when given)."""
        return self._request(list_request(queue))

    def schedule(self, queue: str, name: str) -> Any:
        """Return one schedule: timing, next five fire times, last run, origin, overridden."""
        return self._request(("GET", _path(queue, name), None, None))

    def create_schedule(self, name: str, task: str, *args: Any, **options: Any) -> Any:
        """Create a schedule of `task(*args, **kwargs)`; timing options are keywords (TIMING)."""
        timing, kwargs = _timing(options, with_queue=True)
        return self._request(create_request(name, task, args, kwargs, timing))

    def create_flow_schedule(self, name: str, jobs: list[dict[str, Any]], **timing: Any) -> Any:
        """Create a schedule that submits a whole flow each tick: `jobs` as POST /flows takes
        them (`ref`, `task`, `args`, `depends_on` refs, options); timing options (TIMING)."""
        body = {"name": name, "flow": {"jobs": jobs}, **_definition("", (), {}, timing)}
        for key in ("task", "args", "kwargs"):
            del body[key]
        return self._request(("POST", "/schedules", body, None))

    def edit_schedule(self, queue: str, name: str, task: str, *args: Any, **options: Any) -> Any:
        """Replace a schedule's definition (a declared one becomes overridden)."""
        timing, kwargs = _timing(options, with_queue=False)
        return self._request(edit_request(queue, name, task, args, kwargs, timing))

    def pause_schedule(self, queue: str, name: str) -> Any:
        """Stop firing until resumed."""
        return self._request(("POST", _path(queue, name, "/pause"), None, None))

    def resume_schedule(self, queue: str, name: str) -> Any:
        """Fire again from the next tick."""
        return self._request(("POST", _path(queue, name, "/resume"), None, None))

    def run_schedule(self, queue: str, name: str) -> Any:
        """Submit one job of the schedule now; returns its id."""
        return self._request(("POST", _path(queue, name, "/run"), None, None))

    def delete_schedule(self, queue: str, name: str) -> Any:
        """Delete a schedule (the jobs it submitted stay)."""
        return self._request(("DELETE", _path(queue, name), None, None))
