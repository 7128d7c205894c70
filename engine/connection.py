"""Redis clients built from EngineSettings: redis://, rediss:// (TLS), unix:// and Sentinel."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from .errors import ConfigError
from .faults import typed
from .settings import EngineSettings

SENTINEL_SCHEME = "redis+sentinel"


class TypedPipeline(Pipeline):
    """A pipeline whose Redis failures are the engine's typed errors."""

    # The Redis URL with its secrets hidden, for error messages.
    shown_url = ""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Run the queued commands; a dead socket or a refusal raises RedisUnavailable."""
        try:
            return await super().execute(raise_on_error)
        except Exception as exc:
            raise typed(exc, self.shown_url)  # noqa: B904 (typed() keeps the cause)


class TypedRedis(Redis):
    """A client whose Redis failures are the engine's typed errors, never transport errors.

    RedisUnavailable when the connection is gone (redis-py has dropped it by then),
    RedisRefused (a RedisUnavailable) when Redis refuses for now (OOM, LOADING, READONLY...).
    """

    shown_url = ""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        """Run one command, translating Redis failures (see class doc)."""
        try:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except Exception as exc:
            raise typed(exc, self.shown_url)  # noqa: B904 (typed() keeps the cause)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        """Return a pipeline that translates failures like this client."""
        pipe = TypedPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.shown_url = self.shown_url
        return pipe


def connect(
    settings: EngineSettings, *, blocking: bool = False, timeout_s: float | None = None
) -> Redis:
    """Return a client; `blocking` allows long blocking reads, `timeout_s` bounds every command.

    Replies are decoded as UTF-8 with surrogateescape, so bytes that are not UTF-8 survive a
    round trip and fail JSON decoding (a clear error) instead of breaking the connection.
    """
    options: dict[str, Any] = {
        "decode_responses": True,
        "encoding_errors": "surrogateescape",
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": None if blocking else (timeout_s or settings.socket_timeout_s),
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0 if blocking else 30,
    }
    if urlsplit(settings.redis_url).scheme == SENTINEL_SCHEME:
        client = _sentinel_master(settings.redis_url, options)
    else:
        client = TypedRedis.from_url(settings.redis_url, **options)  # type: ignore[assignment]
    client.shown_url = settings.redacted_url
    return client


def _sentinel_master(url: str, options: dict[str, Any]) -> TypedRedis:
    """Connect to the master named in `redis+sentinel://[:pw@]h1:p1,h2:p2/service[/db]`."""
    parts = urlsplit(url)
    hosts = []
    for item in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = item.rpartition(":")
        hosts.append((host or "127.0.0.1", int(port or 26379)))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ConfigError(
            "a Sentinel URL needs the service name: redis+sentinel://host:port/mymaster"
        )
    service = path[0]
    db = int(path[1]) if len(path) > 1 else 0
    password = unquote(parts.password) if parts.password else None
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    sentinel_password = query.get("sentinel_password")
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        hosts,
        socket_timeout=options["socket_timeout"],
        sentinel_kwargs={"password": sentinel_password} if sentinel_password else None,
    )
    master: TypedRedis = sentinel.master_for(
        service, redis_class=TypedRedis, db=db, password=password, **options
    )
    return master


def ms_from_time(reply: tuple[int, int] | list[Any]) -> int:
    """Return Redis server time in ms from a TIME reply (seconds, microseconds)."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


async def server_ms(redis: Redis) -> int:
    """Return Redis server time in ms (the clock every script uses)."""
    return ms_from_time(await redis.time())
