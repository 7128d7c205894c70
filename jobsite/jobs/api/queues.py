"""One queue's page in the API: counts, pause state, rate limit and concurrency keys; and
PUT /queues/{name}/limits to set the rate limit (and the pause state) in one call."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.errors import HttpError
from pydantic import ConfigDict

from jobsite.jobs import audit, services
from jobsite.jobs.api.jobs import ERRORS, _queues
from jobsite.jobs.api.schemas import Out, QueueOut
from jobsite.jobs.models import QueueRecord
from jobsite.jobs.permissions import Grant, Perm, aneed

router = Router(tags=["queues"])


class RateOut(Out):
    interval_ms: float
    per_s: float


class ConcurrencyKeyOut(Out):
    key: str
    waiting: int
    active: int


class HistoryGapOut(Out):
    """Event entries trimmed before the mirror read them (the hard cap was reached), ever; jobs
    of those rebuilt from their hashes; jobs that could not be (their history rows are missing
    or not final). All 0 when the history never missed anything."""

    entries: int
    rebuilt: int
    lost: int


class QueueDetailOut(QueueOut):
    """A queue with its rate limit (None: none), the concurrency keys whose jobs wait for
    their turn (most waiting first, at most 100) and the history's gaps."""

    rate_limit: RateOut | None
    concurrency_keys: list[ConcurrencyKeyOut]
    history_gap: HistoryGapOut


class LimitsIn(Schema):
    """`rate_limit` like "10/s", "600/m" or "5/2s" for every worker together, or null to lift
    it; `paused` (optional) pauses or resumes the queue."""

    model_config = ConfigDict(extra="forbid")

    rate_limit: str | None = Field(..., min_length=3, max_length=32)
    paused: bool | None = None


async def _detail(rights: Grant, name: str) -> QueueDetailOut:
    if name not in await services.aknown_queues():
        raise HttpError(404, f"no queue named {name!r}")
    base = next(q for q in await _queues(rights) if q.name == name)
    limits = await services.aqueue_limits(name)
    interval = limits.rate_interval_ms
    return QueueDetailOut(
        **base.model_dump(),
        rate_limit=RateOut(interval_ms=interval, per_s=round(1000 / interval, 6))
        if interval
        else None,
        concurrency_keys=[ConcurrencyKeyOut(**k) for k in limits.concurrency_keys],
        history_gap=HistoryGapOut(**await services.ahistory_gaps(name)),
    )


@router.get("/queues/{name}", response={200: QueueDetailOut, **ERRORS})
async def queue(request: HttpRequest, name: str) -> QueueDetailOut:
    """One queue: counts, paused, rate limit, and concurrency keys with jobs waiting."""
    rights = await aneed(request, Perm.VIEW, name)
    return await _detail(rights, name)


@router.put("/queues/{name}/limits", response={200: QueueDetailOut, **ERRORS})
async def set_limits(request: HttpRequest, name: str, body: LimitsIn) -> QueueDetailOut:
    """Set the queue's rate limit (null lifts it), and pause or resume it when `paused` is given."""
    rights = await aneed(request, Perm.CHANGE_QUEUE, name)
    if name not in await services.aknown_queues():
        raise HttpError(404, f"no queue named {name!r}")
    await services.aset_rate_limit(name, body.rate_limit)  # ConfigError: 422, nothing set
    said = f"rate_limit={body.rate_limit or 'none'}"
    if body.paused is not None:
        await services.aset_paused([name], body.paused)
        said += f" paused={body.paused}"
    await audit.arecord(rights.user, "limits", [name], rights.via, QueueRecord, said)
    return await _detail(rights, name)
