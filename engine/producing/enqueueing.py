"""An enqueue's steps apart from their I/O: one definition for the async and the sync client.

`Enqueuer.enqueue` is a generator: it yields what to send to Redis (the steps of
engine/seam/steps.py: a pipeline of commands, one command or one script call) and is sent each
reply (or thrown each failure), so the async Client (`steps.drive_async`) and the SyncClient
(syncclient.py) run the very same validation, id reservation, tracing, queue registration,
submit-13.lua arguments and reply reading.
"""

from __future__ import annotations

from typing import Any

from ..arguments import check_job_arguments
from ..errors import Code, ConfigError, DuplicateJob, EngineError, JobIdTaken, RedisUnavailable
from ..job import Job, JobState
from ..keys import QueueKeys, check_job_id, id_owner_key, new_job_id, queue_keys, queues_key
from ..seam.scripts import Submitted, read_submission
from ..seam.steps import Call, Eval, Format, Pipe, Steps
from ..settings import EngineSettings
from ..stream import tracing
from .submit import default_queue_timeout, flow_order, job_spec, submit_args, with_callbacks

# A state the script replies -> its JobState (a dict: the enum's own lookup is slower, per job).
_STATES = {state.value: state for state in JobState}


def _rate_limited(job: Job, slot_ms: int) -> None:
    """Note on `job` what its rate limit did at submit: dropped (`cancelled`, with the error
    submit-13.lua recorded) or rescheduled (`scheduled` at its slot)."""
    job.rate_limited_until_ms = slot_ms
    if job.state is JobState.SCHEDULED:
        job.run_at_ms = slot_ms
    else:
        job.errors = [{"type": "RateLimited", "message": "rate limited", "attempt": 0}]


class Enqueuer:
    """The enqueue of one client: its settings and the queues it registered."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.known_queues: set[str] = set()

    def keys(self, queue: str) -> QueueKeys:
        """Return the keys of `queue`."""
        return queue_keys(self.settings.prefix, queue)

    def enqueue(self, jobs: list[Job], atomic: bool) -> Steps:
        """Submit jobs (a flow when `atomic` or a job has parents) with their callbacks (all or
        nothing); return them (see Client.enqueue_many and Client.enqueue_flow)."""
        if any(job.repeat_every_s is not None for job in jobs):  # the async Client adds those
            raise ConfigError("a repeating job (repeat_every_s) adds a schedule: use the Client")
        atomic = atomic or any(job.parents for job in jobs)
        if atomic:
            if len({job.queue for job in jobs}) > 1:
                raise ConfigError("a flow stays in one queue; submit one flow per queue")
            jobs = flow_order(jobs)
            if len(jobs) > 1:  # one id for the whole graph (the history finds it by that id)
                flow_id = next((j.flow_id for j in jobs if j.flow_id), None) or new_job_id()
                for job in jobs:
                    job.flow_id = job.flow_id or flow_id
        given = len(jobs)
        if (
            everything := with_callbacks(jobs)
        ) is not jobs:  # written with their jobs or not at all
            jobs, atomic = everything, True
        typed = self.settings.check_argument_types
        for job in jobs:
            check_job_id(job.id)
            if typed:  # before anything is written, ids reserved included
                check_job_arguments(job)
            default_queue_timeout(job, self.settings)
        chosen = [job for job in jobs if not job.generated_id]
        fresh = (yield from self.reserve_ids(chosen)) if chosen else []
        written: set[str] = set()
        try:
            if not tracing.active():  # no span to open (the common case, and the cheap one)
                done = yield from self.submit_specs(jobs, atomic, written)
            else:
                with tracing.enqueue_span(jobs):
                    done = yield from self.submit_specs(jobs, atomic, written)
            return done[:given]  # callbacks come after: each job holds its own
        except EngineError as exc:
            # A refusal writes nothing for the ids it names: their reservations go back. Not
            # after a lost connection: the script may have run, and its ids stay taken.
            unused = [i for i in fresh if i not in written]
            if unused and not isinstance(exc, RedisUnavailable):
                yield self.release_ids(unused)
            raise

    def reserve_ids(self, jobs: list[Job]) -> Steps:
        """Reserve each chosen id for its job's queue; raise JobIdTaken if another queue has it.

        One id, one job in the whole deployment: `SET NX` of one key per id is atomic on one
        Redis and on a Cluster alike (the key is the id's own), and the first queue to take an
        id keeps it for `chosen_id_ttl_s` (the Django app makes that outlast its history). An
        id the engine made for a job of another queue (copied from somewhere) has no
        reservation: a job hash of that id in any other known queue refuses it too. Ids made by
        the engine (`Job.generated_id`) need neither. A refused call gives back every
        reservation it made. Return the ids this call reserved afresh.
        """
        prefix, ttl_s = self.settings.prefix, self.settings.chosen_id_ttl_s
        options: dict[str, Any] = {"nx": True, "get": True}
        if ttl_s is not None:  # None: kept for good (a history kept for good)
            options["ex"] = ttl_s
        owners: list[str | None] = yield Pipe(
            [("set", (id_owner_key(prefix, job.id), job.queue), options) for job in jobs]
        )
        fresh = [j.id for j, owner in zip(jobs, owners, strict=True) if owner is None]
        taken = [
            j.id for j, owner in zip(jobs, owners, strict=True) if owner not in (None, j.queue)
        ]
        if not taken:
            taken = yield from self.held_elsewhere(jobs)
        if taken:  # a refused call keeps none of the reservations it made
            yield self.release_ids(fresh)
            raise JobIdTaken(
                f"job ids belong to jobs of another queue: {', '.join(taken)}", tuple(taken)
            )
        return fresh

    def release_ids(self, job_ids: list[str]) -> Pipe:
        """Give back reservations of chosen ids (made by a call that wrote no job)."""
        prefix = self.settings.prefix
        return Pipe([("delete", (id_owner_key(prefix, job_id),), {}) for job_id in job_ids])

    def held_elsewhere(self, jobs: list[Job]) -> Steps:
        """Return the ids of `jobs` that a job hash of another known queue holds."""
        names: set[str] = yield Call("smembers", (queues_key(self.settings.prefix),))
        pairs = [(job.id, q) for job in jobs for q in sorted(names) if q != job.queue]
        found = yield Pipe([("exists", (self.keys(q).job(job_id),), {}) for job_id, q in pairs])
        return sorted({job_id for (job_id, _), hit in zip(pairs, found, strict=True) if hit})

    def submit_specs(self, jobs: list[Job], atomic: bool, written: set[str]) -> Steps:
        """Submit jobs already checked, one script call per queue; fill in id and state, and
        add to `written` the ids written under their own id."""
        members: dict[str, list[Job]] = {}
        for job in jobs:
            members.setdefault(job.queue, []).append(job)
        limit = self.settings.max_payload_bytes
        fmt: int = yield Format()
        # Every payload is checked before the first script call.
        by_queue = {
            queue: [job_spec(job, self.keys(queue), limit, fmt=fmt) for job in queued]
            for queue, queued in members.items()
        }
        duplicates: list[str] = []
        for queue, specs in by_queue.items():
            results = yield from self.submit(queue, specs, atomic)
            for job, done in zip(members[queue], results, strict=True):
                if done.outcome == Code.DUPLICATE_ID:
                    duplicates.append(job.id)
                else:  # a deduplicated job becomes the one holding its dedup id
                    if done.id == job.id:
                        written.add(job.id)
                    job.id = done.id
                    job.state = _STATES.get(done.state) or JobState(done.state or "completed")
                    if done.outcome == "rate_limited":
                        _rate_limited(job, int(done.slot_ms))
        if duplicates:
            raise DuplicateJob(f"job ids already exist: {', '.join(duplicates)}", tuple(duplicates))
        return jobs

    def submit(self, queue: str, specs: list[bytes], atomic: bool) -> Steps:
        """Run submit-13.lua for `specs` of `queue`, registering the queue first; return the
        per-job rows."""
        registered = queue in self.known_queues
        if not registered:
            yield from self.register(queue)
        keys = self.keys(queue)
        reply = yield Eval("submit", keys, submit_args(self.settings, keys, specs, atomic))
        done = read_submission(keys, reply)
        if done.fresh and registered:  # Redis lost the queue's keys since (flushed, restarted)
            self.known_queues.discard(queue)  # if this fails, the next submit registers first
            yield from self.register(queue)
        jobs: list[Submitted] = done.jobs
        return jobs

    def register(self, queue: str) -> Steps:
        """Add `queue` to the registry of queues (what queues() lists and dashboards show)."""
        yield Call("sadd", (queues_key(self.settings.prefix), queue))
        self.known_queues.add(queue)
