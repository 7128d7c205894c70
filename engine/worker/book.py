"""The claims a worker holds: running, or parked until their task has a slot (max_concurrent)."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable

from ..keys import QueueKeys
from ..running.runner import Outcome
from .flusher import Flusher
from .lifecycle import Lifecycle
from .unit import RunningJob


class Book:
    """Count claims against `concurrency` and each task's max_concurrent; queue their outcomes.

    A claim is kept by token (a job reaped and claimed again is a new claim) until its outcome
    is queued; `slot_free` is set whenever one leaves, or an outcome is written.
    """

    def __init__(self, concurrency: int, flusher: Flusher, life: Lifecycle) -> None:
        self.concurrency = concurrency
        self.flusher = flusher
        self.life = life
        self.active: dict[str, RunningJob] = {}
        # The claim loop waits on it for room (Lifecycle.wait_unless_stopped: a stop sets it).
        self.slot_free = asyncio.Event()
        flusher.on_written = self.slot_free.set  # unwritten outcomes hold claims back too
        self._parked: dict[str, deque[RunningJob]] = defaultdict(deque)
        self._per_task: dict[str, int] = defaultdict(int)
        # Begins a parked job once its task has a slot (the claimer's begin step).
        self.begin: Callable[[RunningJob], None] = _no_begin

    def free(self) -> int:
        """Return the slots free under `concurrency`."""
        return self.concurrency - len(self.active)

    def hold(self, rec: RunningJob) -> None:
        """Count a new claim."""
        self.active[rec.job.token or rec.job.id] = rec

    def in_queue(self, keys: QueueKeys) -> int:
        """Return how many claims of queue `keys` are held."""
        return sum(1 for r in self.active.values() if r.keys == keys)

    def suspects(self) -> int:
        """Return how many held claims are suspects (an earlier run's process died)."""
        return sum(1 for r in self.active.values() if r.job.stalls > 0)

    def take_task_slot(self, rec: RunningJob) -> bool:
        """Take a slot of the job's task; park it (False) when its max_concurrent is reached."""
        cap = rec.opts.max_concurrent if rec.opts else None
        if cap is not None and self._per_task[rec.job.task] >= cap:
            self._parked[rec.job.task].append(rec)
            return False
        self._per_task[rec.job.task] += 1
        return True

    def finish(self, rec: RunningJob, outcome: Outcome | None) -> None:
        """Let a claim go: queue its outcome, give its task's slot to the next parked job."""
        self.forget(rec)
        if outcome is not None:
            self.flusher.add(outcome)
        self.release_task_slot(rec.job.task)

    def release_task_slot(self, task: str) -> None:
        """Give a job of `task` that ended (or never began) its slot's successor."""
        parked = self._parked.get(task)
        if parked and not self.life.stopping.is_set():
            self.begin(parked.popleft())
        else:
            self._per_task[task] -= 1

    def drop(self, rec: RunningJob) -> None:
        """Let a parked claim go with nothing to write (its lease was lost)."""
        parked = self._parked.get(rec.job.task)
        if parked and rec in parked:
            parked.remove(rec)
        self.forget(rec)

    def unpark_all(self) -> list[RunningJob]:
        """Take every parked claim (at shutdown: they go back unrun)."""
        out: list[RunningJob] = []
        for parked in self._parked.values():
            out.extend(parked)
            parked.clear()
        return out

    def forget(self, rec: RunningJob) -> None:
        """Stop counting a claim (once its outcome is queued, or it was refused)."""
        key = rec.job.token or rec.job.id
        if self.active.get(key) is rec:
            del self.active[key]
            self.slot_free.set()

    def handles(self) -> list[asyncio.Task[None]]:
        """Return the tasks of the jobs running now."""
        return [r.handle for r in self.active.values() if r.handle is not None]


def _no_begin(rec: RunningJob) -> None:
    raise RuntimeError("no begin step set for parked jobs")
