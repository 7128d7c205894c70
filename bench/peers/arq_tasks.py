"""arq worker settings and no-op task (`arq bench.peers.arq_tasks.WorkerSettings`).

Jobs and results are JSON, not arq's default pickle.
"""

from __future__ import annotations

import json
import os
from typing import Any

from arq.connections import RedisSettings

from bench import probe

MAX_JOBS = 100


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def loads(data: bytes) -> Any:
    return json.loads(data)


async def noop(ctx: dict[str, Any], t_enqueued: float) -> None:
    probe.hit(t_enqueued)


def redis_settings() -> RedisSettings:
    return RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])


# Passed with --custom-log-dict: warnings only (arq logs every job at INFO by default).
LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler", "level": "WARNING"}},
    "loggers": {"arq": {"handlers": ["stderr"], "level": "WARNING"}},
}


class WorkerSettings:
    functions = (noop,)
    redis_settings = redis_settings()
    max_jobs = MAX_JOBS
    job_serializer = staticmethod(dumps)
    job_deserializer = staticmethod(loads)
