"""Load engine/lua/*.lua, check each call's key count, and return the scripts by name."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from .keys import SCRIPT_KEYS, QueueKeys

_NAME = re.compile(r"^(?P<verb>[a-z_]+)-(?P<keys>\d+)\.lua$")
_INCLUDE = re.compile(r"^--@include (?P<name>[a-z_]+)$", re.MULTILINE)


def _read(name: str) -> str:
    return (resources.files("engine") / "lua" / name).read_text(encoding="utf-8")


def load_sources() -> dict[str, tuple[int, str]]:
    """Return verb -> (key count, Lua source with includes inlined) for every script file."""
    out: dict[str, tuple[int, str]] = {}
    for entry in (resources.files("engine") / "lua").iterdir():
        match = _NAME.match(entry.name)
        if not match:
            continue
        source = _INCLUDE.sub(lambda m: _read(f"include/{m['name']}.lua"), _read(entry.name))
        verb, num_keys = match["verb"], int(match["keys"])
        if len(SCRIPT_KEYS.get(verb, ())) != num_keys:
            raise RuntimeError(
                f"{entry.name}: keys.SCRIPT_KEYS[{verb!r}] must list {num_keys} keys"
            )
        out[verb] = (num_keys, source)
    if set(out) != set(SCRIPT_KEYS):
        raise RuntimeError(f"scripts and SCRIPT_KEYS differ: {sorted(set(out) ^ set(SCRIPT_KEYS))}")
    return out


_SOURCES = load_sources()


@dataclass(frozen=True, slots=True)
class Script:
    """One transition script bound to a client; re-loads itself after NOSCRIPT."""

    verb: str
    num_keys: int
    script: AsyncScript

    async def __call__(self, keys: QueueKeys | list[str], args: list[Any]) -> Any:
        """Run the script with a queue's keys (or an explicit key list) and its ARGV."""
        names = keys.for_script(self.verb) if isinstance(keys, QueueKeys) else keys
        if len(names) != self.num_keys:
            raise ValueError(f"{self.verb} takes {self.num_keys} keys, got {len(names)}")
        return await self.script(keys=names, args=args)


@dataclass(frozen=True, slots=True)
class Declared:
    """What declare-4.lua did to one queue's declared repeatables."""

    created: int
    updated: int
    removed: int
    kept_overrides: int
    # Declared names held by run-time repeatables, left alone.
    conflicts: tuple[str, ...]


class Scripts:
    """Every transition script, registered on one Redis client."""

    def __init__(self, redis: Redis) -> None:
        self._by_verb = {
            verb: Script(verb, n, redis.register_script(src)) for verb, (n, src) in _SOURCES.items()
        }

    def __getattr__(self, verb: str) -> Script:
        try:
            return self._by_verb[verb]
        except KeyError:
            raise AttributeError(f"no script named {verb!r}") from None

    async def declare(
        self, keys: QueueKeys, declared: Sequence[tuple[str, bytes, int | None]]
    ) -> Declared:
        """Run declare-4.lua: make the queue's declared repeatables these.

        Args:
            keys: the queue's keys.
            declared: (name, definition JSON, first tick ms or None) of each declared repeatable.
        """
        args: list[str | bytes | int] = [len(declared)]
        for name, definition, first_ms in declared:
            args += (name, definition, "" if first_ms is None else first_ms)
        _, created, updated, removed, kept, conflicts = await self._by_verb["declare"](keys, args)
        return Declared(int(created), int(updated), int(removed), int(kept), tuple(conflicts))
