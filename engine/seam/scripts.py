"""The typed seam between Python and Lua: one method per script, named parameters, typed rows.

Each method's keyword parameters are its script header's ARGV, in order (tests/engine/
test_scripts.py checks them against the headers); the seam fills in what it can derive: the
job key prefix and children SET prefix (from the queue's keys), counts of per-job groups, and
the histogram bucket bounds. Per-job codes are ints: 0 or a script's own positive code, or a
negative `errors.Code`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Required, TypedDict, Unpack

from redis.asyncio import Redis

from ..errors import Code, DuplicateJob, UnknownParent
from ..fields import both
from ..keys import QueueKeys
from ..settings import EngineSettings
from ..transport.acks import ReplicaAcks
from .luasrc import ScriptSet, load_sources
from .rows import (
    BeginJob,
    Claimed,
    CompleteJob,
    Declared,
    DeclaredEntry,
    Promoted,
    Reaped,
    RenewJob,
    Submission,
    Submitted,
    Trimmed,
)

# The rows are re-exported: callers import the seam and its types from one place.
__all__ = [
    "BUCKETS_ARG",
    "BUCKETS_MS",
    "BeginJob",
    "ClaimOptions",
    "Claimed",
    "CompleteJob",
    "Declared",
    "DeclaredEntry",
    "Promoted",
    "Reaped",
    "RenewJob",
    "Scripts",
    "Submission",
    "Submitted",
    "Trimmed",
    "claim_argv",
    "claimed",
    "load_sources",
    "read_submission",
    "scripts_for",
    "submit_argv",
]

# Upper bounds (ms, ascending) of the buckets of the run time and queue wait histograms; the
# scripts get them as BUCKETS_ARG. Counts kept under a bound no longer listed are read into the
# next bound up (engine/resources/metrics.py), so changing them never loses an observation.
BUCKETS_MS: tuple[int, ...] = (
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
)
BUCKETS_ARG = ",".join(str(bound) for bound in BUCKETS_MS)


def _flag(value: bool) -> str:
    return "1" if value else "0"


class ClaimOptions(TypedDict, total=False):
    """claim-12.lua's ARGV after the job key prefix, in its header's order (Scripts.claim)."""

    events_maxlen: Required[int]
    max_jobs: Required[int]
    lease_ms: Required[int]
    worker_id: Required[str]
    result_ttl_ms: Required[int]
    most_suspects: int  # -1 (the default): any number of suspects
    begin: bool
    build: str  # the worker's build SET key ("": it runs every version)
    # The worker's queue timeout for jobs that carry none (None: no limit; settings'
    # queue_timeout_for the queue).
    queue_timeout_ms: int | None
    held: Sequence[str]


def claim_argv(keys: QueueKeys, **options: Unpack[ClaimOptions]) -> list[Any]:
    """Return claim-12.lua's ARGV (Scripts.claim).

    The worker builds it itself to send a claim in a pipeline (its claim on wake-up) through
    `raw["claim"]`, and reads the reply with `claimed`.
    """
    o = options
    argv: list[Any] = [keys.job_prefix, o["events_maxlen"], o["max_jobs"], o["lease_ms"]]
    argv += [o["worker_id"], o["result_ttl_ms"], o.get("most_suspects", -1)]
    argv += [BUCKETS_ARG if o.get("begin") else "", o.get("build", ""), keys.unserved_prefix]
    wait_ms = o.get("queue_timeout_ms")
    return [*argv, "" if wait_ms is None else wait_ms, *o.get("held", ())]


# Values a job has in claim-12.lua's reply: its rows come one after another in one flat list.
_CLAIMED_WIDTH = len(Claimed._fields)


def claimed(reply: list[Any]) -> list[Claimed]:
    """Read claim-12.lua's reply (the rows of the jobs, flat)."""
    width = _CLAIMED_WIDTH
    return [Claimed._make(reply[i : i + width]) for i in range(0, len(reply), width)]


def submit_argv(
    keys: QueueKeys,
    *,
    events_maxlen: int,
    replaced_ttl_ms: int,
    atomic: bool,
    jobs: Sequence[bytes],
) -> list[Any]:
    """Return submit-13.lua's ARGV (Scripts.submit; the sync client sends the same)."""
    argv: list[Any] = [keys.job_prefix, events_maxlen, replaced_ttl_ms, _flag(atomic)]
    return [*argv, keys.children_prefix, len(jobs), *jobs]


def read_submission(keys: QueueKeys, out: list[Any]) -> Submission:
    """Read submit-13.lua's reply; a refused batch raises UnknownParent or DuplicateJob."""
    if out[0] == Code.UNKNOWN_PARENT:
        raise UnknownParent(
            f"depends_on names job {out[1]!r}, which is not in queue {keys.queue!r}"
        )
    if out[0] == Code.DUPLICATE_ID:  # a flow refused whole
        raise DuplicateJob(f"job ids already exist: {out[1]}", (str(out[1]),))
    rows = zip(out[1::4], out[2::4], out[3::4], out[4::4], strict=True)
    return Submission(out[0] == 0, [Submitted(*row) for row in rows])


def scripts_for(redis: Redis, settings: EngineSettings) -> Scripts:
    """Return the scripts on `redis` for `settings`: their prefix, and the replicas each call
    that writes waits for (replica_acks)."""
    return Scripts(redis, settings.prefix, ReplicaAcks.of(settings))


class Scripts:
    """Every transition script on one Redis client, each as a typed method."""

    def __init__(self, redis: Redis, prefix: str, acks: ReplicaAcks | None = None) -> None:
        self.raw = ScriptSet(redis, prefix, acks)

    async def submit(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        replaced_ttl_ms: int,
        atomic: bool,
        jobs: Sequence[bytes],
    ) -> Submission:
        """Submit jobs (each one JSON array, engine/producing/submit.py); a refused batch raises."""
        argv = submit_argv(
            keys,
            events_maxlen=events_maxlen,
            replaced_ttl_ms=replaced_ttl_ms,
            atomic=atomic,
            jobs=jobs,
        )
        return read_submission(keys, await self.raw["submit"](keys, argv))

    async def claim(self, keys: QueueKeys, **options: Unpack[ClaimOptions]) -> list[Claimed]:
        """Claim up to max_jobs ready jobs (most_suspects -1: any number of suspects).

        `begin`: also begin each job the worker starts at once (not a suspect, no options of its
        own, its task not in `held`), saving begin-2.lua's step for it.
        """
        return claimed(await self.raw["claim"](keys, claim_argv(keys, **options)))

    async def begin(self, keys: QueueKeys, *, lease_ms: int, jobs: Sequence[BeginJob]) -> list[int]:
        """Begin claimed jobs; return per job its attempt (>= 1) or Code.LEASE_LOST."""
        argv: list[Any] = [keys.job_prefix, lease_ms, len(jobs), BUCKETS_ARG]
        for job in jobs:
            argv += (job.id, job.token, _flag(job.isolated))
        codes: list[int] = await self.raw["begin"](keys, argv)
        return codes

    async def heartbeat(self, keys: QueueKeys, *, jobs: Sequence[RenewJob]) -> list[int]:
        """Renew leases; per job 0 renewed, 1 cancel requested, or Code.LEASE_LOST."""
        argv: list[Any] = [keys.job_prefix, len(jobs)]
        for job in jobs:
            argv += (job.id, job.token, job.lease_ms, _flag(job.touch))
        codes: list[int] = await self.raw["heartbeat"](keys, argv)
        return codes

    async def progress(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        job_id: str,
        token: str,
        percent: float,
        message: str,
        worker_id: str,
    ) -> int:
        """Store a running job's progress; return 0 or Code.LEASE_LOST."""
        argv = [keys.job_prefix, events_maxlen, job_id, token, percent, message, worker_id]
        code: int = await self.raw["progress"](keys, argv)
        return code

    async def log(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        job_id: str,
        token: str,
        message: str,
        worker_id: str,
        max_lines: int,
        max_bytes: int,
        line_id: str = "",
    ) -> int:
        """Append a line to a running job's log; return 0 or Code.LEASE_LOST.

        A `line_id` equal to that of the last line stored (same token) stores nothing again.
        """
        argv = [keys.job_prefix, events_maxlen, job_id, token, message, worker_id, max_lines]
        code: int = await self.raw["log"](keys, [*argv, max_bytes, line_id])
        return code

    async def checkpoint(self, keys: QueueKeys, *, job_id: str, token: str, state: bytes) -> int:
        """Save a running job's checkpoint (b"": delete it); return 0 or a negative Code."""
        argv = [keys.job_prefix, job_id, token, state]
        code: int = await self.raw["checkpoint"](keys, argv)
        return code

    async def complete(
        self, keys: QueueKeys, *, events_maxlen: int, worker_id: str, jobs: Sequence[CompleteJob]
    ) -> list[int]:
        """Complete started jobs; per job 0 or a negative Code."""
        argv: list[Any] = [keys.job_prefix, events_maxlen, worker_id, len(jobs), BUCKETS_ARG]
        for job in jobs:
            argv += job
        codes: list[int] = await self.raw["complete"](keys, argv)
        return codes

    async def retry(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        worker_id: str,
        job_id: str,
        token: str,
        delay_ms: int | None,
        error_json: bytes,
        short_error: str,
        ttl_ms: int,
    ) -> int:
        """Retry a started job (delay_ms None: now); 0 retried, 1 cancelled instead, or a Code."""
        delay = "" if delay_ms is None else delay_ms
        argv = [keys.job_prefix, events_maxlen, worker_id, job_id, token, delay, error_json]
        code: int = await self.raw["retry"](keys, [*argv, short_error, ttl_ms])
        return code

    async def fail(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        worker_id: str,
        job_id: str,
        token: str,
        state: str,
        error_json: bytes,
        short_error: str,
        ttl_ms: int,
    ) -> int:
        """End a started job in a dead state; 0 or a negative Code."""
        argv = [keys.job_prefix, events_maxlen, worker_id, job_id, token, state, error_json]
        code: int = await self.raw["fail"](keys, [*argv, short_error, ttl_ms])
        return code

    async def stall(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        worker_id: str,
        job_id: str,
        token: str,
        error_json: bytes,
        short_reason: str,
        ttl_ms: int,
    ) -> int:
        """Count a stall; 1 ended stalled, 0 back in `submitted`, or a negative Code."""
        argv = [keys.job_prefix, events_maxlen, worker_id, job_id, token, error_json]
        code: int = await self.raw["stall"](keys, [*argv, short_reason, ttl_ms])
        return code

    async def release(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        worker_id: str,
        job_id: str,
        token: str,
        reason: str,
    ) -> int:
        """Hand a started job back to `submitted`; 0 or a negative Code."""
        argv = [keys.job_prefix, events_maxlen, worker_id, job_id, token, reason]
        code: int = await self.raw["release"](keys, argv)
        return code

    async def disown(
        self, keys: QueueKeys, *, events_maxlen: int, worker_id: str, held: Sequence[str]
    ) -> list[str]:
        """Hand back the worker's started jobs whose tokens are not in `held`; return their ids."""
        ids: list[str] = await self.raw["disown"](
            keys, [keys.job_prefix, events_maxlen, worker_id, *held]
        )
        return ids

    async def promote(
        self, keys: QueueKeys, *, events_maxlen: int, max_jobs: int, job_ids: Sequence[str] = ()
    ) -> Promoted:
        """Promote due scheduled jobs to `submitted`; with `job_ids`, those at once instead
        (whatever their due time), each with its code."""
        argv = [keys.job_prefix, events_maxlen, max_jobs, *job_ids]
        promoted, wait_ms, *codes = await self.raw["promote"](keys, argv)
        return Promoted(int(promoted), int(wait_ms), tuple(int(c) for c in codes))

    async def reap(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        max_jobs: int,
        ttl_ms: int,
        dead_workers: Sequence[str] = (),
    ) -> Reaped:
        """Recover jobs of expired leases and of the dead workers."""
        argv = [keys.job_prefix, events_maxlen, max_jobs, ttl_ms, *dead_workers]
        released, stalled, orphans = await self.raw["reap"](keys, argv)
        return Reaped(int(released), int(stalled), int(orphans))

    async def expire(
        self, keys: QueueKeys, *, events_maxlen: int, max_jobs: int, ttl_ms: int
    ) -> int:
        """Expire queued jobs past their deadline; return how many."""
        argv = [keys.job_prefix, events_maxlen, max_jobs, ttl_ms]
        return int(await self.raw["expire"](keys, argv))

    async def cancel(
        self, keys: QueueKeys, *, events_maxlen: int, ttl_ms: int, job_ids: Sequence[str]
    ) -> list[int]:
        """Cancel jobs; per id 0 cancelled, 1 cancel requested, or a negative Code."""
        argv = [keys.job_prefix, events_maxlen, ttl_ms, *job_ids]
        codes: list[int] = await self.raw["cancel"](keys, argv)
        return codes

    async def prune(
        self, keys: QueueKeys, *, max_jobs: int, dlq_max_age_ms: int, dlq_max_len: int
    ) -> int:
        """Trim the DLQ by age and length (0: no limit); return how many jobs it deleted."""
        argv = [keys.job_prefix, max_jobs, dlq_max_age_ms, dlq_max_len]
        return int(await self.raw["prune"](keys, argv))

    async def trim(
        self,
        keys: QueueKeys,
        *,
        hard_cap: int,
        max_entries: int,
        max_missed: int,
        group: str,
        max_entries_kept: int,
        holding: Sequence[str] = (),
    ) -> Trimmed:
        """Trim the event stream below what `group` and the `holding` groups acknowledged, and
        to `hard_cap` entries (past it, `group`'s missed jobs are recorded)."""
        argv = [hard_cap, max_entries, max_missed, group, max_entries_kept, *holding]
        entries, past_group, missed = await self.raw["trim"](keys, argv)
        return Trimmed(int(entries), int(past_group), int(missed))

    async def purge(self, keys: QueueKeys, *, state: str = "", job_ids: Sequence[str]) -> list[int]:
        """Delete finished jobs (only those in `state` when given); per id 0 purged or a
        negative Code."""
        codes: list[int] = await self.raw["purge"](keys, [keys.job_prefix, state, *job_ids])
        return codes

    async def resubmit(
        self, keys: QueueKeys, *, events_maxlen: int, ttl_ms: int, job_ids: Sequence[str]
    ) -> list[int]:
        """Resubmit finished jobs; per id 0 resubmitted or a negative Code."""
        argv = [keys.job_prefix, events_maxlen, keys.children_prefix, ttl_ms, *job_ids]
        codes: list[int] = await self.raw["resubmit"](keys, argv)
        return codes

    async def declare(self, keys: QueueKeys, *, repeatables: Sequence[DeclaredEntry]) -> Declared:
        """Make the queue's declared repeatables these."""
        argv: list[Any] = [len(repeatables)]
        for name, definition, first_ms in repeatables:
            argv += (name, definition, "" if first_ms is None else first_ms)
        _, created, updated, removed, kept, conflicts = await self.raw["declare"](keys, argv)
        return Declared(int(created), int(updated), int(removed), int(kept), tuple(conflicts))

    async def unserved(
        self, keys: QueueKeys, *, events_maxlen: int, ttl_ms: int, drop_after_ms: int, max_jobs: int
    ) -> int:
        """Drop jobs set aside for a task version unserved for drop_after_ms; return how many."""
        argv = [keys.job_prefix, events_maxlen, ttl_ms, keys.unserved_prefix, drop_after_ms]
        return int(await self.raw["unserved"](keys, [*argv, max_jobs]))

    async def drain(
        self,
        keys: QueueKeys,
        *,
        events_maxlen: int,
        ttl_ms: int,
        cutoff_ms: int,
        source_key: str,
        source_kind: str,
        cursor: str,
        max_jobs: int,
    ) -> tuple[str, int, int]:
        """Cancel one chunk of a waiting structure's jobs older than the cutoff; return the next
        cursor ("": done), how many were cancelled and how many looked at."""
        argv = [keys.job_prefix, events_maxlen, ttl_ms, cutoff_ms, source_key, source_kind]
        nxt, cancelled, seen = await self.raw["drain"](keys, [*argv, cursor, max_jobs])
        return str(nxt), int(cancelled), int(seen)

    async def snapshot(
        self, keys: QueueKeys, *, field: str = "", job_ids: Sequence[str]
    ) -> list[str | None]:
        """Read job hashes, each as one JSON object string (its fields as stored), or only
        `field` (a Job attribute name: engine/fields.py) of each (None: gone, or no such
        field)."""
        names = both(field) if field else ["", ""]
        argv = [keys.job_prefix, keys.queue, *names, *job_ids]
        rows: list[str | None] = await self.raw["snapshot"](keys, argv)
        return rows
