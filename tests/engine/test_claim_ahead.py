"""A claim sent ahead (while the jobs of the last claim run) never strands what it took.

Judged by the jobs' own record of their runs and by their states after the worker has gone.
"""

from __future__ import annotations

import asyncio
import dataclasses

from engine import Client, EngineSettings, JobContext, JobState, Worker, task

# Ids of the jobs that ran, in order; the worker the first job stops.
RAN: list[str] = []
STOPS: list[Worker] = []


@task(name="claim-ahead.record", takes_context=True)
async def record(job: JobContext, n: int) -> int:
    """Note the run; the first job stops its worker (a SIGTERM as it runs)."""
    RAN.append(job.id)
    if n == 0:
        STOPS[0].stop()
    return n


async def test_a_stop_while_a_claim_is_sent_ahead_runs_what_it_claimed(
    client: Client, settings: EngineSettings
) -> None:
    # Batches of 2 in 4 slots: the first claim's reply sends a second claim at once, and the
    # first job (which runs before that reply) stops the worker while it is on its way.
    settings = dataclasses.replace(settings, claim_batch=2)
    RAN.clear()
    jobs = await client.enqueue_many([record.call(n) for n in range(6)])
    worker = Worker(settings, [record], concurrency=4)
    STOPS[:] = [worker]
    await asyncio.wait_for(worker.run(), 20)

    states = {job.id: (await client.jobs.get(job.id)).state for job in jobs}
    assert [i for i, s in states.items() if s is JobState.STARTED] == []  # none stranded
    assert len(RAN) == len(set(RAN))  # none ran twice
    completed = {i for i, s in states.items() if s is JobState.COMPLETED}
    assert completed == set(RAN)
    # Both claims' jobs ran: the first claim's two and the two the claim sent ahead took.
    assert [job.id for job in jobs[:4]] == RAN
    assert all(states[job.id] is JobState.SUBMITTED for job in jobs[4:])
    assert worker.counters["completed"] == 4
