"""manage.py runworker: worker, scheduler, cleaner, mirror, relay and reconciler in one process."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import signal
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import InterfaceError, OperationalError, connections

from engine import (
    ConfigError,
    LoopCrashed,
    Reconnect,
    Repeatable,
    Worker,
    parse_queues,
    run_periodic,
)
from jobsite.jobs import conf
from jobsite.jobs.heap import worker_heap
from jobsite.jobs.history.charts import sample_depth
from jobsite.jobs.history.health import acheck
from jobsite.jobs.history.mirror import Mirror
from jobsite.jobs.history.reconcile import (
    find_unmirrored,
    reconcile,
    sync_queues,
    sync_workers,
)
from jobsite.jobs.history.retention import prune
from jobsite.jobs.services import relay_once
from jobsite.jobs.tasks import schedules
from jobsite.jobs.tasks.isolation import isolation
from jobsite.jobs.tasks.registry import load_tasks
from jobsite.jobs.tasks.signals import WORKER_HOOKS

log = logging.getLogger("jobsite.runworker")
LOOPS = ("worker", "mirror", "relay", "reconcile", "retention", "depth", "health")
# Database failures that pass (a dropped connection, a locked SQLite file): retried like Redis'.
DB_TRANSIENT: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
# How long a burst's last drain of the streams waits out database trouble before it gives up.
DRAIN_PATIENCE_S = 60.0


class Command(BaseCommand):
    help = "Run Jobsite's worker (scheduler and cleaner included), the mirror and the outbox relay."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", default=",".join(conf.queues()), help="a,b or a:10,b")
        parser.add_argument(
            "--role",
            default=None,
            help="the worker claims from this role's queues and follows their changes live; "
            "--queues then names only what the other loops serve (and limits as a:10)",
        )
        parser.add_argument("--concurrency", type=int, default=10)
        parser.add_argument("--burst", action="store_true", help="exit once the queues are empty")
        parser.add_argument(
            "--only", default=",".join(LOOPS), help=f"comma-separated loops to run, of {LOOPS}"
        )
        parser.add_argument("--reconcile-interval", type=float, default=60.0)
        parser.add_argument("--max-jobs", type=int, default=None, help="retire after N jobs")
        parser.add_argument(
            "--max-rss-mib", type=float, default=None, help="retire above this resident memory"
        )
        parser.add_argument("--max-age-s", type=float, default=None, help="retire after this")

    def handle(self, *args: Any, **options: Any) -> None:
        loops = {name.strip() for name in options["only"].split(",") if name.strip()}
        unknown = loops - set(LOOPS)
        if unknown:
            raise SystemExit(f"unknown loops: {', '.join(sorted(unknown))}")
        with worker_heap():  # rare full walks of the collector, none of the start-up objects
            asyncio.run(self.run(loops, options))

    async def run(self, loops: set[str], options: dict[str, Any]) -> None:
        """Run the chosen loops until a signal (or, with --burst, until the queues are drained)."""
        stopping = asyncio.Event()
        queues, limits = parse_queues(options["queues"])
        try:
            declared = schedules.declared() if "worker" in loops else []
        except ConfigError as exc:
            raise CommandError(f"JOBSITE['SCHEDULES'] is invalid: {exc}") from None
        try:
            worker = self._worker(queues, limits, options) if "worker" in loops else None
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            stopping.set()
            if worker is not None:
                worker.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        if worker is not None:
            await self._sync_schedules(declared, queues, stopping)
        mirror = Mirror(queues) if "mirror" in loops else None
        interval_s = options["reconcile_interval"]
        background = self._background(loops, mirror, stopping, interval_s, queues)
        crashed: list[tuple[str, BaseException]] = []

        def watch(name: str, task: asyncio.Task[None]) -> None:
            """A loop that ends of a bug stops the whole process (no loop lives on alone)."""
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                log.critical("loop crashed loop=%s; stopping", name, exc_info=exc)
                crashed.append((name, exc))
                on_signal()

        for name, task in background.items():
            task.add_done_callback(functools.partial(watch, name))
        try:
            if worker is not None:
                await worker.run()
                if options["burst"] and not crashed:
                    await self._drain(mirror)
                # Burst done, or retired (recycling): the process exits, its loops with it.
                stopping.set()
            await stopping.wait()
        except ConfigError as exc:  # an unknown role: nothing started
            raise CommandError(f"worker not started: {exc}") from None
        except LoopCrashed as exc:
            crashed.append(("worker", exc))
        finally:  # every loop ends before the mirror and the connections close
            stopping.set()
            await asyncio.gather(*background.values(), return_exceptions=True)
            if mirror is not None:
                await mirror.aclose()
            await sync_to_async(connections.close_all, thread_sensitive=True)()
        if crashed:
            where, error = crashed[0]
            raise CommandError(f"loop {where} crashed: {error!r}; see the log above", returncode=70)

    def _background(
        self,
        loops: set[str],
        mirror: Mirror | None,
        stopping: asyncio.Event,
        interval_s: float,
        queues: list[str],
    ) -> dict[str, asyncio.Task[None]]:
        """Start the mirror, relay, reconcile, retention and depth loops chosen; return them."""
        background: dict[str, asyncio.Task[None]] = {}
        if mirror is not None:
            background["mirror"] = asyncio.create_task(mirror.run(stopping, DB_TRANSIENT))
        if "relay" in loops:
            background["relay"] = asyncio.create_task(
                run_periodic("relay", self._relay, stopping, DB_TRANSIENT)
            )
        if "reconcile" in loops:
            step = self._reconcile(interval_s, queues)
            background["reconcile"] = asyncio.create_task(
                run_periodic("reconcile", step, stopping, DB_TRANSIENT)
            )
        if "retention" in loops:
            background["retention"] = asyncio.create_task(
                run_periodic("retention", self._prune, stopping, DB_TRANSIENT)
            )
        if "health" in loops:  # queue verdicts, schedule states: a signal and alerts per change
            background["health"] = asyncio.create_task(
                run_periodic("health", acheck, stopping, DB_TRANSIENT)
            )
        if "depth" in loops:
            background["depth"] = asyncio.create_task(
                run_periodic("depth", self._sample_depth(queues), stopping, DB_TRANSIENT)
            )
        return background

    @staticmethod
    def _sample_depth(queues: list[str]) -> Any:
        async def step() -> float:
            """Sample the queues' depth for the charts; again early in the next minute."""
            await sync_to_async(sample_depth, thread_sensitive=True)(queues)
            return 60.0 - time.time() % 60 + 0.5

        return step

    @staticmethod
    def _worker(queues: list[str], limits: dict[str, int], options: dict[str, Any]) -> Worker:
        """Return the engine worker, with the project's tasks and its Django signals."""
        return Worker(
            dataclasses.replace(conf.engine_settings(), **recycling_flags(options)),
            load_tasks(conf.task_modules()),
            isolation=isolation(conf.task_modules()),
            queues=None if options.get("role") else queues,
            role=options.get("role") or None,
            concurrency=options["concurrency"],
            burst=options["burst"],
            queue_concurrency=limits,
            hooks=WORKER_HOOKS,
        )

    @staticmethod
    async def _sync_schedules(
        declared: list[Repeatable], queues: list[str], stopping: asyncio.Event
    ) -> None:
        """Make Redis hold the schedules of JOBSITE["SCHEDULES"]; wait while Redis is away."""
        retry = Reconnect("schedules")
        while not stopping.is_set():
            try:
                await schedules.sync(declared, queues)
                return
            except Exception as exc:
                await retry.failed(exc)  # re-raises anything but a Redis failure

    @staticmethod
    async def _relay() -> float:
        await sync_to_async(relay_once, thread_sensitive=True)()
        return 1.0

    @staticmethod
    async def _prune() -> float:
        """Prune the history in bounded batches: soon again while there is more, else in 60 s."""
        batch, batches = 2000, 10
        deleted = await sync_to_async(prune, thread_sensitive=True)(batch, batches)
        return 1.0 if deleted >= batch * batches else 60.0

    @staticmethod
    def _reconcile(interval_s: float, queues: list[str]) -> Any:
        async def step() -> float:
            await sync_to_async(sync_workers, thread_sensitive=True)()
            await sync_to_async(sync_queues, thread_sensitive=True)()
            await sync_to_async(reconcile, thread_sensitive=True)()
            await sync_to_async(find_unmirrored, thread_sensitive=True)(queues)
            return interval_s

        return step

    @staticmethod
    async def _drain(mirror: Mirror | None) -> None:
        """In burst mode: apply every event still in the streams before exiting.

        Database trouble (SQLite busy with another loop's write, a dropped connection) is waited
        out as the mirror loop waits it out, for DRAIN_PATIENCE_S; nothing unwritten is acked.
        """
        if mirror is None:
            return
        retry = Reconnect("mirror drain", transient=DB_TRANSIENT)
        deadline = time.monotonic() + DRAIN_PATIENCE_S
        while True:
            try:
                await mirror.start()
                while await mirror.step(block_ms=200):
                    pass
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise
                await retry.failed(exc)  # re-raises a bug


def recycling_flags(options: dict[str, Any]) -> dict[str, Any]:
    """Return the recycling settings given as flags (the rest keep JOBSITE's values)."""
    names = ("max_jobs", "max_rss_mib", "max_age_s")
    return {name: options[name] for name in names if options.get(name) is not None}
