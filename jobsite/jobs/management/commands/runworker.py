"""manage.py runworker: worker, scheduler, cleaner, mirror, relay and reconciler in one process."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import signal
import time
from collections.abc import Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import InterfaceError, OperationalError, connections

from engine import (
    ConfigError,
    ExitBudget,
    ExitGuard,
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
        verbosity = int(options.get("verbosity", 1))
        show_logs(self.stdout, verbosity)
        if verbosity:
            self.stdout.write(banner(loops, options))
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
        settings = worker.settings if worker is not None else conf.engine_settings()
        # The process's own bound on its exit, whatever Redis and the database do meanwhile
        # (engine/worker/exitbound.py): past it, it logs what it leaves and ends.
        guard = ExitGuard(
            settings.shutdown.exit_s,
            busy=worker.holding if worker is not None else lambda: False,
            report=worker.exit_report if worker is not None else lambda: "",
            # Only `manage.py runworker` owns its process: call_command (tests, a project's
            # own script) must never be ended by it.
            owns_process=bool(getattr(self, "_called_from_command_line", False)),
        )
        forced = asyncio.Event()  # a second signal: the exit waits for nothing more

        def stop() -> None:
            if stopping.is_set():
                forced.set()
            stopping.set()
            if worker is not None:
                worker.stop()

        def on_signal(signum: int) -> None:
            grace_s = settings.shutdown.grace_s if worker is not None else 0.0
            guard.stop_signal(signum, grace_s)
            stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
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
                stop()

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
            guard.exiting(70 if crashed else 0)
            budget = ExitBudget(settings.shutdown.exit_s, forced)
            await self._wind_down(background, mirror, budget)
        if crashed:
            where, error = crashed[0]
            raise CommandError(f"loop {where} crashed: {error!r}; see the log above", returncode=70)

    @staticmethod
    async def _wind_down(
        background: dict[str, asyncio.Task[None]], mirror: Mirror | None, budget: ExitBudget
    ) -> None:
        """End the loops, then close the mirror and the database connections, within `budget`.

        A loop or a close still waiting then (on a database that does not answer, in a thread
        no coroutine can stop) is left, in one logged line: the mirror's unacked events and the
        outbox's rows stay for the next start. ExitGuard ends the process if such a thread holds
        its exit.
        """
        loops = asyncio.ensure_future(asyncio.gather(*background.values(), return_exceptions=True))
        await budget.wait(loops)
        left = [name for name, task in background.items() if not task.done()]
        loops.cancel()  # cancels each loop (one waiting on a thread ends at once)
        await asyncio.wait([loops], timeout=budget.last_step_s())
        closed: dict[str, bool] = {}
        if mirror is not None:
            closed["mirror"] = await _within(mirror.aclose(), budget)
        close_all = sync_to_async(connections.close_all, thread_sensitive=True)
        closed["database"] = await _within(close_all(), budget)
        if left or not all(closed.values()):
            log.warning(
                "runworker exit abandoned loops=%s closed=%s exit_s=%g "
                "recovery=unacked_events_and_outbox_rows_kept",
                ",".join(left) or "-",
                ",".join(f"{name}:{done}" for name, done in closed.items()),
                budget.exit_s,
            )

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


async def _within(step: Coroutine[Any, Any, None], budget: ExitBudget) -> bool:
    """Run `step` within what is left of `budget` (a floor at least); return whether it ended."""
    try:
        await asyncio.wait_for(step, budget.last_step_s())
    except TimeoutError:
        return False
    return True


def recycling_flags(options: dict[str, Any]) -> dict[str, Any]:
    """Return the recycling settings given as flags (the rest keep JOBSITE's values)."""
    names = ("max_jobs", "max_rss_mib", "max_age_s")
    return {name: options[name] for name in names if options.get(name) is not None}


# The loggers whose lines an operator reads: the engine's (worker, scheduler, cleaner) and ours.
OUR_LOGGERS = ("engine", "jobsite")


def show_logs(stream: Any, verbosity: int) -> None:
    """Print our loggers' lines on `stream` when the project's LOGGING does not route them
    (Django's default shows only its own): INFO at the default verbosity, DEBUG at -v 2 or
    more, warnings only at -v 0. A project that configures these loggers keeps its own."""
    root = logging.getLogger()
    if root.handlers or any(logging.getLogger(name).handlers for name in OUR_LOGGERS):
        return
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for name in OUR_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)


def _database() -> str:
    """Return the default database as vendor and name (no password)."""
    db = connections["default"]
    where = db.settings_dict.get("NAME") or ""
    host = db.settings_dict.get("HOST")
    if host:
        where = f"{where} on {host}:{db.settings_dict.get('PORT') or 'default port'}"
    return f"{db.vendor} {where}".strip()


NO_TASKS = "none (JOBSITE['TASK_MODULES'] lists no module with tasks)"


def banner(loops: set[str], options: dict[str, Any]) -> str:
    """Return what this process will do, in a few lines: where, which queues, tasks and loops."""
    settings = conf.engine_settings()
    names = sorted(t.name for t in load_tasks(conf.task_modules()))
    shown = ", ".join(names[:8]) + (f", and {len(names) - 8} more" if len(names) > 8 else "")
    order = [name for name in LOOPS if name in loops]
    running = ", ".join(
        "worker (with scheduler and cleaner)" if name == "worker" else name for name in order
    )
    queues = f"role {options['role']}" if options.get("role") else options["queues"]
    lines = [
        f"Jobsite runworker: pid {os.getpid()}",
        f"  redis        {settings.redacted_url} (prefix {settings.prefix})",
        f"  database     {_database()}",
        f"  queues       {queues}, concurrency {options['concurrency']}"
        + (" (burst: exit when empty)" if options.get("burst") else ""),
        f"  tasks        {len(names)}: {shown or NO_TASKS}",
        f"  loops        {running}",
        "  stop         SIGTERM or Ctrl-C: claims stop, running jobs get "
        f"{settings.shutdown.grace_s:g} s (SHUTDOWN_GRACE_S), then go back to their queue",
    ]
    return "\n".join(lines)
