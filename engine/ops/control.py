"""Worker control: the orders (quiet: stop claiming, finish what runs; resume; stop, graceful)
and the choice of the workers an order goes to. The workers resource sends it
(engine/resources/workers.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from ..errors import ConfigError


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
