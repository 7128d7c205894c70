"""The fields of a job's Redis hash, by name: the only place that spells one.

A job is a Redis hash, one field per attribute (ARCHITECTURE.md). Python reads and writes its
fields through `F` (`F.state`, `F.submitted_at_ms`); the Lua scripts spell them the same way
(`F.state`), and engine/seam/luasrc.py puts each stored name in place when it loads a script,
refusing a name this table lacks. So the stored names can change in one place (a shorter
storage format takes a release that reads both first: docs/architecture.md), and a misspelt
field fails at import instead of reading nothing.

Most fields are a `Job` attribute of the same name (engine/job.py maps them); the rest only the
scripts keep (leases, concurrency and dedup keys, version waits, parents still pending).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobFields:
    """Attribute name -> the field's name in the hash."""

    # What the job is.
    id: str = "id"
    task: str = "task"
    queue: str = "queue"
    version: str = "version"
    state: str = "state"
    args: str = "args"
    kwargs: str = "kwargs"
    priority: str = "priority"
    options: str = "options"
    # Its runs and their outcome.
    attempt: str = "attempt"
    stalls: str = "stalls"
    result: str = "result"
    errors: str = "errors"
    fingerprint: str = "fingerprint"
    worker: str = "worker"
    progress: str = "progress"
    progress_message: str = "progress_message"
    logs: str = "logs"
    logs_count: str = "logs_count"
    logs_dropped: str = "logs_dropped"
    # The newest log line's text, so log-1.lua drops a repeat of it.
    logs_last: str = "logs_last"
    # The running attempt's lease: its token, '1' once begun, '1' when run alone (a suspect).
    token: str = "token"
    begun: str = "begun"
    isolated: str = "isolated"
    # Times (server ms, except sent_at_ms: the client's clock at the enqueue).
    sent_at_ms: str = "sent_at_ms"
    submitted_at_ms: str = "submitted_at_ms"
    claimed_at_ms: str = "claimed_at_ms"
    started_at_ms: str = "started_at_ms"
    retried_at_ms: str = "retried_at_ms"
    heartbeat_at_ms: str = "heartbeat_at_ms"
    completed_at_ms: str = "completed_at_ms"
    run_at_ms: str = "run_at_ms"
    deadline_ms: str = "deadline_ms"
    cancel_requested_at_ms: str = "cancel_requested_at_ms"
    # Limits the producer stores for the scripts and the cleaner.
    dlq: str = "dlq"
    max_stalls: str = "max_stalls"
    ttl_ms: str = "ttl_ms"
    good_until_ms: str = "good_until_ms"
    queue_timeout_ms: str = "queue_timeout_ms"
    cleanup_ms: str = "cleanup_ms"
    # Flows: the parents, what their failure does, and how many have not completed yet; the
    # key of the SET of jobs waiting for this one.
    parents: str = "parents"
    on_parent_failure: str = "on_parent_failure"
    pending_parents: str = "pending_parents"
    children: str = "children"
    flow_id: str = "flow_id"
    # Deduplication: the id, its mode and ttl, and the key that holds it.
    dedup_id: str = "dedup_id"
    dedup_mode: str = "dedup_mode"
    dedup_ttl_ms: str = "dedup_ttl_ms"
    dedup_key: str = "dedup_key"
    # Concurrency keys: the key, its limit, and the SET and ZSET of its running and waiting jobs.
    concurrency_key: str = "concurrency_key"
    concurrency_limit: str = "concurrency_limit"
    ckey_active: str = "ckey_active"
    ckey_waiting: str = "ckey_waiting"
    # Rate limits: the task's interval, and the slot a rate-limited job keeps.
    rate_interval_ms: str = "rate_interval_ms"
    rate_slot_ms: str = "rate_slot_ms"
    # A job set aside for its task version: the ZSET it waits in, and since when.
    unserved: str = "unserved"
    unserved_at_ms: str = "unserved_at_ms"
    # Where it came from: a repeatable's tick, a replay, a trace.
    repeat: str = "repeat"
    replay_of: str = "replay_of"
    trace_context: str = "trace_context"


# Format 1: the names as they read.
LONG = JobFields()
# Format 2: short names. A finished job's hash is mostly field names: a no-op job's shrinks from
# 193 bytes to about 127 (jemalloc serves them from its 224- and 128-byte classes).
SHORT = JobFields(
    id="id",
    task="t",
    queue="qu",
    version="v",
    state="s",
    args="a",
    kwargs="k",
    priority="p",
    options="o",
    attempt="n",
    stalls="st",
    result="r",
    errors="e",
    fingerprint="fp",
    worker="w",
    progress="pg",
    progress_message="pm",
    logs="l",
    logs_count="lc",
    logs_dropped="ld",
    logs_last="ll",
    token="tk",
    begun="b",
    isolated="iso",
    sent_at_ms="se",
    submitted_at_ms="su",
    claimed_at_ms="cl",
    started_at_ms="sa",
    retried_at_ms="ra",
    heartbeat_at_ms="hb",
    completed_at_ms="c",
    run_at_ms="ru",
    deadline_ms="dl",
    cancel_requested_at_ms="cr",
    dlq="q",
    max_stalls="ms",
    ttl_ms="tt",
    good_until_ms="gu",
    queue_timeout_ms="qt",
    cleanup_ms="cu",
    parents="pa",
    on_parent_failure="pf",
    pending_parents="pp",
    children="ch",
    flow_id="fl",
    dedup_id="di",
    dedup_mode="dm",
    dedup_ttl_ms="dt",
    dedup_key="dk",
    concurrency_key="ck",
    concurrency_limit="cn",
    ckey_active="ca",
    ckey_waiting="cw",
    rate_interval_ms="ri",
    rate_slot_ms="rs",
    unserved="u",
    unserved_at_ms="ua",
    repeat="rp",
    replay_of="ro",
    trace_context="tc",
)

# The format this release writes (F), and the other one, which it reads too and turns into its
# own the first time a script touches such a hash (include/common.lua `native`; the scripts
# spell its names `O.state`). Both releases of a change of format read both, so a rolling
# deploy, or a rollback, mixes them safely; the first writes the old format, the next the new
# (docs/architecture.md).
F = LONG
# Attribute name -> stored name (F's), for the script loader and Job's mapping.
STORED: dict[str, str] = dataclasses.asdict(F)
# Attribute name -> the other format's stored name.
OTHER: dict[str, str] = dataclasses.asdict(SHORT)
# Stored name, in either format -> attribute name.
ATTRIBUTE: dict[str, str] = {stored: name for name, stored in OTHER.items()} | {
    stored: name for name, stored in STORED.items()
}


def both(*names: str) -> list[str]:
    """Return each field's stored name in this format and in the other, in turn: one HMGET of
    them reads a hash in either format (either)."""
    return [stored for name in names for stored in (STORED[name], OTHER[name])]


def either(row: Sequence[str | None]) -> list[str | None]:
    """Return each field's value from an HMGET of `both(...)`: ours, else the other format's."""
    return [row[i] if row[i] is not None else row[i + 1] for i in range(0, len(row), 2)]


def _check() -> None:
    """Refuse a table where two fields share a name, or a name means two fields."""
    for table in (STORED, OTHER):
        if len(set(table.values())) != len(table):
            raise RuntimeError("two job fields share a stored name")
    if len(ATTRIBUTE) != len(set(STORED.values()) | set(OTHER.values())):
        raise RuntimeError("a stored name means one field in one format and another in the other")
    for name, stored in OTHER.items():
        if ATTRIBUTE[stored] != name:
            raise RuntimeError(f"{stored!r} names two fields across the formats")


_check()
