"""GET /scaling: per queue what an autoscaler needs (KEDA, HPA; docs/deploy.md)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router

from jobsite.jobs import services
from jobsite.jobs.api.queues import visible
from jobsite.jobs.api.schemas import ERRORS, Out
from jobsite.jobs.permissions import Perm, aneed

router = Router(tags=["scaling"])


class ScalingOut(Out):
    """One queue's autoscaling figures (engine/resources/metrics.py's QueueMetrics)."""

    queue: str
    # Jobs a worker could claim now: ready, the queue not paused (not scheduled, blocked, waiting
    # for a concurrency key's turn or for their task version).
    runnable: int
    oldest_runnable_s: float
    # Concurrency of the live workers claiming from it, and the runnable jobs per such slot.
    worker_slots: int
    runnable_per_slot: float
    # task@version -> jobs waiting for a worker with that version.
    waiting_for_version: dict[str, int]


@router.get("", response={200: list[ScalingOut], **ERRORS})
async def scaling(request: HttpRequest) -> list[ScalingOut]:
    """Per queue: runnable jobs, age of the oldest, live worker slots, backlog per slot."""
    rights = await aneed(request, Perm.VIEW)
    names = await sync_to_async(visible)(rights, await services.aknown_queues())
    snapshot = await services.ametrics_snapshot(names)
    return [
        ScalingOut(
            queue=q.queue,
            runnable=q.runnable,
            oldest_runnable_s=q.oldest_runnable_s,
            worker_slots=q.worker_slots,
            runnable_per_slot=q.runnable_per_slot,
            waiting_for_version=q.waiting_for_version,
        )
        for q in snapshot.queues
    ]
