"""Jobs that cannot run: dropped as an unknown task (engine `UnknownTask`) whose task is still
not registered here. A retry or resubmit would only be dropped again, so every surface refuses
it (the API with 409, bulk actions skip it with the reason) and the pages say why."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from engine import UnknownTask, serializer
from jobsite.jobs import services
from jobsite.jobs.tasks.registry import known_tasks

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from jobsite.jobs.models import JobRecord

# The error type the worker records for a job of a task it has no function for.
UNKNOWN_TASK = UnknownTask.__name__
REASON = "dropped as an unknown task; no worker has it (register the task first)"


def unknown(task: str) -> bool:
    """Tell whether no task of this name is registered here."""
    return task not in known_tasks()


def why_not(task: str, errors: Any) -> str:
    """Return why a job of `task` whose error records are `errors` cannot run ("" : it can)."""
    last = errors[-1] if isinstance(errors, list) and errors else {}
    if isinstance(last, dict) and last.get("type") == UNKNOWN_TASK and task not in known_tasks():
        return f"task {task!r} was {REASON}"
    return ""


async def asplit(pairs: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """Split (job id, queue) pairs into those that may run again and the ids that cannot,
    reading each job's task and errors from Redis."""
    by_queue: dict[str, list[str]] = defaultdict(list)
    for job_id, queue in pairs:
        by_queue[queue].append(job_id)
    fit: list[tuple[str, str]] = []
    unfit: list[str] = []
    for queue, ids in by_queue.items():
        for job_id, found in zip(
            ids, await services.ajob_fields(queue, ids, ["task", "errors"]), strict=True
        ):
            errors = serializer.loads(found["errors"]) if found.get("errors") else []
            if found and why_not(found.get("task", ""), errors):
                unfit.append(job_id)
            else:
                fit.append((job_id, queue))
    return fit, unfit


# The dead letters one step of a whole-queue resubmit reads (as the engine's resubmit_dlq).
DLQ_PAGE = 500


async def aresubmit_dlq(queue: str, task: str | None = None) -> tuple[int, int]:
    """Resubmit every dead letter of `queue` (only those of `task` when given) that may run
    again; return how many were resubmitted and how many were left because they cannot run.

    Only the jobs of a task not registered here have their errors read."""
    done, left, cursor = 0, set[str](), 0
    while True:
        cursor, ids = await services.arun_engine(
            lambda c: c.dead_letters.scan(queue, cursor, DLQ_PAGE)  # noqa: B023 (the bridge calls it at once)
        )
        if ids:
            names = [f.get("task", "") for f in await services.ajob_fields(queue, ids, ["task"])]
            chosen = [(i, n) for i, n in zip(ids, names, strict=True) if task is None or n == task]
            suspects = [(i, queue) for i, n in chosen if n and unknown(n)]
            unfit = set((await asplit(suspects))[1]) if suspects else set()
            left.update(unfit)
            fit = [(i, queue) for i, _ in chosen if i not in unfit]
            done += await services.aresubmit(fit) if fit else 0
        if cursor == 0:
            return done, len(left)


def count_unfit(rows: QuerySet[JobRecord]) -> int:
    """Count the history rows (dead letters) a resubmit would leave: dropped as an unknown task
    still unknown (only the rows of tasks not registered here are read)."""
    names = [n for n in rows.order_by().values_list("task", flat=True).distinct() if unknown(n)]
    chosen = rows.filter(task__in=names).values_list("task", "errors")
    return sum(1 for name, errors in chosen.iterator() if why_not(name, errors))
