"""One task, `deploy.send`, in the version $DEPLOY_VERSION names: a rolling deploy's old and
new code. Each run appends to $JOBSITE_LEDGER the version that ran it."""

from __future__ import annotations

import asyncio
import os

import orjson

from engine import JobContext, task

VERSION = int(os.environ.get("DEPLOY_VERSION", "1"))
_FD: list[int] = []


def _ledger(kind: str, job: JobContext) -> None:
    if not _FD:
        _FD.append(os.open(os.environ["JOBSITE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    pid = int(job.worker_id.split(":")[1])
    line = {"kind": kind, "id": job.id, "attempt": job.attempt, "pid": pid, "ran_with": VERSION}
    os.write(_FD[0], orjson.dumps(line) + b"\n")


@task(name="deploy.send", version=VERSION, takes_context=True, max_stalls=100)
async def send(job: JobContext, ms: int) -> int:
    _ledger("start", job)
    await asyncio.sleep(ms / 1000)
    _ledger("end", job)
    return VERSION
