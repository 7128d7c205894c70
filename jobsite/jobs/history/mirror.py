"""The mirror: event streams -> database rows, in batches, idempotently, acked after commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import os
import secrets
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from channels.layers import get_channel_layer
from django import db
from django.db import connection, transaction
from django.utils import timezone

from engine import (
    ENDED_STATES,
    IDLE_MS,
    Event,
    EventReader,
    connect,
    ids_by_queue,
    run_periodic,
)
from jobsite.jobs import heap
from jobsite.jobs.conf import engine_settings
from jobsite.jobs.history import bulkwrite, rollup
from jobsite.jobs.history import rows as history
from jobsite.jobs.history.retention import Horizon
from jobsite.jobs.models import TERMINAL, JobRecord

log = logging.getLogger("jobsite.mirror")
ENDED = frozenset(str(s) for s in ENDED_STATES)
# The longest a read waits for new events (its connection's timeout allows for it).
BLOCK_MS = 1000
# A consumer idle this long with nothing pending is gone for good: its name is deleted.
CONSUMER_GONE_MS = 600_000
# A batch this large (a backlog's) raised the process's peak: once the mirror falls idle, it
# gives that memory back (heap.give_back). A mirror keeping up writes batches far smaller.
GIVE_BACK_BATCH = 5_000
# A mirror that never falls idle (a steady feed) gives memory back this often instead.
GIVE_BACK_BUSY_S = 60.0
# Ids one ORM query names at most (SQLite builds before 3.32 allow 999 parameters).
ROW_IDS = 500


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


@dataclass(slots=True)
class Seen:
    """One job's events in a batch, with what they say that needs no database."""

    job: str
    queue: str
    newest: Event
    changes: dict[str, Event]  # event id -> its event, state changes only
    task: str
    errored: bool  # its hash lists errors
    full: bool  # the row comes from the job hash (else from what the newest event tells)
    kept: bool  # retention keeps the row (else it is not written: no resurrection)
    search: str  # the job's search text ("" without its hash)
    values: list[Any]  # the row's values (history.row_values)


@dataclass(slots=True)
class Batch:
    """A batch of events grouped by job and prepared for write_batch.

    It keeps of the events only their stream ids (to ack them after the commit) and each job's
    newest: a batch's other events are freed once it is prepared.
    """

    acks: dict[str, list[str]]  # queue -> stream ids
    size: int  # events
    jobs: list[Seen] = field(default_factory=list)


def prepare(events: Sequence[Event], hashes: dict[str, dict[str, str]]) -> Batch:
    """Group `events` by job and do every step that needs no database (no I/O).

    The mirror runs this while the previous batch is being written, so the Python work of one
    batch overlaps the database work of the other.
    """
    by_job: dict[str, list[Event]] = {}
    for event in events:
        if event.job and not event.is_note:  # a note changes no row (acked with the batch)
            by_job.setdefault(event.job, []).append(event)
    horizon = Horizon.now()
    batch = Batch(ids_by_queue(events), len(events))
    for job, seen in by_job.items():
        newest = max(seen, key=_stream_order)
        raw = hashes.get(job)
        fields = history.fields_from_event(newest) if raw is None else history.clean_hash(raw)
        changes = {e.key: e for e in seen if e.from_state != e.to_state}
        batch.jobs.append(
            Seen(
                job=job,
                queue=newest.queue,
                newest=newest,
                changes=changes,
                task=fields.get("task", ""),
                errored=fields.get("errors", "[]") != "[]",
                full=raw is not None,
                kept=horizon.keeps(fields.get("state", ""), history.ended_at(fields), _at(newest)),
                search=history.hash_search_text(fields) if raw is not None else "",
                values=history.row_values(fields),
            )
        )
    return batch


def write_batch(batch: Batch, aside: Executor | None = None) -> int:
    """Write a prepared batch in one transaction, idempotently; return the rows written.

    Each job gets one row write: its columns from its newest event (from the job hash when
    Redis still has it; an older event never overwrites a newer one), its state changes merged
    into `transitions` by event id. An event already there (a replay) changes nothing and is
    not counted again; a job whose row retention would prune is not written, so a late event
    never resurrects it. `aside`: see bulkwrite.search_aside.
    """
    full: list[bulkwrite.Staged] = []
    bare: list[bulkwrite.Staged] = []
    texts: list[tuple[str, str]] = []
    tally: rollup.Tally = Counter()
    with transaction.atomic():
        bulkwrite.lock_queues(s.queue for s in batch.jobs)
        rows = bulkwrite.stored([s.job for s in batch.jobs])
        for s in batch.jobs:
            last, kept, task, queue = rows.get(s.job, ("", [], "", s.queue))
            if queue != s.queue:  # one id, one job: never merge another queue's events
                log.error(
                    "mirror refused event job=%s queue=%s row_queue=%s", s.job, s.queue, queue
                )
                continue
            known = {t.get("id") for t in kept}
            fresh = [history.transition(e) for key, e in s.changes.items() if key not in known]
            if (s.newest.key <= last and not fresh) or not s.kept:
                continue  # a replay, or a row retention would prune
            merged = sorted([*kept, *fresh], key=_by_id)
            text = orjson.dumps(merged).decode()
            (full if s.full else bare).append(bulkwrite.Staged(s.job, s.newest.key, text, s.values))
            fresh_ids = {t["id"] for t in fresh}
            rollup.observe(tally, s.queue, s.task or task, merged, fresh_ids)
            if s.full and (s.job not in rows or s.errored):
                texts.append((s.job, s.search))
        searched = bulkwrite.search_aside(aside, texts, rows)
        bulkwrite.upsert(full, history.ALL_BUT_ID, stored_ids=rows)
        bulkwrite.upsert(bare, history.BARE_COLUMNS, stored_ids=rows)
        rollup.write(tally)
        searched()
    return len(full) + len(bare)


def apply_batch(events: Sequence[Event], hashes: dict[str, dict[str, str]]) -> int:
    """Apply events in one transaction (prepare, then write_batch); return the rows written."""
    return write_batch(prepare(events, hashes))


def unsettled(newest: dict[str, Event], states: dict[str, str]) -> set[str]:
    """Return the jobs whose state in Redis has moved past their `newest` event read so far.

    Every state change appends its event in the same script, so such a job's next events are
    further on in the stream: writing its row now would only be written over again.
    """
    return {job for job, e in newest.items() if states.get(job, e.to_state) != e.to_state}


_by_id = operator.itemgetter("id")


def by_job_parts(events: Sequence[Event], size: int) -> Iterator[list[Event]]:
    """Split `events` into parts of about `size` events, each job's events in one part.

    A part holds more than `size` only by the events of its last job.
    """
    by_job: dict[str, list[Event]] = {}
    for e in events:
        by_job.setdefault(e.job, []).append(e)
    part: list[Event] = []
    for seen in by_job.values():
        part += seen
        if len(part) >= size:
            yield part
            part = []
    if part:
        yield part


def _closing_stale[T](fn: Callable[..., T], *args: Any) -> T:
    """Run `fn` after dropping a connection that broke or outlived its age (kept across calls
    whatever CONN_MAX_AGE); one that fails closes for the next call to open afresh."""
    bulkwrite.drop_stale_connection()
    try:
        return fn(*args)
    except (db.OperationalError, db.InterfaceError):
        connection.close_if_unusable_or_obsolete()
        raise


def _stream_order(event: Event) -> str:
    return event.key


def _at(event: Event) -> datetime:
    return datetime.fromtimestamp(event.at_ms / 1000, tz=UTC)


def resync_rows(hashes: dict[str, dict[str, str]]) -> int:
    """Upsert rows straight from job hashes (after the stream was trimmed past the mirror)."""
    now = timezone.now()
    horizon = Horizon.now(now)
    cleaned = [history.clean_hash(fields) for fields in hashes.values()]
    cleaned = [f for f in cleaned if horizon.keeps(f.get("state", ""), history.ended_at(f), now)]
    with transaction.atomic():
        bulkwrite.lock_queues(f.get("queue", "") for f in cleaned)
        held = bulkwrite.stored([f.get("id", "") for f in cleaned])
        # One id, one job: a row of another queue is never overwritten.
        cleaned = [
            f for f in cleaned if held.get(f.get("id", ""), (f.get("queue"),))[-1] == f.get("queue")
        ]
        rows = [bulkwrite.Staged(f.get("id", ""), "", "[]", history.row_values(f)) for f in cleaned]
        texts = [(f.get("id", ""), history.hash_search_text(f)) for f in cleaned]
        bulkwrite.upsert(rows, history.RESYNC_COLUMNS, guard=False)
        bulkwrite.upsert_search(texts)
    return len(rows)


def _rows_by_id(ids: list[str], *columns: str) -> list[tuple[Any, ...]]:
    """Return (id, state, *columns) of the rows among `ids`, ROW_IDS a query.

    By id alone: with `state IN (the ended states)` added, SQLite chose the state index and
    read nearly every row of a large history (docs/benchmarks.md).
    """
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(ids), ROW_IDS):
        chunk = ids[start : start + ROW_IDS]
        rows += JobRecord.objects.filter(id__in=chunk).values_list("id", "state", *columns)
    return rows


def already_ended(ended_ms: dict[str, str]) -> set[str]:
    """Return the jobs of `ended_ms` (id -> its hash's `completed_at_ms`) whose row recorded that
    very end: nothing for a resync to write."""
    return {
        job
        for job, state, at in _rows_by_id(list(ended_ms), "completed_at")
        if state in TERMINAL and at and round(at.timestamp() * 1000) == int(ended_ms[job])
    }


def rebuild_missed(hashes: dict[str, dict[str, str]], gone: Sequence[str]) -> tuple[int, int]:
    """Rebuild the rows of jobs whose events were trimmed unread; return (rebuilt, lost).

    `hashes`: the jobs Redis still holds (their rows are written from them). `gone`: the jobs
    whose hash is gone too: lost, unless their row already ended (its last events came through).
    """
    rebuilt = resync_rows(hashes) if hashes else 0
    ended = {job for job, state in _rows_by_id(list(gone)) if state in TERMINAL}
    return rebuilt, len([job for job in gone if job not in ended])


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
    far is carried to a later batch, unacked, until its next events come (see `unsettled`): a
    backlog where every job was enqueued before any ran then writes each row once, not twice.
    A short read, or more than `carry_max` events carried, writes everything carried, at most
    about `batch` events at a time (each job's events together: `by_job_parts`), so a batch's
    memory stays what `batch` sets however much was carried; a short read carries its own
    unsettled jobs for one step only (a mirror keeping up then writes a job that ran within a
    batch's time once, not at `submitted` and again at its end). Carried events are kept as
    read, about 300 B each (one copy of the stream id, and of a job's id for its events).

    Every `reclaim_every_s` it takes over what another consumer of the group read and left
    unacked for `reclaim_idle_ms` (that reader stopped): a mirror that dies and is not
    started again leaves nothing behind for good, not only until some mirror starts.

    Every `gap_check_every_s`, and at start, it repairs gaps (see `repair`): the jobs whose
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
            group=self.settings.events_group or "mirror",
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
        # Missed jobs whose hash was gone, by the stream's newest entry (sortable) then.
        self._gone_at: dict[str, str] = {}
        # Per queue, the jobs trimmed past a full missed SET not yet resynced, at the last check.
        self._uncovered: dict[str, int] = {}
        # Events read but left for a later batch, unacked, by job (see the class docstring),
        # and how many there are.
        self._carried: dict[str, list[Event]] = {}
        self._carried_n = 0
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

    async def start(self) -> None:
        """Create the groups, resync if the stream was trimmed past us, apply what is pending."""
        self._carried, self._carried_n = {}, 0  # still pending: read again below
        await self.reader.ensure_groups()
        while events := await self.reader.pending(self.batch):
            await self.apply(events)
        await self.take_over_dead()
        await self.repair()

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

    async def repair(self) -> int:
        """Rebuild the jobs whose events were trimmed before this group read them; return how
        many rows were written.

        The jobs of the queue's missed SET (trim-3.lua) are rebuilt from their hashes. One
        whose hash is gone too is judged once this mirror has read every entry the stream held
        when it was first found gone (its later events, if any, are then applied): if its row
        has not ended by then, it is counted (`gap_lost`) and logged, never invented. A loss
        the cleaner did not record (see EventReader.behind_trim), or jobs it could only count
        because the missed SET was full (`gap_unrecorded`; once that count stops growing),
        rebuild every job of the queue (`resync`). When there is something to repair it runs
        between batches (the one being written is committed first), so a row is never written
        from a hash older than an event already applied; when there is nothing, the batch being
        written is left to finish.
        """
        gaps = []
        for queue in self.queues:
            unrecorded = await self.reader.behind_trim(queue)
            uncovered = await self.reader.uncovered(queue)
            # Jobs trimmed past a full missed SET: one resync once their count stops growing
            # (not one per cleaner tick while the mirror is still far behind).
            seen, self._uncovered[queue] = self._uncovered.get(queue), uncovered
            due = uncovered > 0 and uncovered == seen
            missed = await self.reader.has_missed(queue)
            if unrecorded or due or missed:
                gaps.append((queue, unrecorded, due, uncovered, missed))
        if not gaps:
            return 0
        await self.settle()
        total = 0
        for queue, unrecorded, due, uncovered, missed in gaps:
            if unrecorded or due:
                total += await self.resync(queue)
                if unrecorded:
                    await self.reader.record_gap(queue, unrecorded)
                if uncovered:  # a resync rebuilds them, whatever made it run
                    await self.reader.record_resync(queue, uncovered)
            if not missed:
                continue
            read_to, written_to = await self.reader.positions(queue)
            rebuilt = lost = 0
            async for ids in self.reader.missed(queue):
                hashes = await self.reader.job_hashes(queue, ids)
                gone = []
                for job in ids:
                    if job in hashes:
                        continue
                    seen_at = self._gone_at.setdefault(job, written_to)
                    if read_to >= seen_at:
                        gone.append(job)
                done = await self._db(rebuild_missed, hashes, gone)
                await self.reader.forget_missed(queue, [*hashes, *gone], *done)
                for job in gone:
                    self._gone_at.pop(job, None)
                rebuilt, lost = rebuilt + done[0], lost + done[1]
            if rebuilt or lost:
                log.error(
                    "mirror rebuilt jobs whose events were trimmed unread queue=%s rebuilt=%d "
                    "lost=%d",
                    queue,
                    rebuilt,
                    lost,
                )
            total += rebuilt
        return total

    async def resync(self, queue: str) -> int:
        """Rebuild from `queue`'s job hashes the rows that did not record the end their hash
        holds; return how many were written."""
        total = 0
        async for ids in self.reader.job_ids(queue):
            # Jobs whose row recorded their end are left as they are: the work is what is missing.
            ended = await self.reader.job_field(queue, ids, "completed_at_ms")
            kept = await self._db(already_ended, ended) if ended else set()
            if todo := [job for job in ids if job not in kept]:
                total += await self._db(resync_rows, await self.reader.job_hashes(queue, todo))
        log.error("mirror fell behind an unrecorded trim; resynced queue=%s jobs=%d", queue, total)
        return total

    async def _db[T](self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn` on the mirror's own database thread (never the one other loops share)."""
        return await asyncio.wrap_future(self._db_thread.submit(_closing_stale, fn, *args))

    async def apply(self, events: list[Event]) -> None:
        """Write a batch to the database, then ack it."""
        await self._write(prepare(events, await self._hashes(events)))

    async def _hashes(self, events: list[Event]) -> dict[str, dict[str, str]]:
        """Return the job hashes Redis still holds for the jobs of `events`."""
        hashes: dict[str, dict[str, str]] = {}
        by_queue: dict[str, set[str]] = {}
        for e in events:
            by_queue.setdefault(e.queue, set()).add(e.job)
        for queue, ids in by_queue.items():
            hashes.update(await self.reader.job_hashes(queue, sorted(ids)))
        return hashes

    async def _states(self, newest: dict[str, Event]) -> dict[str, str]:
        """Return the Redis state of the jobs whose `newest` event has not ended them."""
        by_queue: dict[str, list[str]] = {}
        for job, e in newest.items():
            if e.to_state not in ENDED:
                by_queue.setdefault(e.queue, []).append(job)
        states: dict[str, str] = {}
        for queue, ids in by_queue.items():
            states.update(await self.reader.job_field(queue, ids))
        return states

    async def _write(self, batch: Batch) -> None:
        await self._db(write_batch, batch, self._aside)
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
        except Exception:
            log.warning("dashboard notify failed", exc_info=True)

    async def step(self, block_ms: int = BLOCK_MS) -> int:
        """Read a batch while the previous one is written; return how many events it held.

        The database write of one batch overlaps the Redis reads of the next; batches still
        commit one after the other, each acked after its commit. 0 means everything read so
        far is written and acked, and no entry was there after (on a cluster, once every slot's
        read still in flight has ended). `block_ms` is at most BLOCK_MS.
        """
        carried = self._carried
        busy = self._writing is not None or bool(carried)
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
        if len(events) >= self.batch and self._carried_n + len(events) <= self.carry_max:
            pool = await self._carry(events)
        else:  # what was carried is written now; what this read carries waits one step only
            self._carried, self._carried_n = {}, 0
            pool = await self._carry(events) if events else []
            for job in [job for job in self._carried if job in carried]:
                again = self._carried.pop(job)
                self._carried_n -= len(again)
                carried[job] += again
            pool += [e for seen in carried.values() for e in seen]
        for part in by_job_parts(pool, self.batch):  # what was carried: batch by batch
            batch = prepare(part, await self._hashes(part))
            await self.settle()
            self._writing = asyncio.ensure_future(self._write(batch))
        return len(events) or len(pool)

    async def _carry(self, events: list[Event]) -> list[Event]:
        """Carry the jobs of `events` that are unsettled; return the events to write now.

        Only the jobs of `events` are looked at: a job carried before and not in them stays
        carried. A job of `events` whose Redis state is still that of its newest event is
        written now, with whatever was carried for it.
        """
        by_job: dict[str, list[Event]] = {}
        for e in events:
            by_job.setdefault(e.job, []).append(e)
        # A stream is read in order: a job's newest event is the last of those just read.
        newest = {job: seen[-1] for job, seen in by_job.items() if job}
        later = unsettled(newest, await self._states(newest))
        pool: list[Event] = []
        for job, seen in by_job.items():
            if job in later:
                self._carried.setdefault(job, []).extend(seen)
                self._carried_n += len(seen)
                continue
            before = self._carried.pop(job, None)
            if before:
                self._carried_n -= len(before)
                pool += before
            pool += seen
        return pool

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
                    await self.repair()
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
