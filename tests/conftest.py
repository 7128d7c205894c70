"""Shared fixtures: a private redis-server per session (never 127.0.0.1:6379)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
import redis

from engine import Client, EngineSettings
from engine.dev.devcluster import ClusterServer
from engine.dev.devserver import RedisServer

# The kit users get: its fixtures (jobsite_eager, jobsite_redis), loaded as a user's would be.
pytest_plugins = ["jobsite.testing"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With JOBSITE_TEST_REDIS=cluster, run only the tests that use the test Redis (`settings`).

    The others (pure functions, Sentinel, the cluster's own tests) do not change with it and
    ran in the main pass already; so do the `long_window` tests, whose faults are in worker
    processes or schedulers (the scripts they run have functional tests on the cluster).
    """
    if os.environ.get("JOBSITE_TEST_REDIS") != "cluster":
        return
    chosen = [
        i
        for i in items
        if "settings" in getattr(i, "fixturenames", ()) and not i.get_closest_marker("long_window")
    ]
    config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
    items[:] = chosen


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def settings(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[EngineSettings]:
    """Settings on a flushed private Redis, with short timings for tests.

    With JOBSITE_TEST_REDIS=cluster, on the private 3-master cluster instead (tests that reach
    the standalone server by its port still do).
    """
    if os.environ.get("JOBSITE_TEST_REDIS") == "cluster":
        cluster: ClusterServer = request.getfixturevalue("redis_cluster")
        cluster.flushall()
        url = cluster.url
    else:
        with redis.Redis(port=redis_server.port) as r:
            r.flushall()
        url = redis_server.url
    yield EngineSettings.from_url(
        url, scheduler_interval_s=0.05, idle_wait_s=0.2, min_repeat_interval_s=0.01
    )


@pytest.fixture
async def client(settings: EngineSettings) -> AsyncIterator[Client]:
    async with Client(settings) as c:
        yield c


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ClusterServer]:
    """A private 3-master Redis Cluster on loopback (started once per session, ~3 s)."""
    with ClusterServer() as cluster:
        yield cluster


@pytest.fixture
def cluster_settings(redis_cluster: ClusterServer) -> Iterator[EngineSettings]:
    """Settings on the flushed private cluster, with short timings for tests."""
    redis_cluster.flushall()
    yield EngineSettings.from_url(
        redis_cluster.url, scheduler_interval_s=0.05, idle_wait_s=0.2, min_repeat_interval_s=0.01
    )
