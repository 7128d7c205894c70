"""A Python client for Jobsite's JSON API (httpx): one set of calls, a sync and an async face.

It never imports Django.

with JobsiteClient("http://127.0.0.1:8000", token="js_...") as api:
    job = api.submit("reports.build", 2026, queue="reports")
    for state in api.progress(job["id"]):
        print(state["state"], state["progress"], state["progress_message"])
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from datetime import datetime
from types import EllipsisType
from typing import Any, TypedDict, Unpack
from urllib.parse import quote

import httpx

from engine import Err, Ok, outcome_of, state_vocabulary

from .client_schedules import ScheduleCalls

TERMINAL = frozenset(state_vocabulary()["ended"])


class ApiError(Exception):
    """The API answered with an error status."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class InvalidRequest(ApiError):
    """400 or 422: the request was malformed, or the task or its arguments are wrong."""


class Unauthorized(ApiError):
    """401 or 403: no valid token or staff session (or no CSRF token)."""


class NotFound(ApiError):
    """404: no job (or queue) with that name."""


class Conflict(ApiError):
    """409: the job is not in a state that allows this (or the id exists)."""


class PayloadTooLarge(ApiError):
    """413: the arguments are over the size limit."""


class ServiceUnavailable(ApiError):
    """503: Redis is unavailable; `retry_after_s` says when to try again."""

    def __init__(self, status: int, detail: Any, retry_after_s: float) -> None:
        super().__init__(status, detail)
        self.retry_after_s = retry_after_s


_ERRORS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
}


def _check(response: httpx.Response) -> Any:
    """Return the JSON body of a success; raise the typed error of a failure."""
    if response.status_code < 400:
        return response.json()
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    if response.status_code == 503:
        raise ServiceUnavailable(503, detail, float(response.headers.get("Retry-After", "1")))
    raise _ERRORS.get(response.status_code, ApiError)(response.status_code, detail)


def _body(
    task: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    options: Mapping[str, Any] | None = None,
    **named: Any,
) -> dict[str, Any]:
    given = {**(options or {}), **{k: v for k, v in named.items() if v is not None}}
    for name in ("run_at", "good_until"):
        if isinstance(given.get(name), datetime):
            given[name] = given[name].isoformat()
    return {"task": task, "args": list(args), "kwargs": kwargs, **given}


def callback(task: str, **kwargs: Any) -> dict[str, Any]:
    """Return a callback for `submit`'s on_success and on_failure: `task` called with `kwargs`
    and parent_id (the id of the job it follows), in that job's queue."""
    return {"task": task, "kwargs": kwargs}


def _callback(value: str | Mapping[str, Any] | None) -> dict[str, Any] | None:
    return callback(value) if isinstance(value, str) else None if value is None else dict(value)


def flow_job(
    ref: str,
    task: str,
    *args: Any,
    depends_on: Iterable[str] = (),
    runs_on: str | None = None,
    options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Return one job of a flow for `submit_flow`: `ref` names it, `depends_on` lists the refs
    of its parents (or ids of queued jobs), `runs_on` which end of theirs runs it ("success",
    the default; "failure": an error callback; "end"); `options` takes any option `submit`
    takes."""
    body = _body(task, args, kwargs, options, runs_on=runs_on)
    return {"ref": ref, **body, **({"depends_on": list(depends_on)} if depends_on else {})}


def batch_job(
    task: str, *args: Any, options: Mapping[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """Return one job for `submit_batch`; `options` takes any option `submit` takes."""
    return _body(task, args, kwargs, options)


def _flow(
    jobs: Iterable[Mapping[str, Any]], on_parent_failure: str | None, name: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"jobs": list(jobs)}
    if on_parent_failure is not None:
        body["on_parent_failure"] = on_parent_failure
    if name is not None:
        body["name"] = name
    return body


def _order(action: str, worker: str | None, host: str | None, queue: str | None) -> dict[str, Any]:
    """Return the body of POST /workers/control (selectors left out when not given)."""
    chosen = {"worker": worker, "host": host, "queue": queue}
    return {"action": action, **{k: v for k, v in chosen.items() if v is not None}}


class Chosen(TypedDict, total=False):
    """The history's filters a bulk action selects jobs by (`cancel_many`, `retry_many`)."""

    state: str | None
    queue: str | None
    task: str | None
    task_like: str | None
    q: str | None
    since: datetime | None


class Found(TypedDict, total=False):
    """The history's filters a list or a count takes (`jobs`, `job_counts`); the state aside."""

    queue: str | None
    task: str | None
    task_like: str | None
    q: str | None
    since: datetime | None
    until: datetime | None
    fingerprint: str | None
    ids: Iterable[str] | None


def _params(**given: Any) -> dict[str, str]:
    """Return the query parameters given, None left out: a datetime in ISO 8601, a bool in lower
    case, a collection of ids comma-separated."""
    params = {}
    for key, value in given.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, Iterable) and not isinstance(value, str):
            value = ",".join(value)
        params[key] = str(value)
    return params


def _selection(
    ids: Iterable[str] | None, every: bool, dry_run: bool, **filters: Any
) -> dict[str, Any]:
    """Return the body of POST /bulk/cancel or /bulk/retry: ids, a filter or every job."""
    body: dict[str, Any] = {"dry_run": dry_run} | ({"all": True} if every else {})
    if ids is not None:
        body["ids"] = list(ids)
    for key, value in filters.items():
        if value is not None:
            body[key] = value.isoformat() if isinstance(value, datetime) else value
    return body


def _dead(ids: Iterable[str] | None, dry_run: bool, **chosen: str | None) -> dict[str, Any]:
    """Return the body of POST /dead-letters/resubmit or /purge: ids, a group or a queue."""
    body: dict[str, Any] = {k: v for k, v in chosen.items() if v}
    if ids:
        body["ids"] = list(ids)
    return body | ({"dry_run": True} if dry_run else {})


def _answer(response: httpx.Response) -> Any:
    """Return `_check`'s answer; None for 204 No Content."""
    return None if response.status_code == 204 else _check(response)


def _segment(value: str) -> str:
    """Return `value` as one path segment: percent-encoded, and never a . or .. dot segment."""
    return "%2E" * len(value) if value in (".", "..") else quote(value, safe="")


def _outcome(job: dict[str, Any]) -> Ok | Err:
    """Return how an ended job (the API's JSON) ended: Ok(result) or Err(its newest error)."""
    return outcome_of(job["id"], job["state"], job.get("result"), job.get("errors") or [])


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class _Watch:
    """What `progress` of either client decides after each poll."""

    def __init__(self, job_id: str, timeout_s: float | None) -> None:
        self.job_id = job_id
        self.timeout_s = timeout_s
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.last: tuple[Any, ...] | None = None

    def changed(self, job: dict[str, Any]) -> bool:
        """Tell whether the state or progress moved since the last poll."""
        seen = (job["state"], job.get("progress"), job.get("progress_message"))
        moved, self.last = seen != self.last, seen
        return moved

    def done(self, job: dict[str, Any]) -> bool:
        """Tell whether the job is terminal; raise TimeoutError past the deadline."""
        if job["state"] in TERMINAL:
            return True
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError(f"job {self.job_id} still {job['state']} after {self.timeout_s}s")
        return False


class _Calls(ScheduleCalls):
    """Every request of the API, written once; a face supplies `_send(method, path, body,
    params)`: the sync one returns the answer, the async one an awaitable of it."""

    def submit(
        self,
        task: str,
        *args: Any,
        queue: str | None = None,
        priority: int | None = None,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        ttl_s: float | None = None,
        job_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        on_success: str | Mapping[str, Any] | None = None,
        on_failure: str | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Submit a job; returns it as the API shows it, with the callbacks submitted with it.

        `on_success` and `on_failure` take a task name or `callback(task, **kwargs)`: a job run
        after this one completes, or after it fails for good. `options` takes any other task
        option of POST /jobs (max_retries, timeout_s, deduplication, concurrency_key,
        depends_on ...; docs/api.md).
        """
        named: dict[str, Any] = {"queue": queue, "priority": priority, "delay_s": delay_s}
        named |= {"run_at": run_at}
        named |= {"on_success": _callback(on_success), "on_failure": _callback(on_failure)}
        body = _body(task, args, kwargs, options, ttl_s=ttl_s, job_id=job_id, **named)
        return self._send("POST", "/jobs", body, None)

    def submit_batch(self, jobs: Iterable[Mapping[str, Any]]) -> Any:
        """Submit many jobs (see `batch_job`) in one call, each on its own (a taken job id is a
        Conflict naming it, the others submitted); returns `{"jobs": [{id, task, queue,
        state}]}` in order."""
        return self._send("POST", "/jobs/batch", {"jobs": list(jobs)}, None)

    def submit_flow(
        self,
        jobs: Iterable[Mapping[str, Any]],
        on_parent_failure: str | None = None,
        name: str | None = None,
    ) -> Any:
        """Submit a graph of jobs (see `flow_job`) all or nothing, named `name` if given;
        returns the flow's jobs."""
        return self._send("POST", "/flows", _flow(jobs, on_parent_failure, name), None)

    def queues(self) -> Any:
        """Return every queue you may view: counts per state, paused, oldest waiting job."""
        return self._send("GET", "/queues", None, None)

    def queue(self, name: str) -> Any:
        """Return a queue: counts, paused, rate limit, concurrency keys with jobs waiting."""
        return self._send("GET", f"/queues/{_segment(name)}", None, None)

    def pause_queue(self, name: str) -> Any:
        """Pause a queue: no worker claims from it until it is resumed; returns the queue."""
        return self._send("POST", f"/queues/{_segment(name)}/pause", None, None)

    def resume_queue(self, name: str) -> Any:
        """Resume a paused queue; returns the queue."""
        return self._send("POST", f"/queues/{_segment(name)}/resume", None, None)

    def drain_queue(self, name: str) -> Any:
        """Start cancelling every job waiting in a queue, in the background (jobs submitted
        meanwhile stay); returns the drain as `drain_status` shows it (Conflict while one
        runs)."""
        return self._send("POST", f"/queues/{_segment(name)}/drain", None, None)

    def drain_status(self, name: str) -> Any:
        """Return a queue's last drain: `state` (running, done, failed; none: never drained),
        jobs `waiting` when it began, `cancelled` so far."""
        return self._send("GET", f"/queues/{_segment(name)}/drain", None, None)

    def set_queue_limits(
        self,
        name: str,
        rate_limit: str | EllipsisType | None = ...,
        paused: bool | None = None,
        max_running: int | EllipsisType | None = ...,
    ) -> Any:
        """Set what is given of a queue's limits: its rate limit ("10/s") and its cap on running
        jobs across every worker (None lifts either; left out, it stays), and pause or resume it."""
        body: dict[str, Any] = {} if paused is None else {"paused": paused}
        if not isinstance(rate_limit, EllipsisType):
            body["rate_limit"] = rate_limit
        if not isinstance(max_running, EllipsisType):
            body["max_running"] = max_running
        return self._send("PUT", f"/queues/{_segment(name)}/limits", body, None)

    def deduplication(self, queue: str, dedup_id: str) -> Any:
        """Return which job holds deduplication id `dedup_id` of `queue` (`job_id`, or None)."""
        path = f"/queues/{_segment(queue)}/deduplication/{_segment(dedup_id)}"
        return self._send("GET", path, None, None)

    def free_deduplication(self, queue: str, dedup_id: str) -> Any:
        """Free deduplication id `dedup_id` of `queue`: the next job with it is submitted."""
        path = f"/queues/{_segment(queue)}/deduplication/{_segment(dedup_id)}"
        return self._send("DELETE", path, None, None)

    def get(self, job_id: str) -> Any:
        """Return a job: state, progress, result, errors per attempt, history, checkpoint."""
        return self._send("GET", f"/jobs/{_segment(job_id)}", None, None)

    def cancel(self, job_id: str) -> Any:
        """Cancel a queued or running job."""
        return self._send("DELETE", f"/jobs/{_segment(job_id)}", None, None)

    def retry(self, job_id: str) -> Any:
        """Retry a finished job as a new attempt series."""
        return self._send("POST", f"/jobs/{_segment(job_id)}/retry", None, None)

    def replay(
        self,
        job_id: str,
        args: Iterable[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        """Submit a new job of a job's task, queue and priority with `args` and `kwargs` (each
        left out is the original's; the job may be gone from Redis); returns the new job, its
        `replay_of` the original's id."""
        body: dict[str, Any] = {} if args is None else {"args": list(args)}
        body |= {} if kwargs is None else {"kwargs": dict(kwargs)}
        return self._send("POST", f"/jobs/{_segment(job_id)}/replay", body, None)

    def jobs(
        self,
        *,
        state: str | None = None,
        sort: str | None = None,
        cursor: str | None = None,
        before: str | None = None,
        limit: int = 50,
        **found: Unpack[Found],
    ) -> Any:
        """Return a page of the history, newest submitted first (or in `sort`, such as
        "-duration_seconds"): `{items, next_cursor, prev_cursor}`. Pass a page's `next_cursor`
        as `cursor` for the page after it, its `prev_cursor` as `before` for the page before
        (None: no job lies that way). `task_like` matches part of the task name, `q` searches,
        `since`/`until` bound the submission time, `ids` (at most 100) keeps those jobs."""
        params = _params(state=state, **found, sort=sort, cursor=cursor, before=before, limit=limit)
        return self._send("GET", "/jobs", None, params)

    def job_counts(self, **found: Unpack[Found]) -> Any:
        """Count the history's jobs under the filters `jobs` takes (all but the state):
        `{total, states: {state: n}}`."""
        return self._send("GET", "/job-counts", None, _params(**found))

    def cancel_many(
        self,
        ids: Iterable[str] | None = None,
        *,
        all: bool = False,
        dry_run: bool = False,
        **chosen: Unpack[Chosen],
    ) -> Any:
        """Cancel the live jobs `ids`, or every one the history's filter matches (`all`: every
        job); `dry_run` only counts. Returns `{matched, changed, skipped}`, `skipped` giving
        each reason's count; past JOBSITE["BULK_MAX"] jobs, the background run as `bulk_run`
        shows it (`id`, `state`...)."""
        return self._send("POST", "/bulk/cancel", _selection(ids, all, dry_run, **chosen), None)

    def retry_many(
        self,
        ids: Iterable[str] | None = None,
        *,
        all: bool = False,
        dry_run: bool = False,
        **chosen: Unpack[Chosen],
    ) -> Any:
        """Retry the finished jobs `ids`, or every one the history's filter matches (`all`:
        every job), as `cancel_many` selects them; `{matched, changed, skipped}`."""
        return self._send("POST", "/bulk/retry", _selection(ids, all, dry_run, **chosen), None)

    def bulk_run(self, run_id: int) -> Any:
        """Return a background bulk change: `state` (running, done, failed, interrupted),
        jobs `matched` when it began, `looked_at`, `changed` and `skipped` so far."""
        return self._send("GET", f"/bulk/runs/{_segment(str(run_id))}", None, None)

    def workers(self) -> Any:
        """Return the live workers: queues, concurrency, current jobs, state, memory
        (`rss_mib`), jobs `completed` and `failed`, task `versions`."""
        return self._send("GET", "/workers", None, None)

    def roles(self) -> Any:
        """Return every worker role: its queues, when it changed, the workers following it."""
        return self._send("GET", "/roles", None, None)

    def role(self, name: str) -> Any:
        """Return one worker role."""
        return self._send("GET", f"/roles/{_segment(name)}", None, None)

    def set_role(self, name: str, queues: list[str]) -> Any:
        """Create or replace a worker role; its running workers claim from `queues` (in order)
        within a second, without a restart. Returns the role."""
        return self._send("PUT", f"/roles/{_segment(name)}", {"queues": list(queues)}, None)

    def delete_role(self, name: str) -> Any:
        """Delete a worker role (its workers keep their last queues); returns None."""
        return self._send("DELETE", f"/roles/{_segment(name)}", None, None)

    def control_workers(
        self,
        action: str,
        worker: str | None = None,
        host: str | None = None,
        queue: str | None = None,
    ) -> Any:
        """Quiet, resume or stop one worker, every worker of a host or of a queue (exactly one
        of them); return `{"action", "workers": [ids told]}`. They obey within a second."""
        return self._send("POST", "/workers/control", _order(action, worker, host, queue), None)

    def dlq(
        self,
        queue: str = "default",
        task: str | None = None,
        version: int | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> Any:
        """Return dead letters of a queue, oldest first; only of `task` (and `version`)."""
        params = {"queue": queue, "offset": str(offset), "limit": str(limit)}
        params |= {"task": task} if task else {}
        params |= {"version": str(version)} if version else {}
        return self._send("GET", "/dead-letters/jobs", None, params)

    def dead_letter_groups(self, queue: str | None = None, task: str | None = None) -> Any:
        """Return the dead letters of the history grouped by error fingerprint, largest group
        first: count, first and last seen, tasks, queues, a sample error, `cannot_run`."""
        return self._send("GET", "/dead-letters", None, _params(queue=queue, task=task))

    def dead_letter_counts(self, queue: str | None = None) -> Any:
        """Return per queue its dead letters in Redis (`in_redis`) and in the history
        (`in_history`), and the ids without a history row yet (`without_row`)."""
        return self._send("GET", "/dead-letters/counts", None, _params(queue=queue))

    def resubmit_dlq(
        self,
        queue: str | None = "default",
        ids: list[str] | None = None,
        task: str | None = None,
        *,
        fingerprint: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Resubmit dead letters of a queue by ids (those its dead-letter queue holds), a group
        (`fingerprint`, narrowed to `queue` and `task`; queue None: every queue), or every one
        of a task (or all); `dry_run` only counts. `{"matched", "changed", "skipped"}`, and when
        some were resubmitted `ids`, `since`, `counts_url` and `jobs_url` to follow them; a group
        past JOBSITE["BULK_MAX"] jobs, the background run as `bulk_run` shows it."""
        body = _dead(ids, dry_run, queue=queue, task=task, fingerprint=fingerprint)
        return self._send("POST", "/dead-letters/resubmit", body, None)

    def purge_dlq(
        self,
        queue: str | None,
        ids: list[str] | None = None,
        *,
        fingerprint: str | None = None,
        task: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Delete dead letters of a queue by id, or a group (`fingerprint`, narrowed to `queue`
        and `task` when given), from Redis and the history; `dry_run` only counts. `{"matched",
        "changed", "skipped"}` (ids not in its dead-letter queue are skipped); a group past
        JOBSITE["BULK_MAX"] jobs, the background run as `bulk_run` shows it."""
        body = _dead(ids, dry_run, queue=queue, task=task, fingerprint=fingerprint)
        return self._send("POST", "/dead-letters/purge", body, None)

    def mute_dead_letter_group(
        self, fingerprint: str, queue: str = "default", for_s: int | None = None, reason: str = ""
    ) -> Any:
        """Mute a dead-letter group in `queue` for `for_s` seconds (None: until unmuted): its
        dead letters are still recorded and counted but raise no alert. Returns the mute
        (`until`, `muted_by`, `muted_at`, `reason`); a new mute replaces the old."""
        body = {"queue": queue, "for_s": for_s, "reason": reason}
        return self._send("POST", f"/dead-letters/groups/{_segment(fingerprint)}/mute", body, None)

    def unmute_dead_letter_group(self, fingerprint: str, queue: str = "default") -> Any:
        """Unmute a dead-letter group in `queue`: its dead letters alert again. Returns None
        (NotFound when it was not muted there)."""
        path = f"/dead-letters/groups/{_segment(fingerprint)}/mute"
        return self._send("DELETE", path, None, {"queue": queue})

    def scheduled(
        self,
        queue: str | None = None,
        retrying: bool | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> Any:
        """Return jobs waiting for their time, next due first; `retrying` True: only retries
        in their backoff, False: only the others."""
        params = {"offset": str(offset), "limit": str(limit)}
        params |= {"queue": queue} if queue else {}
        params |= {} if retrying is None else {"retrying": str(retrying).lower()}
        return self._send("GET", "/scheduled", None, params)

    def run_now(self, job_id: str) -> Any:
        """Run a scheduled job (a run_at ahead, or a retry's backoff) now; returns the job."""
        return self._send("POST", f"/jobs/{_segment(job_id)}/run-now", None, None)

    def run_now_many(self, queue: str, ids: list[str]) -> Any:
        """Run scheduled jobs of a queue now; `{"matched", "changed", "skipped"}`."""
        return self._send("POST", "/bulk/run-now", {"queue": queue, "ids": ids}, None)

    def clear_queue(self, queue: str, state: str, dry_run: bool = False) -> Any:
        """Delete a queue's finished jobs of one state from Redis (the history keeps them);
        `{"queue", "state", "count", "dry_run", "history_kept"}`."""
        body = {"state": state, "dry_run": dry_run}
        return self._send("POST", f"/queues/{_segment(queue)}/clear", body, None)

    def health(self) -> Any:
        """Return each queue's verdict, each schedule's state and Redis memory and uptime."""
        return self._send("GET", "/health", None, None)

    def scaling(self) -> Any:
        """Return per queue what an autoscaler reads: `runnable` jobs, `oldest_runnable_s`, live
        `worker_slots`, `runnable_per_slot`, `waiting_for_version`."""
        return self._send("GET", "/scaling", None, None)

    def stats(self, minutes: int = 60) -> Any:
        """Return completed and failed jobs per minute over the last `minutes` (at most 1440)."""
        return self._send("GET", "/stats", None, _params(minutes=minutes))

    def charts(self, range: str = "hour", queue: str | None = None, task: str | None = None) -> Any:
        """Return the dashboard's charts over the last "hour", "day" or "week": throughput,
        queue wait and run time p50/p95, queue depth, per point (`t`)."""
        return self._send("GET", "/charts", None, _params(range=range, queue=queue, task=task))

    def task_stats(self, range: str = "day", queue: str | None = None) -> Any:
        """Return per task over the last "hour", "day" or "week": completed, failed,
        `failure_rate`, `run_p50_ms` and `run_p95_ms`, busiest first."""
        return self._send("GET", "/task-stats", None, _params(range=range, queue=queue))

    def tasks(self) -> Any:
        """Return every registered task with its options and its arguments' JSON schema."""
        return self._send("GET", "/tasks", None, None)

    def flows(self, queue: str | None = None, limit: int = 50, name: str | None = None) -> Any:
        """Return the newest flows with their jobs per state (`name`: whose name holds it)."""
        params = _params(queue=queue, name=name, limit=limit)
        return self._send("GET", "/flows", None, params)

    def flow(self, flow_id: str) -> Any:
        """Return one flow with every job's state."""
        return self._send("GET", f"/flows/{_segment(flow_id)}", None, None)


class JobsiteClient(_Calls):
    """The client's synchronous face."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers=_headers(token),
            timeout=timeout_s,
            transport=transport,
        )

    def __enter__(self) -> JobsiteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def _send(self, method: str, path: str, body: Any, params: dict[str, str] | None) -> Any:
        return _answer(self.http.request(method, path, json=body, params=params))

    def why(self, job_id: str) -> list[dict[str, Any]]:
        """Return why a job has not started, in order (code, message, link...); [] once it has."""
        return self.get(job_id).get("waiting", [])  # type: ignore[no-any-return]

    def checkpoint(self, job_id: str) -> Any:
        """Return the state the job's task last saved with `checkpoint()` (None: none)."""
        return self.get(job_id).get("checkpoint")

    def progress(
        self, job_id: str, poll_s: float = 0.5, timeout_s: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """Yield the job each time its state or progress changes, until a terminal state."""
        watch = _Watch(job_id, timeout_s)
        while True:
            job = self.get(job_id)
            if watch.changed(job):
                yield job
            if watch.done(job):
                return
            time.sleep(poll_s)

    def wait(self, job_id: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> dict[str, Any]:
        """Wait for a terminal state; raise TimeoutError after `timeout_s`."""
        last: dict[str, Any] = {}
        for state in self.progress(job_id, poll_s, timeout_s):
            last = state
        return last

    def outcome(self, job_id: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> Ok | Err:
        """Wait for the job to end; return Ok(its result) or Err(how it ended otherwise, an
        `engine.JobError`). Not ended after `timeout_s`: TimeoutError, as `wait`."""
        return _outcome(self.wait(job_id, timeout_s, poll_s))

    def result(self, job_id: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> Any:
        """Wait for the job to end; return its result, or raise `engine.JobFailed`."""
        return self.outcome(job_id, timeout_s, poll_s).unwrap()


class AsyncJobsiteClient(_Calls):
    """The client's asynchronous face: the same methods, awaited."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers=_headers(token),
            timeout=timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> AsyncJobsiteClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def _send(self, method: str, path: str, body: Any, params: dict[str, str] | None) -> Any:
        return _answer(await self.http.request(method, path, json=body, params=params))

    async def why(self, job_id: str) -> list[dict[str, Any]]:
        """Return why a job has not started, in order (code, message, link...); [] once it has."""
        return (await self.get(job_id)).get("waiting", [])  # type: ignore[no-any-return]

    async def checkpoint(self, job_id: str) -> Any:
        """Return the state the job's task last saved with `checkpoint()` (None: none)."""
        return (await self.get(job_id)).get("checkpoint")

    async def progress(
        self, job_id: str, poll_s: float = 0.5, timeout_s: float | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the job each time its state or progress changes, until a terminal state."""
        watch = _Watch(job_id, timeout_s)
        while True:
            job = await self.get(job_id)
            if watch.changed(job):
                yield job
            if watch.done(job):
                return
            await asyncio.sleep(poll_s)

    async def wait(
        self, job_id: str, timeout_s: float = 30.0, poll_s: float = 0.2
    ) -> dict[str, Any]:
        """Wait for a terminal state; raise TimeoutError after `timeout_s`."""
        last: dict[str, Any] = {}
        async for state in self.progress(job_id, poll_s, timeout_s):
            last = state
        return last

    async def outcome(self, job_id: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> Ok | Err:
        """Wait for the job to end; return Ok or Err, as the sync client's `outcome`."""
        return _outcome(await self.wait(job_id, timeout_s, poll_s))

    async def result(self, job_id: str, timeout_s: float = 30.0, poll_s: float = 0.2) -> Any:
        """Wait for the job to end; return its result, or raise `engine.JobFailed`."""
        return (await self.outcome(job_id, timeout_s, poll_s)).unwrap()
