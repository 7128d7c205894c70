"""The worker: claims jobs in batches, begins and runs them in slots, flushes outcomes."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from redis.asyncio import Redis

from ..dev import failpoints
from ..errors import ConfigError, LoopCrashed, RedisUnavailable
from ..keys import QueueKeys
from ..periodic.cleaner import Cleaner
from ..periodic.scheduler import Scheduler
from ..periodic.transitions import TransitionHooks
from ..resources.duties.presence import Presence
from ..resources.roles import RoleFollower
from ..resources.versions import Versions
from ..running.isolate import Isolation
from ..running.runner import Kind, Outcome, StopReason
from ..seam.scripts import scripts_for
from ..settings import EngineSettings
from ..stream.hooks import Hook, Hooks
from ..task import Registry, Task
from ..transport.connection import connect
from ..transport.reconnect import Reconnect
from .book import Book
from .claimer import Claimer
from .context import WorkerContext
from .exitbound import ExitBudget
from .flusher import Flusher, Windows
from .lifecycle import Lifecycle, State
from .liveness import Liveness
from .outcomes import OutcomeWriter
from .recycle import Recycler
from .shutdown import Shutdown
from .sidewrites import SideWrites
from .unit import Attempts
from .upkeep import Upkeep

log = logging.getLogger("engine.worker")


class Worker:
    """Run jobs from one or more queues (claimed in the given order), `concurrency` at once.

    Its collaborators: a Claimer claims and starts jobs, each a RunningJob that stops and
    finishes itself into the Book; the Flusher makes outcomes durable; Shutdown is the way out.
    They share one WorkerContext, whose Lifecycle is the worker's one state (claiming, quiet,
    stopping, forced, crashed). The worker wires them, runs its loops as a named table, renews
    leases and follows control orders (its upkeep loop).
    """

    def __init__(
        self,
        settings: EngineSettings,
        tasks: Iterable[Task],
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        burst: bool = False,
        worker_id: str | None = None,
        burst_scheduled: bool = True,
        queue_concurrency: Mapping[str, int] | None = None,
        isolation: Isolation | None = None,
        hooks: Iterable[Hook] = (),
        role: str | None = None,
    ) -> None:
        names = _queues(queues, role)
        keys = [QueueKeys(settings.prefix, q) for q in names]
        self.settings = settings
        # A role's queues are read at run() and followed while running (engine/resources/roles.py).
        self.role = RoleFollower(settings.prefix, role) if role is not None else None
        self.hooks = Hooks(hooks)
        self.registry = Registry(tasks)
        self.concurrency = concurrency
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.redis: Redis = connect(settings)
        self.blocking: Redis = connect(settings, block_s=settings.idle_wait_s)
        life = self.life = Lifecycle(self.id)
        ctx = WorkerContext(settings, self.id, self.redis, scripts_for(self.redis, settings), life)
        self.presence = Presence(settings, self.redis, self.id)
        self.counters: dict[str, int] = defaultdict(int)
        self.writer = OutcomeWriter(ctx, self.counters)
        self.upkeep = Upkeep(ctx)
        self.executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="job")
        self.side = SideWrites(self.writer.side_code, life.crash_on_bug, settings.job_log.max_lines)
        self.attempts = Attempts(
            ctx, self.registry, self.executor, isolation, self.hooks, self.side, self.upkeep
        )
        self.liveness = Liveness(settings, self.id, life.crash_from_thread)
        life.show_in(self.liveness.status)  # what a probe reads: claiming, quiet...
        self.versions = Versions(settings, self.registry, keys)
        self.scheduler = Scheduler(settings, self.redis, names)
        self.cleaner = Cleaner(settings, self.redis, names, liveness=self.liveness)
        self.flusher = Flusher(self.writer, life)
        self.book = Book(concurrency, self.flusher, life)
        # A burst waits for scheduled jobs to come due (burst_scheduled False: it ends once
        # nothing is ready; the test kit's run_jobs(until=) brings them forward itself).
        self.claimer = self._claimer(ctx, keys, (burst, burst_scheduled), queue_concurrency)
        self.shutdown = Shutdown(ctx, self.book, self.claimer)  # its fence goes up at a stop
        self.recycler = Recycler(settings)
        self._loop: asyncio.AbstractEventLoop | None = None
        # The reader of transitions for the hooks, while run() has one (hooks given).
        self._transitions: TransitionHooks | None = None

    def _claimer(
        self,
        ctx: WorkerContext,
        keys: list[QueueKeys],
        burst: tuple[bool, bool],
        queue_limits: Mapping[str, int] | None,
    ) -> Claimer:
        """Return the claimer of `keys` (claimed in order), its claims counted for recycling."""
        claimer = Claimer(
            ctx,
            self.blocking,
            self.book,
            self.attempts,
            self.versions,
            burst=burst[0],
            burst_scheduled=burst[1],
            on_claims=self._check_recycle,
            queue_limits=queue_limits,
        )
        claimer.follow(keys)
        return claimer

    @property
    def queues(self) -> list[QueueKeys]:
        """Return the queues this worker claims from, in order."""
        return self.claimer.queues

    @property
    def windows(self) -> Windows:
        """Return the latest windows from a job's end to its outcome durable, in seconds."""
        return self.flusher.windows

    @property
    def crashed(self) -> BaseException | None:
        """Return the first exception that killed one of the worker's loops (a bug), if any."""
        return self.life.crashed

    @property
    def retired(self) -> str | None:
        """Return why the worker retired (recycling), as key=value text; None: it did not."""
        return self.life.retired

    def stop(self) -> None:
        """Stop claiming (first call); force running jobs to stop (second call)."""
        self.life.stop()

    def retire(self, reason: str) -> None:
        """Stop claiming for good, let running jobs finish, exit 0: a fresh worker follows."""
        self.life.retire(reason)

    def _obey(self, order: str | None) -> None:
        """Follow an order of engine/ops/control.py: quiet, resume (no order) or stop."""
        if self.life.stopping.is_set():
            return  # an order stays until the worker is gone: a stop read again does not force
        if order == "stop":
            self.life.stop(by="control")
        elif order == "quiet":
            self.life.quiet(by="control")
        elif order is None:
            self.life.resume(by="control")

    def _check_recycle(self) -> None:
        if self.retired is None and (reason := self.recycler.reason(self.claimer.claims)):
            self.retire(reason)

    async def run(self) -> None:
        """Run until stopped, or until the queues are empty in burst mode.

        A worker with a role takes its queues from it first: ConfigError when there is none.
        """
        if self.role is not None:
            await self._start_role(self.role)
        log.info(
            "worker started id=%s role=%s queues=%s concurrency=%d burst=%s url=%s",
            self.id,
            self.role.name if self.role else "-",
            ",".join(k.queue for k in self.queues),
            self.concurrency,
            self.claimer.burst,
            self.settings.redacted_url,
        )
        self._loop = self.life.bind()
        await asyncio.to_thread(self.liveness.start, self._loop)
        if self.attempts.lane is not None:
            self.attempts.lane.warm()
        # Set once the last outcome is written: the hooks' reader drains then.
        flushed = asyncio.Event()
        loops = await self._start_loops(flushed)
        try:
            await self._advertise_versions()
            await self._guard("claim", self.claimer.run())
            await self.shutdown.run()
        finally:
            self.life.end()
            await self._exit(loops, flushed)
        if self.crashed is not None:
            raise LoopCrashed(f"worker {self.id}: a loop crashed") from self.crashed

    async def _start_loops(self, flushed: asyncio.Event) -> dict[str, asyncio.Task[None]]:
        """Start the worker's loops beside its claims, by name (a bug in one stops the worker).

        Transitions made anywhere (cleaner, clients, other workers) reach the hooks from the
        event stream (engine/periodic/transitions.py): "hooks" runs only when hooks were given.
        """
        transitions = await self._transition_hooks()
        stopping = self.life.stopping
        loops: dict[str, Coroutine[Any, Any, None]] = {
            "flusher": self.flusher.run(self._flushed_all),
            "upkeep": self._upkeep_loop(),
            "scheduler": self.scheduler.run(stopping),
            "cleaner": self.cleaner.run(stopping),
        }
        if transitions is not None:
            loops["hooks"] = transitions.run(flushed)
        return {name: asyncio.create_task(self._guard(name, co)) for name, co in loops.items()}

    async def _exit(self, loops: dict[str, asyncio.Task[None]], flushed: asyncio.Event) -> None:
        """Write the last outcomes, drain the hooks, end the loops and say goodbye.

        Outcomes, hooks and goodbyes share shutdown_exit_s whatever Redis does (it may never
        answer again): what is not written by then goes back through the leases.
        """
        self.flusher.wanted.set()
        budget = ExitBudget(self.settings.shutdown.exit_s, self.life.forced)
        written = await budget.wait(loops["flusher"])
        unwritten = [] if written else list(self.flusher.pending())
        flushed.set()
        hooks = loops.get("hooks")
        drained = hooks is None or await budget.wait(hooks)
        for task in loops.values():
            task.cancel()
        await asyncio.gather(*loops.values(), return_exceptions=True)
        said = await self._close(budget)
        if unwritten or not drained or not said:
            self._log_abandoned(unwritten, drained, said)

    def _flushed_all(self) -> bool:
        """Return whether the flusher may end once its queue is empty: stopped, nothing runs."""
        return self.life.stopping.is_set() and not self.book.active

    async def _transition_hooks(self) -> TransitionHooks | None:
        """Return the reader of transitions for the hooks (None: no hooks given)."""
        if not self.hooks.hooks:
            return None
        names = [k.queue for k in self.queues]
        transitions = self._transitions = TransitionHooks(self.settings, names, self.hooks, self.id)
        try:
            await transitions.prepare(self.redis)
        except Exception as exc:  # its loop makes the groups once Redis answers
            log.warning("transition hooks not ready worker=%s error=%r", self.id, exc)
        return transitions

    def holding(self) -> bool:
        """Return whether a job whose task says on_shutdown="continue" still runs: the one
        thing a stop waits for past the grace (read from another thread: best effort)."""
        running = list(self.book.active.values())
        return any(rec.opts is not None and rec.opts.on_shutdown == "continue" for rec in running)

    def exit_report(self) -> str:
        """Return what the worker holds, as key=value text (best effort from another thread)."""
        return (
            f"worker={self.id} running={len(self.book.active)} "
            f"outcomes_unwritten={self.flusher.unflushed}"
        )

    def _log_abandoned(self, unwritten: list[Outcome], drained: bool, said: bool) -> None:
        """Say in one line what the exit left undone, and who picks it up."""
        ids = ",".join(o.job.id for o in unwritten[:5]) + (",..." if len(unwritten) > 5 else "")
        log.warning(
            "worker exit abandoned id=%s outcomes_unwritten=%d jobs=%s hooks_drained=%s "
            "goodbye=%s exit_s=%g recovery=cleaner_via_leases",
            self.id,
            len(unwritten),
            ids or "-",
            drained,
            "said" if said else "abandoned",
            self.settings.shutdown.exit_s,
        )

    async def _close(self, budget: ExitBudget) -> bool:
        """Let go of everything run() started: threads, registry entry, fence, connections.

        The goodbyes to Redis (registry entry, claim fence) get what is left of `budget` (a
        floor at least); return whether they were said. Those not said are undone by the
        cleaner's reap of dead workers."""
        await asyncio.to_thread(self.liveness.stop, budget.last_step_s())
        await self.side.close()
        said = True
        try:
            async with asyncio.timeout(budget.last_step_s()):
                try:
                    await self.upkeep.deregister()
                except RedisUnavailable:
                    said = False
                    log.warning("could not deregister worker=%s (redis unavailable)", self.id)
                await self.shutdown.unfence()
        except TimeoutError:
            said = False
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.attempts.lane is not None:
            await self.attempts.lane.close()
        await self.redis.aclose()
        await self.claimer.close()
        await self.blocking.aclose()
        stats = " ".join(f"{k}={v}" for k, v in sorted(self.counters.items()))
        log.info("worker stopped id=%s %s", self.id, stats)
        return said

    async def _start_role(self, role: RoleFollower) -> None:
        """Take the role's queues (waiting while Redis is away); an unknown role ends the worker
        before it starts anything."""
        retry = Reconnect("role")
        while True:
            try:
                await self.follow_queues(await role.load(self.redis))
                return
            except ConfigError:
                await self.redis.aclose()
                await self.blocking.aclose()
                raise
            except Exception as exc:
                await retry.failed(exc)

    async def _follow_role(self, role: RoleFollower) -> None:
        """Swap to the role's queues when they changed (read with each registry renewal)."""
        names = await role.changed(self.redis)
        if names is not None:
            try:
                await self.follow_queues(names)
            except BaseException:
                role.unread()  # Redis failed meanwhile: read the role again next time
                raise

    async def follow_queues(self, names: Sequence[str]) -> None:
        """Claim from the queues `names` (in order) from now on; jobs claimed from the others
        run to their end. The one step that changes a running worker's queues (a role's)."""
        new = [QueueKeys(self.settings.prefix, q) for q in names]
        old = self.queues
        if new == old:
            return
        # Its task versions are named in a new queue before its first claim there.
        self.versions.serve(new)
        await self.versions.advertise(self.redis, force=True)
        if self._transitions is not None:  # its hooks read a new queue's events from its first
            self._transitions.follow(names)
            await self._transitions.prepare(self.redis)
        wake = self.claimer.follow(new)
        self.scheduler.queues = list(new)
        self.cleaner.queues = list(new)
        added = [k for k in new if k not in old]
        removed = [k for k in old if k not in new]
        # A quiet worker's claim fence stays only where it claims; it is fenced wherever it
        # claims nothing; the wait on the old queues' markers ends now (others claim nothing).
        fenced = added if self.life.state is not State.CLAIMING else []
        try:
            await self.presence.move_fence(removed, fenced, old[0] if old else None)
        finally:
            if wake is not None:
                await wake.close()
        if old:
            log.info(
                "worker queues changed id=%s role=%s queues=%s was=%s",
                self.id,
                self.role.name if self.role else "-",
                ",".join(names),
                ",".join(k.queue for k in old),
            )

    async def _advertise_versions(self) -> None:
        """Name this worker's task versions before its first claim (else it would claim jobs of
        versions it lacks); wait while Redis is away."""
        retry = Reconnect("versions")
        while not self.life.stopping.is_set():
            try:
                await self.versions.advertise(self.redis, force=True)
                return
            except Exception as exc:
                await retry.failed(exc)

    async def _guard(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run one loop; a bug in it stops the whole worker (it must not live on without it)."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.life.crash(exc, f"loop crashed loop={name}")

    async def _upkeep_loop(self) -> None:
        """Renew leases (stopping jobs cancelled or lost), follow the role and control orders."""
        retry = Reconnect("upkeep")
        while True:
            try:
                records = list(self.book.active.values())
                failpoints.bug("bug_in_upkeep")
                for rec, code in await self.upkeep.renew(records):
                    if self.book.active.get(rec.job.token or rec.job.id) is not rec:
                        continue  # it finished while the renewal was in flight
                    if code == 1 and rec.handle is not None:
                        rec.stop(StopReason.CANCELLED)
                    elif code < 0:
                        self.writer.count(Outcome(rec.job, Kind.FAILED), "heartbeat", code)
                        rec.stop(StopReason.LEASE_LOST)
                if self.role is not None and not self.life.stopping.is_set():
                    await self._follow_role(self.role)
                order = await self.upkeep.register(
                    [k.queue for k in self.queues],
                    self.concurrency,
                    records,
                    self.life.shown,
                    role=self.role.name if self.role else "",
                    tallies=self.writer.tallies,
                    versions=self.versions.tags,
                )
                self._obey(order)
                await self.versions.advertise(self.redis)
                retry.ok()
                self._check_recycle()
            except Exception as exc:
                await retry.failed(exc)
                continue
            await asyncio.sleep(self.settings.heartbeat_interval_s)


def _queues(queues: Sequence[str] | None, role: str | None) -> Sequence[str]:
    """Return the queues a worker starts with: those given, else a role's (read at run), else
    "default"; ConfigError for both queues and a role."""
    if role is not None and queues is not None:
        raise ConfigError("give a worker its queues or a role, not both")
    if queues is not None:
        return queues
    return () if role is not None else ("default",)
