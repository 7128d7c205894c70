"""The audit trail: every state-changing action, from any surface, as Django admin LogEntry rows.

One entry per job acted on (its id as object id, even before the history has a row for it), or
one summary entry for a bulk change chosen by filter, with the filter and the count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model

from jobsite.jobs.models import JobRecord

# Actions that remove what they act on are logged as deletions; the rest as changes.
REMOVING = {"purge", "delete"}


def record(
    user: Any,
    action: str,
    object_ids: Iterable[str],
    via: str,
    model: type[Model] = JobRecord,
    outcome: Any = None,
) -> int:
    """Log `action` by `user` on each object id; return how many entries were written."""
    kind = ContentType.objects.get_for_model(model)
    flag = DELETION if action in REMOVING else CHANGE
    message = f"{action} via {via}" + (f": {outcome}" if outcome is not None else "")
    entries = [
        LogEntry(
            user_id=user.pk,
            content_type=kind,
            object_id=object_id,
            object_repr=object_id[:200],
            action_flag=flag,
            change_message=message[:2000],
        )
        for object_id in object_ids
    ]
    LogEntry.objects.bulk_create(entries, batch_size=500)
    return len(entries)


def record_bulk(user: Any, action: str, selector: dict[str, Any], count: int, via: str) -> None:
    """Log one summary entry for `action` on every job matching `selector`."""
    LogEntry.objects.create(
        user_id=user.pk,
        content_type=ContentType.objects.get_for_model(JobRecord),
        object_id=None,
        object_repr=f"{count} jobs matching a filter",
        action_flag=DELETION if action in REMOVING else CHANGE,
        change_message=f"{action} via {via}: {count} jobs matching {json.dumps(selector)}"[:2000],
    )


# Async twins, for async views.
arecord = sync_to_async(record)
arecord_bulk = sync_to_async(record_bulk)
