"""The stats resource (/stats): completed and failed jobs per minute, from the rollup."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router

from jobsite.jobs.api.live import throughput
from jobsite.jobs.api.schemas import ERRORS, StatsPoint
from jobsite.jobs.permissions import Perm, need

router = Router(tags=["stats"])


@router.get("", response={200: list[StatsPoint], **ERRORS})
def stats(request: HttpRequest, minutes: int = Query(60, ge=1, le=1440)) -> list[StatsPoint]:  # type: ignore[type-arg]
    """Completed and failed jobs per minute over the last `minutes`."""
    rights = need(request, Perm.VIEW)
    return [StatsPoint(**r) for r in throughput(minutes, rights.queues)]
