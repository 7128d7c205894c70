"""runworker's isolation child: a fresh interpreter that sets Django up and runs a suspect."""

from __future__ import annotations

from engine import Job, JobState
from engine.running.isolate import Lanes
from jobsite.jobs.tasks.isolation import isolation

from .conftest import MODULES


async def run_alone(task: str, args: list[int]) -> tuple[str, bytes]:
    lanes = Lanes(isolation(MODULES), "host:1:abc", 1 << 20, 1)

    async def progress(pct: float, message: str) -> None:
        pass

    try:
        job = Job(id="j1", task=task, state=JobState.STARTED, args=args, attempt=1, stalls=1)
        outcome = await lanes.run(job, None, lambda: None, progress)
    finally:
        await lanes.close()
    return outcome.kind, outcome.result


async def test_a_django_task_runs_in_the_isolation_child() -> None:
    assert await run_alone("tests.jobsite.dj_tasks.add", [2, 3]) == ("complete", b"5")


async def test_an_engine_task_of_a_django_project_runs_there_too() -> None:
    assert await run_alone("add", [4, 5]) == ("complete", b"9")
