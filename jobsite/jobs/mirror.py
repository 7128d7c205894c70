"""The mirror: event streams -> database rows, in batches, idempotently, acked after commit."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

from engine.connection import connect
from engine.events import Event, EventReader
from engine.reconnect import run_periodic

from . import bulkwrite, history
from .conf import engine_settings
from .retention import Horizon

log = logging.getLogger("jobsite.mirror")


def apply_batch(events: Sequence[Event], hashes: dict[str, dict[str, str]]) -> int:
    """Apply events in one transaction; an event older than a row's last one changes nothing.

    Each job gets one row change (its newest event's); rows that retention would prune are
    not written, nor their events, so a late or replayed event never resurrects them. New
    events (not replays) are added to the per-minute counts. Returns the rows offered.
    """
    newest: dict[str, Event] = {}
    for event in events:
        if event.job and (event.job not in newest or event.key > newest[event.job].key):
            newest[event.job] = event
    horizon = Horizon.now()
    full: list[dict[str, Any]] = []
    bare: list[dict[str, Any]] = []
    for job, event in newest.items():
        if job in hashes:
            row, rows = history.values_from_hash(hashes[job], event.key), full
        else:
            row, rows = history.values_from_event(event), bare
        if horizon.keeps(row["state"], row["completed_at"], _at(event)):
            rows.append(row)
    kept = {row["id"] for row in full} | {row["id"] for row in bare}
    with transaction.atomic():
        bulkwrite.upsert(full, history.ALL_BUT_ID)
        bulkwrite.upsert(bare, history.BARE_COLUMNS)
        new = bulkwrite.insert_events([e for e in events if e.job in kept])
        bulkwrite.count_minutes(new)
    return len(full) + len(bare)


def _at(event: Event) -> datetime:
    return datetime.fromtimestamp(event.at_ms / 1000, tz=UTC)


def resync_rows(hashes: dict[str, dict[str, str]]) -> int:
    """Upsert rows straight from job hashes (after the stream was trimmed past the mirror)."""
    horizon = Horizon.now()
    rows = [history.values_from_hash(fields, "") for fields in hashes.values()]
    rows = [r for r in rows if horizon.keeps(r["state"], r["completed_at"], timezone.now())]
    with transaction.atomic():
        bulkwrite.upsert(rows, history.RESYNC_COLUMNS, guard=False)
    return len(rows)


class Mirror:
    """Follow every queue's event stream as one consumer of the `mirror` group."""

    def __init__(
        self, queues: Sequence[str], consumer: str | None = None, batch: int = 2000
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
        await self._notify()

    async def _notify(self) -> None:
        """Tell dashboards a batch landed (one message per batch; consumers coalesce)."""
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            await layer.group_send("dashboard", {"type": "jobs.changed"})
        except Exception:
            log.warning("dashboard notify failed", exc_info=True)

    async def step(self, block_ms: int = 1000) -> int:
        """Read and apply one batch; return how many events it held."""
        events = await self.reader.read(self.batch, block_ms)
        if events:
            await self.apply(events)
        return len(events)

    async def run(
        self, stopping: asyncio.Event, transient: tuple[type[BaseException], ...] = ()
    ) -> None:
        """Mirror until `stopping` is set; Redis and `transient` errors are retried, bugs raise."""
        started = False

        async def tick() -> float:
            nonlocal started
            if not started:
                await self.start()
                started = True
            await self.step()
            return 0.0

        await run_periodic("mirror", tick, stopping, transient)

    async def aclose(self) -> None:
        """Close the Redis connection."""
        await self.redis.aclose()
