"""Idempotent bulk writes of the mirror: one statement per batch and table.

`INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE last_event_id < excluded.last_event_id` makes
"an older event changes nothing" a property of the statement itself. On PostgreSQL a batch goes
in as one array per column (`SELECT * FROM unnest(...)`: one round trip, no per-row parsing);
on SQLite as an `executemany` that the driver runs in C.

Event inserts return the events that were new, and only those are added to the per-minute
counts, so a replayed batch counts nothing twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Model
from django.utils import timezone

from engine.events import Event

from .history import JOB_COLUMNS, TIMES
from .models import JobEvent, JobRecord, MinuteCount

EVENT_COLUMNS = (
    "queue",
    "event_id",
    "job_id",
    "from_state",
    "to_state",
    "at",
    "attempt",
    "worker",
    "error",
    "progress",
)
# SQLite binds at most 32,766 parameters per statement; stay well below.
SQLITE_ROWS = 1000


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _db_time(value: datetime | None) -> Any:
    """Return a datetime as the database driver wants it (SQLite: naive UTC text)."""
    if value is None or _postgres():
        return value
    return str(value.replace(tzinfo=None))


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _values(model: type[Model], columns: Sequence[str], rows: int) -> str:
    """Return the row source of an INSERT: unnest of typed arrays, or one VALUES tuple."""
    if _postgres():
        types = [model._meta.get_field(c).db_type(connection) for c in columns]
        return "SELECT * FROM unnest(" + ", ".join(f"%s::{t}[]" for t in types) + ")"
    cast = ["%s" for _ in columns]
    return "VALUES " + ", ".join(["(" + ", ".join(cast) + ")"] * rows)


def _columns_of(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Transpose rows into one list per column (the arrays unnest takes)."""
    return [[row[i] for row in rows] for i in range(width)] if rows else [[]] * width


def upsert(rows: Sequence[dict[str, Any]], update: Iterable[str], guard: bool = True) -> None:
    """Insert rows or update `update` columns of existing ones (newer events only when `guard`)."""
    if not rows:
        return
    table = _q(JobRecord._meta.db_table)
    names = ", ".join(_q(c) for c in JOB_COLUMNS)
    sets = ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in update)
    where = (
        f" WHERE {table}.{_q('last_event_id')} < excluded.{_q('last_event_id')}" if guard else ""
    )
    tail = f" ON CONFLICT ({_q('id')}) DO UPDATE SET {sets}{where}"
    now = _db_time(timezone.now())
    # In id order, so that two mirrors writing overlapping rows lock them in the same order.
    prepped = [
        tuple(_db_time(row[c]) if c in TIMES else row.get(c, now) for c in JOB_COLUMNS)
        for row in sorted(rows, key=lambda r: r["id"])
    ]
    with connection.cursor() as cursor:
        if _postgres():
            sql = f"INSERT INTO {table} ({names}) {_values(JobRecord, JOB_COLUMNS, 0)}{tail}"
            cursor.execute(sql, _columns_of(prepped, len(JOB_COLUMNS)))
        else:
            sql = f"INSERT INTO {table} ({names}) {_values(JobRecord, JOB_COLUMNS, 1)}{tail}"
            cursor.executemany(sql, prepped)


def insert_events(events: Sequence[Event]) -> list[Event]:
    """Insert history rows, skipping those already stored; return the events that were new."""
    by_key = {(e.queue, e.key): e for e in events if e.job}
    if not by_key:
        return []
    adapt = connection.ops.adapt_datetimefield_value
    params = [
        (
            e.queue,
            e.key,
            e.job,
            e.from_state,
            e.to_state,
            adapt(_dt(e.at_ms)),
            e.attempt,
            e.worker,
            e.error,
            e.progress,
        )
        for e in by_key.values()
    ]
    table = _q(JobEvent._meta.db_table)
    head = f"INSERT INTO {table} ({', '.join(_q(c) for c in EVENT_COLUMNS)}) "
    tail = (
        f" ON CONFLICT ({_q('queue')}, {_q('event_id')}) DO NOTHING"
        f" RETURNING {_q('queue')}, {_q('event_id')}"
    )
    if _postgres():
        statements = [(len(params), _columns_of(params, len(EVENT_COLUMNS)))]
    else:
        chunks = [params[i : i + SQLITE_ROWS] for i in range(0, len(params), SQLITE_ROWS)]
        statements = [(len(c), [v for row in c for v in row]) for c in chunks]
    new: list[tuple[str, str]] = []
    with connection.cursor() as cursor:
        for rows, values in statements:
            cursor.execute(head + _values(JobEvent, EVENT_COLUMNS, rows) + tail, values)
            new.extend(cursor.fetchall())
    return [by_key[(queue, key)] for queue, key in new]


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
