"""The mirror: event streams -> database rows, in batches, idempotently, acked after commit."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from datetime import UTC, datetime

from asgiref.sync import sync_to_async
from django.db import transaction

from engine import Job as EngineJob
from engine.connection import connect
from engine.events import Event, EventReader
from engine.reconnect import run_periodic

from .conf import engine_settings
from .models import Job, JobEvent

log = logging.getLogger("jobsite.mirror")

# Row fields copied from the job hash (the hash is the newest truth for a job).
_HASH_FIELDS = (
    "queue",
    "task",
    "version",
    "state",
    "priority",
    "attempt",
    "args",
    "kwargs",
    "result",
    "errors",
    "progress",
    "worker",
)
_TIMES = (
    "sent_at",
    "submitted_at",
    "claimed_at",
    "started_at",
    "retried_at",
    "heartbeat_at",
    "completed_at",
    "run_at",
)
UPDATE_FIELDS = [*_HASH_FIELDS, "progress_message", *_TIMES, "last_event_id"]


def _dt(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


def row_from_hash(fields: dict[str, str], last_event_id: str) -> Job:
    """Return a Job row built from a job hash."""
    job = EngineJob.from_hash(fields)
    row = Job(id=job.id, last_event_id=last_event_id, progress_message=job.progress_message or "")
    for name in _HASH_FIELDS:
        setattr(row, name, getattr(job, name))
    row.state = str(job.state)
    row.worker = job.worker or ""
    for name in _TIMES:
        setattr(row, name, _dt(getattr(job, f"{name}_ms")))
    return row


def row_from_event(event: Event, old: Job | None) -> Job:
    """Return a row for a job whose hash is gone (expired): the event is all we know."""
    row = old or Job(id=event.job, queue=event.queue, task="", submitted_at=_dt(event.at_ms))
    row.state = event.to_state
    row.attempt = event.attempt
    row.worker = event.worker or row.worker
    if event.to_state in ("completed", "failed", "cancelled", "stalled", "dropped", "expired"):
        row.completed_at = _dt(event.at_ms)
    row.last_event_id = event.key
    return row


def apply_batch(events: Sequence[Event], hashes: dict[str, dict[str, str]]) -> int:
    """Apply events in one transaction; an event older than a row's last one changes nothing.

    Returns the number of job rows written.
    """
    newest: dict[str, Event] = {}
    for event in events:
        if event.job and (event.job not in newest or event.key > newest[event.job].key):
            newest[event.job] = event
    with transaction.atomic():
        existing = {
            row.id: row for row in Job.objects.select_for_update().filter(id__in=list(newest))
        }
        rows = []
        for job_id, event in newest.items():
            old = existing.get(job_id)
            if old is not None and old.last_event_id >= event.key:
                continue
            fields = hashes.get(job_id)
            rows.append(row_from_hash(fields, event.key) if fields else row_from_event(event, old))
        Job.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["id"], update_fields=UPDATE_FIELDS
        )
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    queue=e.queue,
                    event_id=e.key,
                    job_id=e.job,
                    from_state=e.from_state,
                    to_state=e.to_state,
                    at=_dt(e.at_ms),
                    attempt=e.attempt,
                    worker=e.worker,
                    error=e.error,
                    progress=e.progress,
                )
                for e in events
                if e.job
            ],
            ignore_conflicts=True,
        )
    return len(rows)


def resync_rows(hashes: dict[str, dict[str, str]]) -> int:
    """Upsert rows straight from job hashes (after the stream was trimmed past the mirror)."""
    rows = [row_from_hash(fields, "") for fields in hashes.values()]
    with transaction.atomic():
        existing = dict(Job.objects.filter(id__in=list(hashes)).values_list("id", "last_event_id"))
        for row in rows:
            row.last_event_id = existing.get(row.id, "")
        Job.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["id"], update_fields=UPDATE_FIELDS
        )
    return len(rows)


class Mirror:
    """Follow every queue's event stream as one consumer of the `mirror` group."""

    def __init__(
        self, queues: Sequence[str], consumer: str | None = None, batch: int = 500
    ) -> None:
        self.settings = engine_settings()
        self.redis = connect(self.settings, blocking=True)
        self.reader = EventReader(
            self.redis, self.settings, queues, consumer=consumer or f"mirror-{socket.gethostname()}"
        )
        self.queues = list(queues)
        self.batch = batch
        self.applied = 0

    async def start(self) -> None:
        """Create the groups, resync if the stream was trimmed past us, apply what is pending."""
        await self.reader.ensure_groups()
        for queue in self.queues:
            if await self.reader.behind_trim(queue):
                await self.resync(queue)
        while events := await self.reader.pending(self.batch):
            await self.apply(events)

    async def resync(self, queue: str) -> int:
        """Rebuild rows from every job hash of `queue`."""
        ids = await self.reader.scan_job_ids(queue)
        total = 0
        for start in range(0, len(ids), 1000):
            hashes = await self.reader.job_hashes(queue, ids[start : start + 1000])
            total += await sync_to_async(resync_rows, thread_sensitive=True)(hashes)
        log.warning("mirror fell behind the stream's trim; resynced queue=%s jobs=%d", queue, total)
        return total

    async def apply(self, events: list[Event]) -> None:
        """Write a batch to the database, then ack it."""
        hashes: dict[str, dict[str, str]] = {}
        by_queue: dict[str, list[str]] = {}
        for e in events:
            by_queue.setdefault(e.queue, []).append(e.job)
        for queue, ids in by_queue.items():
            hashes.update(await self.reader.job_hashes(queue, sorted(set(ids))))
        await sync_to_async(apply_batch, thread_sensitive=True)(events, hashes)
        await self.reader.ack(events)
        self.applied += len(events)

    async def step(self, block_ms: int = 1000) -> int:
        """Read and apply one batch; return how many events it held."""
        events = await self.reader.read(self.batch, block_ms)
        if events:
            await self.apply(events)
        return len(events)

    async def run(self, stopping: asyncio.Event) -> None:
        """Mirror until `stopping` is set; Redis and database errors are retried, never fatal."""
        started = False

        async def tick() -> float:
            nonlocal started
            if not started:
                await self.start()
                started = True
            await self.step()
            return 0.0

        await run_periodic("mirror", tick, stopping)

    async def aclose(self) -> None:
        """Close the Redis connection."""
        await self.redis.aclose()
