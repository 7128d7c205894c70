"""The worker: claims jobs in batches, runs them in slots, flushes outcomes in batches."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redis.asyncio import Redis

from . import serializer
from .connection import CONNECTION_ERRORS, connect
from .errors import SCRIPT_ERRORS, LeaseLost
from .job import Job
from .keys import QueueKeys
from .runner import Outcome, Runner, error_info
from .scheduler import Scheduler
from .scripts import Scripts
from .settings import EngineSettings
from .task import Registry, Task

log = logging.getLogger("engine.worker")


class Worker:
    """Run jobs from one or more queues (in the given order) with at most `concurrency` at once."""

    def __init__(
        self,
        settings: EngineSettings,
        tasks: Iterable[Task],
        queues: Sequence[str] = ("default",),
        concurrency: int = 10,
        burst: bool = False,
        worker_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.registry = Registry(tasks)
        self.queues = [QueueKeys(settings.prefix, q) for q in queues]
        self.concurrency = concurrency
        self.burst = burst
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.redis: Redis = connect(settings)
        self.blocking: Redis = connect(settings, blocking=True)
        self.scripts = Scripts(self.redis)
        self.executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="job")
        self.runner = Runner(self.registry, self.id, self.executor)
        self.scheduler = Scheduler(settings, self.redis, [k.queue for k in self.queues])
        self.counters: dict[str, int] = defaultdict(int)
        self._running: set[asyncio.Task[None]] = set()
        self._outcomes: list[Outcome] = []
        # Outcomes produced but not yet written to Redis (queued or being flushed).
        self._unflushed = 0
        self._slot_free = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Stop claiming; running jobs finish and their outcomes are written."""
        self._stopping.set()
        self._slot_free.set()

    async def run(self) -> None:
        """Run until stopped, or until the queues are empty in burst mode."""
        log.info(
            "worker started id=%s queues=%s concurrency=%d burst=%s url=%s",
            self.id,
            ",".join(k.queue for k in self.queues),
            self.concurrency,
            self.burst,
            self.settings.redacted_url,
        )
        flusher = asyncio.create_task(self._flush_loop(), name="flusher")
        scheduler = asyncio.create_task(self.scheduler.run(self._stopping), name="scheduler")
        try:
            await self._claim_loop()
            if self._running:
                await asyncio.wait(self._running)
        finally:
            self._stopping.set()
            self._flush_wanted.set()
            await flusher
            scheduler.cancel()
            await asyncio.gather(scheduler, return_exceptions=True)
            self.executor.shutdown(wait=False, cancel_futures=True)
            await self.redis.aclose()
            await self.blocking.aclose()
            log.info(
                "worker stopped id=%s %s",
                self.id,
                " ".join(f"{k}={v}" for k, v in sorted(self.counters.items())),
            )

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            free = self.concurrency - len(self._running)
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            try:
                jobs = await self._claim(free)
            except CONNECTION_ERRORS as exc:
                await self._redis_down(exc)
                continue
            for job in jobs:
                self._start(job)
            if jobs:
                continue
            if self.burst and await self._drained():
                return
            await self._wait_for_work()

    async def _claim(self, free: int) -> list[Job]:
        jobs: list[Job] = []
        for keys in self.queues:
            want = min(free - len(jobs), self.settings.claim_batch)
            if want <= 0:
                break
            rows = await self.scripts.claim(
                [keys.submitted, keys.started, keys.events, keys.marker, keys.seq],
                [
                    keys.job_prefix,
                    self.settings.events_maxlen,
                    want,
                    self.settings.lease_ms,
                    self.id,
                ],
            )
            jobs.extend(Job.from_claim(keys.queue, row) for row in rows)
        return jobs

    def _start(self, job: Job) -> None:
        task = asyncio.create_task(self._run_one(job))
        self._running.add(task)
        task.add_done_callback(self._job_done)

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._slot_free.set()

    async def _run_one(self, job: Job) -> None:
        try:
            outcome = await self.runner.run(job)
        except asyncio.CancelledError:
            return
        except Exception as exc:  # a bug in the engine itself: fail the job, keep the worker
            log.exception("runner error job=%s worker=%s", job.id, self.id)
            outcome = Outcome(job, "failed", error=error_info(job, exc, "EngineError", repr(exc)))
        self._outcomes.append(outcome)
        self._unflushed += 1
        self._flush_wanted.set()

    async def _wait_for_work(self) -> None:
        markers = [k.marker for k in self.queues]
        try:
            await self.blocking.bzpopmin(markers, timeout=self.settings.idle_wait_s)
        except CONNECTION_ERRORS as exc:
            await self._redis_down(exc)

    async def _drained(self) -> bool:
        if self._running or self._unflushed:
            return False
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys in self.queues:
                pipe.zcard(keys.submitted)
                pipe.zcard(keys.scheduled)
            sizes = await pipe.execute()
        return not any(sizes)

    async def _redis_down(self, exc: BaseException) -> None:
        self.counters["redis_errors"] += 1
        log.warning("redis unavailable worker=%s error=%r", self.id, exc)
        await asyncio.sleep(0.5)

    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            batch, self._outcomes = self._outcomes, []
            if batch:
                try:
                    await self._flush(batch)
                except CONNECTION_ERRORS as exc:
                    self._outcomes[:0] = batch
                    self._flush_wanted.set()
                    await self._redis_down(exc)
                    continue
                self._unflushed -= len(batch)
            if self._stopping.is_set() and not self._running and not self._outcomes:
                return

    async def _flush(self, batch: list[Outcome]) -> None:
        by_queue: dict[str, list[Outcome]] = defaultdict(list)
        for outcome in batch:
            by_queue[outcome.job.queue].append(outcome)
        calls = []
        for queue, outcomes in by_queue.items():
            keys = QueueKeys(self.settings.prefix, queue)
            done = [o for o in outcomes if o.kind == "complete"]
            if done:
                calls.append(self._complete(keys, done))
            calls.extend(self._write_other(keys, o) for o in outcomes if o.kind != "complete")
        await asyncio.gather(*calls)

    async def _complete(self, keys: QueueKeys, outcomes: list[Outcome]) -> None:
        argv: list[Any] = [keys.job_prefix, self.settings.events_maxlen, self.id, len(outcomes)]
        for o in outcomes:
            argv += (o.job.id, o.job.token or "", o.result, o.result_ttl_s * 1000)
        codes = await self.scripts.complete(
            [keys.started, keys.done, keys.events, keys.stats], argv
        )
        for o, code in zip(outcomes, codes, strict=True):
            self._count(o, "completed", code)

    async def _write_other(self, keys: QueueKeys, o: Outcome) -> None:
        err = serializer.dumps(o.error or {})
        short = f"{(o.error or {}).get('type', '')}: {(o.error or {}).get('message', '')}"[:200]
        head = [keys.job_prefix, self.settings.events_maxlen, self.id, o.job.id, o.job.token or ""]
        if o.kind == "retry":
            delay = "" if o.delay_s is None else int(o.delay_s * 1000)
            code = await self.scripts.retry(
                [keys.started, keys.submitted, keys.scheduled, keys.events, keys.marker, keys.seq],
                [*head, delay, err, short],
            )
            self._count(o, "retried", code)
        else:
            code = await self.scripts.fail(
                [keys.started, keys.dlq, keys.done, keys.events, keys.stats],
                [*head, o.kind, err, short, "1" if o.save_dlq else "0", o.result_ttl_s * 1000],
            )
            self._count(o, o.kind, code)

    def _count(self, o: Outcome, name: str, code: int) -> None:
        if code == 0:
            self.counters[name] += 1
            return
        if SCRIPT_ERRORS.get(code) is LeaseLost:
            self.counters["lease_lost"] += 1
            log.warning("lease lost job=%s worker=%s write=%s", o.job.id, self.id, name)
        else:
            self.counters["write_refused"] += 1
            log.warning(
                "write refused job=%s worker=%s write=%s code=%d", o.job.id, self.id, name, code
            )
