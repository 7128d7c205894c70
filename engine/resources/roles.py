"""Worker roles: a role names the queues its workers claim from, and may change while they run.

A role is one field of a HASH (keys.roles_key): its name -> {"queues": [...], "changed_at_ms"}.
Each change also increments one counter (keys.roles_version_key) in the same transaction (both
keys share the `{@roles}` hash tag, one slot). A worker started with a role reads that counter
with its registry renewal and re-reads its role only when the counter moved (RoleFollower), then
swaps its queues (Worker.follow_queues): a change reaches every worker within about a second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from .. import serializer
from ..errors import ConfigError, SerializationError
from ..keys import _QUEUE_NAME, roles_key, roles_version_key, validate_queue_name

log = logging.getLogger("engine.roles")

# The most queues one role names.
MAX_ROLE_QUEUES = 100


@dataclass(frozen=True, slots=True)
class Role:
    """A named list of queues, in claim order, and when it last changed (ms since the epoch)."""

    name: str
    queues: tuple[str, ...]
    changed_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        """Return the role as JSON-ready data."""
        return {"name": self.name, "queues": list(self.queues), "changed_at_ms": self.changed_at_ms}

    @classmethod
    def from_json(cls, name: str, raw: str | bytes) -> Role:
        """Read a role's stored JSON; SerializationError when it is not a role's."""
        data = serializer.loads(raw)
        queues = data.get("queues") if isinstance(data, dict) else None
        if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
            raise SerializationError(f"role {name!r} is stored without a list of queues")
        return cls(name, tuple(queues), int(data.get("changed_at_ms") or 0))


def check_role_name(name: str) -> str:
    """Return `name` if it is a valid role name (the rule of queue names), else ConfigError."""
    if not isinstance(name, str) or not _QUEUE_NAME.match(name):
        raise ConfigError(f"role names are 1-100 characters of [A-Za-z0-9._-], got {name!r}")
    return name


def check_role_queues(queues: Sequence[str]) -> tuple[str, ...]:
    """Return `queues` as a tuple if they are 1-MAX_ROLE_QUEUES distinct valid queue names."""
    if isinstance(queues, str | bytes) or not isinstance(queues, Sequence):
        raise ConfigError(f"a role's queues are a list of queue names, got {queues!r}")
    if not 1 <= len(queues) <= MAX_ROLE_QUEUES:
        raise ConfigError(f"a role names 1 to {MAX_ROLE_QUEUES} queues, got {len(queues)}")
    for queue in queues:
        validate_queue_name(queue)
    if len(set(queues)) != len(queues):
        raise ConfigError(f"a role names each queue once, got {list(queues)!r}")
    return tuple(queues)


async def set_role(redis: Redis, prefix: str, name: str, queues: Sequence[str]) -> Role:
    """Create or replace role `name`; its workers claim from `queues` (in order) from now on.

    Bad input raises ConfigError and changes nothing.
    """
    role = Role(check_role_name(name), check_role_queues(queues), int(time.time() * 1000))
    raw = serializer.dumps({"queues": list(role.queues), "changed_at_ms": role.changed_at_ms})
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(roles_key(prefix), name, raw)
        pipe.incr(roles_version_key(prefix))
        await pipe.execute()
    return role


async def get_role(redis: Redis, prefix: str, name: str) -> Role | None:
    """Return role `name`, or None when there is none."""
    raw = await redis.hget(roles_key(prefix), check_role_name(name))
    return None if raw is None else Role.from_json(name, raw)


async def list_roles(redis: Redis, prefix: str) -> list[Role]:
    """Return every role, by name."""
    rows: dict[str, str] = await redis.hgetall(roles_key(prefix))  # type: ignore[assignment]
    return [Role.from_json(name, raw) for name, raw in sorted(rows.items())]


async def delete_role(redis: Redis, prefix: str, name: str) -> bool:
    """Delete role `name`; return whether it existed. Its workers keep their last queues."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hdel(roles_key(prefix), check_role_name(name))
        pipe.incr(roles_version_key(prefix))
        removed, _ = await pipe.execute()
    return bool(removed)


class RoleFollower:
    """Follow one role for a worker: its queues at start, then each change of them."""

    def __init__(self, prefix: str, name: str) -> None:
        self.prefix = prefix
        self.name = check_role_name(name)
        self.queues: tuple[str, ...] = ()
        # The roles counter when the role was last read (None: never read).
        self._version: str | bytes | None = None
        self._gone = False

    async def load(self, redis: Redis) -> list[str]:
        """Return the role's queues now; ConfigError when there is no such role."""
        self._version = await redis.get(roles_version_key(self.prefix))
        role = await get_role(redis, self.prefix, self.name)
        if role is None:
            raise ConfigError(f"no role {self.name!r}: create it first (engine.set_role)")
        self.queues = role.queues
        return list(role.queues)

    def unread(self) -> None:
        """Forget what was read: the next `changed` reads the role and returns its queues."""
        self._version = None
        self.queues = ()

    async def changed(self, redis: Redis) -> list[str] | None:
        """Return the role's queues when they changed since the last call, else None.

        One GET while nothing changed. A deleted role leaves the worker on its last queues,
        logged once.
        """
        version = await redis.get(roles_version_key(self.prefix))
        if version == self._version:
            return None
        self._version = version
        role = await get_role(redis, self.prefix, self.name)
        if role is None:
            if not self._gone:
                self._gone = True
                log.warning(
                    "role deleted; keeping its last queues role=%s queues=%s",
                    self.name,
                    ",".join(self.queues),
                )
            return None
        self._gone = False
        if role.queues == self.queues:
            return None
        self.queues = role.queues
        return list(role.queues)
