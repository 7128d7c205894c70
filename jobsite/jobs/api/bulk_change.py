"""Changing many jobs at once, for every surface: the rows each action applies to, its step
over one chunk, and the background run past JOBSITE["BULK_MAX"].

The API's /bulk, its dead-letter group actions and the admin's actions all come here. Within the
cap a change is `STEPS[action]` over the chosen rows, in the request. Past it `begin` records a
`BulkRun` and `walk` takes it to its end in a thread: the matching rows in id order, CHUNK at a
time, only those submitted before it began, its progress kept in the row (GET /bulk/runs/{id}).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection
from django.db.models import QuerySet
from django.utils import timezone

from jobsite.jobs import services
from jobsite.jobs.api.schemas import BulkRunOut
from jobsite.jobs.history import deadletters
from jobsite.jobs.models import CANCELLABLE, RETRYABLE, TERMINAL, BulkRun, JobRecord, JobSearch
from jobsite.jobs.search import text_search
from jobsite.jobs.tasks import runnable

log = logging.getLogger("jobsite.bulk")

# Jobs one step of a background run changes: one query, one engine call per queue.
CHUNK = 1_000
# A running run whose heartbeat is older than this stopped with its process.
STALE_S = 60

Pairs = list[tuple[str, str]]
# One chunk's change: how many changed, and the others by why they were skipped.
Step = Callable[[Pairs], Awaitable[tuple[int, dict[str, int]]]]

# The states each action applies to, as the history last saw them.
STATES: dict[str, list[str]] = {
    "cancel": list(CANCELLABLE),
    "retry": list(RETRYABLE),
    "resubmit": list(deadletters.DLQ_STATES),
    "purge": list(TERMINAL),
}
SKIP_REASONS = {
    "finished": "finished meanwhile",
    "not_found": "no longer in Redis",
}


def matching(
    action: str, selector: dict[str, Any], queues: list[str] | None, ids: list[str] | None = None
) -> QuerySet[JobRecord]:
    """Return the rows `action` applies to that `selector` or `ids` chooses, within `queues`
    (None: every queue). A selector is a filter in its JSON form (state, queue, task,
    task_like, q, since, before) or a dead-letter group (fingerprint, queue, task)."""
    if "fingerprint" in selector:
        group = deadletters.dead_in(queues, selector.get("queue"), selector.get("task"))
        return group.filter(fingerprint=selector["fingerprint"])
    rows = JobRecord.objects.filter(state__in=STATES[action])
    if queues is not None:
        rows = rows.filter(queue__in=queues)
    if ids is not None:
        rows = rows.filter(id__in=ids)
    filters = {k: selector.get(k) for k in ("state", "queue", "task")}
    rows = rows.filter(**{k: v for k, v in filters.items() if v})
    if selector.get("task_like"):
        rows = rows.filter(task__icontains=selector["task_like"])
    if selector.get("since"):
        rows = rows.filter(submitted_at__gte=datetime.fromisoformat(selector["since"]))
    if selector.get("before"):
        rows = rows.filter(submitted_at__lt=datetime.fromisoformat(selector["before"]))
    if selector.get("q"):
        rows = text_search(rows, selector["q"])
    return rows


def begin(
    action: str,
    selector: dict[str, Any],
    matched: int,
    queues: list[str] | None,
    by: Any,
    via: str,
) -> BulkRun:
    """Record a background run of `action` over `selector` (`matched` jobs, within `queues`)
    for the user `by` and start it."""
    now = timezone.now()
    run = BulkRun.objects.create(
        action=action,
        selector=selector,
        queues=queues,
        matched=matched,
        by=str(getattr(by, "username", by)),
        via=via,
        started_at=now,
        heartbeat_at=now,
    )
    threading.Thread(target=walk, args=(run.pk,), name=f"bulk-{run.pk}", daemon=True).start()
    log.info("bulk run began run=%d action=%s selector=%s", run.pk, action, run.selector)
    return run


abegin = sync_to_async(begin)


def walk(run_id: int) -> None:
    """Run a recorded bulk run to its end: its rows in id order, CHUNK at a time, each chunk's
    outcome and the walk's position saved as it goes. A run whose row was deleted meanwhile
    stops after its chunk (deleting the row is how a run is stopped)."""
    run = BulkRun.objects.get(pk=run_id)
    kept = BulkRun.objects.filter(pk=run_id)
    step = async_to_sync(STEPS[run.action])
    try:
        while True:
            rows = matching(run.action, run.selector, run.queues).filter(
                submitted_at__lte=run.started_at, id__gt=run.last_id
            )
            pairs = list(rows.order_by("id").values_list("id", "queue")[:CHUNK])
            if not pairs:
                break
            changed, skipped = step(pairs)
            run.looked_at += len(pairs)
            run.changed += changed
            for reason, n in skipped.items():
                run.skipped[reason] = run.skipped.get(reason, 0) + n
            run.last_id, run.heartbeat_at = pairs[-1][0], timezone.now()
            progress = ("looked_at", "changed", "skipped", "last_id", "heartbeat_at")
            if not kept.update(**{f: getattr(run, f) for f in progress}):
                log.warning("bulk run stopped: its row is gone run=%d", run_id)
                return
        run.state = "done"
        log.info("bulk run done run=%d changed=%d", run_id, run.changed)
    except Exception as exc:
        run.state, run.error = "failed", repr(exc)[:500]
        log.exception("bulk run failed run=%d", run_id)
    finally:
        kept.update(state=run.state, error=run.error, finished_at=timezone.now())
        connection.close()


def run_out(run: BulkRun) -> BulkRunOut:
    """Return `run` as the API shows it: a running one whose heartbeat went stale is
    `interrupted`."""
    stale = run.heartbeat_at < timezone.now() - timedelta(seconds=STALE_S)
    state = "interrupted" if run.state == "running" and stale else run.state
    return BulkRunOut(
        id=run.pk,
        action=run.action,
        state=state,
        selector=run.selector,
        matched=run.matched,
        looked_at=run.looked_at,
        changed=run.changed,
        skipped=run.skipped,
        by=run.by,
        started_at=run.started_at,
        finished_at=run.finished_at,
        error=run.error,
    )


async def acancel(pairs: Pairs) -> tuple[int, dict[str, int]]:
    """Cancel; return how many changed, and the others by reason (finished meanwhile...)."""
    outcome = await services.acancel(pairs)
    skipped: dict[str, int] = {}
    for value in outcome.values():
        if value not in ("cancelled", "cancelling"):
            reason = SKIP_REASONS.get(value, value)
            skipped[reason] = skipped.get(reason, 0) + 1
    return sum(1 for v in outcome.values() if v in ("cancelled", "cancelling")), skipped


async def aretry(pairs: Pairs) -> tuple[int, dict[str, int]]:
    """Retry; return how many changed, and how many Redis no longer had as retryable or could
    not run (an unknown task)."""
    fit, unfit = await runnable.asplit(pairs)
    changed = await services.aresubmit(fit) if fit else 0
    left = len(fit) - changed
    gone = "no longer retryable in Redis (expired, retried or purged)"
    skipped = {gone: left} if left else {}
    if unfit:
        skipped[runnable.REASON] = len(unfit)
    return changed, skipped


async def arunnable(action: str, pairs: Pairs, skipped: dict[str, int]) -> Pairs:
    """Return the pairs `action` may change: a resubmit leaves out the jobs that would only be
    dropped again (an unknown task still unknown), counted in `skipped` with the reason."""
    if action != "resubmit" or not pairs:
        return pairs
    fit, unfit = await runnable.asplit(pairs)
    if unfit:
        skipped[runnable.REASON] = skipped.get(runnable.REASON, 0) + len(unfit)
    return fit


def _forget(ids: list[str]) -> None:
    """Delete purged jobs from the history."""
    JobSearch.objects.filter(job_id__in=ids).delete()
    JobRecord.objects.filter(id__in=ids).delete()


async def achange(action: str, pairs: Pairs) -> tuple[int, int | None]:
    """Purge (from Redis and the history) or resubmit jobs; return how many Redis changed and,
    for a resubmit, Redis' time just before it (ms)."""
    if action == "purge":
        changed = await services.apurge(pairs)
        await sync_to_async(_forget)([i for i, _ in pairs])
        return changed, None
    since_ms = await services.aclock_ms({q for _, q in pairs})
    return await services.aresubmit(pairs), since_ms


async def aresubmit(pairs: Pairs) -> tuple[int, dict[str, int]]:
    """Resubmit dead letters but those that cannot run; return how many changed, the others
    by reason."""
    skipped: dict[str, int] = {}
    fit = await arunnable("resubmit", pairs, skipped)
    changed, _ = await achange("resubmit", fit) if fit else (0, None)
    return changed, skipped


async def apurge(pairs: Pairs) -> tuple[int, dict[str, int]]:
    """Purge from Redis and the history; return how many Redis still held."""
    changed, _ = await achange("purge", pairs)
    return changed, {}


# What each action does to one chunk: the same step in a request and in a background run.
STEPS: dict[str, Step] = {
    "cancel": acancel,
    "retry": aretry,
    "resubmit": aresubmit,
    "purge": apurge,
}
