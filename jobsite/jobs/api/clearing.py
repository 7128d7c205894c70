"""Clearing a queue's finished jobs of one state from Redis (API router, mounted by
api/root.py): POST /queues/{name}/clear. The history keeps every row (it is the record of what
happened); only Redis forgets the jobs, a batch per script call (engine/clearing.py)."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Field, Router, Schema
from pydantic import ConfigDict

from engine import CLEARABLE, validate_queue_name
from jobsite.jobs import audit, services
from jobsite.jobs.api.jobs import ERRORS
from jobsite.jobs.api.schemas import Out
from jobsite.jobs.permissions import Perm, aneed

router = Router(tags=["queues"])


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


@router.post("/queues/{name}/clear", response={200: ClearOut, **ERRORS})
async def clear(request: HttpRequest, name: str, body: ClearIn) -> ClearOut:
    """Delete the queue's finished jobs of one state (completed, failed, cancelled, stalled,
    dropped, expired) from Redis; never a waiting or running one. The history keeps them."""
    rights = await aneed(request, Perm.PURGE, validate_queue_name(name))
    count = await services.aclear_state(name, body.state, dry_run=body.dry_run)
    if not body.dry_run:
        selector = {"queue": name, "state": body.state, "redis_only": True}
        await audit.arecord_bulk(rights.user, "clear", selector, count, rights.via)
    return ClearOut(queue=name, state=body.state, count=count, dry_run=body.dry_run)
