"""The tasks of the soak benchmark (bench.soak): a worker imports them with
JOBSITE_TASK_MODULES=bench.soak_tasks.

`MIX` is the share of each kind in the jobs fed; `calls(n)` makes job n's call, so the same
sequence of numbers always gives the same mix.
"""

from __future__ import annotations

import asyncio

from engine import JobContext, task


class SoakFlaky(Exception):
    """The first attempt of a flaky job fails with this; the second succeeds."""


class SoakBroken(Exception):
    """A broken job fails with this on every attempt (it ends in the DLQ)."""


@task(name="bench.soak.noop")
async def noop(n: int) -> int:
    return n


@task(name="bench.soak.nap")
async def nap(n: int, ms: int) -> int:
    await asyncio.sleep(ms / 1000)
    return n


@task(
    name="bench.soak.flaky",
    max_retries=1,
    retry_delay_s=0.05,
    backoff="constant",
    expected_exceptions=(SoakFlaky,),
    takes_context=True,
)
async def flaky(job: JobContext, n: int) -> int:
    if job.attempt == 1:
        raise SoakFlaky(f"job {n} fails on its first attempt")
    return n


@task(name="bench.soak.broken", max_retries=0)
async def broken(n: int) -> None:
    raise SoakBroken(f"job {n} always fails")


@task(name="bench.soak.report", takes_context=True)
async def report(job: JobContext, n: int, steps: int) -> int:
    for step in range(1, steps + 1):
        await job.log(f"job {n}: step {step} of {steps}")
        await job.set_progress(100 * step / steps, f"step {step} of {steps}")
    return n


# kind -> share of the jobs fed (sums to 1).
MIX = {"noop": 0.50, "nap": 0.30, "flaky": 0.10, "report": 0.08, "broken": 0.02}
_WHEEL = [kind for kind, share in MIX.items() for _ in range(round(share * 100))]


def kind_of(n: int) -> str:
    """Return the kind of job n (the mix repeats every 100 jobs, spread by a stride)."""
    return _WHEEL[(n * 37) % len(_WHEEL)]


def call(n: int) -> object:
    """Return job n's call (an engine TaskCall for Client.enqueue_many)."""
    kind = kind_of(n)
    if kind == "nap":
        return nap.call(n, 1 + (n * 7919) % 50)
    if kind == "flaky":
        return flaky.call(n)
    if kind == "report":
        return report.call(n, 3)
    if kind == "broken":
        return broken.call(n)
    return noop.call(n)
