"""Worker control: quiet (stop claiming, finish what runs), resume, stop (graceful).

An order is a key per worker (keys.control_key) that the worker reads with its registry
renewal, every heartbeat_interval_s: no new round trip, obeyed within a second. Quiet and
stop also fence the worker's claims on the server at once (its queues' meta `stop:<worker>`
field, which claim-12.lua reads), so it claims nothing after the order is written, even a claim
already queued behind its wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from redis.asyncio import Redis

from ..errors import ConfigError
from ..keys import QueueKeys, control_key, stop_field


class Order(StrEnum):
    """What a worker is told."""

    QUIET = "quiet"
    RESUME = "resume"
    STOP = "stop"


def order(name: str) -> Order:
    """Return the Order named `name`, or raise ConfigError listing the valid ones."""
    try:
        return Order(name)
    except ValueError:
        raise ConfigError(f"unknown worker order {name!r}; one of quiet, resume, stop") from None


def select(
    workers: Iterable[Mapping[str, Any]],
    worker: str | None = None,
    host: str | None = None,
    queue: str | None = None,
) -> list[Mapping[str, Any]]:
    """Return the registry entries of one worker, every worker of a host, or of a queue.

    Exactly one selector must be given: an order never reaches every worker by accident.
    """
    if sum(x is not None for x in (worker, host, queue)) != 1:
        raise ConfigError("name exactly one of: a worker id, a host, a queue")
    return [
        w
        for w in workers
        if (worker is None or w.get("id") == worker)
        and (host is None or w.get("host") == host)
        and (queue is None or queue in str(w.get("queues", "")).split(","))
    ]


async def send(
    redis: Redis, prefix: str, what: Order, workers: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Give `what` to each worker (registry entries); return their ids.

    A worker already on its way out (stopping, retiring) is not resumed: its own fence stays.
    """
    if what is Order.RESUME:
        workers = [w for w in workers if w.get("state") not in ("stopping", "retiring")]
    async with redis.pipeline(transaction=False) as pipe:
        for w in workers:
            worker_id = str(w["id"])
            queues = [q for q in str(w.get("queues", "")).split(",") if q]
            for queue in queues:
                meta = QueueKeys(prefix, queue).meta
                if what is Order.RESUME:
                    pipe.hdel(meta, stop_field(worker_id))
                else:
                    pipe.hset(meta, stop_field(worker_id), what.value)
            key = control_key(prefix, worker_id)
            if what is Order.RESUME:
                pipe.delete(key)
            else:
                pipe.set(key, what.value, ex=7 * 86_400)
        await pipe.execute()
    return [str(w["id"]) for w in workers]
