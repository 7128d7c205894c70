"""The queues resource of the API (/queues): every queue's counts, one queue's page with its rate
limit and concurrency keys, pause and resume, PUT /queues/{name}/limits to set the rate limit
(and the pause state) in one call, and /queues/{name}/drain: POST starts cancelling every job
waiting in the queue (any number) in the background, GET shows its progress
(engine/resources/drain.py)."""

from __future__ import annotations

import logging
import re
from concurrent.futures import Future

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from engine import CLEARABLE, validate_queue_name
from engine import drain as engine_drain
from jobsite.jobs import audit, services
from jobsite.jobs.api.schemas import ERRORS, Out, QueueOut
from jobsite.jobs.models import QueueRecord, oldest_waiting
from jobsite.jobs.permissions import Grant, Perm, aneed

log = logging.getLogger("jobsite.drain")
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
    # The cap on its running jobs, all workers together (None: no cap).
    max_running: int | None = None
    concurrency_keys: list[ConcurrencyKeyOut]
    history_gap: HistoryGapOut


class LimitsIn(Schema):
    """What to change, each optional (a key left out stays as it is): `rate_limit` like "10/s",
    "600/m" or "5/2s" for every worker together, or null to lift it; `max_running`, the most
    jobs of the queue running at once across every worker, or null to lift it; `paused`
    pauses or resumes the queue."""

    model_config = ConfigDict(extra="forbid")

    rate_limit: str | None = Field(None, min_length=3, max_length=32)
    max_running: int | None = Field(None, ge=1, le=1_000_000, strict=True)
    paused: bool | None = None


def visible(rights: Grant, names: list[str]) -> list[str]:
    """Return the queues of `names` this request may view."""
    return [q for q in names if rights.allows(Perm.VIEW, q)]


async def _queues(rights: Grant) -> list[QueueOut]:
    """Return the queues this request may view: counts, paused flag, oldest waiting job."""
    names = await sync_to_async(visible)(rights, await services.aknown_queues())
    states = await services.aqueue_states(names)
    oldest = await sync_to_async(oldest_waiting)(names)
    now = timezone.now()
    return [
        QueueOut(
            name=s.name,
            paused=s.paused,
            counts=s.counts,
            oldest_waiting_s=(now - oldest[s.name]).total_seconds() if oldest.get(s.name) else None,
        )
        for s in states
    ]


@router.get("", response={200: list[QueueOut], **ERRORS})
async def queues(request: HttpRequest) -> list[QueueOut]:
    """Counts per state, paused flag and oldest waiting job of every queue."""
    rights = await aneed(request, Perm.VIEW)
    return await _queues(rights)


async def _set_paused(request: HttpRequest, name: str, paused: bool) -> QueueOut:
    """Pause or resume a known queue; an unknown name is a 404 before anything is written."""
    rights = await aneed(request, Perm.CHANGE_QUEUE, name)
    if name not in await services.aknown_queues():
        raise HttpError(404, f"no queue named {name!r}")
    await services.aset_paused([name], paused)
    await audit.arecord(
        rights.user, "pause" if paused else "resume", [name], rights.via, model=QueueRecord
    )
    return next(q for q in await _queues(rights) if q.name == name)


@router.post("/{name}/pause", response={200: QueueOut, **ERRORS})
async def pause(request: HttpRequest, name: str) -> QueueOut:
    """Pause a queue: no worker claims from it until resumed."""
    return await _set_paused(request, name, True)


@router.post("/{name}/resume", response={200: QueueOut, **ERRORS})
async def resume(request: HttpRequest, name: str) -> QueueOut:
    """Resume a paused queue."""
    return await _set_paused(request, name, False)


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
        max_running=limits.max_running,
        concurrency_keys=[ConcurrencyKeyOut(**k) for k in limits.concurrency_keys],
        history_gap=HistoryGapOut(
            **await services.arun_engine(lambda c: c.queues.history_gaps(name))
        ),
    )


@router.get("/{name}", response={200: QueueDetailOut, **ERRORS})
async def queue(request: HttpRequest, name: str) -> QueueDetailOut:
    """One queue: counts, paused, rate limit, and concurrency keys with jobs waiting."""
    rights = await aneed(request, Perm.VIEW, name)
    return await _detail(rights, name)


@router.put("/{name}/limits", response={200: QueueDetailOut, **ERRORS})
async def set_limits(request: HttpRequest, name: str, body: LimitsIn) -> QueueDetailOut:
    """Set what the body gives: the queue's rate limit and its cap on running jobs (null lifts
    either), and pause or resume it."""
    rights = await aneed(request, Perm.CHANGE_QUEUE, name)
    if name not in await services.aknown_queues():
        raise HttpError(404, f"no queue named {name!r}")
    given = body.model_fields_set
    said = ""
    if "rate_limit" in given:
        await services.arun_engine(
            lambda c: c.queues.set_rate_limit(name, body.rate_limit)
        )  # ConfigError: 422, nothing set
        said += f" rate_limit={body.rate_limit or 'none'}"
    if "max_running" in given:
        await services.arun_engine(lambda c: c.queues.set_max_running(name, body.max_running))
        said += f" max_running={body.max_running or 'none'}"
    if body.paused is not None:
        await services.aset_paused([name], body.paused)
        said += f" paused={body.paused}"
    await audit.arecord(rights.user, "limits", [name], rights.via, QueueRecord, said.strip())
    return await _detail(rights, name)


class DrainOut(Out):
    """A queue's last drain: `state` running, done or failed (none: never drained)."""

    queue: str
    state: str
    waiting: int = 0  # jobs waiting when it began
    cancelled: int = 0
    by: str = ""
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    error: str = ""


def _drain_out(queue: str, row: dict[str, str]) -> DrainOut:
    def number(name: str) -> int | None:
        return int(row[name]) if row.get(name) else None

    return DrainOut(
        queue=queue,
        state=row.get("state", "none"),
        waiting=number("waiting") or 0,
        cancelled=number("cancelled") or 0,
        by=row.get("by", ""),
        started_at_ms=number("started_at_ms"),
        finished_at_ms=number("finished_at_ms"),
        error=row.get("error", ""),
    )


async def _known(name: str) -> None:
    if name not in await services.aknown_queues():
        raise HttpError(404, f"no queue named {name!r}")


def _logged(future: Future[int]) -> None:
    """Log how a background drain ended (its record in Redis says it too)."""
    if not future.cancelled() and future.exception() is not None:
        log.error("drain failed error=%r", future.exception())


@router.post("/{name}/drain", response={202: DrainOut, **ERRORS})
async def start_drain(request: HttpRequest, name: str) -> Status[DrainOut]:
    """Cancel every job waiting in the queue when this call came (jobs enqueued meanwhile stay),
    in the background; 409 while a drain of the queue runs."""
    rights = await aneed(request, Perm.CANCEL, name)
    await _known(name)
    who = f"{rights.user.get_username()} via {rights.via}"
    row = await services.arun_engine(lambda c: engine_drain.begin(c, name, who))
    if row is None:
        raise HttpError(409, f"a drain of queue {name!r} is already running")
    await audit.arecord(
        rights.user, "drain", [name], rights.via, QueueRecord, f"{row['waiting']} jobs waiting"
    )
    services.drain_in_background(name).add_done_callback(_logged)
    return Status(202, _drain_out(name, row))


@router.get("/{name}/drain", response={200: DrainOut, **ERRORS})
async def drain_status(request: HttpRequest, name: str) -> DrainOut:
    """The queue's last drain: state, jobs waiting when it began, cancelled so far."""
    await aneed(request, Perm.VIEW, name)
    await _known(name)
    return _drain_out(name, await services.arun_engine(lambda c: engine_drain.status(c, name)))


class ClearIn(Schema):
    """The finished state whose jobs to clear; `dry_run` only counts them."""

    model_config = ConfigDict(extra="forbid")

    state: str = Field(..., description=f"one of {', '.join(CLEARABLE)}")
    dry_run: bool = False


class ClearOut(Out):
    queue: str
    state: str
    # Jobs deleted from Redis (with dry_run: how many there are).
    count: int
    dry_run: bool
    # Always true: the history's rows stay; only Redis forgets the jobs.
    history_kept: bool = True


class DeduplicationOut(Out):
    """A deduplication id of a queue and the job that holds it (None: nobody; the next job with
    it is submitted). After a DELETE, `freed` says whether it was held."""

    queue: str
    deduplication_id: str
    job_id: str | None
    freed: bool = False


DEDUP_ID = r"^[^\x00-\x1f\x7f]{1,200}$"


@router.get("/{name}/deduplication/{dedup_id}", response={200: DeduplicationOut, **ERRORS})
async def deduplication(request: HttpRequest, name: str, dedup_id: str) -> DeduplicationOut:
    """Say which job holds a deduplication id of the queue (none: the id is free)."""
    await aneed(request, Perm.VIEW, validate_queue_name(name))
    _check_dedup_id(dedup_id)
    held = await services.arun_engine(lambda c: c.jobs.dedup_holder(name, dedup_id))
    return DeduplicationOut(queue=name, deduplication_id=dedup_id, job_id=held)


@router.delete("/{name}/deduplication/{dedup_id}", response={200: DeduplicationOut, **ERRORS})
async def free_deduplication(request: HttpRequest, name: str, dedup_id: str) -> DeduplicationOut:
    """Free a deduplication id of the queue: the next job with it is submitted, whatever holds
    it now (the holder runs on). Audited."""
    rights = await aneed(request, Perm.CHANGE_QUEUE, validate_queue_name(name))
    _check_dedup_id(dedup_id)
    held = await services.arun_engine(lambda c: c.jobs.dedup_holder(name, dedup_id))
    freed = await services.arun_engine(lambda c: c.jobs.free_dedup(name, dedup_id))
    said = f"freed deduplication id {dedup_id!r} (held by {held or 'nobody'})"
    await audit.arecord(rights.user, "deduplication", [name], rights.via, QueueRecord, said)
    return DeduplicationOut(queue=name, deduplication_id=dedup_id, job_id=held, freed=freed)


def _check_dedup_id(dedup_id: str) -> None:
    if not re.match(DEDUP_ID, dedup_id):
        raise HttpError(422, "a deduplication id is 1 to 200 characters, no control characters")


@router.post("/{name}/clear", response={200: ClearOut, **ERRORS})
async def clear(request: HttpRequest, name: str, body: ClearIn) -> ClearOut:
    """Delete the queue's finished jobs of one state (completed, failed, cancelled, stalled,
    dropped, expired) from Redis; never a waiting or running one. The history keeps them."""
    rights = await aneed(request, Perm.PURGE, validate_queue_name(name))
    count = await services.arun_engine(
        lambda c: c.queues.clear_state(name, body.state, dry_run=body.dry_run)
    )
    if not body.dry_run:
        selector = {"queue": name, "state": body.state, "redis_only": True}
        await audit.arecord_bulk(rights.user, "clear", selector, count, rights.via)
    return ClearOut(queue=name, state=body.state, count=count, dry_run=body.dry_run)
