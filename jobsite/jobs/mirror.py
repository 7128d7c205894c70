"""The mirror: event streams -> database rows, in batches, idempotently, acked after commit."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from engine.connection import connect
from engine.events import Event, EventReader
from engine.reconnect import run_periodic

from . import history
from .conf import engine_settings

log = logging.getLogger("jobsite.mirror")


def apply_batch(events: Sequence[Event], hashes: dict[str, dict[str, str]]) -> int:
    """Apply events in one transaction; an event older than a row's last one changes nothing.

    Returns the number of job rows offered to the database.
    """
    newest: dict[str, Event] = {}
    for event in events:
        if event.job and (event.job not in newest or event.key > newest[event.job].key):
            newest[event.job] = event
    full = [history.values_from_hash(hashes[j], e.key) for j, e in newest.items() if j in hashes]
    bare = [history.values_from_event(e) for j, e in newest.items() if j not in hashes]
    with transaction.atomic():
        history.upsert(full, history.ALL_BUT_ID)
        history.upsert(bare, history.EVENT_COLUMNS)
        history.insert_events(events)
    return len(full) + len(bare)


def resync_rows(hashes: dict[str, dict[str, str]]) -> int:
    """Upsert rows straight from job hashes (after the stream was trimmed past the mirror)."""
    rows = [history.values_from_hash(fields, "") for fields in hashes.values()]
    with transaction.atomic():
        history.upsert(rows, history.RESYNC_COLUMNS, guard=False)
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
