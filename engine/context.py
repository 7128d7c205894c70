"""JobContext: what a task with `takes_context=True` receives as its first argument."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .job import Job


@dataclass(slots=True)
class JobContext:
    """The running job as its task sees it."""

    job: Job
    worker_id: str
    _cancel: threading.Event = field(default_factory=threading.Event)

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
    def cancelled(self) -> bool:
        """Tell whether the job was cancelled (sync code checks this between steps)."""
        return self._cancel.is_set()
