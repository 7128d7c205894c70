"""Shared fixtures: a private redis-server per session (never 127.0.0.1:6379)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from engine import Client, EngineSettings
from engine.devserver import RedisServer

# The kit users get: its fixtures (jobsite_eager, jobsite_redis), loaded as a user's would be.
pytest_plugins = ["jobsite.testing"]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def settings(redis_server: RedisServer) -> Iterator[EngineSettings]:
    """Settings on a flushed private Redis, with short timings for tests."""
    with redis.Redis(port=redis_server.port) as r:
        r.flushall()
    yield EngineSettings.from_url(redis_server.url, scheduler_interval_s=0.05, idle_wait_s=0.2)


@pytest.fixture
async def client(settings: EngineSettings) -> AsyncIterator[Client]:
    async with Client(settings) as c:
        yield c
