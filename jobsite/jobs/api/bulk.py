"""The bulk resource (/bulk): cancel or retry the jobs a body selects, any number, audited.

Up to JOBSITE["BULK_MAX"] jobs change within the request. Past it the change runs in the
background (202, a `BulkRun` row): the matching rows are walked in id order, a chunk at a time,
only those submitted before it began, its progress kept in the row (GET /bulk/runs/{id}).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja import Router, Status
from ninja.errors import HttpError

from jobsite.jobs import audit, services
from jobsite.jobs.api.schemas import (
    ERRORS,
    RUN_NOW_SKIPPED,
    BulkIn,
    BulkOut,
    BulkRunOut,
    RunNowIn,
)
from jobsite.jobs.conf import bulk_max
from jobsite.jobs.models import CANCELLABLE, RETRYABLE, BulkRun, JobRecord
from jobsite.jobs.permissions import Grant, Perm, aneed
from jobsite.jobs.search import text_search
from jobsite.jobs.tasks import runnable

log = logging.getLogger("jobsite.bulk")

# Jobs one step of a background run changes: one query, one engine call per queue.
CHUNK = 1_000
# A running run whose heartbeat is older than this stopped with its process.
STALE_S = 60

router = Router(tags=["jobs"])


@router.post("/cancel", response={200: BulkOut, 202: BulkRunOut, **ERRORS})
async def cancel_many(request: HttpRequest, body: BulkIn) -> BulkOut | Status[BulkRunOut]:
    """Cancel the given live jobs, or every one matching the filter (`dry_run` counts only);
    past JOBSITE["BULK_MAX"] in the background (202)."""
    return await aapply(request, body, Perm.CANCEL, "cancel")


@router.post("/retry", response={200: BulkOut, 202: BulkRunOut, **ERRORS})
async def retry_many(request: HttpRequest, body: BulkIn) -> BulkOut | Status[BulkRunOut]:
    """Retry (or resubmit from the DLQ) the given finished jobs, or every one matching; past
    JOBSITE["BULK_MAX"] in the background (202)."""
    return await aapply(request, body, Perm.RETRY, "retry")


@router.get("/runs/{run_id}", response={200: BulkRunOut, **ERRORS})
async def bulk_run(request: HttpRequest, run_id: int) -> BulkRunOut:
    """A background bulk change: how many it matched, looked at, changed and skipped."""
    run = await BulkRun.objects.filter(pk=run_id).afirst()
    rights = await aneed(request, Perm.VIEW, run.selector.get("queue") if run else None)
    scope = rights.queues
    if run is None or (scope is not None and not set(run.queues or [None]) <= set(scope)):
        raise HttpError(404, f"no bulk run {run_id}")
    return run_out(run)


@router.post("/run-now", response={200: BulkOut, **ERRORS})
async def run_now_many(request: HttpRequest, body: RunNowIn) -> BulkOut:
    """Run the given scheduled jobs of a queue now; the others are reported as skipped."""
    rights = await aneed(request, Perm.RETRY, body.queue)
    ids = list(dict.fromkeys(body.ids))
    outcome = await services.arun_now([(i, body.queue) for i in ids])
    skipped: dict[str, int] = {}
    for value in outcome.values():
        if value != "promoted":
            reason = RUN_NOW_SKIPPED.get(value, value)
            skipped[reason] = skipped.get(reason, 0) + 1
    promoted = [i for i, v in outcome.items() if v == "promoted"]
    await audit.arecord(rights.user, "run now", promoted, rights.via)
    return BulkOut(matched=len(ids), changed=len(promoted), skipped=skipped)


def matching(
    action: str, selector: dict[str, Any], queues: list[str] | None, ids: list[str] | None = None
) -> QuerySet[JobRecord]:
    """Return the rows `action` applies to that the filter `selector` (BulkIn.selector, in
    its JSON form) or `ids` chooses, within `queues` (None: every queue)."""
    rows = JobRecord.objects.filter(state__in=BULK_STATES[action])
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
    if selector.get("q"):
        rows = text_search(rows, selector["q"])
    return rows


def _select(
    queues: list[str] | None, body: BulkIn, action: str, cap: int
) -> tuple[list[tuple[str, str]], int]:
    """Return up to `cap` + 1 (job id, queue) pairs `body` selects, and how many match."""
    rows = matching(action, body.selector(), queues, body.ids)
    pairs = list(rows.values_list("id", "queue")[: cap + 1])
    return pairs, rows.count() if len(pairs) > cap else len(pairs)


async def aapply(
    request: HttpRequest, body: BulkIn, perm: Perm, action: str
) -> BulkOut | Status[BulkRunOut]:
    """Apply `action` to the jobs `body` selects (past the cap, in the background); audit it."""
    rights = await aneed(request, perm, body.queue)
    cap = bulk_max()
    pairs, matched = await sync_to_async(_select)(rights.queues, body, action, cap)
    # Ids asked for that are not in a state this action applies to (or not visible here).
    unfit = len(set(body.ids)) - matched if body.ids is not None else 0
    if body.dry_run:
        return BulkOut(matched=matched, changed=0, skipped=_unfit(action, unfit))
    if body.ids is None:
        await audit.arecord_bulk(rights.user, action, body.selector(), matched, rights.via)
    if matched > cap:  # only a filter gets here: ids are at most 10,000, the default cap
        begun = await sync_to_async(_begin)(action, body, matched, rights.queues, rights)
        return Status(202, run_out(begun))
    changed, skipped = await BULK_ACTIONS[action](pairs)
    skipped.update(_unfit(action, unfit))
    if body.ids is not None:
        await audit.arecord(rights.user, action, [i for i, _ in pairs], rights.via)
    return BulkOut(matched=matched, changed=changed, skipped=skipped)


def _begin(
    action: str, body: BulkIn, matched: int, queues: list[str] | None, rights: Grant
) -> BulkRun:
    """Record a background run of `action` over `body`'s filter (`matched` jobs) and start it."""
    now = timezone.now()
    run = BulkRun.objects.create(
        action=action,
        selector=body.selector(),
        queues=queues,
        matched=matched,
        by=str(getattr(rights.user, "username", rights.user)),
        via=rights.via,
        started_at=now,
        heartbeat_at=now,
    )
    threading.Thread(target=walk, args=(run.pk,), name=f"bulk-{run.pk}", daemon=True).start()
    log.info("bulk run began run=%d action=%s selector=%s", run.pk, action, run.selector)
    return run


def walk(run_id: int) -> None:
    """Run a recorded bulk run to its end: its rows in id order, CHUNK at a time, each chunk's
    outcome and the walk's position saved as it goes."""
    run = BulkRun.objects.get(pk=run_id)
    step = async_to_sync(BULK_ACTIONS[run.action])
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
            run.save(update_fields=["looked_at", "changed", "skipped", "last_id", "heartbeat_at"])
        run.state = "done"
        log.info("bulk run done run=%d changed=%d", run.pk, run.changed)
    except Exception as exc:
        run.state, run.error = "failed", repr(exc)[:500]
        log.exception("bulk run failed run=%d", run.pk)
    finally:
        run.finished_at = timezone.now()
        run.save(update_fields=["state", "error", "finished_at"])
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


def _unfit(action: str, n: int) -> dict[str, int]:
    verb = {"cancel": "cancellable", "retry": "retryable"}[action]
    return {f"not {verb} (state or permission)": n} if n > 0 else {}


async def _acancel_count(pairs: list[tuple[str, str]]) -> tuple[int, dict[str, int]]:
    """Cancel; return how many changed, and the others by reason (finished meanwhile...)."""
    outcome = await services.acancel(pairs)
    skipped: dict[str, int] = {}
    for value in outcome.values():
        if value not in ("cancelled", "cancelling"):
            reason = SKIP_REASONS.get(value, value)
            skipped[reason] = skipped.get(reason, 0) + 1
    return sum(1 for v in outcome.values() if v in ("cancelled", "cancelling")), skipped


async def _aretry_count(pairs: list[tuple[str, str]]) -> tuple[int, dict[str, int]]:
    """Retry; return how many changed, and how many Redis no longer had as retryable."""
    fit, unfit = await runnable.asplit(pairs)
    changed = await services.aresubmit(fit) if fit else 0
    left = len(fit) - changed
    gone = "no longer retryable in Redis (expired, retried or purged)"
    skipped = {gone: left} if left else {}
    if unfit:
        skipped[runnable.REASON] = len(unfit)
    return changed, skipped


SKIP_REASONS = {
    "finished": "finished meanwhile",
    "not_found": "no longer in Redis",
}
BULK_STATES = {"cancel": CANCELLABLE, "retry": RETRYABLE}
BULK_ACTIONS = {"cancel": _acancel_count, "retry": _aretry_count}
