"""Reconciliation: live rows whose job is nowhere in Redis become `lost` (or are resubmitted);
jobs Redis holds that have no row are handed to the mirror to rebuild."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.db.models import QuerySet
from django.utils import timezone

from engine import Job as EngineJob
from engine import task_ref
from jobsite.jobs import conf, services
from jobsite.jobs.models import LOST, TERMINAL, JobRecord, QueueRecord, WorkerRecord

log = logging.getLogger("jobsite.reconcile")


def _resubmit(rows: QuerySet[JobRecord]) -> int:
    """Push `rows` again with their own ids; return how many."""
    jobs: list[EngineJob] = []
    for row in rows:
        ref = task_ref(row.task, version=row.version).using(
            queue=row.queue, priority=row.priority, job_id=row.id
        )
        jobs.append(ref.call(*row.args, **row.kwargs))
    services.push(jobs)
    return len(jobs)


def reconcile(policy: str | None = None, chunk: int = 1000) -> dict[str, int]:
    """Check every live row against Redis; return counts of checked, lost and resubmitted rows.

    Reads only the ids and queues of live rows, a chunk at a time (a backlog can be 100,000s of
    live rows; their JSON columns would be decoded for nothing): whole rows only to resubmit.
    """
    policy = policy or conf.option("RECONCILE")
    counts = {"checked": 0, "lost": 0, "resubmitted": 0}
    live = JobRecord.objects.exclude(state__in=[*TERMINAL, LOST]).order_by("id")
    last = ""
    while True:
        pairs: list[tuple[str, str]] = list(
            live.filter(id__gt=last).values_list("id", "queue")[:chunk]
        )
        if not pairs:
            return counts
        last = pairs[-1][0]
        counts["checked"] += len(pairs)
        gone = services.run_engine(lambda c: c.jobs.missing(pairs))  # noqa: B023 (the bridge calls it at once)
        missing = [job_id for job_id, _ in pairs if job_id in gone]
        if not missing:
            continue
        # Only rows still live: one the mirror ended meanwhile is neither rerun nor marked lost.
        still = live.filter(id__in=missing)
        if policy == "resubmit":
            counts["resubmitted"] += _resubmit(still)
        else:
            counts["lost"] += still.update(state=LOST, completed_at=timezone.now())
        log.warning("reconcile policy=%s missing=%d", policy, len(missing))


# Where each queue's scan of job hashes stands (find_unmirrored), in this process, and the jobs
# it found without a row once (handed to the mirror if they still have none the next time).
_cursors: dict[str, int] = {}
_suspects: dict[str, set[str]] = {}
# The most suspects kept per queue (more are looked at again on a later pass).
SUSPECTS_MAX = 100_000


def find_unmirrored(queues: list[str], budget: int = 10_000) -> int:
    """Hand jobs Redis holds without a row to the mirror (the queue's missed SET); return how
    many. Looks at up to `budget` job hashes per call, the SCAN going on where the last call
    stopped, so every job is looked at over a few calls whatever the number of jobs.

    A job is handed over when it has no row at two looks, one scan pass apart: a job whose
    events the mirror is about to apply is not (and one that is would only be rebuilt from its
    hash between two of the mirror's batches, which is harmless).
    """
    found = 0
    for queue in queues:
        suspects = _suspects.setdefault(queue, set())
        seen = 0
        while seen < budget:
            cursor, ids = services.run_engine(
                lambda c: c.jobs.scan_ids(queue, _cursors.get(queue, 0), 1000)  # noqa: B023 (the bridge calls it at once)
            )
            _cursors[queue] = cursor
            seen += len(ids)
            known = set(JobRecord.objects.filter(id__in=ids).values_list("id", flat=True))
            unknown = [job for job in ids if job not in known]
            again = [job for job in unknown if job in suspects]
            services.run_engine(lambda c: c.jobs.mark_missed(queue, again))  # noqa: B023 (the bridge calls it at once)
            found += len(again)
            suspects.difference_update(ids)
            fresh = [job for job in unknown if job not in again]
            suspects.update(fresh[: max(0, SUSPECTS_MAX - len(suspects))])
            if cursor == 0:
                break
    if found:
        log.warning("reconcile found jobs without a row; handed to the mirror jobs=%d", found)
    return found


def sync_workers() -> int:
    """Copy the engine's worker registry into Worker rows; drop workers that left it."""
    infos = services.run_engine(lambda c: c.workers.list())
    seen = []
    for info in infos:
        WorkerRecord.objects.update_or_create(
            id=info["id"],
            defaults={
                "host": info["host"],
                "pid": info["pid"],
                "queues": info["queues"],
                "role": info.get("role") or "",
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
