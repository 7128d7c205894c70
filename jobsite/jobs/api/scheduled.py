"""The scheduled resource (/scheduled): jobs waiting for their time, live from Redis.

Those never run yet (a run_at, a delay) apart from retries waiting for their backoff
(`retrying`). POST /jobs/{id}/run-now and POST /bulk/run-now make them `submitted` at once.
"""

from __future__ import annotations

import heapq

from django.http import HttpRequest
from ninja import Query, Router

from jobsite.jobs import services
from jobsite.jobs.api.jobout import engine_values, fields
from jobsite.jobs.api.schemas import ERRORS, QUEUE, JobOut
from jobsite.jobs.permissions import Perm, aneed

router = Router(tags=["scheduled"])
# The deepest page: each queue is read from its first job to offset + limit (Redis holds no
# index to skip by, and `retrying` filters job by job), so the offset bounds a request's cost.
# The history's list (GET /jobs?state=scheduled, by cursor) reaches further.
MAX_OFFSET = 10_000


@router.get("", response={200: list[JobOut], **ERRORS})
async def scheduled(
    request: HttpRequest,
    queue: str | None = Query(None, pattern=QUEUE),  # type: ignore[type-arg]
    retrying: bool | None = None,
    offset: int = Query(0, ge=0, le=MAX_OFFSET),  # type: ignore[type-arg]
    limit: int = Query(50, ge=1, le=500),  # type: ignore[type-arg]
) -> list[JobOut]:
    """Jobs waiting for their time, next due first, of `queue` or every queue this request may
    view; `retrying` true: only retries waiting for their backoff, false: only the others.
    `offset` is at most 10,000."""
    rights = await aneed(request, Perm.VIEW, queue)
    names = [queue] if queue else await services.aknown_queues()
    names = [q for q in names if rights.allows(Perm.VIEW, q)]
    found = [
        await services.arun_engine(lambda c: c.queues.scheduled(q, 0, offset + limit, retrying))  # noqa: B023 (the bridge calls it at once)
        for q in names
    ]
    jobs = list(heapq.merge(*found, key=lambda j: (j.run_at_ms or 0, j.id)))
    return [JobOut(**fields(JobOut, engine_values(j))) for j in jobs[offset : offset + limit]]
