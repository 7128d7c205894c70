"""The jobs resource (/jobs): submit, list the history, read one, cancel, retry and replay.

Operations that reach Redis are async views on the services' async twins; the list only reads
the history and stays sync. The list's filters (JobFilters) are also /job-counts' (job_counts.py).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict, field_validator

from engine import JOB_ID_PATTERN, WAITING_STATES, InvalidArguments, JobNotFound, explain
from engine import Job as EngineJob
from jobsite.jobs import audit, services
from jobsite.jobs.api import options as taskoptions
from jobsite.jobs.api import paging, related
from jobsite.jobs.api.jobout import (
    ended,
    engine_values,
    known_task,
    live_out,
    out,
    row_out,
    submittable,
)
from jobsite.jobs.api.replays import areplays_of
from jobsite.jobs.api.schemas import (
    ERRORS,
    RUN_NOW_SKIPPED,
    CancelOut,
    JobDetailOut,
    JobIn,
    JobOut,
    JobPage,
    Out,
    WaitingOut,
)
from jobsite.jobs.api.waiting import reasons_out
from jobsite.jobs.models import JobRecord
from jobsite.jobs.permissions import Grant, Perm, aneed, need
from jobsite.jobs.search import SearchText, text_search
from jobsite.jobs.tasks import runnable

router = Router(tags=["jobs"])


class CallbackOut(Out):
    """A callback submitted with the job: its id, its task, and the end it runs on."""

    id: str
    task: str
    runs_on: Literal["success", "failure"]


class SubmittedOut(JobOut):
    """A job as submitted, with the callbacks submitted with it."""

    callbacks: list[CallbackOut] = []
    # Set when the job met its rate limit at submit (on_rate_limit "drop": it is `cancelled`;
    # "reschedule": it is `scheduled`, run_at this time): the next free slot.
    rate_limited_until: datetime | None = None


@router.post("", response={201: SubmittedOut, **ERRORS})
async def submit(request: HttpRequest, body: JobIn) -> Status[SubmittedOut]:
    """Submit a job, with its callbacks; arguments are checked against the task before anything
    reaches Redis."""
    rights = await aneed(request, Perm.SUBMIT)
    task = await submittable(rights, body, "", set())
    try:
        task = taskoptions.apply(task, body)
    except taskoptions.BadOptions as exc:
        raise HttpError(422, str(exc)) from None
    try:
        call = task.call(*body.args, **body.kwargs)
    except InvalidArguments as exc:
        raise HttpError(422, str(exc)) from None
    by = services.Actor(rights.user, rights.via)
    (job,) = await services.aadmit([call], by=by, check_types=True)
    if job.repeat_every_s is not None:  # a schedule: its first run is not in Redis yet
        return Status(201, await out(engine_values(job), job.id, SubmittedOut))
    done = await live_out(job.id, job.queue, SubmittedOut)
    if job.rate_limited_until_ms is not None:
        done.rate_limited_until = datetime.fromtimestamp(job.rate_limited_until_ms / 1000, UTC)
    done.callbacks = [
        CallbackOut(id=c.id, task=c.task, runs_on="failure" if c.runs_on else "success")
        for c in job.callbacks
    ]
    return Status(201, done)


class BatchIn(Schema):
    """Jobs submitted together, each on its own (not all or nothing: `POST /flows` is)."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobIn] = Field(..., min_length=1, max_length=1000)


class BatchJobOut(Out):
    id: str
    task: str
    queue: str
    state: str


class BatchOut(Out):
    jobs: list[BatchJobOut]


@router.post("/batch", response={201: BatchOut, **ERRORS})
async def submit_batch(request: HttpRequest, body: BatchIn) -> Status[BatchOut]:
    """Submit many jobs in one call (one script call per queue), each checked as `POST /jobs`
    checks one before any reaches Redis; a chosen id already taken is a 409 naming it, the
    others being submitted (a job with depends_on belongs in `POST /flows`)."""
    rights = await aneed(request, Perm.SUBMIT)
    calls: list[EngineJob] = []
    allowed: set[str] = set()
    for n, spec in enumerate(body.jobs):
        where = f"job {n}"
        if spec.depends_on:
            raise HttpError(422, f"{where}: depends_on makes a flow: submit it to POST /flows")
        task = await submittable(rights, spec, where, allowed)
        try:
            calls.append(taskoptions.apply(task, spec).call(*spec.args, **spec.kwargs))
        except (taskoptions.BadOptions, InvalidArguments) as exc:
            raise HttpError(422, f"{where}: {exc}") from None
    by = services.Actor(rights.user, rights.via)
    done = await services.aadmit(calls, by=by, check_types=True)
    return Status(
        201,
        BatchOut(
            jobs=[
                BatchJobOut(id=j.id, task=j.task, queue=j.queue, state=str(j.state)) for j in done
            ]
        ),
    )


@router.get("/{job_id}", response={200: JobDetailOut, **ERRORS})
async def get_job(request: HttpRequest, job_id: str) -> JobDetailOut:
    """Return a job with its log: live from Redis, else from the history; 404 for an unknown id."""
    rights = await aneed(request, Perm.VIEW)
    source: EngineJob | JobRecord | None
    try:
        source = await services.arun_engine(lambda c: c.jobs.get(job_id))
        job = await out(engine_values(source), job_id, JobDetailOut)
    except JobNotFound:
        source = await JobRecord.objects.filter(id=job_id).afirst()
        if source is None:
            raise HttpError(404, f"no job with id {job_id!r}") from None
        job = await row_out(source, JobDetailOut)
    await rights.arequire(Perm.VIEW, job.queue)
    job.replays = await areplays_of(job_id)
    if isinstance(source, EngineJob) and source.state in WAITING_STATES:
        reasons = await services.arun_engine(lambda c: explain(c, job_id, source.queue))
        job.waiting = [WaitingOut(**r) for r in reasons_out(reasons, source.queue)]
    return await related.afill(job, *related.links(source))


# The columns a list item is made of; the fields told by a job's end come from them (ended).
DERIVED = (
    "failed_at",
    "cancelled_at",
    "duration_seconds",
    "max_retries",
    "error",
    "phase",
    "cannot_run",
)
LISTED = [f for f in JobOut.model_fields if f != "history" and f not in DERIVED]


# How many job ids the `ids` filter takes: a URL stays within what servers accept (a few KB).
IDS_MAX = 100
_JOB_ID = re.compile(JOB_ID_PATTERN)


class JobFilters(Schema):
    """The history's filters of the list and of /job-counts (all but the state): `task_like`
    matches part of the task name (any case), `q` searches, `fingerprint` keeps one dead-letter
    group, `since` and `until` bound the submission time, `ids` keeps those jobs (comma-separated,
    at most IDS_MAX)."""

    queue: str | None = None
    task: str | None = None
    task_like: str | None = Field(None, min_length=1, max_length=255)
    q: SearchText | None = None
    since: datetime | None = None
    until: datetime | None = None
    fingerprint: str | None = Field(None, max_length=32)
    ids: str | None = Field(None, min_length=1, max_length=IDS_MAX * 129)

    @field_validator("ids")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        if value is None:
            return None
        ids = value.split(",")
        if len(ids) > IDS_MAX:
            raise ValueError(f"at most {IDS_MAX} ids, got {len(ids)}")
        if bad := [i for i in ids if not _JOB_ID.match(i)]:
            raise ValueError(f"not a job id: {bad[0][:130]!r}")
        return value

    def rows(self, request: HttpRequest) -> QuerySet[JobRecord]:
        """Return the history rows these filters select, of the queues this request may view."""
        rows = need(request, Perm.VIEW, self.queue).narrow(JobRecord.objects.all())
        chosen = {
            "queue": self.queue,
            "task": self.task,
            "task__icontains": self.task_like,
            "fingerprint": self.fingerprint,
            "submitted_at__gte": self.since,
            "submitted_at__lt": self.until,
            "id__in": self.ids.split(",") if self.ids else None,
        }
        rows = rows.filter(**{k: v for k, v in chosen.items() if v is not None})
        return text_search(rows, self.q) if self.q else rows


@router.get("", response={200: JobPage, **ERRORS})
def list_jobs(
    request: HttpRequest,
    filters: Query[JobFilters],
    state: str | None = None,
    sort: paging.Sort = "-submitted_at",
    cursor: str | None = None,
    before: str | None = None,
    limit: int = Query(50, ge=1, le=500),  # type: ignore[type-arg]
) -> JobPage:
    """List the history with filters, in a time or duration order (newest submitted first by
    default), a page at a time: `cursor` (a page's next_cursor) gives the page after it,
    `before` (a page's prev_cursor) the page before it. `task_like` matches part of the task
    name (any case); `fingerprint` keeps one dead-letter group; sorting by started_at,
    completed_at or duration_seconds lists the jobs that have one."""
    rows = filters.rows(request)
    if state is not None:
        rows = rows.filter(state=state)
    # Plain values of the listed columns: no model instances, no decoding of what the list
    # leaves out (transitions, logs).
    got = paging.page(rows, sort, LISTED, limit, after=cursor, before=before)
    items = [{**row, **ended(row)} for row in got.rows]
    return JobPage.model_validate(
        {"items": items, "next_cursor": got.next_cursor, "prev_cursor": got.prev_cursor}
    )


async def _live_job(request: HttpRequest, job_id: str, perm: Perm) -> tuple[Grant, EngineJob]:
    """Return the request's rights and the live job `job_id` if they allow `perm` on its queue
    (404 when Redis no longer holds the job, 403 when its queue is not theirs)."""
    rights = await aneed(request, perm)
    try:
        job = await services.arun_engine(lambda c: c.jobs.get(job_id))
    except JobNotFound:
        raise HttpError(404, f"no live job with id {job_id!r}") from None
    await rights.arequire(perm, job.queue)
    return rights, job


@router.delete("/{job_id}", response={202: CancelOut, **ERRORS})
async def cancel(request: HttpRequest, job_id: str) -> Status[CancelOut]:
    """Cancel a queued or running job."""
    rights, job = await _live_job(request, job_id, Perm.CANCEL)
    queue = job.queue
    outcome = (await services.acancel([(job_id, queue)]))[job_id]
    if outcome == "not_found":
        raise HttpError(404, f"no live job with id {job_id!r}")
    if outcome == "finished":
        raise HttpError(409, "the job already finished")
    await audit.arecord(rights.user, "cancel", [job_id], rights.via, outcome=outcome)
    out = await live_out(job_id, queue, JobOut)
    return Status(202, CancelOut(**out.model_dump(), outcome=outcome))


@router.post("/{job_id}/retry", response={200: JobOut, **ERRORS})
async def retry(request: HttpRequest, job_id: str) -> JobOut:
    """Retry a finished job (failed, stalled, expired, dropped, cancelled) as a new series."""
    rights, job = await _live_job(request, job_id, Perm.RETRY)
    refused = runnable.why_not(job.task, job.errors)
    if refused:  # it would only be dropped again
        raise HttpError(409, f"job {job_id!r} cannot run: {refused}")
    if await services.aresubmit([(job_id, job.queue)]) != 1:
        raise HttpError(409, f"a {job.state} job cannot be retried")
    await audit.arecord(rights.user, "retry", [job_id], rights.via)
    return await live_out(job_id, job.queue, JobOut)


class ReplayIn(Schema):
    """The arguments of the replay; a part left out is the original's."""

    model_config = ConfigDict(extra="forbid")

    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None


async def _original(job_id: str) -> tuple[str, str, int, list[Any], dict[str, Any]]:
    """Return task, queue, priority, args and kwargs of a job, live or from the history."""
    try:
        job = await services.arun_engine(lambda c: c.jobs.get(job_id))
        return job.task, job.queue, job.priority, job.args, job.kwargs
    except JobNotFound:
        row = await JobRecord.objects.filter(id=job_id).afirst()
        if row is None:
            raise HttpError(404, f"no job with id {job_id!r}") from None
        return row.task, row.queue, row.priority, row.args, row.kwargs


@router.post("/{job_id}/replay", response={201: JobDetailOut, **ERRORS})
async def replay(request: HttpRequest, job_id: str, body: ReplayIn) -> Status[JobDetailOut]:
    """Submit a new job of the same task, queue and priority with edited arguments."""
    rights = await aneed(request, Perm.RETRY)
    name, queue, priority, args, kwargs = await _original(job_id)
    await rights.arequire(Perm.RETRY, queue)
    task = known_task(name)
    args = body.args if body.args is not None else args
    kwargs = body.kwargs if body.kwargs is not None else kwargs
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise HttpError(422, "the original's arguments are not JSON; give args and kwargs")
    try:
        job: EngineJob = task.using(queue=queue, priority=priority).call(*args, **kwargs)
    except InvalidArguments as exc:
        raise HttpError(422, str(exc)) from None
    job.replay_of = job_id
    by = services.Actor(rights.user, rights.via, "replay", f"{job_id} -> {job.id}", (job_id,))
    await services.aadmit([job], by=by, check_types=True)
    return Status(201, await live_out(job.id, job.queue, JobDetailOut))


@router.post("/{job_id}/run-now", response={200: JobOut, **ERRORS})
async def run_now(request: HttpRequest, job_id: str) -> JobOut:
    """Run a scheduled job (waiting for its run_at or a retry's backoff) now."""
    rights, job = await _live_job(request, job_id, Perm.RETRY)
    outcome = (await services.arun_now([(job_id, job.queue)]))[job_id]
    if outcome != "promoted":
        raise HttpError(409, f"job {job_id!r} is {RUN_NOW_SKIPPED.get(outcome, outcome)}")
    await audit.arecord(rights.user, "run now", [job_id], rights.via)
    return await live_out(job_id, job.queue, JobOut)
