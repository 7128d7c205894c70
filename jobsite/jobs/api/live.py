"""What the dashboard shows: one snapshot function over Redis (live) and the history (DB).

Two doors give it: the dashboard's websocket (web/consumers.py) and GET /live here, which a page
whose socket cannot connect (a WSGI server, `runserver` without Daphne) loads and then polls.
Both say in `redis` whether Redis answers, as the process saw it (services/reach.py): the page's
banner, its "since" and the "answers again" toast follow that field alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.db.models import F, Q, Sum
from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router
from pydantic import BaseModel, ConfigDict, Field, field_validator

from jobsite.jobs import services
from jobsite.jobs.api.schemas import ERRORS, QUEUE, Out, RedisStateOut
from jobsite.jobs.history import rollup
from jobsite.jobs.models import (
    STATE_CHOICES,
    VOCABULARY,
    JobRecord,
    RollupCount,
    dead,
    oldest_waiting,
)
from jobsite.jobs.permissions import Grant, Perm, aneed
from jobsite.jobs.search import SearchText, text_search
from jobsite.jobs.services import reach
from jobsite.jobs.tasks import runnable

STATES = frozenset(value for value, _ in STATE_CHOICES)
router = Router(tags=["live"])


class Filter(BaseModel):
    """What a dashboard tab watches; blank fields are no filter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: str | None = None
    queue: str | None = Field(default=None, pattern=QUEUE)
    task: str | None = Field(default=None, max_length=255)
    q: SearchText | None = None
    since: datetime | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("state")
    @classmethod
    def _known_state(cls, value: str | None) -> str | None:
        if value is not None and value not in STATES:
            raise ValueError(f"unknown state; one of {', '.join(sorted(STATES))}")
        return value

    @field_validator("since")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return timezone.make_aware(value) if value and timezone.is_naive(value) else value

    def shown(self) -> dict[str, str]:
        """Return the filter as the client sent it back (JSON, blanks left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class Message(BaseModel):
    """A message from a dashboard tab: a new filter, or whether the tab is visible."""

    model_config = ConfigDict(extra="forbid")

    filter: Filter | None = None
    visible: bool | None = None


def throughput(minutes: int, scope: list[str] | None = None) -> list[Mapping[str, Any]]:
    """Return completed and failed jobs per minute over the last `minutes` (from the rollup),
    of the queues in `scope` (None: every queue)."""
    since = (timezone.now() - timedelta(minutes=minutes)).replace(second=0, microsecond=0)
    rows = rollup.pick(RollupCount.objects.all(), scope, None, None)
    return list(
        rows.filter(span_s=60, start__gte=since, series__in=["completed", "failed"], bucket=0)
        .values(minute=F("start"))
        .annotate(
            completed=Sum("count", filter=Q(series="completed"), default=0),
            failed=Sum("count", filter=Q(series="failed"), default=0),
        )
        .order_by("minute")
    )


def _history(
    chosen: Filter, queues: Sequence[str], scope: Sequence[str] | None = None
) -> dict[str, Any]:
    everything = JobRecord.objects.all()
    if scope is not None:
        everything = everything.filter(queue__in=scope)
    rows = everything
    for key in ("state", "queue", "task"):
        if getattr(chosen, key) is not None:
            rows = rows.filter(**{key: getattr(chosen, key)})
    if chosen.q:
        rows = text_search(rows, chosen.q)
    if chosen.since is not None:
        rows = rows.filter(submitted_at__gte=chosen.since)
    oldest = oldest_waiting(queues)
    now = timezone.now()
    fields = ("id", "task", "queue", "state", "attempt", "progress", "progress_message", "worker")
    return {
        "oldest_waiting_s": {q: (now - at).total_seconds() for q, at in oldest.items() if at},
        "jobs": [
            {
                **{f: getattr(j, f) for f in fields},
                "submitted_at": j.submitted_at.isoformat() if j.submitted_at else None,
            }
            for j in rows.order_by("-submitted_at")[:50]
        ],
        "running": [
            {f: getattr(j, f) for f in fields}
            for j in everything.filter(state="started").order_by("-started_at")[:50]
        ],
        "failures": [
            {
                "id": j.id,
                "task": j.task,
                "state": j.state,
                "error": (j.errors or [{}])[-1],
                "cannot_run": runnable.why_not(j.task, j.errors),
            }
            for j in dead(everything).order_by("-completed_at")[:20]
        ],
    }


async def snapshot(chosen: Filter, rights: Grant | None = None) -> dict[str, Any]:
    """Return counts per queue, workers, and the history views for the filter `chosen`, of the
    queues `rights` may view (None: every queue), and Redis' state; the caller has checked
    `Perm.VIEW`. RedisUnavailable when Redis does not answer (noted in services/reach.py)."""
    scope = rights.queues if rights is not None else None
    if scope is None:
        queues = await services.aqueue_states()
    else:
        names = [q for q in await services.aknown_queues() if q in scope]
        queues = await services.aqueue_states(names)
    workers = await services.arun_engine(lambda c: c.workers.list())
    if rights is not None:
        workers = rights.narrow_workers(workers)
    history = await database_sync_to_async(_history)(chosen, [q.name for q in queues], scope)
    return {
        "filter": chosen.shown(),
        "vocabulary": VOCABULARY,
        "queues": {q.name: q.counts for q in queues},
        "paused": {q.name: q.paused for q in queues},
        # Each worker's task versions (a list as long as its registry) are the Workers page's
        # (GET /workers): a snapshot, sent to every open dashboard, goes without them.
        "workers": [{k: v for k, v in w.items() if k != "versions"} for w in workers],
        **history,
        "redis": reach.current().shown(),
    }


class LiveOut(Out):
    """The dashboard's snapshot, as its websocket sends it (less the message's `type`)."""

    filter: dict[str, str]
    vocabulary: dict[str, Any]
    queues: dict[str, dict[str, int]]
    paused: dict[str, bool]
    workers: list[dict[str, Any]]
    oldest_waiting_s: dict[str, float]
    jobs: list[dict[str, Any]]
    running: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    redis: RedisStateOut


@router.get("", response={200: LiveOut, **ERRORS})
async def live(request: HttpRequest, chosen: Query[Filter]) -> dict[str, Any]:
    """The dashboard's snapshot, the one its websocket sends: counts and paused flag per queue,
    workers, running jobs, recent failures, the newest jobs matching the filter. A dashboard whose
    socket cannot connect polls it."""
    rights = await aneed(request, Perm.VIEW)
    return await snapshot(chosen, rights)
