"""The bulk resource (/bulk): cancel or retry the jobs a body selects, any number, audited.

Up to JOBSITE["BULK_MAX"] jobs change within the request. Past it a filter's change runs in the
background (202, a `BulkRun` that bulk_change.walk takes to its end), its progress at
GET /bulk/runs/{id}.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router, Status
from ninja.errors import HttpError

from jobsite.jobs import audit, services
from jobsite.jobs.api.bulk_change import STEPS, abegin, matching, run_out
from jobsite.jobs.api.schemas import (
    ERRORS,
    RUN_NOW_SKIPPED,
    BulkIn,
    BulkOut,
    BulkRunOut,
    RunNowIn,
)
from jobsite.jobs.conf import bulk_max
from jobsite.jobs.models import BulkRun
from jobsite.jobs.permissions import Perm, aneed

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


def _select(
    queues: list[str] | None, body: BulkIn, action: str, cap: int
) -> tuple[list[tuple[str, str]], int]:
    """Return the (job id, queue) pairs `body` selects (a filter's up to `cap` + 1; ids, at
    most 10,000, whole), and how many match."""
    rows = matching(action, body.selector(), queues, body.ids)
    if body.ids is not None:
        pairs = list(rows.values_list("id", "queue"))
        return pairs, len(pairs)
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
    if matched > cap and body.ids is None:  # ids (at most 10,000) change in the request
        selector = body.selector()
        begun = await abegin(action, selector, matched, rights.queues, rights.user, rights.via)
        return Status(202, run_out(begun))
    changed, skipped = await STEPS[action](pairs)
    skipped.update(_unfit(action, unfit))
    if body.ids is not None:
        await audit.arecord(rights.user, action, [i for i, _ in pairs], rights.via)
    return BulkOut(matched=matched, changed=changed, skipped=skipped)


def _unfit(action: str, n: int) -> dict[str, int]:
    verb = {"cancel": "cancellable", "retry": "retryable"}[action]
    return {f"not {verb} (state or permission)": n} if n > 0 else {}
