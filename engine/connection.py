"""Redis clients built from EngineSettings (decoded replies, fail-fast connects)."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .settings import EngineSettings

# Errors that mean "Redis is not reachable right now", as opposed to a bad command.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
)


def connect(settings: EngineSettings, *, blocking: bool = False) -> Redis:
    """Return a client for settings.redis_url; `blocking` allows long blocking reads."""
    return Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_connect_timeout=settings.connect_timeout_s,
        socket_timeout=None if blocking else settings.socket_timeout_s,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0 if blocking else 30,
    )
