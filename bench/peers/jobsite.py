"""Jobsite adapter: engine.Client for enqueueing, `python -m engine worker` for processing."""

from __future__ import annotations

import os
from pathlib import Path

from bench.peers import Sender, chunks

LABEL = "Jobsite"
PACKAGES = ("jobsite", "redis", "hiredis", "orjson", "uvloop")
BATCH = 1000
BULK = f"Client.enqueue_many, batches of {BATCH} (one round trip per batch)"
CONCURRENCY = 200
CONFIG = (
    f"`python -m engine worker --concurrency {CONCURRENCY}` (asyncio), `--burst` where bursting"
)
BURST = True
# EngineSettings overrides of a variant run (bench/replica_acks.py), for the client and the
# workers alike: `FIELD=VALUE` items, comma-separated, as `--set` takes them.
SETTINGS_ENV = "BENCH_JOBSITE_SET"


def overrides() -> list[str]:
    """Return the `FIELD=VALUE` items of SETTINGS_ENV."""
    return [item for item in os.environ.get(SETTINGS_ENV, "").split(",") if item]


def worker_argv(bindir: Path, url: str, burst: bool, index: int) -> list[str]:
    argv = [str(bindir / "python"), "-m", "engine", "worker", "--url", url]
    argv += ["--tasks", "bench.peers.jobsite_tasks", "--queues", "default"]
    argv += ["--concurrency", str(CONCURRENCY), "--log-level", "WARNING"]
    for item in overrides():
        argv += ["--set", item]
    return [*argv, "--burst"] if burst else argv


class _Sender:
    def __init__(self, url: str) -> None:
        from bench.peers.jobsite_tasks import noop
        from engine import Client, EngineSettings
        from engine.cli import parse_overrides

        self.noop = noop
        self.settings = EngineSettings.from_url(url, **parse_overrides(overrides()))
        self.client = Client(self.settings)

    async def one(self, t_enqueued: float) -> None:
        await self.client.enqueue(self.noop, t_enqueued)

    async def bulk(self, n: int) -> None:
        for size in chunks(n, BATCH):
            await self.client.enqueue_many([self.noop.call(0.0) for _ in range(size)])

    async def settle(self) -> None:
        """Leave Redis as a project running the history mirror has it once the mirror caught up:
        its group read and acknowledged every event, and the cleaner trimmed the stream by that."""
        from engine.keys import QueueKeys
        from engine.periodic.cleaner import Cleaner

        redis = self.client.redis
        keys = QueueKeys(self.settings.prefix, "default")
        group = self.settings.events_group
        await redis.xgroup_create(keys.events, group, id="0", mkstream=True)
        while read := await redis.xreadgroup(group, "bench", {keys.events: ">"}, count=5000):
            ids = [entry_id for _, entries in read for entry_id, _ in entries]
            if not ids:
                break
            await redis.xack(keys.events, group, *ids)
        await Cleaner(self.settings, redis, ["default"]).trim_events(keys)

    async def close(self) -> None:
        await self.client.aclose()


async def open_sender(url: str) -> Sender:
    return _Sender(url)
