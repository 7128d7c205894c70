"""Idempotent bulk writes of the mirror: one statement per batch and table.

On PostgreSQL a batch is first copied (COPY, formatted by psycopg's C code) into a temporary
staging table of this session, then moved with set-based statements (`UPDATE ... FROM`, then
`INSERT ... SELECT ... ON CONFLICT`); on SQLite it is an `executemany` that the driver runs
in C. Every guarded column is written only by a newer event (`last_event_id`), so "an older
event changes nothing" is a property of the statement itself; `transitions` is the merge the
caller made under `lock_queues`.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from jobsite.jobs.history.rows import JOB_COLUMNS, TIMES
from jobsite.jobs.models import JobRecord, JobSearch

# Columns written whatever the guard says: the merged list of state changes.
UNGUARDED = frozenset(("transitions",))
_TIME_INDEXES = [JOB_COLUMNS.index(c) for c in TIMES]


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


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


# The ids as one JSON array parameter (SQLite). An `IN (%s, %s, ...)` of the batch's count made
# a new statement for each count, and the driver keeps the last 128 prepared, so the process
# grew with every new count; one statement keeps it flat, and is faster (docs/benchmarks.md).
SQLITE_IDS = '"id" IN (SELECT value FROM json_each(%s))'


def stored(ids: Sequence[str]) -> dict[str, tuple[str, list[dict[str, Any]], str, str]]:
    """Return the last event id, the transitions, the task and the queue of the rows among
    `ids` that exist."""
    if not ids:
        return {}
    table = _q(JobRecord._meta.db_table)
    columns = ", ".join(_q(c) for c in ("id", "last_event_id", "transitions", "task", "queue"))
    head = f"SELECT {columns} FROM {table} WHERE "
    found: dict[str, tuple[str, list[dict[str, Any]], str, str]] = {}
    with connection.cursor() as cursor:
        if _postgres():
            sql, param = _ids_param(ids)
            cursor.execute(head + f"{_q('id')} = ANY({sql})", [param])
            rows = cursor.fetchall()
        else:  # one statement whatever the count (see SQLITE_IDS)
            cursor.execute(head + SQLITE_IDS, [orjson.dumps(ids).decode()])
            rows = cursor.fetchall()
    for job_id, last, transitions, task, queue in rows:
        kept = orjson.loads(transitions) if isinstance(transitions, str | bytes) else transitions
        found[job_id] = (last, kept if isinstance(kept, list) else [], task, queue)
    return found


# A character no job id holds (engine.keys.JOB_ID_PATTERN).
_ID_SEP = "\x1f"


def _ids_param(ids: Sequence[str]) -> tuple[str, Any]:
    """Return the SQL of a text[] of `ids` and its one parameter (PostgreSQL).

    The ids go as one text joined by _ID_SEP, which the driver quotes in one call, not as an
    array it dumps element by element in Python; as that array only when an id holds the
    separator (a hand-written stream entry).
    """
    joined = _ID_SEP.join(ids)
    if joined.count(_ID_SEP) == len(ids) - 1:
        return "string_to_array(%s, E'\\x1f')", joined
    return "%s", list(ids)


# The staging tables made in each session (a temporary table lives as long as its session).
_made: dict[str, weakref.WeakSet[Any]] = {}


def _empty_stage(cursor: Any, name: str, definition: str) -> None:
    """Make this session's temporary table `name` (`definition`: its columns) empty, once made."""
    made = _made.setdefault(name, weakref.WeakSet())
    session = connection.connection
    if session not in made:
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} {definition}")
        # A rollback drops a table made in its transaction: it counts as made once committed.
        transaction.on_commit(lambda: made.add(session))
    cursor.execute(f"TRUNCATE {name}")


def _stage(cursor: Any, model: type[Model], columns: Sequence[str], rows: Iterable[Any]) -> str:
    """Copy rows into this session's staging table for `model`; return the SELECT of them."""
    table = _q(model._meta.db_table)
    stage = _q(f"{model._meta.db_table}_stage")
    names = ", ".join(_q(c) for c in columns)
    _empty_stage(cursor, stage, f"AS SELECT {names} FROM {table} WITH NO DATA")
    with cursor.cursor.copy(f"COPY {stage} ({names}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    return f"SELECT {names} FROM {stage}"


def _insert(
    model: type[Model], columns: Sequence[str], rows: Sequence[tuple[Any, ...]], tail: str
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


@dataclass(frozen=True, slots=True)
class Staged:
    """One job row to write: its values (history.row_values), newest event id and transitions."""

    id: str
    last_event_id: str
    transitions: str  # JSON text of the merged list
    values: list[Any]  # row_values of its cleaned hash: the three above go in at the write


_LAST, _TRANSITIONS, _UPDATED = (
    JOB_COLUMNS.index(c) for c in ("last_event_id", "transitions", "updated_at")
)


def upsert(
    rows: Sequence[Staged],
    update: Iterable[str],
    guard: bool = True,
    stored_ids: Container[str] | None = None,
) -> None:
    """Insert rows or update `update` columns of existing ones (newer events only when `guard`).

    `stored_ids`: the rows known to exist, read under lock_queues (None: not known). On
    PostgreSQL the known rows are changed by an `UPDATE ... FROM` a staging table (no row-lock
    record before each update, unlike `ON CONFLICT DO UPDATE`) and the others copied straight
    into the table; a row that exists after all (written by someone not holding the lock)
    makes the copy fail and the rows go through `INSERT ... ON CONFLICT` instead, as all rows
    do when `stored_ids` is None. SQLite: one `executemany` upsert.
    """
    if not rows:
        return
    rows = sorted(rows, key=lambda r: r.id)  # one lock order for concurrent writers
    if not _postgres():
        _upsert_rows(rows, update, guard)
        return
    update = list(update)
    if stored_ids is None:
        _upsert_rows(rows, update, guard)
        return
    known = [r for r in rows if r.id in stored_ids]
    fresh = [r for r in rows if r.id not in stored_ids]
    if known:
        _update_staged(known, update, guard)
    if fresh:
        made = _written(fresh)  # one row's values at a time
        _copy_new(JobRecord, JOB_COLUMNS, made, lambda: _upsert_rows(fresh, update, guard))


def _written(rows: Iterable[Staged]) -> Iterator[list[Any]]:
    """Yield the values written for each row: its times as UTC text (PostgreSQL's ending in
    "+00", SQLite's naive, as Django keeps them), its last event id and transitions, and the
    time of this write as updated_at."""
    if _postgres():
        now, zone = str(timezone.now()), "+00"
    else:
        now, zone = str(timezone.now().replace(tzinfo=None)), ""
    for r in rows:
        values = list(r.values)
        values[_LAST], values[_TRANSITIONS], values[_UPDATED] = r.last_event_id, r.transitions, now
        for i in _TIME_INDEXES:
            ms = values[i]
            if ms is not None:
                values[i] = time_text(ms, zone)
        yield values


_EPOCH = datetime(1970, 1, 1)


@functools.lru_cache(maxsize=4096)
def _second_text(second: int) -> str:
    return (_EPOCH + timedelta(seconds=second)).isoformat(" ")  # years zero-padded to 4


def time_text(ms: int, zone: str = "") -> str:
    """Return a time in ms since the epoch as UTC text, as Django writes a datetime to SQLite
    (no fraction when it is 0); `zone` ("+00") makes it PostgreSQL's timestamptz input.

    The jobs of a batch end within a few seconds of each other, so the seconds come from a
    cache: cheaper than a datetime per time that the driver formats again.
    """
    second, milli = divmod(ms, 1000)
    if milli:
        return f"{_second_text(second)}.{milli * 1000:06d}{zone}"
    return _second_text(second) + zone


def _copy_new(
    model: type[Model],
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    fallback: Callable[[], None],
) -> None:
    """Copy rows known to be new straight into the table of `model` (PostgreSQL); when one is
    there after all (written by someone not holding lock_queues), undo the copy and run
    `fallback`, the upsert, instead."""
    table = _q(model._meta.db_table)
    names = ", ".join(_q(c) for c in columns)
    try:
        with (
            transaction.atomic(),  # a savepoint: a failed copy leaves the batch usable
            connection.wrap_database_errors,  # the driver's errors as Django's
            connection.cursor() as cursor,
            cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
    except IntegrityError:
        fallback()


def _update_staged(rows: Sequence[Staged], update: list[str], guard: bool) -> None:
    """Update stored rows (PostgreSQL): their values `COPY`ed into this session's staging
    table, then one `UPDATE ... FROM` it (no row-lock record before each update)."""
    table = _q(JobRecord._meta.db_table)
    with connection.cursor() as cursor:
        source = _stage(cursor, JobRecord, JOB_COLUMNS, _written(rows))
        cursor.execute(
            f"UPDATE {table} SET {_sets(update, guard, 'new')} FROM ({source}) AS new"
            f" WHERE {table}.{_q('id')} = new.{_q('id')}"
        )


def _upsert_rows(rows: Sequence[Staged], update: Iterable[str], guard: bool) -> None:
    """Insert rows, updating those that exist (`INSERT ... ON CONFLICT DO UPDATE`)."""
    made = [tuple(values) for values in _written(rows)]
    tail = f" ON CONFLICT ({_q('id')}) DO UPDATE SET {_sets(update, guard, 'excluded')}"
    _insert(JobRecord, JOB_COLUMNS, made, tail)


def upsert_search(
    texts: Sequence[tuple[str, str]], stored_ids: Container[str] | None = None
) -> None:
    """Store the search text of jobs; an unchanged text writes nothing.

    `stored_ids`: the jobs known to have a row, read under lock_queues (None: not known). On
    PostgreSQL the texts of the others are copied straight in, as upsert does with their rows.
    """
    texts = sorted(texts)
    if stored_ids is not None and _postgres():
        fresh = [t for t in texts if t[0] not in stored_ids]
        texts = [t for t in texts if t[0] in stored_ids]
        if fresh:
            _copy_new(JobSearch, ("job_id", "text"), fresh, lambda: _upsert_texts(fresh))
    _upsert_texts(texts)


def _upsert_texts(texts: Sequence[tuple[str, str]]) -> None:
    if not texts:
        return
    table = _q(JobSearch._meta.db_table)
    text = _q("text")
    tail = (
        f" ON CONFLICT ({_q('job_id')}) DO UPDATE SET {text} = excluded.{text}"
        f" WHERE {table}.{text} <> excluded.{text}"
    )
    _insert(JobSearch, ("job_id", "text"), texts, tail)


# Fewest search texts a batch writes on its `aside` connection (fewer: in line, no hand-over).
ASIDE_MIN_TEXTS = 1000


def search_aside(
    aside: Executor | None, texts: list[tuple[str, str]], stored_ids: Container[str]
) -> Callable[[], None]:
    """Start writing search texts; return the wait for them (raising their error).

    With `aside` (PostgreSQL) they go in a transaction of their own on that executor's
    connection, at the same time as the rows: the server writes the two tables on two cores.
    The caller waits before its own commit, so rows never commit without their texts; texts
    committed without their rows are written again, idempotently, with the batch's retry.
    """
    if aside is None or len(texts) < ASIDE_MIN_TEXTS:
        upsert_search(texts, stored_ids=stored_ids)
        return lambda: None
    return aside.submit(write_texts, texts, stored_ids).result


def write_texts(texts: list[tuple[str, str]], stored_ids: Container[str]) -> None:
    """Write search texts in a transaction of this thread's connection (search_aside)."""
    drop_stale_connection()  # after an error: a fresh connection
    with transaction.atomic():
        upsert_search(texts, stored_ids=stored_ids)


def drop_stale_connection() -> None:
    """Close this thread's connection if it broke, or outlived a CONN_MAX_AGE above 0.

    Django's close_old_connections ends a request: with CONN_MAX_AGE 0 (Django's default) it
    closes every time, and a loop writing batch after batch would connect again for each one.
    """
    if connection.connection is None or connection.in_atomic_block:
        return
    if connection.errors_occurred:
        if connection.is_usable():
            connection.errors_occurred = False
        else:
            connection.close()
        return
    max_age_s = connection.settings_dict["CONN_MAX_AGE"]
    if max_age_s and connection.close_at is not None and time.monotonic() >= connection.close_at:
        connection.close()


def close_connection() -> None:
    """Close this thread's connection (the search executor's, when the mirror closes)."""
    connection.close()  # this thread's
