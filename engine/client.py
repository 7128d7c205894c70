"""The client: the root that holds the connection, enqueues, and exposes the resources
(`client.jobs`, `client.queues`, `client.dead_letters`, `client.workers`, `client.repeats`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis

from .errors import ConfigError
from .job import Job
from .keys import QueueKeys, queue_keys
from .producing.enqueueing import Enqueuer
from .resources.dead_letters import DeadLetters
from .resources.duties.feed import live_groups
from .resources.jobs import Jobs
from .resources.metrics import Metrics, read_metrics
from .resources.queues import Queues
from .resources.repeats import Repeats
from .resources.workers import Workers
from .seam.scripts import scripts_for
from .seam.steps import drive_async
from .settings import EngineSettings
from .task import Task
from .transport.connection import connect, ping

# The methods that moved to a resource: old name -> (resource, its method).
_MOVED = {
    **{n: ("jobs", n) for n in ("get", "wait", "missing", "cancel", "purge", "resubmit")},
    **{n: ("jobs", n) for n in ("run_now", "mark_missed")},
    "job_fields": ("jobs", "fields"),
    "scan_job_ids": ("jobs", "scan_ids"),
    "get_deduplication_job_id": ("jobs", "dedup_holder"),
    "remove_deduplication_key": ("jobs", "free_dedup"),
    **{n: ("queues", n) for n in ("counts", "pause", "resume", "is_paused", "set_rate_limit")},
    **{n: ("queues", n) for n in ("rate_limit_ms", "concurrency_keys", "scheduled", "waiting")},
    **{n: ("queues", n) for n in ("clear_state", "history_gaps")},
    "queue_states": ("queues", "states"),
    "dlq": ("dead_letters", "list"),
    "in_dlq": ("dead_letters", "contains"),
    "resubmit_dlq": ("dead_letters", "resubmit"),
    "control": ("workers", "control"),
    "run_repeatable_now": ("repeats", "run_now"),
}


class Client:
    """Talk to the engine's Redis: submit jobs and inspect them."""

    def __init__(self, settings: EngineSettings, redis: Redis | None = None) -> None:
        self.settings = settings
        self.redis = (
            redis if redis is not None else connect(settings, timeout_s=settings.client_timeout_s)
        )
        self.scripts = scripts_for(self.redis, settings)
        # The resources, each holding every Redis access for what it names.
        self.queues = Queues(settings, self.redis, self.scripts)
        self.jobs = Jobs(settings, self.redis, self.scripts)
        self.dead_letters = DeadLetters(settings, self.redis, self.scripts, self.jobs)
        self.workers = Workers(settings, self.redis, self.scripts)
        # The enqueue's steps, shared with the SyncClient (engine/producing/enqueueing.py).
        self._enqueuer = Enqueuer(settings)
        # Repeatable and cron jobs: add, update, pause, resume, remove, list, run one now.
        self.repeats = Repeats(settings, self.redis, self.scripts, self._enqueuer)

    def __getattr__(self, name: str) -> Any:
        """Forward a method that moved to a resource (`client.cancel` is `client.jobs.cancel`),
        with a DeprecationWarning, for one release."""
        moved = _MOVED.get(name)
        if moved is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        resource, method = moved
        warnings.warn(
            f"Client.{name} is client.{resource}.{method} now; the old name goes in 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(getattr(self, resource), method)

    def keys(self, queue: str) -> QueueKeys:
        """Return the keys of `queue`."""
        return queue_keys(self.settings.prefix, queue)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def enqueue(self, task: Task, *args: Any, **kwargs: Any) -> Job:
        """Submit one call of `task`; use `task.using(...)` for per-call options."""
        return (await self.enqueue_many([task.call(*args, **kwargs)]))[0]

    async def enqueue_many(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit jobs in one script call per queue; validate all before writing any.

        Jobs with `depends_on` make the batch a flow (see `enqueue_flow`). Otherwise a job id
        that already exists raises DuplicateJob after the others were written. A deduplicated
        job comes back with the id and state of the job that holds its deduplication id. A job
        that met its rate limit at submit (on_rate_limit "drop" or "reschedule") comes back
        `cancelled` or `scheduled` at its slot, with `rate_limited_until_ms` set.
        """
        return await self._enqueue(list(jobs), atomic=False)

    async def enqueue_flow(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit a graph of jobs linked by `depends_on`, all or nothing, in one queue.

        Raises ConfigError for a cycle, UnknownParent for a parent that is neither in the
        batch nor in the queue, DuplicateJob for an id that exists; nothing is written then.
        """
        return await self._enqueue(list(jobs), atomic=True)

    async def _enqueue(self, jobs: list[Job], atomic: bool) -> list[Job]:
        if any(job.repeat_every_s is not None for job in jobs):
            if len(jobs) > 1 or jobs[0].parents or jobs[0].callbacks:
                raise ConfigError(
                    "a repeating job (repeat_every_s) is enqueued alone, without callbacks"
                )
            return [await self.repeats.first_run(jobs[0])]
        steps = self._enqueuer.enqueue(jobs, atomic)
        done: list[Job] = await drive_async(steps, self.redis, self.scripts.raw)
        return done

    async def metrics(self, queues: Iterable[str], group: str = "mirror") -> Metrics:
        """Return the metrics of `queues` (counts, histograms, depths, mirror lag), workers alive.

        `group` is the consumer group whose lag is reported (the Django mirror's by default); the
        lag of every other group read lately (the transition hooks') is in `groups`.
        """
        prefix = self.settings.prefix
        others = [g for g in await live_groups(self.redis, prefix) if g != group]
        return await read_metrics(self.redis, prefix, list(queues), group, others)

    async def ping(self) -> None:
        """Check that Redis answers (RedisUnavailable when it does not)."""
        await ping(self.redis)
