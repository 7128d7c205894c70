"""Idempotent bulk writes of the mirror: one statement per batch and table.

On PostgreSQL a batch is first copied (COPY, formatted by psycopg's C code) into a temporary
staging table of this session, then moved with set-based statements (`UPDATE ... FROM`, then
`INSERT ... SELECT ... ON CONFLICT`); on SQLite it is an `executemany` that the driver runs
in C. Every guarded column is written only by a newer event (`last_event_id`), so "an older
event changes nothing" is a property of the statement itself; `transitions` is the merge the
caller made under `lock_queues`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import connection
from django.db.models import Model
from django.utils import timezone

from engine.events import Event

from .history import JOB_COLUMNS, TIMES
from .models import JobRecord, JobSearch, MinuteCount

# Columns written whatever the guard says: the merged list of state changes.
UNGUARDED = frozenset(("transitions",))


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def lock_queues(queues: Iterable[str]) -> None:
    """Make concurrent mirrors of the same queues write one after the other (PostgreSQL).

    Held to the end of the transaction; taken in sorted order, so two mirrors cannot deadlock.
    SQLite needs nothing: its writers are serial already.
    """
    if not _postgres():
        return
    with connection.cursor() as cursor:
        for queue in sorted(set(queues)):
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"jobsite:{queue}"])


def stored(ids: Sequence[str]) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Return the last event id and the transitions of the rows among `ids` that exist."""
    if not ids:
        return {}
    table = _q(JobRecord._meta.db_table)
    head = f"SELECT {_q('id')}, {_q('last_event_id')}, {_q('transitions')} FROM {table} WHERE "
    found: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    with connection.cursor() as cursor:
        if _postgres():
            cursor.execute(head + f"{_q('id')} = ANY(%s)", [list(ids)])
            rows = cursor.fetchall()
        else:
            rows = []
            for start in range(0, len(ids), 10_000):
                chunk = ids[start : start + 10_000]
                cursor.execute(head + f"{_q('id')} IN ({', '.join(['%s'] * len(chunk))})", chunk)
                rows.extend(cursor.fetchall())
    for job_id, last, transitions in rows:
        kept = orjson.loads(transitions) if isinstance(transitions, str | bytes) else transitions
        found[job_id] = (last, kept if isinstance(kept, list) else [])
    return found


def _stage(cursor: Any, model: type[Model], columns: Sequence[str], rows: list[Any]) -> str:
    """Copy rows into this session's staging table for `model`; return the SELECT of them."""
    table = _q(model._meta.db_table)
    stage = _q(f"{model._meta.db_table}_stage")
    names = ", ".join(_q(c) for c in columns)
    cursor.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {stage} AS SELECT {names} FROM {table} WITH NO DATA"
    )
    cursor.execute(f"TRUNCATE {stage}")
    with cursor.cursor.copy(f"COPY {stage} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    return f"SELECT {names} FROM {stage}"


def _insert(
    model: type[Model], columns: Sequence[str], rows: list[tuple[Any, ...]], tail: str
) -> None:
    """Run `INSERT INTO model (columns) <rows> <tail>` for many rows in one go."""
    table = _q(model._meta.db_table)
    names = ", ".join(_q(c) for c in columns)
    with connection.cursor() as cursor:
        if _postgres():
            source = _stage(cursor, model, columns, rows)
            cursor.execute(f"INSERT INTO {table} ({names}) {source}{tail}")
        else:
            one = "(" + ", ".join(["%s"] * len(columns)) + ")"
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES {one}{tail}", rows)


def _sets(update: Iterable[str], guard: bool, new: str) -> str:
    """Return the SET list taking `update` columns from the row alias `new` (guarded: if newer)."""
    table = _q(JobRecord._meta.db_table)
    newer = f"{table}.{_q('last_event_id')} < {new}.{_q('last_event_id')}"
    sets = []
    for column in update:
        c = _q(column)
        if guard and column not in UNGUARDED:
            sets.append(f"{c} = CASE WHEN {newer} THEN {new}.{c} ELSE {table}.{c} END")
        else:
            sets.append(f"{c} = {new}.{c}")
    return ", ".join(sets)


def upsert(rows: Sequence[dict[str, Any]], update: Iterable[str], guard: bool = True) -> None:
    """Insert rows or update `update` columns of existing ones (newer events only when `guard`).

    PostgreSQL: an `UPDATE ... FROM` the staging table, then an insert of the rows that were
    not there; unlike `ON CONFLICT DO UPDATE`, that writes no row-lock record before each
    update (it was most of the write-ahead log).
    """
    if not rows:
        return
    sqlite = not _postgres()
    now = timezone.now()
    now_value: Any = str(now.replace(tzinfo=None)) if sqlite else now  # SQLite: naive UTC text
    prepped = []
    for row in sorted(rows, key=lambda r: r["id"]):  # one lock order for concurrent writers
        values = [row.get(c, now_value) for c in JOB_COLUMNS]
        if sqlite:
            for i in _TIME_INDEXES:
                if values[i] is not None:
                    values[i] = str(values[i].replace(tzinfo=None))
        prepped.append(tuple(values))
    if sqlite:
        tail = f" ON CONFLICT ({_q('id')}) DO UPDATE SET {_sets(update, guard, 'excluded')}"
        _insert(JobRecord, JOB_COLUMNS, prepped, tail)
        return
    table = _q(JobRecord._meta.db_table)
    names = ", ".join(_q(c) for c in JOB_COLUMNS)
    with connection.cursor() as cursor:
        source = _stage(cursor, JobRecord, JOB_COLUMNS, prepped)
        stage = _q(f"{JobRecord._meta.db_table}_stage")
        cursor.execute(
            f"UPDATE {table} SET {_sets(update, guard, 'new')} FROM {stage} AS new"
            f" WHERE {table}.{_q('id')} = new.{_q('id')}"
        )
        cursor.execute(
            f"INSERT INTO {table} ({names}) {source} ON CONFLICT ({_q('id')}) DO NOTHING"
        )


_TIME_INDEXES = [JOB_COLUMNS.index(c) for c in TIMES]


def upsert_search(texts: Sequence[tuple[str, str]]) -> None:
    """Store the search text of jobs; an unchanged text writes nothing."""
    if not texts:
        return
    table = _q(JobSearch._meta.db_table)
    text = _q("text")
    tail = (
        f" ON CONFLICT ({_q('job_id')}) DO UPDATE SET {text} = excluded.{text}"
        f" WHERE {table}.{text} <> excluded.{text}"
    )
    _insert(JobSearch, ("job_id", "text"), sorted(texts), tail)


def count_minutes(events: Iterable[Event]) -> None:
    """Add events to the per-minute counts of their queue and state."""
    counts = Counter((e.at_ms // 60_000 * 60_000, e.queue, e.to_state) for e in events)
    if not counts:
        return
    table = _q(MinuteCount._meta.db_table)
    columns = ("minute", "queue", "state", "count")
    sql = (
        f"INSERT INTO {table} ({', '.join(_q(c) for c in columns)}) VALUES (%s, %s, %s, %s)"
        f" ON CONFLICT ({_q('minute')}, {_q('queue')}, {_q('state')})"
        f" DO UPDATE SET {_q('count')} = {table}.{_q('count')} + excluded.{_q('count')}"
    )
    adapt = connection.ops.adapt_datetimefield_value
    rows = [(adapt(_dt(ms)), q, s, n) for (ms, q, s), n in sorted(counts.items())]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
