"""The columns of a mirrored job row, from a job hash or from an event alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from engine import TERMINAL_STATES, Event, claimed_ms

TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
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
    "logs",
    "logs_dropped",
    "worker",
    "fingerprint",
    "replay_of",
    "parents",
    "flow_id",
    *TIMES,
    "last_event_id",
    "updated_at",
    "transitions",
)
# What an event alone (its job hash already expired) may change on a row.
BARE_COLUMNS = (
    "state",
    "attempt",
    "worker",
    "completed_at",
    "last_event_id",
    "updated_at",
    "transitions",
)


def _dt(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


SEARCH_CHARS = 2000


def search_text(task: str, args: str, kwargs: str, errors: Any) -> str:
    """Return the lower-cased text that search matches: task, arguments, error messages.

    `args` and `kwargs` are JSON text; `errors` the decoded list of error records. Ids are
    matched whole elsewhere and tracebacks left out (either would swamp the index); the text
    is capped at SEARCH_CHARS.
    """
    said = [
        f"{e.get('exception') or e.get('type', '')}: {e.get('message', '')}"
        for e in (errors if isinstance(errors, list) else [])
        if isinstance(e, dict)
    ]
    return " ".join([task, args, kwargs, *said])[:SEARCH_CHARS].lower()


def hash_search_text(fields: dict[str, str]) -> str:
    """Return the search text of a job hash (its JSON fields cleaned by clean_hash)."""
    raw = fields.get("errors") or "[]"
    try:
        errors = [] if raw in _PLAIN else orjson.loads(raw)
    except orjson.JSONDecodeError:
        errors = []
    return search_text(
        fields.get("task", ""), fields.get("args") or "[]", fields.get("kwargs") or "{}", errors
    )


def transition(event: Event) -> dict[str, Any]:
    """Return the record of one state change as a row's `transitions` keeps it."""
    return {
        "id": event.key,
        "from": event.from_state,
        "to": event.to_state,
        "at_ms": event.at_ms,
        "attempt": event.attempt,
        "worker": event.worker,
        "error": event.error,
    }


def _json_text(raw: str | None, default: str) -> str | None:
    """Return stored JSON text as it is when valid, else the text as a JSON string (poison)."""
    if raw is None:
        return None if default == "null" else default
    if raw in _PLAIN:
        return raw
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return orjson.dumps(raw.encode("utf-8", "replace").decode()).decode()
    # PostgreSQL's jsonb refuses NUL characters; keep the rest of the document.
    return raw.replace("\\u0000", "\\ufffd") if "\\u0000" in raw else raw


# JSON texts most fields hold: valid, nothing to check.
_PLAIN = frozenset(("[]", "{}", "null"))

# The hash fields holding JSON text, with what a missing one means.
JSON_FIELDS = {
    "args": "[]",
    "kwargs": "{}",
    "result": "null",
    "errors": "[]",
    "logs": "[]",
    "parents": "[]",
}


def clean_hash(fields: dict[str, str]) -> dict[str, str]:
    """Return `fields` with every JSON field valid JSON text (see _json_text) and no NUL in the
    others (PostgreSQL's text refuses it: U+FFFD takes its place); copy if changed."""
    if "\x00" in "".join(fields.values()):
        fields = {k: v.replace("\x00", "\ufffd") for k, v in fields.items()}
    for name, default in JSON_FIELDS.items():
        raw = fields.get(name)
        if raw is not None:
            good = _json_text(raw, default)
            if good is not raw:
                fields = {**fields, name: good or default}
    return fields


def ended_at(fields: dict[str, str]) -> datetime | None:
    """Return when the job of a hash ended (None: it has not)."""
    return _dt(int(fields.get("completed_at_ms") or 0))


def _int(raw: str | None, default: int = 0) -> int:
    return int(raw) if raw else default


_TIME_FIELDS = [f"{name}_ms" for name in TIMES]


def _ms(raw: str | None) -> int | None:
    return int(raw) if raw and raw != "0" else None


def row_values(fields: dict[str, str]) -> list[Any]:
    """Return a job row's values in JOB_COLUMNS order from a job hash cleaned by clean_hash.

    JSON fields stay their JSON text, times are ms since the epoch (bulkwrite writes them as
    text); `last_event_id`, `updated_at` and `transitions` are left None for the writer. One
    list per job, built in one go: every write path, on SQLite and PostgreSQL, writes it.
    """
    f = fields.get
    progress = f("progress")
    return [
        f("id", ""),
        f("queue", ""),
        f("task", ""),
        _int(f("version"), 1),
        f("state", ""),
        _int(f("priority")),
        _int(f("attempt")),
        f("args") or "[]",
        f("kwargs") or "{}",
        f("result"),
        f("errors") or "[]",
        float(progress) if progress else None,
        f("progress_message", ""),
        f("logs") or "[]",
        _int(f("logs_dropped")),
        f("worker", ""),
        f("fingerprint", ""),
        f("replay_of", ""),
        f("parents") or "[]",
        f("flow_id") or None,
        *[_ms(claimed_ms(fields) if name == "claimed_at_ms" else f(name)) for name in _TIME_FIELDS],
        None,
        None,
        None,
    ]


def fields_from_event(event: Event) -> dict[str, str]:
    """Return the hash fields an event tells, for a job whose hash Redis no longer holds."""
    at_ms = str(event.at_ms)
    return {
        "id": event.job,
        "queue": event.queue,
        "state": event.to_state,
        "attempt": str(event.attempt),
        "worker": event.worker,
        "submitted_at_ms": at_ms,
        "completed_at_ms": at_ms if event.to_state in TERMINAL else "",
    }


ALL_BUT_ID = [c for c in JOB_COLUMNS if c != "id"]
RESYNC_COLUMNS = [c for c in ALL_BUT_ID if c not in ("last_event_id", "transitions")]
