"""The no-op task of the history fault runs (bench.history_faults, tests/jobsite/
test_history_faults.py): a worker imports it with JOBSITE_TASK_MODULES=bench.history_tasks."""

from __future__ import annotations

from engine import task


@task(name="bench.history.noop")
async def noop(n: int) -> int:
    return n
