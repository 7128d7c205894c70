"""Scheduled jobs and "run now" (API router, mounted by api/root.py).

GET /scheduled lists the jobs waiting for a time, live from Redis: those never run yet (a
run_at, a delay) apart from retries waiting for their backoff (`retrying`). POST
/jobs/{id}/run-now and POST /bulk/run-now make them `submitted` at once (promote-11.lua with
ids: the scheduled -> submitted event, ids not scheduled reported, not changed).
"""

from __future__ import annotations

import heapq
from typing import Annotated

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from pydantic import ConfigDict

from engine import JOB_ID_PATTERN, JobNotFound
from jobsite.jobs import audit, services
from jobsite.jobs.api.jobs import ERRORS, JobOut, _engine_values, _fields, _live_out
from jobsite.jobs.api.schemas import QUEUE, BulkOut
from jobsite.jobs.permissions import Perm, aneed

router = Router(tags=["scheduled"])
# Why a job asked for was not run now, in words (engine Client.run_now's outcomes).
SKIPPED = {
    "not_found": "no longer in Redis",
    "not_scheduled": "not scheduled any more (already submitted, running or finished)",
}


class RunNowIn(Schema):
    """Scheduled jobs of one queue to run now, by id."""

    model_config = ConfigDict(extra="forbid")

    queue: str = Field("default", pattern=QUEUE)
    ids: list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]] = Field(
        ..., min_length=1, max_length=10_000
    )


@router.get("/scheduled", response={200: list[JobOut], **ERRORS})
async def scheduled(
    request: HttpRequest,
    queue: str | None = Query(None, pattern=QUEUE),  # type: ignore[type-arg]
    retrying: bool | None = None,
    offset: int = Query(0, ge=0, le=100_000),  # type: ignore[type-arg]
    limit: int = Query(50, ge=1, le=500),  # type: ignore[type-arg]
) -> list[JobOut]:
    """Jobs waiting for their time, next due first, of `queue` or every queue this request may
    view; `retrying` true: only retries waiting for their backoff, false: only the others."""
    rights = await aneed(request, Perm.VIEW, queue)
    names = [queue] if queue else await services.aknown_queues()
    names = [q for q in names if rights.allows(Perm.VIEW, q)]
    found = [await services.ascheduled(q, 0, offset + limit, retrying) for q in names]
    jobs = list(heapq.merge(*found, key=lambda j: (j.run_at_ms or 0, j.id)))
    return [JobOut(**_fields(JobOut, _engine_values(j))) for j in jobs[offset : offset + limit]]


@router.post("/jobs/{job_id}/run-now", response={200: JobOut, **ERRORS})
async def run_now(request: HttpRequest, job_id: str) -> JobOut:
    """Run a scheduled job (waiting for its run_at or a retry's backoff) now."""
    rights = await aneed(request, Perm.RETRY)
    try:
        job = await services.aget_job(job_id)
    except JobNotFound:
        raise HttpError(404, f"no job with id {job_id!r} in Redis") from None
    await rights.arequire(Perm.RETRY, job.queue)
    outcome = (await services.arun_now([(job_id, job.queue)]))[job_id]
    if outcome != "promoted":
        raise HttpError(409, f"job {job_id!r} is {SKIPPED.get(outcome, outcome)}")
    await audit.arecord(rights.user, "run now", [job_id], rights.via)
    return await _live_out(job_id, job.queue, JobOut)


@router.post("/bulk/run-now", response={200: BulkOut, **ERRORS})
async def run_now_many(request: HttpRequest, body: RunNowIn) -> BulkOut:
    """Run the given scheduled jobs of a queue now; the others are reported as skipped."""
    rights = await aneed(request, Perm.RETRY, body.queue)
    ids = list(dict.fromkeys(body.ids))
    outcome = await services.arun_now([(i, body.queue) for i in ids])
    skipped: dict[str, int] = {}
    for value in outcome.values():
        if value != "promoted":
            reason = SKIPPED.get(value, value)
            skipped[reason] = skipped.get(reason, 0) + 1
    promoted = [i for i, v in outcome.items() if v == "promoted"]
    await audit.arecord(rights.user, "run now", promoted, rights.via)
    return BulkOut(matched=len(ids), changed=len(promoted), skipped=skipped)
