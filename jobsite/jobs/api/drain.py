"""Drain a queue: POST /queues/{name}/drain starts cancelling every job waiting in it (any
number) in the background; GET /queues/{name}/drain shows its progress (engine/drain.py)."""

from __future__ import annotations

import logging
from concurrent.futures import Future

from django.http import HttpRequest
from ninja import Router, Status
from ninja.errors import HttpError

from jobsite.jobs import audit, services
from jobsite.jobs.api.jobs import ERRORS
from jobsite.jobs.api.schemas import Out
from jobsite.jobs.models import QueueRecord
from jobsite.jobs.permissions import Perm, aneed

log = logging.getLogger("jobsite.drain")
router = Router(tags=["queues"])


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


def _out(queue: str, row: dict[str, str]) -> DrainOut:
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


@router.post("/queues/{name}/drain", response={202: DrainOut, **ERRORS})
async def start_drain(request: HttpRequest, name: str) -> Status[DrainOut]:
    """Cancel every job waiting in the queue when this call came (jobs enqueued meanwhile stay),
    in the background; 409 while a drain of the queue runs."""
    rights = await aneed(request, Perm.CANCEL, name)
    await _known(name)
    who = f"{rights.user.get_username()} via {rights.via}"
    row = await services.adrain_begin(name, who)
    if row is None:
        raise HttpError(409, f"a drain of queue {name!r} is already running")
    await audit.arecord(
        rights.user, "drain", [name], rights.via, QueueRecord, f"{row['waiting']} jobs waiting"
    )
    services.drain_in_background(name).add_done_callback(_logged)
    return Status(202, _out(name, row))


@router.get("/queues/{name}/drain", response={200: DrainOut, **ERRORS})
async def drain_status(request: HttpRequest, name: str) -> DrainOut:
    """The queue's last drain: state, jobs waiting when it began, cancelled so far."""
    await aneed(request, Perm.VIEW, name)
    await _known(name)
    return _out(name, await services.adrain_status(name))
