"""The charts resource (/charts): the dashboard's charts over the last hour, day or week
(history/charts.py)."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Query, Router
from pydantic import Field

from engine import RedisUnavailable
from jobsite.jobs import services
from jobsite.jobs.api.schemas import QUEUE, ErrorOut, Out
from jobsite.jobs.history.charts import chart_data, choices, live_depth
from jobsite.jobs.history.rollup import pick
from jobsite.jobs.models import QueueDepth, RollupCount
from jobsite.jobs.permissions import Perm, need

router = Router(tags=["charts"])


class Percentiles(Out):
    """Per point and over the whole range: p50 and p95 in milliseconds (null: no job)."""

    p50: list[float | None]
    p95: list[float | None]
    count: int = Field(description="jobs observed over the range")
    overall: dict[str, float | None]


class Throughput(Out):
    """Jobs per point: completed, failed (for good) and retried attempts."""

    completed: list[int]
    failed: list[int]
    retried: list[int]


class Depth(Out):
    """The deepest queue sample of each point (queues summed; null: no sample)."""

    waiting: list[int | None]
    scheduled: list[int | None]
    running: list[int | None]


class ChartsOut(Out):
    """The charts of one range; `t` holds each point's start (Unix seconds, UTC)."""

    range: str
    step_s: int
    t: list[int]
    throughput: Throughput
    wait: Percentiles
    run: Percentiles
    depth: Depth
    queues: list[str] = Field(description="queues with data this week, for a picker")
    tasks: list[str] = Field(description="tasks with data this week, for a picker")


ERRORS: dict[int, Any] = {401: ErrorOut, 403: ErrorOut, 422: ErrorOut}


@router.get("", response={200: ChartsOut, **ERRORS})
def charts(
    request: HttpRequest,
    range: Literal["hour", "day", "week"] = "hour",
    queue: str | None = Query(None, pattern=QUEUE),  # type: ignore[type-arg]
    task: str | None = Query(None, max_length=255),  # type: ignore[type-arg]
) -> dict[str, Any]:
    """Throughput, queue wait and run time p50/p95, and queue depth, per queue and task.

    The hour has 1-minute points, the day 15-minute points, the week hourly points. Only the
    queues the caller may see are counted; naming one it may not see is refused (403).
    """
    rights = need(request, Perm.VIEW, queue or None)
    rollup = RollupCount.objects.all()
    depth = rights.narrow(QueueDepth.objects.all())
    picks = choices(rights.narrow(rollup), depth)
    if queue:
        depth = depth.filter(queue=queue)
    # The depth's last point is read now, as the Queues table is (none while Redis is away).
    scope = rights.queues
    names = (
        [queue] if queue else [q for q in services.known_queues() if scope is None or q in scope]
    )
    try:
        live = live_depth(names)
    except RedisUnavailable:
        live = None
    data = chart_data(range, pick(rollup, rights.queues, queue, task), depth, live=live)
    return {**data, **picks}
