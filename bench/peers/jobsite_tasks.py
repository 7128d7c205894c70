"""Jobsite's no-op task; the worker imports this module with `--tasks bench.peers.jobsite_tasks`."""

from __future__ import annotations

from bench import probe
from engine import task


@task(name="bench.noop")
async def noop(t_enqueued: float) -> None:
    probe.hit(t_enqueued)
