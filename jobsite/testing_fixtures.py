"""The pytest fixtures of the test kit (jobsite.testing offers them where pytest is installed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from engine import RedisServer
from jobsite.jobs import conf


@pytest.fixture
def jobsite_eager() -> Iterator[None]:
    """Run every job inline when it is enqueued (no Redis, no worker), its arguments checked
    against its task's type hints."""
    from django.conf import settings

    jobsite = {**settings.JOBSITE, "EAGER": True, "CHECK_ARGUMENT_TYPES": True}
    with override_settings(JOBSITE=jobsite):
        yield


@pytest.fixture(scope="session")
def _jobsite_redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def jobsite_redis(_jobsite_redis_server: RedisServer) -> Iterator[RedisServer]:
    """Point settings.JOBSITE at a private, flushed redis-server for this test, with every
    submission's arguments checked against its task's type hints."""
    import redis

    with redis.Redis(port=_jobsite_redis_server.port) as r:
        r.flushall()
    from django.conf import settings

    engine = {
        **settings.JOBSITE,
        "REDIS_URL": _jobsite_redis_server.url,
        "CHECK_ARGUMENT_TYPES": True,
    }
    with override_settings(JOBSITE=engine):
        conf.engine_settings.cache_clear()
        yield _jobsite_redis_server
    conf.engine_settings.cache_clear()
