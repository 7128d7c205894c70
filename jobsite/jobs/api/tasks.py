"""The tasks resource (/tasks): every registered task with its options and argument schema."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from engine import argument_schema
from jobsite.jobs.api.schemas import ERRORS, TaskOut
from jobsite.jobs.permissions import Perm, need
from jobsite.jobs.tasks.registry import known_tasks

router = Router(tags=["tasks"])


@router.get("", response={200: list[TaskOut], **ERRORS})
def tasks(request: HttpRequest) -> list[TaskOut]:
    """Every registered task with its options and its argument schema."""
    need(request, Perm.VIEW)
    return [
        TaskOut(
            name=t.name,
            version=t.version,
            queue=t.options.queue,
            priority=t.options.priority,
            max_retries=t.options.max_retries,
            timeout_s=t.options.timeout_s,
            arguments=argument_schema(t),
        )
        for t in sorted(known_tasks().values(), key=lambda t: t.name)
    ]
