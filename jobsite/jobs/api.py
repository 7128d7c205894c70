"""The JSON API (django-ninja Router, mounted under /api/v1/ by jobsite/api.py)."""

from __future__ import annotations

import base64
import inspect
from datetime import UTC, datetime
from typing import Any

from django.db.models import Min
from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Status
from ninja.errors import HttpError
from pydantic import TypeAdapter

from engine import Client, InvalidArguments, JobNotFound, Task
from engine import Job as EngineJob

from . import services
from .live import throughput
from .models import Job, JobEvent, text_search
from .registry import known_tasks
from .schemas import (
    BulkIn,
    BulkOut,
    CancelOut,
    CountOut,
    ErrorOut,
    EventOut,
    JobIn,
    JobOut,
    JobPage,
    QueueOut,
    ResubmitIn,
    StatsPoint,
    TaskOut,
    WorkerOut,
)

router = Router(tags=["jobs"])
ERRORS: dict[int, Any] = {
    400: ErrorOut,
    401: ErrorOut,
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
def submit(request: HttpRequest, body: JobIn) -> Status[JobOut]:
    """Submit a job; arguments are checked against the task before anything reaches Redis."""
    task = _task(body.task)
    options: dict[str, Any] = {
        k: v
        for k, v in (("queue", body.queue), ("priority", body.priority), ("ttl_s", body.ttl_s))
        if v is not None
    }
    task = task.using(delay_s=body.delay_s, run_at=body.run_at, job_id=body.job_id, **options)
    try:
        job = services.enqueue(task, *body.args, **body.kwargs)
    except InvalidArguments as exc:
        raise HttpError(422, str(exc)) from None
    return Status(201, _live_out(job.id, job.queue))


def _live_out(job_id: str, queue: str | None = None) -> JobOut:
    async def fetch(client: Client) -> EngineJob:
        return await client.get(job_id, queue)

    return _out(_engine_values(services.run_engine(fetch)), job_id)


def _dt(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _engine_values(job: EngineJob) -> dict[str, Any]:
    """Return JobOut fields of a live engine job."""
    values = {f: getattr(job, f, None) for f in JobOut.model_fields if f != "history"}
    values.update(
        state=str(job.state), worker=job.worker or "", progress_message=job.progress_message or ""
    )
    for name in ("submitted_at", "started_at", "completed_at", "run_at"):
        values[name] = _dt(getattr(job, f"{name}_ms"))
    return values


def _out(values: dict[str, Any], job_id: str) -> JobOut:
    history = [
        EventOut(
            at=e.at,
            from_state=e.from_state,
            to_state=e.to_state,
            attempt=e.attempt,
            worker=e.worker,
            error=e.error,
        )
        for e in JobEvent.objects.filter(job_id=job_id).order_by("event_id")[:500]
    ]
    return JobOut(**{k: v for k, v in values.items() if k in JobOut.model_fields}, history=history)


def _row_out(row: Job) -> JobOut:
    return _out({f: getattr(row, f) for f in JobOut.model_fields if hasattr(row, f)}, row.id)


@router.get("/jobs/{job_id}", response={200: JobOut, **ERRORS})
def get_job(request: HttpRequest, job_id: str) -> JobOut:
    """Return a job: live from Redis, else from the history; 404 for an id nobody knows."""
    try:
        return _live_out(job_id)
    except JobNotFound:
        row = Job.objects.filter(id=job_id).first()
        if row is None:
            raise HttpError(404, f"no job with id {job_id!r}") from None
        return _row_out(row)


def _cursor(row: Job) -> str:
    raw = f"{row.submitted_at.isoformat() if row.submitted_at else ''}|{row.id}"
    return base64.urlsafe_b64encode(raw.encode()).decode()


@router.get("/jobs", response={200: JobPage, **ERRORS})
def list_jobs(
    request: HttpRequest,
    state: str | None = None,
    queue: str | None = None,
    task: str | None = None,
    q: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=500),  # type: ignore[type-arg]
) -> JobPage:
    """List the history, newest first, with filters and an opaque cursor."""
    rows = Job.objects.order_by("-submitted_at", "-id")
    filters = {
        "state": state,
        "queue": queue,
        "task": task,
        "submitted_at__gte": since,
        "submitted_at__lt": until,
    }
    rows = rows.filter(**{k: v for k, v in filters.items() if v is not None})
    if q:
        rows = text_search(rows, q)
    if cursor:
        try:
            stamp, _, last_id = base64.urlsafe_b64decode(cursor.encode()).decode().partition("|")
            at = datetime.fromisoformat(stamp)
        except ValueError:
            raise HttpError(422, "invalid cursor") from None
        # A plain range on submitted_at first, so the index serves the page (an OR would not).
        rows = rows.filter(submitted_at__lte=at).exclude(submitted_at=at, id__gte=last_id)
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    items = [
        JobOut(**{f: getattr(r, f) for f in JobOut.model_fields if f != "history"}) for r in page
    ]
    return JobPage(items=items, next_cursor=_cursor(page[-1]) if more and page else None)


@router.delete("/jobs/{job_id}", response={202: CancelOut, **ERRORS})
def cancel(request: HttpRequest, job_id: str) -> Status[CancelOut]:
    """Cancel a queued or running job."""

    async def call(client: Client) -> dict[str, str]:
        return await client.cancel([job_id])

    outcome = services.run_engine(call)[job_id]
    if outcome == "not_found":
        raise HttpError(404, f"no live job with id {job_id!r}")
    if outcome == "finished":
        raise HttpError(409, "the job already finished")
    return Status(202, CancelOut(id=job_id, outcome=outcome))


@router.post("/jobs/{job_id}/retry", response={200: JobOut, **ERRORS})
def retry(request: HttpRequest, job_id: str) -> JobOut:
    """Retry a finished job (failed, stalled, expired, dropped, cancelled) as a new series."""
    try:
        job = _live_out(job_id)
    except JobNotFound:
        raise HttpError(404, f"no job with id {job_id!r} in Redis") from None
    if services.resubmit([(job_id, job.queue)]) != 1:
        raise HttpError(409, f"a {job.state} job cannot be retried")
    return _live_out(job_id, job.queue)


def _matching(body: BulkIn, states: list[str]) -> list[tuple[str, str]]:
    rows = Job.objects.filter(state__in=states)
    if body.ids is not None:
        rows = rows.filter(id__in=body.ids)
    filters = {"state": body.state, "queue": body.queue, "task": body.task}
    rows = rows.filter(**{k: v for k, v in filters.items() if v})
    if body.q:
        rows = text_search(rows, body.q)
    return list(rows.values_list("id", "queue")[:100_000])


@router.post("/bulk/cancel", response={200: BulkOut, **ERRORS})
def cancel_many(request: HttpRequest, body: BulkIn) -> BulkOut:
    """Cancel the given jobs, or every live job matching the filter (`dry_run` counts only)."""
    pairs = _matching(body, ["submitted", "scheduled", "blocked", "started"])
    if body.dry_run:
        return BulkOut(matched=len(pairs), changed=0)
    outcome = services.cancel(pairs)
    changed = sum(1 for v in outcome.values() if v in ("cancelled", "cancelling"))
    return BulkOut(matched=len(pairs), changed=changed)


@router.post("/bulk/retry", response={200: BulkOut, **ERRORS})
def retry_many(request: HttpRequest, body: BulkIn) -> BulkOut:
    """Retry (or resubmit from the DLQ) the given finished jobs, or every one matching."""
    pairs = _matching(body, ["failed", "stalled", "expired", "dropped", "cancelled"])
    if body.dry_run:
        return BulkOut(matched=len(pairs), changed=0)
    return BulkOut(matched=len(pairs), changed=services.resubmit(pairs))


@router.get("/dlq", response={200: list[JobOut], **ERRORS})
def dlq(
    request: HttpRequest,
    queue: str = "default",
    offset: int = Query(0, ge=0, le=10_000_000),  # type: ignore[type-arg]
    limit: int = Query(100, ge=1, le=1000),
) -> list[JobOut]:  # type: ignore[type-arg]
    """List the dead-letter queue of a queue, oldest first."""

    async def call(client: Client) -> list[EngineJob]:
        return await client.dlq(queue, offset, limit)

    return [JobOut(**_engine_values(j)) for j in services.run_engine(call)]


@router.post("/dlq/resubmit", response={200: CountOut, **ERRORS})
def dlq_resubmit(request: HttpRequest, body: ResubmitIn) -> CountOut:
    """Resubmit DLQ jobs by ids, or every one of a task (or all) in a queue."""

    async def call(client: Client) -> int:
        if body.ids is not None:
            return await client.resubmit(body.queue, body.ids)
        return await client.resubmit_dlq(body.queue, task=body.task)

    return CountOut(count=services.run_engine(call))


@router.get("/queues", response={200: list[QueueOut], **ERRORS})
def queues(request: HttpRequest) -> list[QueueOut]:
    """Counts per state, paused flag and oldest waiting job of every queue."""

    async def call(client: Client) -> list[tuple[str, bool, dict[str, int]]]:
        return [
            (q, await client.is_paused(q), await client.counts(q)) for q in await client.queues()
        ]

    oldest = dict(
        Job.objects.filter(state="submitted").values_list("queue").annotate(Min("submitted_at"))
    )
    now = timezone.now()
    return [
        QueueOut(
            name=n,
            paused=p,
            counts=c,
            oldest_waiting_s=(now - oldest[n]).total_seconds() if oldest.get(n) else None,
        )
        for n, p, c in services.run_engine(call)
    ]


@router.post("/queues/{name}/pause", response={200: QueueOut, **ERRORS})
def pause(request: HttpRequest, name: str) -> QueueOut:
    """Pause a queue: no worker claims from it until resumed."""
    services.set_paused([name], True)
    return (
        next(q for q in queues(request) if q.name == name) if _known_queue(name) else _unknown(name)
    )


@router.post("/queues/{name}/resume", response={200: QueueOut, **ERRORS})
def resume(request: HttpRequest, name: str) -> QueueOut:
    """Resume a paused queue."""
    services.set_paused([name], False)
    return (
        next(q for q in queues(request) if q.name == name) if _known_queue(name) else _unknown(name)
    )


def _known_queue(name: str) -> bool:
    async def call(client: Client) -> list[str]:
        return await client.queues()

    return name in services.run_engine(call)


def _unknown(name: str) -> QueueOut:
    raise HttpError(404, f"no queue named {name!r}")


@router.get("/workers", response={200: list[WorkerOut], **ERRORS})
def workers(request: HttpRequest) -> list[WorkerOut]:
    """Live workers and what each runs."""

    async def call(client: Client) -> list[dict[str, Any]]:
        return await client.workers()

    return [
        WorkerOut(**{k: w[k] for k in WorkerOut.model_fields}) for w in services.run_engine(call)
    ]


@router.get("/stats", response={200: list[StatsPoint], **ERRORS})
def stats(request: HttpRequest, minutes: int = Query(60, ge=1, le=1440)) -> list[StatsPoint]:  # type: ignore[type-arg]
    """Completed and failed jobs per minute over the last `minutes`."""
    return [StatsPoint(**r) for r in throughput(minutes)]


def _argument_schema(task: Task) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    if task.fn is None:
        return {"type": "object"}
    params = list(inspect.signature(task.fn).parameters.values())
    if task.options.takes_context:
        params = params[1:]
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        try:
            props[p.name] = (
                TypeAdapter(p.annotation).json_schema() if p.annotation is not p.empty else {}
            )
        except Exception:
            props[p.name] = {}
        if p.default is p.empty:
            required.append(p.name)
    return {"type": "object", "properties": props, "required": required}


@router.get("/tasks", response={200: list[TaskOut], **ERRORS})
def tasks(request: HttpRequest) -> list[TaskOut]:
    """Every registered task with its options and its argument schema."""
    return [
        TaskOut(
            name=t.name,
            version=t.version,
            queue=t.options.queue,
            priority=t.options.priority,
            max_retries=t.options.max_retries,
            timeout_s=t.options.timeout_s,
            arguments=_argument_schema(t),
        )
        for t in sorted(known_tasks().values(), key=lambda t: t.name)
    ]
