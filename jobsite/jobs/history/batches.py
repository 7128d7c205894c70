"""Write the mirror's rows: a batch of events in one transaction, or rows rebuilt from hashes."""

from __future__ import annotations

import logging
import operator
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import transaction
from django.utils import timezone

from engine import Event, ids_by_queue
from jobsite.jobs.history import bulkwrite, rollup
from jobsite.jobs.history import rows as history
from jobsite.jobs.history.retention import Horizon
from jobsite.jobs.models import TERMINAL, JobRecord

log = logging.getLogger("jobsite.mirror")

# Ids one ORM query names at most (SQLite builds before 3.32 allow 999 parameters).
ROW_IDS = 500


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
