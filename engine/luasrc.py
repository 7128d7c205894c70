"""Load engine/lua/*.lua (includes inlined); run each script by verb, its key count checked."""

from __future__ import annotations

import re
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


class ScriptSet:
    """Every transition script on one Redis client, by verb, registered on first use.

    A request of the Django app makes a client and calls a script or two: hashing all of
    them for every client was most of the cost of making one.
    """

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._by_verb: dict[str, Script] = {}

    def __getitem__(self, verb: str) -> Script:
        script = self._by_verb.get(verb)
        if script is None:
            num_keys, source = _SOURCES[verb]
            script = Script(verb, num_keys, self._redis.register_script(source))
            self._by_verb[verb] = script
        return script
