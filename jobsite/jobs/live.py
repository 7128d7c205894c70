"""What the dashboard shows: one snapshot function over Redis (live) and the history (DB)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.db.models import Count, Min, Q
from django.db.models.functions import TruncMinute
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from engine import Client

from .conf import engine_settings
from .models import Job, JobEvent, text_search

FILTER_KEYS = ("state", "queue", "task", "q", "since")


def clean_filter(raw: dict[str, Any]) -> dict[str, str]:
    """Keep the known filter keys with short string values."""
    return {k: str(raw[k])[:200] for k in FILTER_KEYS if raw.get(k) not in (None, "")}


def throughput(minutes: int) -> list[dict[str, Any]]:
    """Return completed and failed jobs per minute over the last `minutes`."""
    since = timezone.now() - timedelta(minutes=minutes)
    return list(
        JobEvent.objects.filter(at__gte=since, to_state__in=["completed", "failed"])
        .annotate(minute=TruncMinute("at"))
        .values("minute")
        .annotate(
            completed=Count("id", filter=Q(to_state="completed")),
            failed=Count("id", filter=Q(to_state="failed")),
        )
        .order_by("minute")
    )


def _history(filters: dict[str, str]) -> dict[str, Any]:
    rows = Job.objects.all()
    for key in ("state", "queue", "task"):
        if key in filters:
            rows = rows.filter(**{key: filters[key]})
    if "q" in filters:
        rows = text_search(rows, filters["q"])
    if "since" in filters:
        since_at = parse_datetime(filters["since"]) or parse_datetime(filters["since"] + "T00:00")
        if since_at is not None:
            if timezone.is_naive(since_at):
                since_at = timezone.make_aware(since_at)
            rows = rows.filter(submitted_at__gte=since_at)
    oldest = dict(
        Job.objects.filter(state="submitted").values_list("queue").annotate(Min("submitted_at"))
    )
    now = timezone.now()
    per_minute = throughput(60)
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
            for j in Job.objects.filter(state="started").order_by("-started_at")[:50]
        ],
        "failures": [
            {"id": j.id, "task": j.task, "error": (j.errors or [{}])[-1]}
            for j in Job.objects.filter(state="failed").order_by("-completed_at")[:20]
        ],
        "throughput": [
            {"minute": p["minute"].isoformat(), "completed": p["completed"], "failed": p["failed"]}
            for p in per_minute
        ],
    }


async def snapshot(filters: dict[str, str]) -> dict[str, Any]:
    """Return counts per queue, workers, and the history views for `filters`."""
    async with Client(engine_settings()) as client:
        queues = {q: await client.counts(q) for q in await client.queues()}
        paused = {q: await client.is_paused(q) for q in queues}
        workers = await client.workers()
    history = await database_sync_to_async(_history)(filters)
    return {"filter": filters, "queues": queues, "paused": paused, "workers": workers, **history}
