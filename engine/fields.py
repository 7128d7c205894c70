"""The fields of a job's Redis hash, by name, in each storage format: the only place that spells
one.

A job is a Redis hash, one field per attribute (docs/architecture.md). Format 1 names each field
after its `Job` attribute; format 2 gives it a name of one to three letters, since a finished
job's hash, kept for its result ttl, is mostly names. A Redis records which one its jobs are
written in (engine/seam/hashformat.py). The Lua scripts spell a field `F.state` (`O.state` for
its name in the other format), and engine/seam/luasrc.py makes each script once per format,
putting the stored names in place and refusing a name this table lacks. Python reads a hash in
either format (Job.from_hash, by_attribute; both and either for single fields) and writes the
Redis's (Job.to_hash, producing/submit.job_spec).

Most fields are a `Job` attribute; the rest only the scripts keep (leases, concurrency and
dedup keys, version waits, parents still pending).
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
    # The task's resumable state as JSON (checkpoint-1.lua; complete-11.lua deletes it).
    checkpoint: str = "checkpoint"
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
    # Flows: the parents, what their failure does, which of their ends releases this job
    # (absent: their success; "failure", "end"), and how many have not ended so yet; the key of
    # the SET of jobs waiting for this one.
    parents: str = "parents"
    on_parent_failure: str = "on_parent_failure"
    runs_on: str = "runs_on"
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
    # Rate limits: the task's interval, and the slot a rate-limited job keeps; a rate key (its
    # own budget of the task's rate, kept under the key rate_budget names) and what the job
    # does when that budget is spent (on_rate_limit: "drop", "reschedule"; absent: wait).
    rate_interval_ms: str = "rate_interval_ms"
    rate_slot_ms: str = "rate_slot_ms"
    rate_key: str = "rate_key"
    rate_budget: str = "rate_budget"
    on_rate_limit: str = "on_rate_limit"
    # A job set aside for its task version: the ZSET it waits in, and since when.
    unserved: str = "unserved"
    unserved_at_ms: str = "unserved_at_ms"
    # Where it came from: a repeatable's tick, a replay, a trace.
    repeat: str = "repeat"
    replay_of: str = "replay_of"
    trace_context: str = "trace_context"


# Format 1: the names as they read.
LONG = JobFields()
# Format 2: short names. A finished job's hash is mostly field names: short ones bring a no-op
# job's hash under jemalloc's 128-byte class instead of its 224-byte one.
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
    checkpoint="cp",
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
    runs_on="rn",
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
    rate_key="rk",
    rate_budget="rb",
    on_rate_limit="or",
    unserved="u",
    unserved_at_ms="ua",
    repeat="rp",
    replay_of="ro",
    trace_context="tc",
)

# Format number -> its names. A Redis records the one its job hashes are written in
# (engine/seam/hashformat.py). Every process reads both and turns a hash of the other into its
# own the first time a script touches it (include/common.lua `native`; the scripts spell the
# other format's names `O.state`), so processes that disagree, as in a rolling deploy, or a
# rollback to 0.2, lose nothing.
FORMATS: dict[int, JobFields] = {1: LONG, 2: SHORT}
# Format -> attribute name -> stored name.
NAMES: dict[int, dict[str, str]] = {n: dataclasses.asdict(f) for n, f in FORMATS.items()}
# Format 1's names are the attribute names: what Python code spells a field by when it builds
# fields for Job.from_hash (which reads either format).
F = LONG
# Stored name, in any format -> attribute name.
ATTRIBUTE: dict[str, str] = {
    stored: name for table in NAMES.values() for name, stored in table.items()
}


def other(fmt: int) -> int:
    """Return the format that is not `fmt`."""
    return next(n for n in FORMATS if n != fmt)


def both(*names: str) -> list[str]:
    """Return each field's stored name in each format, in turn: one HMGET of them reads a hash
    in either format (either)."""
    return [NAMES[fmt][name] for name in names for fmt in FORMATS]


def either(row: Sequence[str | None]) -> list[str | None]:
    """Return each field's value from an HMGET of `both(...)`: whichever format holds it."""
    step = len(FORMATS)
    return [
        next((v for v in row[i : i + step] if v is not None), None)
        for i in range(0, len(row), step)
    ]


def _check() -> None:
    """Refuse a table where two fields share a name, or a name means two fields."""
    if len(FORMATS) != 2:
        raise RuntimeError("a hash is read in two formats: this release's and the other")
    for table in NAMES.values():
        if len(set(table.values())) != len(table):
            raise RuntimeError("two job fields share a stored name")
    if JobFields() != LONG or any(name != stored for name, stored in NAMES[1].items()):
        raise RuntimeError("format 1 stores each field under its attribute's name")
    for table in NAMES.values():
        for name, stored in table.items():
            if ATTRIBUTE[stored] != name:
                raise RuntimeError(f"{stored!r} names two fields across the formats")


_check()
