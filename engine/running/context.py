"""JobContext: what a task with `takes_context=True` receives as its first argument."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .. import serializer
from ..errors import CheckpointTooLarge, SerializationError
from ..job import Job
from ..settings import DEFAULT_CHECKPOINT_MAX_BYTES

ProgressWriter = Callable[[Job, float, str], Awaitable[None]]
LogWriter = Callable[[Job, str], Awaitable[None]]
# Writes a checkpoint's JSON (b"": delete it).
CheckpointWriter = Callable[[Job, bytes], Awaitable[None]]
ResultReader = Callable[[Job], Awaitable[dict[str, Any]]]

# Longest message of one log line, in characters (the line and its event carry it whole).
LOG_MESSAGE_MAX_CHARS = 1000


@dataclass(slots=True, eq=False)
class JobContext:
    """The running job as its task sees it: identity, heartbeat, progress, log, checkpoint,
    cancellation.

    The worker builds one per job with positional arguments (Attempts.prepare): keep the order
    of the fields, or change it there too.
    """

    job: Job
    worker_id: str
    _progress: ProgressWriter | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _results: ResultReader | None = None
    _log: LogWriter | None = None
    # Set from the event loop, read by sync code in a thread (a bool is safe to share).
    _cancelled: bool = False
    # Monotonic time of the task's last heartbeat (starts when the job begins).
    last_heartbeat: float = field(default_factory=time.monotonic)
    # Set when the task heartbeated since the worker last renewed the lease.
    touched: bool = False
    _checkpoint: CheckpointWriter | None = None
    # Largest checkpoint, bytes of JSON (EngineSettings.checkpoint_max_bytes).
    checkpoint_max_bytes: int = DEFAULT_CHECKPOINT_MAX_BYTES
    # Reads the last error of each parent that did not complete (parent_errors).
    _errors: ResultReader | None = None

    @property
    def id(self) -> str:
        """Return the job id."""
        return self.job.id

    @property
    def attempt(self) -> int:
        """Return the attempt number, counting from 1."""
        return self.job.attempt

    @property
    def queue(self) -> str:
        """Return the queue name."""
        return self.job.queue

    @property
    def parents(self) -> list[str]:
        """Return the ids of the jobs this one depends on."""
        return list(self.job.parents)

    async def parent_results(self) -> dict[str, Any]:
        """Return each parent's result by id (None for one without: a parent that did not
        complete, for a job released by its failure or its end)."""
        if self._results is None or not self.job.parents:
            return {}
        return await self._results(self.job)

    async def parent_errors(self) -> dict[str, Any]:
        """Return each parent's last error by id (a dict: type, message, attempt...), None for
        a parent that completed: what a failure callback reads (runs_on "failure" or "end")."""
        if self._errors is None or not self.job.parents:
            return {}
        return await self._errors(self.job)

    def cancel(self) -> None:
        """Mark the job cancelled; sync code sees it through `cancelled`."""
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        """Tell whether the job was cancelled (sync code checks this between steps)."""
        return self._cancelled

    def touch(self) -> None:
        """Record a heartbeat from sync code (thread-safe); the worker sends it with its renewal."""
        self.last_heartbeat = time.monotonic()
        self.touched = True

    async def heartbeat(self) -> None:
        """Record a heartbeat; the worker's lease renewal carries it to Redis."""
        self.touch()
        await asyncio.sleep(0)

    async def set_progress(self, pct: float, message: str = "") -> None:
        """Store progress (0 to 100) and a message on the job, and event it.

        Redis away does not fail the job: the worker holds the write until Redis answers.
        """
        if self._progress is not None and not self._cancelled:  # stopped: no longer its job
            await self._progress(self.job, max(0.0, min(100.0, float(pct))), message[:500])

    def set_progress_sync(self, pct: float, message: str = "", timeout_s: float = 5.0) -> None:
        """Do `set_progress` from sync code running in the worker's thread pool."""
        if self._loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self.set_progress(pct, message), self._loop)
        with contextlib.suppress(TimeoutError):  # slow Redis: it is written (or held) meanwhile
            future.result(timeout=timeout_s)

    async def log(self, message: str) -> None:
        """Append a timestamped line to the job's log (the newest lines are kept), and event it."""
        if self._log is not None and not self._cancelled:  # stopped: no longer its job
            text = str(message)[:LOG_MESSAGE_MAX_CHARS]
            # Lone surrogates cannot be sent as UTF-8: they become "?".
            await self._log(self.job, text.encode("utf-8", "replace").decode())

    def log_sync(self, message: str, timeout_s: float = 5.0) -> None:
        """Do `log` from sync code running in the worker's thread pool."""
        if self._loop is None:
            return
        future = asyncio.run_coroutine_threadsafe(self.log(message), self._loop)
        with contextlib.suppress(TimeoutError):  # slow Redis: it is written (or held) meanwhile
            future.result(timeout=timeout_s)

    @property
    def checkpointed(self) -> Any:
        """Return the state last saved with `checkpoint` (by an earlier attempt, then by this
        one); None when none was saved, as on a first run."""
        return self.job.checkpoint

    async def checkpoint(self, state: Any) -> None:
        """Save `state` (JSON) on the job for a later attempt to resume from; None deletes it.

        Raises CheckpointTooLarge past checkpoint_max_bytes, SerializationError for a state
        that is not JSON; either saves nothing. Redis away does not fail the job: the worker
        holds the newest state until Redis answers.
        """
        await self._save(self._encoded(state))

    def checkpoint_sync(self, state: Any, timeout_s: float = 5.0) -> None:
        """Do `checkpoint` from sync code running in the worker's thread pool.

        Once the job is stopped nothing is written: its outcome (a hand-back) may be written
        already, while its thread runs on.
        """
        data = self._encoded(state)  # its errors are raised here, in the task's thread
        if self._loop is None or self._cancelled:
            self._keep(data)
            return
        future = asyncio.run_coroutine_threadsafe(self._save(data), self._loop)
        with contextlib.suppress(TimeoutError):  # slow Redis: it is written (or held) meanwhile
            future.result(timeout=timeout_s)

    def _encoded(self, state: Any) -> bytes:
        """Return `state` as JSON within checkpoint_max_bytes (b"" for None), or raise."""
        if state is None:
            return b""
        try:
            data = serializer.dumps(state)
        except SerializationError as exc:
            raise SerializationError(f"checkpoint: {exc}") from None
        if len(data) > self.checkpoint_max_bytes:
            raise CheckpointTooLarge(len(data), self.checkpoint_max_bytes)
        return data

    def _keep(self, data: bytes) -> None:
        """Make `checkpointed` the saved state (a copy: the task may change its own after)."""
        self.job.checkpoint = serializer.loads(data) if data else None

    async def _save(self, data: bytes) -> None:
        # Saved even once stopped: an async task may save its place as it stops (a shutdown's
        # hand-back), before its outcome is written; the token refuses it once the job is no
        # longer this worker's.
        self._keep(data)
        if self._checkpoint is not None:
            await self._checkpoint(self.job, data)
