"""The typed rows of the Lua seam: what scripts return per job, and what they take per job."""

from __future__ import annotations

from typing import NamedTuple

from ..job import Job, JobState, loads_or_raw


class Claimed(NamedTuple):
    """One job claim-12.lua moved to `started` (options, parents, trace_context, checkpoint: None
    if none)."""

    id: str
    task: str
    version: str | None
    args: str | None
    kwargs: str | None
    attempt: int  # the attempt it will run as
    token: str
    options: str | None
    parents: str | None
    stalls: int  # > 0: a suspect, which the worker runs alone
    trace_context: str | None
    begun: int  # 1: the claim began it (attempt counted), 0: begin-2.lua begins it
    checkpoint: str | None  # the state an earlier attempt saved (JSON)

    def to_job(self, queue: str) -> Job:
        """Build the worker's view of the claimed job (of `queue`)."""
        return Job(
            id=self.id,
            task=self.task,
            queue=queue,
            version=int(self.version or 1),
            state=JobState.STARTED,
            args=loads_or_raw(self.args or "[]"),
            kwargs=loads_or_raw(self.kwargs or "{}"),
            attempt=int(self.attempt),
            token=self.token,
            options=loads_or_raw(self.options) if self.options else {},
            parents=loads_or_raw(self.parents) if self.parents else [],
            stalls=int(self.stalls),
            trace_context=self.trace_context or None,
            checkpoint=loads_or_raw(self.checkpoint) if self.checkpoint else None,
        )


class Submitted(NamedTuple):
    """What submit-13.lua did with one job: an outcome (a state word, 'rate_limited', or -4), an
    id, a state, and for a job rate limited at submit its next free slot (server ms; else '')."""

    outcome: str | int
    id: str
    state: str
    slot_ms: str = ""


class Submission(NamedTuple):
    """What submit-13.lua did: each job's row; fresh: the queue's first batch since its keys were
    made (a new queue, or one whose keys Redis lost), which the client registers."""

    fresh: bool
    jobs: list[Submitted]


class Trimmed(NamedTuple):
    """What trim-3.lua did: entries trimmed, of them past the group, jobs added to missed."""

    entries: int
    past_group: int
    missed: int


class Promoted(NamedTuple):
    """What promote-11.lua did: jobs promoted, ms until the next is due (-1: none), and with
    ids given, one code per id (0 promoted, Code.NOT_FOUND, Code.WRONG_STATE: not scheduled)."""

    promoted: int
    wait_ms: int
    codes: tuple[int, ...] = ()


class Reaped(NamedTuple):
    """What reap-11.lua did: jobs released, jobs stalled, orphan entries removed."""

    released: int
    stalled: int
    orphans_removed: int


class Declared(NamedTuple):
    """What declare-4.lua did to one queue's declared repeatables."""

    created: int
    updated: int
    removed: int
    kept_overrides: int
    # Declared names held by run-time repeatables, left alone.
    conflicts: tuple[str, ...]


class BeginJob(NamedTuple):
    """One job for begin-2.lua; isolated: it runs alone in a child process."""

    id: str
    token: str
    isolated: bool


class RenewJob(NamedTuple):
    """One lease for heartbeat-1.lua; touch: the task itself called heartbeat()."""

    id: str
    token: str
    lease_ms: int
    touch: bool


class CompleteJob(NamedTuple):
    """One job for complete-11.lua with its result JSON."""

    id: str
    token: str
    result: bytes
    result_ttl_ms: int


class DeclaredEntry(NamedTuple):
    """One declared repeatable for declare-4.lua (first_tick_ms None: no first tick)."""

    name: str
    definition: bytes
    first_tick_ms: int | None
