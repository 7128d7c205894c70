"""The task stats resource (/task-stats): per task over a range, from the charts' rollup."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Query, Router
from pydantic import Field

from jobsite.jobs.api.charts import ERRORS
from jobsite.jobs.api.schemas import QUEUE, Out
from jobsite.jobs.history.charts import task_stats
from jobsite.jobs.models import RollupCount
from jobsite.jobs.permissions import Perm, need

router = Router(tags=["charts"])


class TaskStatsOut(Out):
    """One task over a range: jobs ended, the share that failed, run time of completed jobs."""

    task: str
    completed: int
    failed: int
    failure_rate: float = Field(description="failed / (completed + failed), 0 when none ended")
    run_p50_ms: float | None
    run_p95_ms: float | None


@router.get("", response={200: list[TaskStatsOut], **ERRORS})
def stats_per_task(
    request: HttpRequest,
    range: Literal["hour", "day", "week"] = "day",
    queue: str | None = Query(None, pattern=QUEUE),  # type: ignore[type-arg]
) -> list[dict[str, Any]]:
    """Per task: completed and failed jobs, failure rate, run time p50/p95 over the range.

    From the rollup (a row per point, task and histogram bucket): counts only the queues the
    caller may see; naming one it may not see is refused (403).
    """
    rights = need(request, Perm.VIEW, queue or None)
    rollup = RollupCount.objects.all()
    if rights.queues is not None:
        rollup = rollup.filter(queue__in=rights.queues)
    if queue:
        rollup = rollup.filter(queue=queue)
    return task_stats(range, rollup)
