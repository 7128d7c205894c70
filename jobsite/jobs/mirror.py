"""The mirror: event streams -> database rows, in batches, idempotently, acked after commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

import orjson
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone

from engine.connection import connect
from engine.events import Event, EventReader
from engine.reconnect import run_periodic

from . import bulkwrite, history, rollup
from .conf import engine_settings
from .retention import Horizon

log = logging.getLogger("jobsite.mirror")


def apply_batch(events: Sequence[Event], hashes: dict[str, dict[str, str]]) -> int:
    """Apply events in one transaction, idempotently; return the number of rows written.

    Each job gets one row write: its columns from its newest event (from the job hash when
    Redis still has it; an older event never overwrites a newer one), its state changes merged
    into `transitions` by event id. An event already there (a replay) changes nothing and is
    not counted again; a job whose row retention would prune is not written, so a late event
    never resurrects it.
    """
    by_job: dict[str, list[Event]] = {}
    for event in events:
        if event.job:
            by_job.setdefault(event.job, []).append(event)
    horizon = Horizon.now()
    full: list[bulkwrite.Staged] = []
    bare: list[bulkwrite.Staged] = []
    texts: list[tuple[str, str]] = []
    tally: rollup.Tally = Counter()
    with transaction.atomic():
        bulkwrite.lock_queues(e.queue for e in events if e.job)
        rows = bulkwrite.stored(list(by_job))
        for job, seen in by_job.items():
            last, kept, task = rows.get(job, ("", [], ""))
            known = {t.get("id") for t in kept}
            fresh = {e.key: e for e in seen if e.from_state != e.to_state and e.key not in known}
            changes = list(fresh.values())
            newest = max(seen, key=lambda e: e.key)
            if newest.key <= last and not changes:
                continue  # a replay
            fields = hashes.get(job)
            fields = (
                history.fields_from_event(newest) if fields is None else history.clean_hash(fields)
            )
            if not horizon.keeps(fields.get("state", ""), history.ended_at(fields), _at(newest)):
                continue
            merged = sorted([*kept, *map(history.transition, changes)], key=lambda t: t["id"])
            row = bulkwrite.Staged(job, newest.key, orjson.dumps(merged).decode(), fields)
            (full if job in hashes else bare).append(row)
            rollup.observe(tally, newest.queue, fields.get("task") or task, merged, set(fresh))
            if job in hashes and (job not in rows or fields.get("errors", "[]") != "[]"):
                texts.append((job, history.hash_search_text(fields)))
        bulkwrite.upsert(full, history.ALL_BUT_ID)
        bulkwrite.upsert(bare, history.BARE_COLUMNS)
        bulkwrite.upsert_search(texts)
        rollup.write(tally)
    return len(full) + len(bare)


def _at(event: Event) -> datetime:
    return datetime.fromtimestamp(event.at_ms / 1000, tz=UTC)


def resync_rows(hashes: dict[str, dict[str, str]]) -> int:
    """Upsert rows straight from job hashes (after the stream was trimmed past the mirror)."""
    now = timezone.now()
    horizon = Horizon.now(now)
    cleaned = [history.clean_hash(fields) for fields in hashes.values()]
    cleaned = [f for f in cleaned if horizon.keeps(f.get("state", ""), history.ended_at(f), now)]
    rows = [bulkwrite.Staged(f.get("id", ""), "", "[]", f) for f in cleaned]
    texts = [(f.get("id", ""), history.hash_search_text(f)) for f in cleaned]
    with transaction.atomic():
        bulkwrite.upsert(rows, history.RESYNC_COLUMNS, guard=False)
        bulkwrite.upsert_search(texts)
    return len(rows)


class Mirror:
    """Follow every queue's event stream as one consumer of the `mirror` group."""

    def __init__(
        self, queues: Sequence[str], consumer: str | None = None, batch: int = 5000
    ) -> None:
        self.settings = engine_settings()
        self.redis = connect(self.settings, blocking=True)
        self.reader = EventReader(
            self.redis, self.settings, queues, consumer=consumer or f"mirror-{socket.gethostname()}"
        )
        self.queues = list(queues)
        self.batch = batch
        self.applied = 0
        # The batch being written while the next one is read (see step).
        self._writing: asyncio.Future[None] | None = None

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
        await self._write(events, await self._hashes(events))

    async def _hashes(self, events: list[Event]) -> dict[str, dict[str, str]]:
        """Return the job hashes Redis still holds for the jobs of `events`."""
        hashes: dict[str, dict[str, str]] = {}
        by_queue: dict[str, set[str]] = {}
        for e in events:
            by_queue.setdefault(e.queue, set()).add(e.job)
        for queue, ids in by_queue.items():
            hashes.update(await self.reader.job_hashes(queue, sorted(ids)))
        return hashes

    async def _write(self, events: list[Event], hashes: dict[str, dict[str, str]]) -> None:
        await sync_to_async(apply_batch, thread_sensitive=True)(events, hashes)
        await self.reader.ack(events)
        self.applied += len(events)
        await self._notify()

    async def settle(self) -> None:
        """Wait until the batch being written is committed and acked (raising its error)."""
        writing, self._writing = self._writing, None
        if writing is not None:
            await writing

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
        """Read a batch while the previous one is written; return how many events it held.

        The database write of one batch overlaps the Redis reads of the next; batches still
        commit one after the other, each acked after its commit. 0 means everything read so
        far is written and acked.
        """
        events = await self.reader.read(self.batch, None if self._writing else block_ms)
        if not events:
            await self.settle()
            return 0
        hashes = await self._hashes(events)
        await self.settle()
        self._writing = asyncio.ensure_future(self._write(events, hashes))
        return len(events)

    async def run(
        self, stopping: asyncio.Event, transient: tuple[type[BaseException], ...] = ()
    ) -> None:
        """Mirror until `stopping` is set; Redis and `transient` errors are retried, bugs raise."""
        started = False

        async def tick() -> float:
            nonlocal started
            try:
                if not started:
                    await self.start()
                    started = True
                await self.step()
            except BaseException:
                started = False  # after an error, take up the unacked entries again first
                raise
            return 0.0

        await run_periodic("mirror", tick, stopping, transient)

    async def aclose(self) -> None:
        """Finish the batch being written (its entries stay pending if it fails); close."""
        with contextlib.suppress(Exception):
            await self.settle()
        await self.reader.close()
        await self.redis.aclose()
