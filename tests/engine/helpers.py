"""Helpers for engine tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from subprocess import CompletedProcess
from typing import Any

import pytest
import redis

from engine import EngineSettings, Task, Worker
from engine.fields import FORMATS
from engine.keys import hash_format_key
from engine.seam.hashformat import NEWEST

# The names a job hash of a test Redis has: a fresh Redis takes the newest format.
STORED = FORMATS[NEWEST]


def sync_redis(url: str, **options: Any) -> Any:
    """Return a synchronous client of the test Redis: a cluster client for redis+cluster://."""
    if url.startswith("redis+cluster://"):
        host, _, port = url.removeprefix("redis+cluster://").split(",")[0].rpartition(":")
        return redis.RedisCluster(host=host, port=int(port), **options)
    return redis.Redis.from_url(url, **options)


# For a test that reaches one server by its port (a proxy in front of it, say): on the test
# cluster (JOBSITE_TEST_REDIS=cluster) the client would go around it to every master.
single_node = pytest.mark.skipif(
    os.environ.get("JOBSITE_TEST_REDIS") == "cluster", reason="reaches one server by its port"
)


def reset_stats(r: Any) -> None:
    """Reset INFO commandstats on the test Redis (every master of a cluster)."""
    if isinstance(r, redis.RedisCluster):
        r.config_resetstat(target_nodes=redis.RedisCluster.ALL_NODES)
    else:
        r.config_resetstat()


def command_calls(r: Any, command: str = "evalsha") -> int:
    """Return the calls of `command` that ran since reset_stats (summed over a cluster's
    masters; a call refused, such as NOSCRIPT on a node that had not loaded it yet, is not)."""
    if isinstance(r, redis.RedisCluster):
        stats = list(r.info("commandstats", target_nodes=redis.RedisCluster.ALL_NODES).values())
    else:
        stats = [r.info("commandstats")]
    counts = [s.get(f"cmdstat_{command}", {}) for s in stats]
    return sum(int(c.get("calls", 0)) - int(c.get("failed_calls", 0)) for c in counts)


def dbsize(settings: EngineSettings) -> int:
    """Return the number of keys in the test Redis but the record of its hash format (which a
    client writes the first time it needs it: engine/seam/hashformat.py)."""
    skip = hash_format_key(settings.prefix).encode()
    with sync_redis(settings.redis_url) as r:  # SCAN: every master of a cluster
        return sum(1 for key in r.scan_iter(count=1000) if key != skip)


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
