"""Bulk actions of the API: the jobs a body selects, within the cap, changed and audited."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.errors import HttpError

from . import audit, services
from .conf import bulk_max
from .models import CANCELLABLE, RETRYABLE, JobRecord, text_search
from .permissions import Perm, need
from .schemas import BulkIn, BulkOut


def apply(request: HttpRequest, body: BulkIn, perm: Perm, action: str) -> BulkOut:
    """Apply `action` to the jobs `body` selects, within the cap; audit it."""
    rights = need(request, perm, body.queue)
    rows = rights.narrow(JobRecord.objects.filter(state__in=BULK_STATES[action]))
    if body.ids is not None:
        rows = rows.filter(id__in=body.ids)
    filters = {"state": body.state, "queue": body.queue, "task": body.task}
    rows = rows.filter(**{k: v for k, v in filters.items() if v})
    if body.since is not None:
        rows = rows.filter(submitted_at__gte=body.since)
    if body.q:
        rows = text_search(rows, body.q)
    cap = bulk_max()
    pairs = list(rows.values_list("id", "queue")[: cap + 1])
    matched = rows.count() if len(pairs) > cap else len(pairs)
    if body.dry_run:
        return BulkOut(matched=matched, changed=0)
    if matched > cap:
        raise HttpError(
            422,
            f"{matched} jobs match; one request may change at most {cap} "
            "(JOBSITE['BULK_MAX']): narrow the selection",
        )
    changed = BULK_ACTIONS[action](pairs)
    if body.ids is not None:
        audit.record(rights.user, action, [i for i, _ in pairs], rights.via)
    else:
        audit.record_bulk(rights.user, action, body.selector(), matched, rights.via)
    return BulkOut(matched=matched, changed=changed)


def _cancel_count(pairs: list[tuple[str, str]]) -> int:
    outcome = services.cancel(pairs)
    return sum(1 for v in outcome.values() if v in ("cancelled", "cancelling"))


BULK_STATES = {"cancel": CANCELLABLE, "retry": RETRYABLE}
BULK_ACTIONS = {"cancel": _cancel_count, "retry": services.resubmit}
