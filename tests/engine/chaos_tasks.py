"""Tasks for reliability tests; each start and end goes to an O_APPEND ledger file."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import orjson

from engine import JobContext, task

_FD: list[int] = []


def ledger(kind: str, job: JobContext) -> None:
    """Append one line (start or end) to $JOBSITE_LEDGER with os.write: a kill loses no line."""
    path = os.environ.get("JOBSITE_LEDGER")
    if not path:
        return
    if not _FD:
        _FD.append(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    line = {
        "kind": kind,
        "id": job.id,
        "attempt": job.attempt,
        # The worker's pid (from its default id "host:pid:random"): a suspect runs alone in the
        # worker's isolation child, whose own pid is `proc`.
        "pid": int(job.worker_id.split(":")[1]),
        "proc": os.getpid(),
        "t": time.time(),
    }
    os.write(_FD[0], orjson.dumps(line) + b"\n")


async def _sleep_ledgered(job: JobContext, ms: int) -> int:
    ledger("start", job)
    await asyncio.sleep(ms / 1000)
    ledger("end", job)
    return ms


@task(name="chaos.work", takes_context=True, max_stalls=100)
async def work(job: JobContext, ms: int) -> int:
    return await _sleep_ledgered(job, ms)


@task(name="chaos.held", takes_context=True, max_concurrent=1)
async def held(job: JobContext, ms: int) -> int:
    """Like work, of a task capped by max_concurrent: a worker claims its jobs, not begins."""
    return await _sleep_ledgered(job, ms)


@task(
    name="chaos.fail_once",
    takes_context=True,
    expected_exceptions=(ValueError,),
    retry_delay_s=0.05,
    backoff="constant",
)
async def fail_once(job: JobContext) -> int:
    ledger("start", job)
    if job.attempt == 1:
        raise ValueError("first attempt fails")
    ledger("end", job)
    return job.attempt


@task(name="chaos.always_fail", takes_context=True, max_retries=0)
async def always_fail(job: JobContext) -> None:
    ledger("start", job)
    raise RuntimeError("always fails")


@task(name="chaos.beat", takes_context=True, max_heartbeat_interval_s=1.0)
async def beat(job: JobContext, seconds: float) -> str:
    ledger("start", job)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await job.heartbeat()
        await asyncio.sleep(0.1)
    ledger("end", job)
    return "done"


@task(name="chaos.silent", takes_context=True, max_heartbeat_interval_s=1.0, max_stalls=0)
async def silent(job: JobContext) -> None:
    ledger("start", job)
    await asyncio.sleep(30)


@task(name="chaos.cpu", takes_context=True)
def cpu(job: JobContext, seconds: float) -> int:
    ledger("start", job)
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        n += sum(range(1000))
    ledger("end", job)
    return n


@task(name="chaos.stop", takes_context=True, on_shutdown="stop")
async def stop(job: JobContext, seconds: float) -> None:
    ledger("start", job)
    await asyncio.sleep(seconds)
    ledger("end", job)


@task(name="chaos.resubmit", takes_context=True, on_shutdown="resubmit")
async def resubmit(job: JobContext, seconds: float) -> None:
    ledger("start", job)
    await asyncio.sleep(seconds)
    ledger("end", job)


@task(name="chaos.keep_going", takes_context=True, on_shutdown="continue")
async def keep_going(job: JobContext, seconds: float) -> None:
    ledger("start", job)
    await asyncio.sleep(seconds)
    ledger("end", job)


@task(name="chaos.sync_loop", takes_context=True)
def sync_loop(job: JobContext, seconds: float) -> str:
    ledger("start", job)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if job.cancelled:
            ledger("saw_cancel", job)
            return "stopped early"
        time.sleep(0.01)
    ledger("end", job)
    return "finished"


@task(name="chaos.report", takes_context=True)
def report(job: JobContext, seconds: float) -> str:
    """A long sync job with the default on_shutdown, writing progress and never looking at
    `cancelled` (as a team's first report task would)."""
    ledger("start", job)
    end, step = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        step += 1
        job.set_progress_sync(min(99.0, step), f"step {step}")
        time.sleep(0.05)
    ledger("end", job)
    return "done"


@task(name="chaos.progress", takes_context=True)
async def progress(job: JobContext) -> None:
    for pct in (25, 50, 100):
        await job.set_progress(pct, f"step {pct}")


@task(name="chaos.rated", takes_context=True, rate_limit="10/s")
async def rated(job: JobContext) -> None:
    ledger("start", job)


@task(
    name="chaos.tenant",
    takes_context=True,
    max_stalls=100,
    concurrency_key=lambda tenant, ms: tenant,
    concurrency_limit=2,
)
async def tenant(job: JobContext, tenant: str, ms: int) -> int:
    ledger("start", job)
    await asyncio.sleep(ms / 1000)
    ledger("end", job)
    return ms


@task(name="chaos.plain", takes_context=True)
async def plain(job: JobContext, ms: int) -> int:
    """Like work, with every option at its default (max_stalls=1)."""
    ledger("start", job)
    await asyncio.sleep(ms / 1000)
    ledger("end", job)
    return ms


@task(name="chaos.poison", takes_context=True)
async def poison(job: JobContext) -> None:
    """Kill the process running it, as a crash in a C extension or the OOM killer would."""
    ledger("start", job)
    await asyncio.sleep(0.05)
    os._exit(1)


@task(name="chaos.exit_async", takes_context=True, max_retries=0)
async def exit_async(job: JobContext, code: int | None) -> None:
    ledger("start", job)
    if code is None:
        raise SystemExit
    sys.exit(code)


@task(name="chaos.exit_sync", takes_context=True, max_retries=0)
def exit_sync(job: JobContext, code: int | None) -> None:
    ledger("start", job)
    if code is None:
        raise SystemExit
    sys.exit(code)


@task(name="chaos.block_loop", takes_context=True)
async def block_loop(job: JobContext, seconds: float) -> str:
    """Block the worker's event loop (a coroutine calling blocking code)."""
    ledger("start", job)
    time.sleep(seconds)
    ledger("end", job)
    return "done"


@task(
    name="chaos.give_up",
    takes_context=True,
    max_retries=2,
    expected_exceptions=(ValueError,),
    retry_delay_s=None,
)
async def give_up(job: JobContext) -> None:
    """Fail every attempt with an expected error: retried twice, then `failed`."""
    ledger("start", job)
    ledger("raise", job)
    raise ValueError("never works")


# What chaos.leak keeps alive: 5 MiB more each run, never freed.
_LEAKED: list[bytes] = []


@task(name="chaos.leak", takes_context=True)
async def leak(job: JobContext) -> None:
    """Leak 5 MiB a run (touched, so it is resident): recycling by max_rss_mib must catch it."""
    ledger("start", job)
    _LEAKED.append(os.urandom(5 << 20))
    await asyncio.sleep(0.05)
    ledger("end", job)
