"""Event: one entry of the per-queue event streams, parsed; resources/duties/feed.py reads them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson

from ..job import by_attribute

# A mirror batch holds thousands of events and job hashes whose states, workers, queues and tasks
# are a handful of texts: each is kept once (`shared`), not once per event. Bounded: past
# SHARED_MAX texts (workers come and go) the table starts again.
SHARED_MAX = 4096
_shared: dict[str, str] = {}
# A job's events (three or more) are read close together: the reader (resources/duties/feed.py)
# keeps one copy of each job id for all of them (EventReader._jobs), at most JOBS_SHARED_MAX ids,
# then starts again.
JOBS_SHARED_MAX = 20_000
# The hash fields whose values repeat from job to job.
REPEATED_FIELDS = ("state", "queue", "task", "worker", "version", "attempt", "priority")


def shared(text: str) -> str:
    """Return the copy of `text` kept for everyone (see SHARED_MAX)."""
    kept = _shared.get(text)
    if kept is None:
        if len(_shared) >= SHARED_MAX:
            _shared.clear()
        kept = _shared[text] = text
    return kept


def sortable_id(stream_id: str) -> str:
    """Return a stream id ("ms-seq") zero-padded so that ids sort as text."""
    ms, _, seq = stream_id.partition("-")
    return f"{ms.zfill(15)}-{(seq or '0').zfill(8)}"


def stream_id(sortable: str) -> str:
    """Return the stream id ("ms-seq") of a sortable id (sortable_id's inverse)."""
    ms, _, seq = sortable.partition("-")
    return f"{ms.lstrip('0') or '0'}-{seq.lstrip('0') or '0'}"


class Event(NamedTuple):
    """One transition as written by a script: job, from, to, time, attempt, worker, error.

    An entry with a `note` is not a transition (from = to): a submit folded into this job,
    `deduplicated` (the submit of job `other` was ignored for it) or `debounced` (job `other`
    replaced it). Readers that follow states skip it (`is_note`).
    """

    queue: str
    # The stream id in its sortable form (see sortable_id): made once, compared often; `id`
    # gives it back as Redis spells it (for acks). The one copy an event keeps of its id.
    key: str
    job: str
    from_state: str
    to_state: str
    at_ms: int
    attempt: int
    worker: str
    error: str
    progress: float | None = None
    message: str = ""
    # The message of a log line (job.log): a started -> started event like progress.
    log: str = ""
    # A note, not a transition: NOTES, and the other job it names.
    note: str = ""
    other: str = ""

    @property
    def id(self) -> str:
        """Return the stream id as Redis spells it ("ms-seq")."""
        return stream_id(self.key)

    @property
    def is_note(self) -> bool:
        """Tell whether this entry notes a folded submit rather than a change of state."""
        return bool(self.note)

    @classmethod
    def from_entry(
        cls, queue: str, entry_id: str, f: dict[str, str], jobs: dict[str, str] | None = None
    ) -> Event:
        """Build an Event from one stream entry; `jobs` keeps one copy of each job id."""
        progress = f.get("progress")
        job = f.get("job", "")
        return cls(
            queue,
            sortable_id(entry_id),
            job if jobs is None else jobs.setdefault(job, job),
            shared(f.get("from", "")),
            shared(f.get("to", "")),
            int(f.get("at") or 0),
            int(f.get("attempt") or 0),
            shared(f.get("worker", "")),
            f.get("error", ""),
            float(progress) if progress else None,
            f.get("message", ""),
            f.get("log", ""),
            f.get("note", ""),
            f.get("other", ""),
        )

    @classmethod
    def from_flat(
        cls, queue: str, entry_id: str, flat: list[str], jobs: dict[str, str] | None = None
    ) -> Event:
        """Build an Event from one entry's field/value list as Redis sent it.

        An entry of exactly the fields every script writes, in their order (`emit` in
        common.lua), is read by position: no dict per entry. Any other goes by name. `jobs`
        keeps one copy of each job id.
        """
        if len(flat) == _CORE_LEN and flat[0::2] == CORE_FIELDS:
            job = flat[1]
            return cls(
                queue,
                sortable_id(entry_id),
                job if jobs is None else jobs.setdefault(job, job),
                shared(flat[3]),
                shared(flat[5]),
                int(flat[7] or 0),
                int(flat[9] or 0),
                shared(flat[11]),
                flat[13],
            )
        pairs = iter(flat)
        return cls.from_entry(queue, entry_id, dict(zip(pairs, pairs, strict=True)), jobs)


# What a note entry says (Event.note): a submit ignored for a job, or a job a debounce replaced.
NOTES = ("deduplicated", "debounced")
# The fields of an event, in the order every script writes them (`emit` in common.lua).
CORE_FIELDS = ["job", "from", "to", "at", "attempt", "worker", "error"]
_CORE_LEN = 2 * len(CORE_FIELDS)


def ids_by_queue(events: Iterable[Event]) -> dict[str, list[str]]:
    """Return the stream ids of `events` by queue (what acknowledging them takes)."""
    by_queue: dict[str, list[str]] = defaultdict(list)
    for e in events:
        by_queue[e.queue].append(e.id)
    return by_queue


def stream_entries(reply: Any) -> Iterable[tuple[str, list[Any]]]:
    """Return (stream, entries) of an XREADGROUP reply: RESP3 sends a map, RESP2 pairs."""
    if not reply:
        return ()
    return reply.items() if isinstance(reply, dict) else reply


# How long an entry stays unacked before another consumer takes it over (its reader stopped).
IDLE_MS = 30_000


def hash_from_json(text: str) -> dict[str, str]:
    """Decode a hash sent as JSON, keyed by Job attribute name whichever format stored it (its
    repeated values shared); bytes that are not UTF-8 (surrogate-escaped) become U+FFFD."""
    try:
        stored: dict[str, str] = orjson.loads(text)
    except orjson.JSONDecodeError:
        stored = orjson.loads(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    fields = dict(by_attribute(stored))
    for name in REPEATED_FIELDS:
        value = fields.get(name)
        if value is not None:
            fields[name] = shared(value)
    return fields
