"""Fast, idempotent writes of mirrored rows: executemany of guarded INSERTs.

`INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE last_event_id < excluded.last_event_id` makes
"an older event changes nothing" a property of the statement itself (SQLite and PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import connection
from django.utils import timezone

from engine.events import Event

from .models import JobEvent, JobRecord

TERMINAL = ("completed", "failed", "cancelled", "stalled", "dropped", "expired")
TIMES = (
    "sent_at",
    "submitted_at",
    "claimed_at",
    "started_at",
    "retried_at",
    "heartbeat_at",
    "completed_at",
    "run_at",
)
JOB_COLUMNS = (
    "id",
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
    "progress_message",
    "worker",
    *TIMES,
    "last_event_id",
    "updated_at",
)
JSON_COLUMNS = frozenset(("args", "kwargs", "result", "errors"))
# What an event alone (its job hash already expired) may change on a row.
EVENT_COLUMNS = ("state", "attempt", "worker", "completed_at", "last_event_id", "updated_at")
EVENT_INSERT = (
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


def _dt(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _json_text(raw: str | None, default: str) -> str | None:
    """Return stored JSON text as it is when valid, else the text as a JSON string (poison)."""
    if raw is None:
        return None if default == "null" else default
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return orjson.dumps(raw.encode("utf-8", "replace").decode()).decode()
    # PostgreSQL's jsonb refuses NUL characters; keep the rest of the document.
    return raw.replace("\\u0000", "\\ufffd") if "\\u0000" in raw else raw


def _int(raw: str | None, default: int = 0) -> int:
    return int(raw) if raw else default


def values_from_hash(fields: dict[str, str], last_event_id: str) -> dict[str, Any]:
    """Return a row's column values from a job hash (JSON fields stay the hash's JSON text)."""
    f = fields.get
    progress = f("progress")
    row: dict[str, Any] = {
        "id": f("id", ""),
        "queue": f("queue", ""),
        "task": f("task", ""),
        "version": _int(f("version"), 1),
        "state": f("state", ""),
        "priority": _int(f("priority")),
        "attempt": _int(f("attempt")),
        "args": _json_text(f("args"), "[]"),
        "kwargs": _json_text(f("kwargs"), "{}"),
        "result": _json_text(f("result"), "null"),
        "errors": _json_text(f("errors"), "[]"),
        "progress": float(progress) if progress else None,
        "progress_message": f("progress_message", ""),
        "worker": f("worker", ""),
        "last_event_id": last_event_id,
    }
    for name in TIMES:
        row[name] = _dt(_int(f(f"{name}_ms")))
    return row


def values_from_event(event: Event) -> dict[str, Any]:
    """Return a row's column values when only the event is known."""
    at = _dt(event.at_ms)
    return {
        "id": event.job,
        "queue": event.queue,
        "task": "",
        "version": 1,
        "state": event.to_state,
        "priority": 0,
        "attempt": event.attempt,
        "args": "[]",
        "kwargs": "{}",
        "result": None,
        "errors": "[]",
        "progress": None,
        "progress_message": "",
        "worker": event.worker,
        **dict.fromkeys(TIMES),
        "submitted_at": at,
        "completed_at": at if event.to_state in TERMINAL else None,
        "last_event_id": event.key,
    }


def _db_time(value: datetime | None) -> Any:
    """Return a datetime as the database driver wants it (SQLite: naive UTC text)."""
    if value is None or connection.vendor != "sqlite":
        return value
    return str(value.replace(tzinfo=None))


def _prep(row: dict[str, Any], now: Any) -> tuple[Any, ...]:
    return tuple(_db_time(row[c]) if c in TIMES else row.get(c, now) for c in JOB_COLUMNS)


def upsert(rows: Sequence[dict[str, Any]], update: Iterable[str], guard: bool = True) -> None:
    """Insert rows or update `update` columns of existing ones (newer events only when `guard`)."""
    if not rows:
        return
    q = connection.ops.quote_name
    table = q(JobRecord._meta.db_table)
    columns = ", ".join(q(c) for c in JOB_COLUMNS)
    sets = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in update)
    where = f" WHERE {table}.{q('last_event_id')} < excluded.{q('last_event_id')}" if guard else ""
    now = _db_time(timezone.now())
    prepped = [_prep(row, now) for row in rows]
    tail = f" ON CONFLICT ({q('id')}) DO UPDATE SET {sets}{where}"
    _insert_many(f"INSERT INTO {table} ({columns}) VALUES ", _placeholders(), prepped, tail)


def _placeholders() -> str:
    """Return the VALUES tuple of a job row; JSON columns take JSON text (cast on PostgreSQL)."""
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    return "(" + ", ".join(f"%s{cast}" if c in JSON_COLUMNS else "%s" for c in JOB_COLUMNS) + ")"


def _insert_many(head: str, one: str, rows: list[tuple[Any, ...]], tail: str) -> None:
    """Run one INSERT for many rows with executemany (SQLite runs it in C)."""
    with connection.cursor() as cursor:
        cursor.executemany(head + one + tail, rows)


def insert_events(events: Sequence[Event]) -> None:
    """Insert history rows; an event already stored is skipped."""
    if not events:
        return
    q = connection.ops.quote_name
    table = q(JobEvent._meta.db_table)
    head = f"INSERT INTO {table} ({', '.join(q(c) for c in EVENT_INSERT)}) VALUES "
    tail = f" ON CONFLICT ({q('queue')}, {q('event_id')}) DO NOTHING"
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
        for e in events
        if e.job
    ]
    _insert_many(head, "(" + ", ".join(["%s"] * len(EVENT_INSERT)) + ")", params, tail)


ALL_BUT_ID = [c for c in JOB_COLUMNS if c != "id"]
RESYNC_COLUMNS = [c for c in ALL_BUT_ID if c != "last_event_id"]
