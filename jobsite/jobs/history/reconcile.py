"""Reconciliation: live rows whose job is nowhere in Redis become `lost` (or are resubmitted)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.utils import timezone

from engine import Job as EngineJob
from engine import task_ref
from jobsite.jobs import conf, services
from jobsite.jobs.models import LOST, TERMINAL, JobRecord, QueueRecord, WorkerRecord

log = logging.getLogger("jobsite.reconcile")


def _resubmit(rows: list[JobRecord]) -> None:
    jobs: list[EngineJob] = []
    for row in rows:
        ref = task_ref(row.task, version=row.version).using(
            queue=row.queue, priority=row.priority, job_id=row.id
        )
        jobs.append(ref.call(*row.args, **row.kwargs))
    services.push(jobs)


def reconcile(policy: str | None = None, chunk: int = 1000) -> dict[str, int]:
    """Check every live row against Redis; return counts of checked, lost and resubmitted rows."""
    policy = policy or conf.option("RECONCILE")
    counts = {"checked": 0, "lost": 0, "resubmitted": 0}
    live = JobRecord.objects.exclude(state__in=[*TERMINAL, LOST]).order_by("id")
    last = ""
    while True:
        rows = list(live.filter(id__gt=last)[:chunk])
        if not rows:
            return counts
        last = rows[-1].id
        counts["checked"] += len(rows)
        gone = services.missing([(row.id, row.queue) for row in rows])
        missing = [row for row in rows if row.id in gone]
        if not missing:
            continue
        if policy == "resubmit":
            _resubmit(missing)
            counts["resubmitted"] += len(missing)
        else:
            JobRecord.objects.filter(id__in=[r.id for r in missing]).update(
                state=LOST, completed_at=timezone.now()
            )
            counts["lost"] += len(missing)
        log.warning("reconcile policy=%s missing=%d", policy, len(missing))


def sync_workers() -> int:
    """Copy the engine's worker registry into Worker rows; drop workers that left it."""
    infos = services.workers()
    seen = []
    for info in infos:
        WorkerRecord.objects.update_or_create(
            id=info["id"],
            defaults={
                "host": info["host"],
                "pid": info["pid"],
                "queues": info["queues"],
                "concurrency": info["concurrency"],
                "current_jobs": info["current_jobs"],
                "started_at": datetime.fromtimestamp(info["started_at_ms"] / 1000, tz=UTC),
                "heartbeat_at": datetime.fromtimestamp(info["heartbeat_at_ms"] / 1000, tz=UTC),
            },
        )
        seen.append(info["id"])
    WorkerRecord.objects.exclude(id__in=seen).delete()
    return len(seen)


def sync_queues() -> int:
    """Copy every queue's paused flag and live counts into Queue rows."""
    rows = services.queue_states()
    for name, paused, counts in rows:
        QueueRecord.objects.update_or_create(
            name=name,
            defaults={
                "paused": paused,
                **{k: counts[k] for k in ("submitted", "scheduled", "started", "dlq")},
            },
        )
    return len(rows)
