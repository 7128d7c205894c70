"""The worker's one state machine: claiming, quiet, stopping, forced or crashed, and its waits.

Sidekiq's model: quiet stops claiming and lets the jobs run on (resume undoes it); a stop fences
claims, hands back what did not begin and gives running jobs the grace period; a second stop
forces them; a bug anywhere crashes the worker, which then stops as if forced and exits non-zero.
Every collaborator reads the state and waits on it here, never on an event of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

log = logging.getLogger("engine.worker")


class State(StrEnum):
    """Where a worker is in its life."""

    CLAIMING = "claiming"
    QUIET = "quiet"  # claims nothing, its jobs run on (a control order)
    STOPPING = "stopping"  # claims nothing, on its way out (grace period, then on_shutdown)
    FORCED = "forced"  # a second stop: running jobs are stopped now
    CRASHED = "crashed"  # a bug: stopped as if forced, then the process exits non-zero


# The moves a worker may make; any other is a bug of the caller, refused with RuntimeError.
ALLOWED: dict[State, frozenset[State]] = {
    State.CLAIMING: frozenset({State.QUIET, State.STOPPING, State.CRASHED}),
    State.QUIET: frozenset({State.CLAIMING, State.STOPPING, State.CRASHED}),
    State.STOPPING: frozenset({State.FORCED, State.CRASHED}),
    State.FORCED: frozenset({State.CRASHED}),
    State.CRASHED: frozenset(),
}
# The states of a worker on its way out.
STOPPED = frozenset({State.STOPPING, State.FORCED, State.CRASHED})


class Shown(Protocol):
    """What shows the worker's state outside its process (ops/probe.py's Status)."""

    state: str


class Lifecycle:
    """Hold a worker's state, move it by the allowed transitions, log each, wake the waits."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.state = State.CLAIMING
        # The first exception that killed one of the worker's loops or steps (a bug).
        self.crashed: BaseException | None = None
        # Why the worker retired (recycling), as key=value text; None: it did not.
        self.retired: str | None = None
        # Set once the worker stops (stopping, forced or crashed): the loops on a clock end.
        self.stopping = asyncio.Event()
        # Set by a second stop or a crash: running jobs stop now, the exit waits for nothing.
        self.forced = asyncio.Event()
        # Clear only while quiet: the claim loop waits on it.
        self._claiming = asyncio.Event()
        self._claiming.set()
        # Events whose waiters a stop must wake (wait_unless_stopped), while they wait.
        self._woken: set[asyncio.Event] = set()
        # What a stop starts at once (the claim fence on the server).
        self._on_stop: list[Callable[[], object]] = []
        # The statuses kept in the words of `shown` (the probe's, read by its liveness thread).
        self._shown: list[Shown] = []
        # The worker's event loop, once it runs: crashes reported from threads go there.
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def shown(self) -> str:
        """Return the state in the words the registry entry, the probe and the dashboard use:
        claiming, quiet, stopping or retiring (forced and crashed are stopping too)."""
        if self.state in STOPPED:
            return "retiring" if self.retired is not None else "stopping"
        return self.state.value

    def show_in(self, status: Shown) -> None:
        """Keep `status.state` in the words of `shown` from now on."""
        self._shown.append(status)
        status.state = self.shown

    def on_stop(self, callback: Callable[[], object]) -> None:
        """Call `callback` at the step out of claiming or quiet that a stop or a crash makes."""
        self._on_stop.append(callback)

    def bind(self) -> asyncio.AbstractEventLoop:
        """Take the running loop as the worker's (crashes reported from threads go there)."""
        self.loop = asyncio.get_running_loop()
        return self.loop

    def quiet(self, by: str) -> None:
        """Stop claiming, let the jobs run on (claiming only; otherwise nothing)."""
        if self.state is State.CLAIMING:
            self._move(State.QUIET)
            log.info("worker quiet id=%s claims=off by=%s", self.worker_id, by)

    def resume(self, by: str) -> None:
        """Claim again after quiet (quiet only; otherwise nothing)."""
        if self.state is State.QUIET:
            self._move(State.CLAIMING)
            log.info("worker resumed id=%s claims=on by=%s", self.worker_id, by)

    def stop(self, by: str | None = None) -> None:
        """Stop claiming (the first stop); force running jobs to stop (the second).

        A stop `by` someone (a control order) is logged here; any other is logged by the claim
        fence once it holds on the server (`claims=off`)."""
        if self.state in (State.CLAIMING, State.QUIET):
            if by is not None:
                log.info("worker stopping id=%s was=%s by=%s", self.worker_id, self.state, by)
            self._move(State.STOPPING)
        elif self.state is State.STOPPING:
            log.warning("worker forced id=%s was=stopping by=second_stop", self.worker_id)
            self._move(State.FORCED)

    def retire(self, reason: str) -> None:
        """Stop for good to let a fresh worker follow (claiming or quiet only); `reason` is
        key=value text."""
        if self.retired is None and self.state not in STOPPED:
            self.retired = reason
            log.info("worker retiring id=%s %s", self.worker_id, reason)
            self.stop()

    def end(self) -> None:
        """Mark the run over without a stop asked for (burst mode drained, or the run failed):
        nothing claims any more, so no fence goes up."""
        if self.state not in STOPPED:
            self._move(State.STOPPING, announce=False)

    def crash(self, exc: BaseException, what: str | None = None) -> None:
        """Stop the worker after a bug: running jobs go back now, the process exits non-zero.

        The first exception is kept; `what` names where it happened, for the log line (None:
        logged there already)."""
        if what is not None:
            log.critical(
                "%s worker=%s was=%s state=crashed", what, self.worker_id, self.state, exc_info=exc
            )
        if self.crashed is None:
            self.crashed = exc
        if self.state is not State.CRASHED:
            self._move(State.CRASHED)

    def crash_on_bug(self, task: asyncio.Task[None]) -> None:
        """Crash if a detached step died of a bug (nothing else awaits it): a done callback."""
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self.crash(exc, "step crashed")

    def crash_from_thread(self, exc: BaseException) -> None:
        """Crash after a bug in a thread of the worker's own (which logged it)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.crash, exc)

    async def wait_claiming(self) -> None:
        """Wait while the worker is quiet (resume, a stop or a crash ends the wait)."""
        await self._claiming.wait()

    async def wait_unless_stopped(self, event: asyncio.Event) -> None:
        """Wait for `event`; a stop (or a crash) sets it, so the wait ends with it."""
        if self.stopping.is_set():
            return
        self._woken.add(event)
        try:
            await event.wait()
        finally:
            self._woken.discard(event)

    def _move(self, new: State, announce: bool = True) -> None:
        """Make the transition to `new` (RuntimeError if not allowed) and wake its waits."""
        old = self.state
        if new not in ALLOWED[old]:
            raise RuntimeError(f"worker {self.worker_id}: no transition from {old} to {new}")
        self.state = new
        for status in self._shown:
            status.state = self.shown
        if new is State.QUIET:
            self._claiming.clear()
        else:
            self._claiming.set()  # a quiet worker's claim loop wakes to see the stop
        if new in STOPPED and old not in STOPPED:
            self.stopping.set()
            for event in self._woken:
                event.set()
            if announce:
                for callback in self._on_stop:
                    callback()
        if new in (State.FORCED, State.CRASHED):
            self.forced.set()
