"""The JSON API (django-ninja Router, mounted under /api/v1/ by apiroot.py).

Operations that reach Redis are async views on the services' async twins; those that only read
the history (list, stats) or nothing (tasks) stay sync.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any, Literal

from django.db.models import Count, QuerySet
from django.http import HttpRequest
from ninja import Query, Router, Status
from ninja.errors import HttpError

from engine import WAITING_STATES, InvalidArguments, JobNotFound, JobState, Task, version_tag
from engine import Job as EngineJob
from jobsite.jobs import audit, services
from jobsite.jobs.api import bulk, related
from jobsite.jobs.api import options as taskoptions
from jobsite.jobs.api.live import throughput
from jobsite.jobs.api.replays import areplays_of
from jobsite.jobs.api.schemas import (
    BulkIn,
    BulkOut,
    CancelOut,
    CountOut,
    ErrorOut,
    EventOut,
    JobCountsOut,
    JobDetailOut,
    JobIn,
    JobOut,
    JobPage,
    LogLineOut,
    PurgeIn,
    ResubmitIn,
    StatsPoint,
    TaskOut,
    WaitingOut,
    WorkerOut,
)
from jobsite.jobs.api.waiting import reasons_out
from jobsite.jobs.arguments import check_types, schema
from jobsite.jobs.models import DEAD, JobRecord
from jobsite.jobs.permissions import Perm, aneed, need
from jobsite.jobs.search import text_search
from jobsite.jobs.tasks.registry import known_tasks

router = Router(tags=["jobs"])
ERRORS: dict[int, Any] = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    503: ErrorOut,
}


def _task(name: str) -> Task:
    task = known_tasks().get(name)
    if task is None:
        raise HttpError(422, f"unknown task {name!r}; see GET /api/v1/tasks")
    return task


@router.post("/jobs", response={201: JobOut, **ERRORS})
async def submit(request: HttpRequest, body: JobIn) -> Status[JobOut]:
    """Submit a job; arguments are checked against the task before anything reaches Redis."""
    rights = await aneed(request, Perm.SUBMIT)
    task = _task(body.task)
    await rights.arequire(Perm.SUBMIT, body.queue or task.options.queue)
    check_types(task, body.args, body.kwargs)
    try:
        task = taskoptions.apply(task, body)
    except taskoptions.BadOptions as exc:
        raise HttpError(422, str(exc)) from None
    try:
        job = await services.aenqueue(task, *body.args, **body.kwargs)
    except InvalidArguments as exc:
        raise HttpError(422, str(exc)) from None
    await audit.arecord(rights.user, "submit", [job.id], rights.via)
    if job.repeat_every_s is not None:  # a schedule: its first run is not in Redis yet
        return Status(201, await _out(_engine_values(job), job.id, JobOut))
    return Status(201, await _live_out(job.id, job.queue, JobOut))


async def _live_out[Out: JobOut](job_id: str, queue: str | None, schema: type[Out]) -> Out:
    """Return a job live from Redis, with its history (JobNotFound when Redis has none)."""
    return await _out(_engine_values(await services.aget_job(job_id, queue)), job_id, schema)


def _dt(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _engine_values(job: EngineJob) -> dict[str, Any]:
    """Return JobOut fields of a live engine job."""
    values = {f: getattr(job, f, None) for f in JobOut.model_fields if f != "history"}
    values.update(
        state=str(job.state), worker=job.worker or "", progress_message=job.progress_message or ""
    )
    values.update(logs=job.logs, logs_dropped=job.logs_dropped or 0)
    values.update(fingerprint=job.fingerprint or "", replay_of=job.replay_of or "")
    aside_ms = job.extra.get("unserved_at_ms")
    if aside_ms:  # waits for a worker with its task version (engine/versions.py)
        values.update(
            waiting_for_version=version_tag(job.task, job.version),
            waiting_for_version_since=_dt(int(aside_ms)),
        )
    for name in (
        "submitted_at",
        "claimed_at",
        "started_at",
        "retried_at",
        "completed_at",
        "run_at",
    ):
        values[name] = _dt(getattr(job, f"{name}_ms"))
    values["max_retries"] = job.options.get("max_retries")
    if job.state is JobState.STARTED:
        values["phase"] = "running" if job.begun == "1" else "claimed"
    return values


def _history(row: JobRecord | None) -> list[EventOut]:
    """Return the state changes the history holds for a job (none when it has no row)."""
    return [
        EventOut(
            at=t["at"],
            from_state=t.get("from", ""),
            to_state=t.get("to", ""),
            attempt=t.get("attempt", 0),
            worker=t.get("worker", ""),
            error=t.get("error", ""),
        )
        for t in (row.timeline() if row is not None else [])
    ]


def _log_lines(raw: Any) -> list[LogLineOut]:
    """Return the well-formed lines of a stored log (anything else is left out)."""
    lines = raw if isinstance(raw, list) else []
    return [
        LogLineOut(at_ms=x["at_ms"], attempt=x["attempt"], message=x["message"])
        for x in lines
        if isinstance(x, dict)
        and isinstance(x.get("at_ms"), int)
        and isinstance(x.get("attempt"), int)
        and isinstance(x.get("message"), str)
    ]


def _ended(values: dict[str, Any]) -> dict[str, Any]:
    """Return the fields told by a job's end and its task: failed_at or cancelled_at, the last
    attempt's duration, the retries its task allows, its newest error's message."""
    state, end = values.get("state"), values.get("completed_at")
    begun = values.get("retried_at") or values.get("started_at")
    errors = values.get("errors") or []
    last = errors[-1] if errors and isinstance(errors[-1], dict) else {}
    task = known_tasks().get(values.get("task") or "")
    retries = values.get("max_retries")
    return {
        "failed_at": end if state in DEAD else None,
        "cancelled_at": end if state == "cancelled" else None,
        "duration_seconds": (end - begun).total_seconds() if end and begun else None,
        "max_retries": retries if retries is not None else task and task.options.max_retries,
        "error": last.get("message"),
    }


def _fields(schema: type[JobOut], values: dict[str, Any]) -> dict[str, Any]:
    """Return the values `schema` takes, its log lines checked."""
    values = {**values, **_ended(values)}
    fields = {k: v for k, v in values.items() if k in schema.model_fields}
    if "logs" in fields:
        fields["logs"] = _log_lines(fields["logs"])
    return fields


async def _out[Out: JobOut](values: dict[str, Any], job_id: str, schema: type[Out]) -> Out:
    row = await JobRecord.objects.filter(id=job_id).only("transitions").afirst()
    return schema(**_fields(schema, values), history=_history(row))


async def _row_out[Out: JobOut](row: JobRecord, schema: type[Out]) -> Out:
    wanted = [f for f in schema.model_fields if f not in related.GRAPH]
    values = {f: getattr(row, f) for f in wanted if hasattr(row, f)}
    return schema(**_fields(schema, values), history=_history(row))


@router.get("/jobs/{job_id}", response={200: JobDetailOut, **ERRORS})
async def get_job(request: HttpRequest, job_id: str) -> JobDetailOut:
    """Return a job with its log: live from Redis, else from the history; 404 for an unknown id."""
    rights = await aneed(request, Perm.VIEW)
    source: EngineJob | JobRecord | None
    try:
        source = await services.aget_job(job_id)
        job = await _out(_engine_values(source), job_id, JobDetailOut)
    except JobNotFound:
        source = await JobRecord.objects.filter(id=job_id).afirst()
        if source is None:
            raise HttpError(404, f"no job with id {job_id!r}") from None
        job = await _row_out(source, JobDetailOut)
    await rights.arequire(Perm.VIEW, job.queue)
    job.replays = await areplays_of(job_id)
    if isinstance(source, EngineJob) and source.state in WAITING_STATES:
        reasons = await services.aexplain_job(job_id, source.queue)
        job.waiting = [WaitingOut(**r) for r in reasons_out(reasons, source.queue)]
    return await related.afill(job, *related.links(source))


# The columns a list item is made of; the fields told by a job's end come from them (_ended).
DERIVED = ("failed_at", "cancelled_at", "duration_seconds", "max_retries", "error", "phase")
LISTED = [f for f in JobOut.model_fields if f != "history" and f not in DERIVED]


# The orders the list offers: a time column, newest ("-") or oldest first; ties by id.
Sort = Literal[
    "-submitted_at", "submitted_at", "-started_at", "started_at", "-completed_at", "completed_at"
]


def _cursor(sort: str, at: datetime | None, job_id: str) -> str:
    raw = f"{sort}|{at.isoformat() if at else ''}|{job_id}"
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _after(rows: QuerySet[JobRecord], sort: str, cursor: str) -> QuerySet[JobRecord]:
    """Return the rows after the cursor's row in the order `sort` (422 for a foreign cursor)."""
    try:
        made_for, stamp, last_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 2)
        at = datetime.fromisoformat(stamp)
    except ValueError:
        raise HttpError(422, "invalid cursor") from None
    if made_for != sort:
        raise HttpError(422, f"this cursor pages the order {made_for!r}, not {sort!r}")
    field = sort.lstrip("-")
    # A plain range on the time first, so the index serves the page (an OR would not).
    if sort.startswith("-"):
        return rows.filter(**{f"{field}__lte": at}).exclude(**{field: at, "id__gte": last_id})
    return rows.filter(**{f"{field}__gte": at}).exclude(**{field: at, "id__lte": last_id})


def _listed(
    request: HttpRequest,
    queue: str | None,
    task: str | None,
    task_like: str | None,
    q: str | None,
    since: datetime | None,
    until: datetime | None,
    fingerprint: str | None = None,
) -> QuerySet[JobRecord]:
    """Return the history rows the list's filters (all but the state) select, for this user."""
    rows = need(request, Perm.VIEW, queue).narrow(JobRecord.objects.all())
    filters = {
        "queue": queue,
        "task": task,
        "task__icontains": task_like,
        "fingerprint": fingerprint,
        "submitted_at__gte": since,
        "submitted_at__lt": until,
    }
    rows = rows.filter(**{k: v for k, v in filters.items() if v is not None})
    return text_search(rows, q) if q else rows


@router.get("/jobs", response={200: JobPage, **ERRORS})
def list_jobs(
    request: HttpRequest,
    state: str | None = None,
    queue: str | None = None,
    task: str | None = None,
    task_like: str | None = Query(None, min_length=1, max_length=255),  # type: ignore[type-arg]
    q: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    fingerprint: str | None = Query(None, max_length=32),  # type: ignore[type-arg]
    sort: Sort = "-submitted_at",
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=500),  # type: ignore[type-arg]
) -> JobPage:
    """List the history with filters, in a time order (newest submitted first by default),
    with an opaque cursor. `task_like` matches part of the task name (any case); `fingerprint`
    keeps one dead-letter group; sorting by started_at or completed_at lists the jobs that have
    that time."""
    rows = _listed(request, queue, task, task_like, q, since, until, fingerprint)
    if state is not None:
        rows = rows.filter(state=state)
    field = sort.lstrip("-")
    if field != "submitted_at":
        rows = rows.filter(**{f"{field}__isnull": False})
    rows = rows.order_by(sort, "-id" if sort.startswith("-") else "id")
    if cursor:
        rows = _after(rows, sort, cursor)
    # Plain values of the listed columns: no model instances, no decoding of what the list
    # leaves out (transitions, logs).
    page = list(rows.values(*LISTED)[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_cursor = _cursor(sort, page[-1][field], page[-1]["id"]) if more and page else None
    items = [{**row, **_ended(row)} for row in page]
    return JobPage.model_validate({"items": items, "next_cursor": next_cursor})


@router.get("/job-counts", response={200: JobCountsOut, **ERRORS})
def count_jobs(
    request: HttpRequest,
    queue: str | None = None,
    task: str | None = None,
    task_like: str | None = Query(None, min_length=1, max_length=255),  # type: ignore[type-arg]
    q: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    fingerprint: str | None = Query(None, max_length=32),  # type: ignore[type-arg]
) -> JobCountsOut:
    """Count the history's jobs per state under the list's filters (all but the state)."""
    rows = _listed(request, queue, task, task_like, q, since, until, fingerprint)
    per_state = dict(rows.order_by().values_list("state").annotate(n=Count("id")))
    return JobCountsOut(total=sum(per_state.values()), states=per_state)


@router.delete("/jobs/{job_id}", response={202: CancelOut, **ERRORS})
async def cancel(request: HttpRequest, job_id: str) -> Status[CancelOut]:
    """Cancel a queued or running job."""
    rights = await aneed(request, Perm.CANCEL)
    try:
        queue = (await services.aget_job(job_id)).queue
    except JobNotFound:
        raise HttpError(404, f"no live job with id {job_id!r}") from None
    await rights.arequire(Perm.CANCEL, queue)
    outcome = (await services.acancel([(job_id, queue)]))[job_id]
    if outcome == "not_found":
        raise HttpError(404, f"no live job with id {job_id!r}")
    if outcome == "finished":
        raise HttpError(409, "the job already finished")
    await audit.arecord(rights.user, "cancel", [job_id], rights.via, outcome=outcome)
    job = await _live_out(job_id, queue, JobOut)
    return Status(202, CancelOut(**job.model_dump(), outcome=outcome))


@router.post("/jobs/{job_id}/retry", response={200: JobOut, **ERRORS})
async def retry(request: HttpRequest, job_id: str) -> JobOut:
    """Retry a finished job (failed, stalled, expired, dropped, cancelled) as a new series."""
    rights = await aneed(request, Perm.RETRY)
    try:
        job = await services.aget_job(job_id)
    except JobNotFound:
        raise HttpError(404, f"no job with id {job_id!r} in Redis") from None
    await rights.arequire(Perm.RETRY, job.queue)
    if await services.aresubmit([(job_id, job.queue)]) != 1:
        raise HttpError(409, f"a {job.state} job cannot be retried")
    await audit.arecord(rights.user, "retry", [job_id], rights.via)
    return await _live_out(job_id, job.queue, JobOut)


@router.post("/bulk/cancel", response={200: BulkOut, **ERRORS})
async def cancel_many(request: HttpRequest, body: BulkIn) -> BulkOut:
    """Cancel the given live jobs, or every one matching the filter (`dry_run` counts only)."""
    return await bulk.aapply(request, body, Perm.CANCEL, "cancel")


@router.post("/bulk/retry", response={200: BulkOut, **ERRORS})
async def retry_many(request: HttpRequest, body: BulkIn) -> BulkOut:
    """Retry (or resubmit from the DLQ) the given finished jobs, or every one matching."""
    return await bulk.aapply(request, body, Perm.RETRY, "retry")


@router.get("/dlq", response={200: list[JobOut], **ERRORS})
async def dlq(
    request: HttpRequest,
    queue: str = "default",
    offset: int = Query(0, ge=0, le=10_000_000),  # type: ignore[type-arg]
    limit: int = Query(100, ge=1, le=1000),
    task: str | None = Query(None, min_length=1, max_length=255),  # type: ignore[type-arg]
    version: int | None = Query(None, ge=1, le=1_000_000),  # type: ignore[type-arg]
) -> list[JobOut]:  # type: ignore[type-arg]
    """List the dead-letter queue of a queue, oldest first; only `task` (and `version`)."""
    await aneed(request, Perm.VIEW, queue)
    jobs = await services.adlq(queue, offset, limit, task=task, version=version)
    return [JobOut(**_fields(JobOut, _engine_values(j))) for j in jobs]


@router.post("/dlq/purge", response={200: CountOut, **ERRORS})
async def dlq_purge(request: HttpRequest, body: PurgeIn) -> CountOut:
    """Delete jobs of a queue's dead-letter queue by id (ids not in it are left alone)."""
    rights = await aneed(request, Perm.PURGE, body.queue)
    dead = await services.ain_dlq(body.queue, body.ids)
    chosen = [i for i in body.ids if i in dead]
    count = await services.apurge([(i, body.queue) for i in chosen]) if chosen else 0
    await audit.arecord(rights.user, "purge", chosen, rights.via)
    return CountOut(count=count)


@router.post("/dlq/resubmit", response={200: CountOut, **ERRORS})
async def dlq_resubmit(request: HttpRequest, body: ResubmitIn) -> CountOut:
    """Resubmit DLQ jobs by ids, or every one of a task (or all) in a queue."""
    rights = await aneed(request, Perm.RETRY, body.queue)
    count = await services.aresubmit_dlq(body.queue, ids=body.ids, task=body.task)
    if body.ids is not None:
        await audit.arecord(rights.user, "resubmit", body.ids, rights.via)
    else:
        selector = {"queue": body.queue, "task": body.task, "dlq": True}
        await audit.arecord_bulk(rights.user, "resubmit", selector, count, rights.via)
    return CountOut(count=count)


@router.get("/workers", response={200: list[WorkerOut], **ERRORS})
async def workers(request: HttpRequest) -> list[WorkerOut]:
    """Live workers and what each runs."""
    rights = await aneed(request, Perm.VIEW)
    return [
        WorkerOut(**{k: w[k] for k in WorkerOut.model_fields if k in w})
        for w in rights.narrow_workers(await services.aworkers())
    ]


@router.get("/stats", response={200: list[StatsPoint], **ERRORS})
def stats(request: HttpRequest, minutes: int = Query(60, ge=1, le=1440)) -> list[StatsPoint]:  # type: ignore[type-arg]
    """Completed and failed jobs per minute over the last `minutes`."""
    rights = need(request, Perm.VIEW)
    return [StatsPoint(**r) for r in throughput(minutes, rights.queues)]


@router.get("/tasks", response={200: list[TaskOut], **ERRORS})
def tasks(request: HttpRequest) -> list[TaskOut]:
    """Every registered task with its options and its argument schema."""
    need(request, Perm.VIEW)
    return [
        TaskOut(
            name=t.name,
            version=t.version,
            queue=t.options.queue,
            priority=t.options.priority,
            max_retries=t.options.max_retries,
            timeout_s=t.options.timeout_s,
            arguments=schema(t),
        )
        for t in sorted(known_tasks().values(), key=lambda t: t.name)
    ]
