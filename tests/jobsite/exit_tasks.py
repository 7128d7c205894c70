"""The tasks of the exit-bound tests (tests/jobsite/test_worker_exit.py): a runworker process
imports them with JOBSITE_TASK_MODULES=tests.jobsite.exit_tasks."""

from __future__ import annotations

import asyncio
import time

from engine import task


@task(name="exit.noop")
async def noop(n: int) -> int:
    return n


@task(name="exit.nap")
async def nap(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@task(name="exit.sync_nap")
def sync_nap(seconds: float) -> float:
    """Sleep in the worker's job thread, which runs on after the job is handed back."""
    time.sleep(seconds)
    return seconds
