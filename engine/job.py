"""Job, JobState and the mapping between a Job and its Redis hash (unknown keys are kept)."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from . import serializer
from .errors import SerializationError
from .fields import ATTRIBUTE, FORMATS, NAMES


class JobState(StrEnum):
    """The states a job goes through (docs/states.md), stored as lowercase strings."""

    UNSUBMITTED = "unsubmitted"
    SCHEDULED = "scheduled"
    BLOCKED = "blocked"
    SUBMITTED = "submitted"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STALLED = "stalled"
    DROPPED = "dropped"
    EXPIRED = "expired"
    # Never in Redis: the history's word for a live job that reconciliation found nowhere.
    LOST = "lost"

    @property
    def is_terminal(self) -> bool:
        """Tell whether no transition leaves this state except a manual retry."""
        return self in TERMINAL_STATES


# The one vocabulary of states: every surface (Django, templates, the dashboard's JS, which gets
# it in each snapshot) derives its lists from these sets.
TERMINAL_STATES: frozenset[JobState] = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.STALLED,
        JobState.DROPPED,
        JobState.EXPIRED,
    }
)
# In Redis and not finished: what a cancel applies to.
LIVE_STATES: frozenset[JobState] = frozenset(
    {JobState.SCHEDULED, JobState.BLOCKED, JobState.SUBMITTED, JobState.STARTED}
)
# Finished, as the history sees it (retention counts from the end of these).
ENDED_STATES: frozenset[JobState] = TERMINAL_STATES | {JobState.LOST}
# Ended without success: "recent failures", error triage.
DEAD_STATES: frozenset[JobState] = ENDED_STATES - {JobState.COMPLETED, JobState.CANCELLED}
# What a retry (or a DLQ resubmit) applies to: ended in Redis, not completed.
RETRYABLE_STATES: frozenset[JobState] = TERMINAL_STATES - {JobState.COMPLETED}


def state_vocabulary() -> dict[str, list[str]]:
    """Return every state and each named set, in the enum's order (for templates and JS)."""
    sets = {
        "terminal": TERMINAL_STATES,
        "live": LIVE_STATES,
        "ended": ENDED_STATES,
        "dead": DEAD_STATES,
        "cancellable": LIVE_STATES,
        "retryable": RETRYABLE_STATES,
    }
    return {"states": [s.value for s in JobState]} | {
        name: [s.value for s in JobState if s in members] for name, members in sets.items()
    }


# Per-call option overrides stored on the job hash when given; the worker prefers them.
OPTION_FIELDS: tuple[str, ...] = (
    "max_retries",
    "retry_delay_s",
    "backoff",
    "max_retry_delay_s",
    "timeout_s",
    "dead_letter_policy",
    "result_ttl_s",
    "max_heartbeat_interval_s",
    "on_shutdown",
)
TIMESTAMP_FIELDS: tuple[str, ...] = (
    "sent_at_ms",
    "submitted_at_ms",
    "claimed_at_ms",
    "started_at_ms",
    "retried_at_ms",
    "heartbeat_at_ms",
    "completed_at_ms",
    "run_at_ms",
    "deadline_ms",
    "cancel_requested_at_ms",
)
# Limits the producer stores for the cleaner, which runs without the task's code.
LIMIT_FIELDS: tuple[str, ...] = ("max_stalls", "ttl_ms", "good_until_ms", "queue_timeout_ms")
# Flow, deduplication, limit and repeat fields, set by the producer (None: not used).
FEATURE_FIELDS: tuple[str, ...] = (
    "on_parent_failure",
    "runs_on",
    "dedup_id",
    "dedup_mode",
    "dedup_ttl_ms",
    "concurrency_key",
    "concurrency_limit",
    "rate_interval_ms",
    "rate_key",
    "on_rate_limit",
    "repeat",
    "trace_context",
    "replay_of",
    "flow_id",
    "cleanup_ms",
)
_JSON_FIELDS = ("args", "kwargs", "result", "errors", "options", "parents", "logs", "checkpoint")
_INT_FIELDS = (
    "version",
    "priority",
    "attempt",
    "stalls",
    "concurrency_limit",
    "dedup_ttl_ms",
    "logs_count",
    "logs_dropped",
    *TIMESTAMP_FIELDS,
    *LIMIT_FIELDS,
)
_FLOAT_FIELDS = ("progress", "rate_interval_ms")
_STR_FIELDS = (
    "id",
    "task",
    "queue",
    "state",
    "worker",
    "token",
    "dlq",
    "begun",
    "progress_message",
    "on_parent_failure",
    "runs_on",
    "dedup_id",
    "dedup_mode",
    "concurrency_key",
    "rate_key",
    "on_rate_limit",
    "repeat",
    "trace_context",
    "replay_of",
    "fingerprint",
    "flow_id",
    "cleanup_ms",
)
_KNOWN = frozenset((*_JSON_FIELDS, *_INT_FIELDS, *_FLOAT_FIELDS, *_STR_FIELDS))
# Fields to_hash writes as str(value) when not None.
_PLAIN_FIELDS: tuple[str, ...] = (
    "worker",
    "token",
    "dlq",
    "begun",
    "progress",
    "progress_message",
    "logs_count",
    "logs_dropped",
    "fingerprint",
    *TIMESTAMP_FIELDS,
    *LIMIT_FIELDS,
    *FEATURE_FIELDS,
)
_plain_values = operator.attrgetter(*_PLAIN_FIELDS)
# Format -> the stored names of _PLAIN_FIELDS.
_PLAIN_STORED = {fmt: tuple(names[n] for n in _PLAIN_FIELDS) for fmt, names in NAMES.items()}


@dataclass(slots=True)
class Job:
    """A job as stored in Redis; `extra` keeps hash fields this version does not know."""

    id: str
    task: str
    queue: str = "default"
    version: int = 1
    state: JobState = JobState.UNSUBMITTED
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    attempt: int = 0
    stalls: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    worker: str | None = None
    token: str | None = None
    # '0' keeps the job out of the DLQ (dead_letter_policy="none"); absent means "save".
    dlq: str | None = None
    # '1' once the worker began running the claimed job.
    begun: str | None = None
    progress: float | None = None
    progress_message: str | None = None
    # The newest log lines ({"at_ms", "attempt", "message"}), their number, and how many older
    # ones were dropped to stay within the caps (log-1.lua).
    logs: list[dict[str, Any]] = field(default_factory=list)
    logs_count: int | None = None
    logs_dropped: int | None = None
    # The state the task last saved with `checkpoint()` (JSON; None: none saved), kept across
    # retries, stalls, hand-backs and resubmits and deleted when the job completes.
    checkpoint: Any = None
    max_stalls: int | None = None
    ttl_ms: int | None = None
    good_until_ms: int | None = None
    queue_timeout_ms: int | None = None
    sent_at_ms: int | None = None
    submitted_at_ms: int | None = None
    claimed_at_ms: int | None = None
    started_at_ms: int | None = None
    retried_at_ms: int | None = None
    heartbeat_at_ms: int | None = None
    completed_at_ms: int | None = None
    run_at_ms: int | None = None
    deadline_ms: int | None = None
    cancel_requested_at_ms: int | None = None
    # Jobs that must complete before this one starts (same queue), and what their failure does.
    parents: list[str] = field(default_factory=list)
    on_parent_failure: str | None = None
    # Which end of its parents releases it: None their success, "failure" a parent failing (a
    # parent that completes or is cancelled cancels it), "end" any end.
    runs_on: str | None = None
    dedup_id: str | None = None
    dedup_mode: str | None = None
    # How long the deduplication id holds (0: until the job finishes).
    dedup_ttl_ms: int | None = None
    # Jobs sharing a concurrency key run at most concurrency_limit at once, taking turns.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    # The task's rate limit as the interval between starts.
    rate_interval_ms: float | None = None
    # The rate key whose own budget of that rate the job uses (None: the task's), and what it
    # does when the budget is spent: "drop", "reschedule" (None: wait for its slot).
    rate_key: str | None = None
    on_rate_limit: str | None = None
    # Name of the repeatable whose tick made this job.
    repeat: str | None = None
    # The enqueue's OpenTelemetry context as JSON (engine.stream.tracing), when tracing is on.
    trace_context: str | None = None
    # The job this one replays with edited arguments (jobsite's POST /jobs/{id}/replay).
    replay_of: str | None = None
    # The fingerprint of the newest error record (engine.ops.fingerprint; set by the scripts).
    fingerprint: str | None = None
    # The graph this job was submitted in (enqueue_flow gives every job of a flow the same id).
    flow_id: str | None = None
    # cleanup_on as JSON: final state -> ms its hash is kept (the scripts' PEXPIRE; none: DLQ
    # or the result ttl as before).
    cleanup_ms: str | None = None
    # Keys this version does not know, with their values as given (JSON text in the hash).
    extra: dict[str, Any] = field(default_factory=dict)
    # Client side only: wait this long after submission (counted on Redis server time).
    delay_ms: int | None = None
    # Client side only: the engine made this id (keys.new_job_id), so no other job can hold
    # it; any other id is reserved for its queue before it is submitted (Client._reserve_ids).
    generated_id: bool = False
    # Client side only: a repeating job (the `repeat_every` option): the enqueue adds a
    # repeatable named by the job's id, firing every this many seconds, at most repeat_limit
    # times (None: no end).
    repeat_every_s: float | None = None
    repeat_limit: int | None = None
    # Client side only: callback jobs (on_success, on_failure) submitted with this one, in the
    # same script call, as its children (producing/submit.with_callbacks).
    callbacks: list[Job] = field(default_factory=list)
    # Client side only: the submit found the job's rate limit with no free slot
    # (on_rate_limit "drop" or "reschedule"): the next free slot, in server ms. A dropped job
    # is `cancelled`; a rescheduled one `scheduled`, its run_at_ms that slot.
    rate_limited_until_ms: int | None = None
    # Client side only: the Task whose `call()` made this job (engine/task.py; typed loosely,
    # as that module builds on this one): an enqueue with check_argument_types on checks the
    # arguments against its function's type hints (engine/arguments.py).
    made_by: object = field(default=None, compare=False, repr=False)

    @property
    def finished_at_ms(self) -> int | None:
        """Return when the job reached a terminal state (alias of completed_at_ms)."""
        return self.completed_at_ms

    @property
    def error(self) -> dict[str, Any] | None:
        """Return the last attempt's error, if any."""
        return self.errors[-1] if self.errors else None

    def to_hash(self, payload: bool = True, fmt: int = 1) -> dict[str, str]:
        """Return the Redis hash fields of this job (only fields that are set), named as hash
        format `fmt` stores them (engine/fields.py; 1: the attribute names).

        `payload` False leaves out args and kwargs, for a caller that encodes them itself.
        """
        fields = FORMATS[fmt]
        out: dict[str, str] = {
            fields.id: self.id,
            fields.task: self.task,
            fields.queue: self.queue,
            fields.version: str(self.version),
            fields.state: str(self.state),
            fields.priority: str(self.priority),
        }
        if payload:
            out[fields.args] = serializer.dumps(self.args).decode()
            out[fields.kwargs] = serializer.dumps(self.kwargs).decode()
        out.update(self.set_fields(fmt))
        return out

    def set_fields(self, fmt: int = 1) -> list[tuple[str, str]]:
        """Return the hash fields of `to_hash` beyond the six always written and the payload
        (id, task, queue, version, state, priority; args, kwargs): those set, in its order."""
        fields, names = FORMATS[fmt], NAMES[fmt]
        out: list[tuple[str, str]] = []
        if self.attempt:
            out.append((fields.attempt, str(self.attempt)))
        if self.stalls:
            out.append((fields.stalls, str(self.stalls)))
        if self.options:
            out.append((fields.options, serializer.dumps(self.options).decode()))
        if self.result is not None:
            out.append((fields.result, serializer.dumps(self.result).decode()))
        if self.errors:
            out.append((fields.errors, serializer.dumps(self.errors).decode()))
        if self.parents:
            out.append((fields.parents, serializer.dumps(self.parents).decode()))
        if self.logs:
            out.append((fields.logs, serializer.dumps(self.logs).decode()))
        if self.checkpoint is not None:
            out.append((fields.checkpoint, serializer.dumps(self.checkpoint).decode()))
        # One C call reads the ~30 optional fields (getattr one by one is slower, on every enqueue).
        for name, value in zip(_PLAIN_STORED[fmt], _plain_values(self), strict=True):
            if value is not None:
                out.append((name, str(value)))
        for name, value in self.extra.items():
            out.append(
                (
                    names.get(name, name),
                    value if isinstance(value, str) else serializer.dumps(value).decode(),
                )
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict of every field, unknown keys included at top level."""
        skip = ("extra", "delay_ms", "callbacks", "made_by")
        data = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip
        }
        data["state"] = str(self.state)
        data.update(self.extra)
        if self.callbacks:
            data["callbacks"] = [callback.to_dict() for callback in self.callbacks]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Job:
        """Build a Job from `to_dict` output, or from a dict in the other common spelling
        (`task_id`, `status` in BullMQ's words, `delay_until` and `created_at` in epoch seconds,
        `depends_on`); keys it does not know go to `extra` with their values as they are."""
        data = _with_common_names(data)
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "delay_ms", "made_by"}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        known["state"] = JobState(known.get("state") or JobState.UNSUBMITTED)
        if known.get("callbacks"):
            known["callbacks"] = [cls.from_dict(c) for c in known["callbacks"]]
        return cls(**known, extra=extra)

    @classmethod
    def from_hash(
        cls, fields: Mapping[str, str] | Iterable[str], job_id: str = "", queue: str = "default"
    ) -> Job:
        """Build a Job from HGETALL output (a mapping, or a flat field/value list).

        `job_id` and `queue` come from the key: a submitted job's hash does not store them.
        Fields are read by their stored names, in either format (engine/fields.py); fields
        neither names go to `extra`.
        """
        if not isinstance(fields, Mapping):
            flat = list(fields)
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
        fields = by_attribute(fields)
        values: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for name, raw in fields.items():
            if name not in _KNOWN:
                extra[name] = raw
            elif name in _INT_FIELDS:
                values[name] = int(raw)
            elif name in _FLOAT_FIELDS:
                values[name] = float(raw)
            elif name in _JSON_FIELDS:
                values[name] = loads_or_raw(raw)
            else:
                values[name] = raw
        if "claimed_at_ms" not in values and (claimed := claimed_ms(fields)):
            values["claimed_at_ms"] = int(claimed)  # begun at its claim
        values["state"] = JobState(values.get("state") or JobState.UNSUBMITTED)  # "" too
        values.setdefault("id", job_id)
        values.setdefault("queue", queue)
        values.setdefault("task", "")
        return cls(**values, extra=extra)


def by_attribute(fields: Mapping[str, str]) -> Mapping[str, str]:
    """Return a job hash's fields keyed by Job attribute name, whichever format stored them
    (engine/fields.py); fields neither format names keep theirs."""
    if _RENAMED.keys().isdisjoint(fields):
        return fields
    return {_RENAMED.get(name, name): raw for name, raw in fields.items()}


# Stored names that are not their attribute's name, in either format.
_RENAMED = {stored: name for stored, name in ATTRIBUTE.items() if stored != name}


def claimed_ms(fields: Mapping[str, str]) -> str | None:
    """Return when a job's latest claim was, as stored (None: never claimed); `fields` keyed
    by attribute name (by_attribute).

    claim-12.lua stores claimed_at_ms only for a job it claims without beginning it; one it
    begins at once was claimed at the start stamp of that attempt (retried_at_ms, or
    started_at_ms for the first), which a finished job keeps anyway.
    """
    return fields.get("claimed_at_ms") or fields.get("retried_at_ms") or fields.get("started_at_ms")


# Status names in BullMQ's words, as ours (`delayed` is a job waiting for its time: scheduled).
_COMMON_STATUS = {
    "waiting": JobState.SUBMITTED,
    "delayed": JobState.SCHEDULED,
    "waiting-children": JobState.BLOCKED,
    "active": JobState.STARTED,
    "completed": JobState.COMPLETED,
    "failed": JobState.FAILED,
    "expired": JobState.EXPIRED,
}


def _with_common_names(data: Mapping[str, Any]) -> dict[str, Any]:
    """Return `data` with the other common key names read as ours (ours win over theirs)."""
    out = dict(data)
    renames = {"task_id": "task", "depends_on": "parents", "status": "state"}
    for theirs, ours in renames.items():
        if theirs in out and ours not in out:
            out[ours] = out.pop(theirs)
    state = out.get("state")
    if isinstance(state, str) and state in _COMMON_STATUS:
        out["state"] = _COMMON_STATUS[state]
    seconds = {"delay_until": "run_at_ms", "created_at": "sent_at_ms"}
    for theirs, ours in seconds.items():
        value = out.get(theirs)
        if ours not in out and isinstance(value, int | float) and not isinstance(value, bool):
            out[ours] = int(value * 1000)
            del out[theirs]
    return out


def loads_or_raw(raw: str) -> Any:
    """Decode a JSON field; keep undecodable text as it is (a poison payload stays inspectable)."""
    try:
        return serializer.loads(raw)
    except SerializationError:
        return raw
