"""Follow the event streams into database rows: in batches, idempotently, acked after commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.layers import get_channel_layer
from django import db
from django.db import connection

from engine import IDLE_MS, Event, EventReader, connect, run_periodic
from jobsite.jobs import heap
from jobsite.jobs.conf import engine_settings
from jobsite.jobs.history import batches, bulkwrite
from jobsite.jobs.history.carry import Carry
from jobsite.jobs.history.repair import GapRepair

log = logging.getLogger("jobsite.mirror")
# The longest a read waits for new events (its connection's timeout allows for it).
BLOCK_MS = 1000
# A consumer idle this long with nothing pending is gone for good: its name is deleted.
CONSUMER_GONE_MS = 600_000
# A batch this large (a backlog's) raised the process's peak: once the mirror falls idle, it
# gives that memory back (heap.give_back). A mirror keeping up writes batches far smaller.
GIVE_BACK_BATCH = 5_000
# A mirror that never falls idle (a steady feed) gives memory back this often instead.
GIVE_BACK_BUSY_S = 60.0


def consumer_name() -> str:
    """Return a consumer name of this process alone: host, pid and a random part."""
    return f"mirror-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def died_here(consumer: str) -> bool:
    """Tell whether `consumer` (a consumer_name) was a process of this host that is gone."""
    head, _, rest = consumer.rpartition("-")
    host, _, pid = head.rpartition("-")
    if host != f"mirror-{socket.gethostname()}" or not pid.isdigit() or len(rest) != 6:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _closing_stale[T](fn: Callable[..., T], *args: Any) -> T:
    """Run `fn` after dropping a connection that broke or outlived its age (kept across calls
    whatever CONN_MAX_AGE); one that fails closes for the next call to open afresh."""
    bulkwrite.drop_stale_connection()
    try:
        return fn(*args)
    except (db.OperationalError, db.InterfaceError):
        connection.close_if_unusable_or_obsolete()
        raise


class Mirror:
    """Follow every queue's event stream as one consumer of the `mirror` group.

    `batch` caps the events read at once. A read returns what is there, so when the mirror
    keeps up a batch is small; behind, every read is full. The cap also bounds the process's
    memory: a prepared batch takes 1 to 1.5 KB an event (the more jobs, the more rows; it keeps
    its stream ids, each job's state-change events, its row's values and one copy of each
    repeated text, not its events or the job hashes), writing one adds up to 1 KB an event more
    at its peak on SQLite and a third of that on PostgreSQL (the rows' values and transitions
    as text), two batches are alive at once (one prepared while the other is written), and the
    allocator keeps the arenas of the largest batch for the rest of the process's life (a few
    objects made during it, kept afterwards, pin them). The default, 10,000, drains a backlog
    nearly as fast as a much larger batch with a far lower peak, where a smaller one is
    clearly slower (docs/benchmarks.md).

    Behind (a full read), a job whose state in Redis has moved past its newest event read so
    far is carried to a later batch, unacked, until its next events come (see `Carry`): a
    backlog where every job was enqueued before any ran then writes each row once, not twice.
    A short read, or more than `carry_max` events carried, writes everything carried, at most
    about `batch` events at a time (each job's events together: `batches.by_job_parts`), so a
    batch's memory stays what `batch` sets however much was carried; a short read carries its
    own unsettled jobs for one step only (a mirror keeping up then writes a job that ran within
    a batch's time once, not at `submitted` and again at its end). Carried events are kept as
    read, about 300 B each (one copy of the stream id, and of a job's id for its events).

    Every `reclaim_every_s` it takes over what another consumer of the group read and left
    unacked for `reclaim_idle_ms` (that reader stopped): a mirror that dies and is not
    started again leaves nothing behind for good, not only until some mirror starts.

    Every `gap_check_every_s`, and at start, it repairs gaps (see `GapRepair`): the jobs whose
    events the cleaner trimmed before any mirror read them (the hard cap was reached) are
    rebuilt from their hashes while it keeps following the streams.
    """

    def __init__(
        self,
        queues: Sequence[str],
        consumer: str | None = None,
        batch: int = 10_000,
        carry_max: int = 200_000,
        reclaim_every_s: float = 30.0,
        reclaim_idle_ms: int = IDLE_MS,
        gap_check_every_s: float = 1.0,
    ) -> None:
        self.settings = engine_settings()
        self.redis = connect(self.settings, block_s=BLOCK_MS / 1000)
        self.reader = EventReader(
            self.redis,
            self.settings,
            queues,
            group=self.settings.stream.group or "mirror",
            consumer=consumer or consumer_name(),
        )
        self.queues = list(queues)
        self.batch = batch
        self.carry_max = carry_max
        self.reclaim_every_s = reclaim_every_s
        self.reclaim_idle_ms = reclaim_idle_ms
        self.gap_check_every_s = gap_check_every_s
        self.applied = 0
        self._largest_batch = 0  # events of the largest batch since the last heap.give_back
        self._give_back_at = time.monotonic() + GIVE_BACK_BUSY_S  # while busy, not before
        # Events read but left for a later batch, unacked (see the class docstring).
        self._carry = Carry(self.reader)
        # The search texts' own connection (PostgreSQL; see bulkwrite.search_aside).
        self._aside = (
            ThreadPoolExecutor(1, thread_name_prefix="mirror-search")
            if connection.vendor == "postgresql"
            else None
        )
        # The batch being written while the next one is read (see step).
        self._writing: asyncio.Future[None] | None = None
        # Every database call of the mirror runs on this thread: a database that hangs or
        # refuses holds up the mirror alone, never the worker's loops of the same process.
        self._db_thread = ThreadPoolExecutor(1, thread_name_prefix="mirror-db")
        # The jobs whose events were trimmed unread, rebuilt between batches.
        self.gaps = GapRepair(self.reader, self.queues, self._db, self.settle)

    async def start(self) -> None:
        """Create the groups, resync if the stream was trimmed past us, apply what is pending."""
        self._carry.clear()  # still pending: read again below
        await self.reader.ensure_groups()
        while events := await self.reader.pending(self.batch):
            await self.apply(events)
        await self.take_over_dead()
        await self.gaps.repair()

    async def take_over_dead(self) -> int:
        """Apply what consumers of this host whose process died left unacked (at once, not
        after reclaim_idle_ms); return how many events."""
        total = 0
        for name in await self.reader.consumers():
            if name == self.reader.consumer or not died_here(name):
                continue
            while events := await self.reader.claim_from(name, self.batch):
                await self.settle()
                await self.apply(events)
                total += len(events)
        if total:
            log.warning("took over events a dead mirror of this host left events=%d", total)
        return total

    async def _db[T](self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on the mirror's own database thread (never the one other loops share)."""
        return await asyncio.wrap_future(self._db_thread.submit(_closing_stale, fn, *args))

    async def apply(self, events: list[Event]) -> None:
        """Write a batch to the database, then ack it."""
        await self._write(batches.prepare(events, await self._hashes(events)))

    async def _hashes(self, events: list[Event]) -> dict[str, dict[str, str]]:
        """Return the job hashes Redis still holds for the jobs of `events`."""
        hashes: dict[str, dict[str, str]] = {}
        by_queue: dict[str, set[str]] = {}
        for e in events:
            by_queue.setdefault(e.queue, set()).add(e.job)
        for queue, ids in by_queue.items():
            hashes.update(await self.reader.job_hashes(queue, sorted(ids)))
        return hashes

    async def _write(self, batch: batches.Batch) -> None:
        await self._db(batches.write_batch, batch, self._aside)
        await self.reader.ack_ids(batch.acks)
        self.applied += batch.size
        self._largest_batch = max(self._largest_batch, batch.size)
        await self._notify()

    def _give_back(self) -> None:
        """Give memory back (heap.give_back) and start the busy interval again."""
        began = time.perf_counter()
        heap.give_back()
        self._largest_batch = 0
        self._give_back_at = time.monotonic() + GIVE_BACK_BUSY_S
        log.debug("gave memory back took_ms=%.1f", (time.perf_counter() - began) * 1000)

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
        except Exception as exc:  # dashboards poll too: a line, not a traceback
            log.warning("dashboard notify failed error=%r", exc)

    async def step(self, block_ms: int = BLOCK_MS) -> int:
        """Read a batch while the previous one is written; return how many events it held.

        The database write of one batch overlaps the Redis reads of the next; batches still
        commit one after the other, each acked after its commit. 0 means everything read so
        far is written and acked, and no entry was there after (on a cluster, once every slot's
        read still in flight has ended). `block_ms` is at most BLOCK_MS.
        """
        carried = bool(self._carry.jobs)
        busy = self._writing is not None or carried
        if busy and time.monotonic() >= self._give_back_at:
            self._give_back()
        events = await self.reader.read(self.batch, None if busy else block_ms)
        if not events and not carried:
            await self.settle()
            if busy:  # what came while a batch was written; on a cluster, reads still in flight
                await self.reader.finish_reads()
                events = await self.reader.read(self.batch, None)
            if not events:
                if self._largest_batch >= GIVE_BACK_BATCH:
                    self._give_back()
                return 0
        if len(events) >= self.batch and self._carry.size + len(events) <= self.carry_max:
            pool = await self._carry.hold(events)
        else:  # what was carried is written now; what this read carries waits one step only
            pool = await self._carry.release(events)
        for part in batches.by_job_parts(pool, self.batch):  # what was carried: batch by batch
            batch = batches.prepare(part, await self._hashes(part))
            await self.settle()
            self._writing = asyncio.ensure_future(self._write(batch))
        return len(events) or len(pool)

    async def run(
        self, stopping: asyncio.Event, transient: tuple[type[BaseException], ...] = ()
    ) -> None:
        """Mirror until `stopping` is set; Redis and `transient` errors are retried, bugs raise."""
        started = False
        reclaim_at = gap_at = 0.0

        async def tick() -> float:
            nonlocal started, reclaim_at, gap_at
            try:
                if not started:
                    await self.start()
                    started = True
                    reclaim_at = time.monotonic() + self.reclaim_every_s
                    gap_at = time.monotonic() + self.gap_check_every_s
                await self.step()
                if time.monotonic() >= gap_at:
                    await self.gaps.repair()
                    gap_at = time.monotonic() + self.gap_check_every_s
                if time.monotonic() >= reclaim_at:
                    await self.reclaim()
                    reclaim_at = time.monotonic() + self.reclaim_every_s
            except BaseException:
                started = False  # after an error, take up the unacked entries again first
                raise
            return 0.0

        await run_periodic("mirror", tick, stopping, transient)

    async def reclaim(self) -> int:
        """Apply what other consumers left unacked for reclaim_idle_ms; return how many events."""
        total = 0
        while events := await self.reader.claim_idle(self.batch, self.reclaim_idle_ms):
            await self.settle()
            await self.apply(events)
            total += len(events)
        if total:
            log.warning("took over events a stopped mirror left unacked events=%d", total)
        await self.reader.forget_idle_consumers(CONSUMER_GONE_MS)
        return total

    async def aclose(self) -> None:
        """Finish the batch being written (its entries stay pending if it fails); close."""
        with contextlib.suppress(Exception):
            await self.settle()
        if self._aside is not None:
            await asyncio.wrap_future(self._aside.submit(bulkwrite.close_connection))
            self._aside.shutdown()
        await asyncio.wrap_future(self._db_thread.submit(bulkwrite.close_connection))
        self._db_thread.shutdown()
        await self.reader.close()
        await self.redis.aclose()
