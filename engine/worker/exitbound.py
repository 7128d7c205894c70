"""The bound on a worker's exit: the time its last writes get, and the process's last resort.

After a stop the jobs get `shutdown_grace_s`; then the outcomes, the hooks and the goodbyes to
Redis share `shutdown_exit_s` (`ExitBudget`), cut to FORCED_EXIT_S by a second signal. What is
not written by then is left to the leases: the cleaner of another worker hands those jobs back.
`ExitGuard` bounds what no coroutine can end (a thread blocked in a database call, a task that
swallows its cancellation, the interpreter joining such threads at exit): past its bound the
process logs what it leaves and ends with os._exit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("engine.worker")

# After a second signal: how long the outcomes of the jobs it stopped still get (a Redis that
# answers takes milliseconds; one that does not is left to the leases).
FORCED_EXIT_S = 1.0
# The least each last step of the exit gets when the budget is spent (the liveness thread's
# stop, the goodbyes to Redis): plenty for a Redis that answers, a bound for one that hangs.
EXIT_FLOOR_S = 0.5
# What a process's exit takes past the worker's own bounds: its connections and threads closed,
# the interpreter's exit. ExitGuard allows it on top of them.
EXIT_SLACK_S = 2.0
# How often the guard looks at the clock and at the running jobs.
GUARD_TICK_S = 0.25


class ExitBudget:
    """The time left for a worker's exit: `exit_s` from now, FORCED_EXIT_S from a second signal."""

    def __init__(self, exit_s: float, forced: asyncio.Event) -> None:
        self.exit_s = exit_s
        self._end = time.monotonic() + exit_s
        self._forced = forced
        self._cut = False
        self._cut_if_forced()

    def left(self) -> float:
        """Return the seconds left (0: spent)."""
        self._cut_if_forced()
        return max(0.0, self._end - time.monotonic())

    def last_step_s(self) -> float:
        """Return how long a last step of the exit may take: what is left, EXIT_FLOOR_S at
        least."""
        return max(self.left(), EXIT_FLOOR_S)

    async def wait(self, task: asyncio.Future[Any]) -> bool:
        """Wait for `task` while the budget lasts; return whether it ended."""
        forced = asyncio.ensure_future(self._forced.wait())
        try:
            while not task.done() and (left := self.left()) > 0:
                await asyncio.wait(
                    [task, forced], timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            forced.cancel()
        return task.done()

    def _cut_if_forced(self) -> None:
        if self._forced.is_set() and not self._cut:
            self._cut = True
            self._end = min(self._end, time.monotonic() + FORCED_EXIT_S)


class ExitGuard:
    """End a worker process whose exit overruns its bound; a daemon thread, armed by its stop.

    From the first stop signal the process has `grace_s + exit_s + EXIT_SLACK_S`, or
    `exit_s + EXIT_SLACK_S` from the last moment `busy()` held (an on_shutdown="continue" job
    running on), whichever ends later; from a second signal `FORCED_EXIT_S + EXIT_SLACK_S`,
    whatever runs. Then it logs one line (`report()` and the threads that would hold the exit)
    and ends the process with os._exit: the status the process was exiting with (`exiting`),
    else 128 + the signal. Jobs whose outcomes were not written are handed back by the cleaner
    of another worker once this one's liveness key lapses.
    """

    def __init__(
        self,
        exit_s: float,
        busy: Callable[[], bool] = lambda: False,
        report: Callable[[], str] = lambda: "",
        owns_process: bool = True,
    ) -> None:
        # False when the worker runs inside a process it does not own (a test, call_command):
        # then the guard counts signals and statuses but never ends the process.
        self.owns_process = owns_process
        self.exit_s = exit_s
        self._busy = busy
        self._report = report
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._status = 0
        self._grace_end = 0.0
        self._busy_at = 0.0
        self._forced_at: float | None = None

    def stop_signal(self, signum: int, grace_s: float) -> None:
        """Count a stop signal: the first arms the bound, the next one cuts it to the forced
        bound."""
        with self._lock:
            if self._thread is not None:
                if self._forced_at is None:
                    self._forced_at = time.monotonic()
                self._wake.set()
                return
            self._start(128 + signum, grace_s)

    def exiting(self, status: int) -> None:
        """Say the process is on its way out with `status`, the status the guard then ends it
        with. An exit no signal asked for (a crash, a retirement, a burst's end) arms the bound
        here: `exit_s + EXIT_SLACK_S` from now."""
        with self._lock:
            if self._thread is None:
                self._start(status, 0.0)
            else:
                self._status = status

    def due(self) -> float:
        """Return when (monotonic) the guard fires, given what it saw so far."""
        if self._forced_at is not None:
            return self._forced_at + FORCED_EXIT_S + EXIT_SLACK_S
        return max(self._grace_end, self._busy_at) + self.exit_s + EXIT_SLACK_S

    def _start(self, status: int, grace_s: float) -> None:
        now = time.monotonic()
        self._status = status
        self._grace_end = self._busy_at = now + grace_s
        if not self.owns_process:
            return
        self._thread = threading.Thread(target=self._watch, name="exit-guard", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        began = time.monotonic()
        while True:
            now = time.monotonic()
            if self._forced_at is None and self._is_busy():
                self._busy_at = max(self._busy_at, now)
            if now >= self.due():
                break
            self._wake.wait(min(GUARD_TICK_S, self.due() - now))
            self._wake.clear()
        self._fire(time.monotonic() - began)

    def _is_busy(self) -> bool:
        try:
            return bool(self._busy())
        except Exception:  # a reading across threads that failed: the bound holds regardless
            return False

    def _fire(self, after_s: float) -> None:
        """Log what is left (from a thread of its own: a stuck log handler must not hold the
        exit), then end the process."""
        try:
            report = self._report()
        except Exception as exc:
            report = f"report_error={exc!r}"
        holding = [
            t.name
            for t in threading.enumerate()
            if not t.daemon and t is not threading.main_thread() and t.is_alive()
        ]
        line = (
            f"exit forced pid={os.getpid()} after_s={after_s:.1f} status={self._status} "
            f"{report} threads_alive={','.join(holding) or '-'} recovery=leases"
        )
        say = threading.Thread(target=_say, args=(line,), name="exit-guard-log", daemon=True)
        say.start()
        say.join(1.0)
        os._exit(self._status)


def _say(line: str) -> None:
    log.critical("%s", line)
    logger: logging.Logger | None = log
    while logger is not None:  # os._exit flushes nothing: the handlers up the tree do it now
        for handler in logger.handlers:
            handler.flush()
        logger = logger.parent
