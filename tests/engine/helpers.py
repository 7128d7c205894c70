"""Helpers for engine tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from subprocess import CompletedProcess
from typing import Any

import redis

from engine import EngineSettings, Task, Worker


def sync_redis(url: str, **options: Any) -> Any:
    """Return a synchronous client of the test Redis: a cluster client for redis+cluster://."""
    if url.startswith("redis+cluster://"):
        host, _, port = url.removeprefix("redis+cluster://").split(",")[0].rpartition(":")
        return redis.RedisCluster(host=host, port=int(port), **options)
    return redis.Redis.from_url(url, **options)


def dbsize(settings: EngineSettings) -> int:
    """Return the number of keys in the test Redis."""
    with sync_redis(settings.redis_url) as r:
        return int(r.dbsize())


async def drain(settings: EngineSettings, tasks: Iterable[Task], **kwargs: object) -> Worker:
    """Run a burst worker until the queues are empty; return it for its counters."""
    worker = Worker(settings, tasks, burst=True, **kwargs)  # type: ignore[arg-type]
    await worker.run()
    return worker


def run_cli(url: str, tasks: str, *extra: str, timeout_s: float = 60) -> CompletedProcess[str]:
    """Run `python -m engine worker` in a subprocess and return what it did."""
    return subprocess.run(
        [sys.executable, "-m", "engine", "worker", "--url", url, "--tasks", tasks, *extra],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
