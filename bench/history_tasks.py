"""The no-op task of the history fault runs (bench.history_faults, tests/jobsite/
test_history_faults.py): a worker imports it with JOBSITE_TASK_MODULES=bench.history_tasks.

With HISTORY_SYNC_RECEIVER=1 a synchronous receiver of `job_finished` is connected too: Django
runs it through `sync_to_async` on the thread it shares with every thread-sensitive call of
the process (what a project's own receiver costs a worker beside its mirror).
"""

from __future__ import annotations

import os
from typing import Any

from engine import task


@task(name="bench.history.noop")
async def noop(n: int) -> int:
    return n


def _finished(sender: Any, **kwargs: Any) -> None:
    """Do nothing, synchronously."""


if os.environ.get("HISTORY_SYNC_RECEIVER") == "1":
    from jobsite.jobs.tasks.signals import job_finished

    job_finished.connect(_finished, weak=False)
