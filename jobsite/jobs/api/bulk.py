"""The bulk resource (/bulk): cancel or retry the jobs a body selects, within the cap, audited."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router
from ninja.errors import HttpError

from jobsite.jobs import audit, services
from jobsite.jobs.api.schemas import ERRORS, RUN_NOW_SKIPPED, BulkIn, BulkOut, RunNowIn
from jobsite.jobs.conf import bulk_max
from jobsite.jobs.models import CANCELLABLE, RETRYABLE, JobRecord
from jobsite.jobs.permissions import Grant, Perm, aneed
from jobsite.jobs.search import text_search
from jobsite.jobs.tasks import runnable

router = Router(tags=["jobs"])


@router.post("/cancel", response={200: BulkOut, **ERRORS})
async def cancel_many(request: HttpRequest, body: BulkIn) -> BulkOut:
    """Cancel the given live jobs, or every one matching the filter (`dry_run` counts only)."""
    return await aapply(request, body, Perm.CANCEL, "cancel")


@router.post("/retry", response={200: BulkOut, **ERRORS})
async def retry_many(request: HttpRequest, body: BulkIn) -> BulkOut:
    """Retry (or resubmit from the DLQ) the given finished jobs, or every one matching."""
    return await aapply(request, body, Perm.RETRY, "retry")


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
    rights: Grant, body: BulkIn, action: str, cap: int
) -> tuple[list[tuple[str, str]], int]:
    """Return up to `cap` + 1 (job id, queue) pairs `body` selects, and how many match."""
    rows = rights.narrow(JobRecord.objects.filter(state__in=BULK_STATES[action]))
    if body.ids is not None:
        rows = rows.filter(id__in=body.ids)
    filters = {"state": body.state, "queue": body.queue, "task": body.task}
    rows = rows.filter(**{k: v for k, v in filters.items() if v})
    if body.task_like:
        rows = rows.filter(task__icontains=body.task_like)
    if body.since is not None:
        rows = rows.filter(submitted_at__gte=body.since)
    if body.q:
        rows = text_search(rows, body.q)
    pairs = list(rows.values_list("id", "queue")[: cap + 1])
    return pairs, rows.count() if len(pairs) > cap else len(pairs)


async def aapply(request: HttpRequest, body: BulkIn, perm: Perm, action: str) -> BulkOut:
    """Apply `action` to the jobs `body` selects, within the cap; audit it."""
    rights = await aneed(request, perm, body.queue)
    cap = bulk_max()
    pairs, matched = await sync_to_async(_select)(rights, body, action, cap)
    # Ids asked for that are not in a state this action applies to (or not visible here).
    unfit = len(set(body.ids)) - matched if body.ids is not None else 0
    if body.dry_run:
        return BulkOut(matched=matched, changed=0, skipped=_unfit(action, unfit))
    if matched > cap:
        raise HttpError(
            422,
            f"{matched} jobs match; one request may change at most {cap} "
            "(JOBSITE['BULK_MAX']): narrow the selection",
        )
    changed, skipped = await BULK_ACTIONS[action](pairs)
    skipped.update(_unfit(action, unfit))
    if body.ids is not None:
        await audit.arecord(rights.user, action, [i for i, _ in pairs], rights.via)
    else:
        await audit.arecord_bulk(rights.user, action, body.selector(), matched, rights.via)
    return BulkOut(matched=matched, changed=changed, skipped=skipped)


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
