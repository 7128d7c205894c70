"""Enqueue, and read how a job ended, from synchronous code on the caller's own thread: no event
loop, no thread hop."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..job import Job
from ..result import Err, Ok, outcome
from ..seam.reads import find_job, wait_for_end
from ..seam.steps import Step, hash_format_sync, run_step_sync, run_steps
from ..settings import EngineSettings
from ..task import Task
from ..transport.acks import ReplicaAcks
from ..transport.cluster import cluster_typed, is_cluster
from ..transport.connection import connect_sync
from ..transport.faults import typed
from ..transport.held import HeldConnections
from .enqueueing import Enqueuer


class SyncClient:
    """Submit jobs from sync code (a view, a management command) on redis-py's blocking pool.

    The very steps of `Client.enqueue_many` (engine/producing/enqueueing.py: validation, chosen-id
    reservation, tracing, deduplication, queue registration, submit-13.lua), run here on the
    caller's thread. One client serves every thread of a process (the pool is thread-safe);
    Redis failures raise the engine's typed errors (RedisUnavailable, RedisRefused).
    """

    def __init__(self, settings: EngineSettings, redis: Any = None) -> None:
        self.settings = settings
        self.redis: Any = (
            redis
            if redis is not None
            else connect_sync(settings, timeout_s=settings.client_timeout_s)
        )
        self._typed = cluster_typed if is_cluster(self.redis) else typed
        self._enqueuer = Enqueuer(settings)
        # A cluster routes each command by its keys: it keeps redis-py's own path.
        self._held = None if is_cluster(self.redis) else HeldConnections(self.redis)
        # The hash format of the Redis (engine/seam/hashformat.py), once asked.
        self._format: int | None = None
        # What a script call that writes waits for (replica_acks; None: nothing).
        self._acks = ReplicaAcks.of(settings)

    def close(self) -> None:
        """Close the connection pool."""
        if self._held is not None:
            self._held.clear()
        self.redis.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enqueue(self, task: Task, *args: Any, **kwargs: Any) -> Job:
        """Submit one call of `task`; use `task.using(...)` for per-call options."""
        return self.enqueue_many([task.call(*args, **kwargs)])[0]

    def enqueue_many(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit jobs as `Client.enqueue_many` does."""
        done: list[Job] = run_steps(self._enqueuer.enqueue(list(jobs), atomic=False), self._run)
        return done

    def enqueue_flow(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit a graph of jobs all or nothing, as `Client.enqueue_flow` does."""
        done: list[Job] = run_steps(self._enqueuer.enqueue(list(jobs), atomic=True), self._run)
        return done

    def get(self, job_id: str, queue: str | None = None) -> Job:
        """Return the job with this id, as `client.jobs.get` does (JobNotFound if unknown)."""
        job: Job = run_steps(find_job(self.settings.prefix, job_id, queue), self._run)
        return job

    def wait(self, job_id: str, timeout_s: float, queue: str | None = None) -> Job:
        """Wait until the job reaches a terminal state; raise JobTimeout after `timeout_s`."""
        steps = wait_for_end(self.settings.prefix, job_id, timeout_s, queue)
        job: Job = run_steps(steps, self._run)
        return job

    def outcome(self, job_id: str, timeout_s: float, queue: str | None = None) -> Ok | Err:
        """Wait until the job ends; return Ok or Err as `client.jobs.outcome` does."""
        return outcome(self.wait(job_id, timeout_s, queue))

    def result(self, job_id: str, timeout_s: float, queue: str | None = None) -> Any:
        """Wait until the job ends; return its result or raise as `client.jobs.result` does."""
        return self.outcome(job_id, timeout_s, queue).unwrap()

    def _run(self, step: Step) -> Any:
        """Send one step to Redis; a failure raises the engine's typed error."""
        try:
            fmt = self._format
            if fmt is None:
                fmt = self._format = hash_format_sync(self.redis, self.settings.prefix)
            return run_step_sync(step, self.redis, self._held, fmt, self._acks)
        except Exception as exc:
            raise self._typed(exc, self.settings.redacted_url)  # noqa: B904 (keeps the cause)
