"""Worker roles through the engine (engine/ops/roles.py): services.py's twins for roles.

A role names the queues its workers claim from; a change reaches its running workers within
about a second. Each role is shown with the live workers that follow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine import Client, Role, delete_role, get_role, list_roles, set_role
from jobsite.jobs.services.engineloop import twins


@dataclass(frozen=True, slots=True)
class RoleState:
    """A role and the ids of the live workers that follow it."""

    role: Role
    workers: list[str]


def _followers(workers: list[dict[str, Any]], name: str) -> list[str]:
    return sorted(str(w["id"]) for w in workers if w.get("role") == name)


async def _roles(client: Client) -> list[RoleState]:
    """Return every role, by name, with the workers following each."""
    workers = await client.workers()
    found = await list_roles(client.redis, client.settings.prefix)
    return [RoleState(r, _followers(workers, r.name)) for r in found]


async def _role(client: Client, name: str) -> RoleState | None:
    """Return role `name` with the workers following it (None: no such role)."""
    found = await get_role(client.redis, client.settings.prefix, name)
    if found is None:
        return None
    return RoleState(found, _followers(await client.workers(), name))


async def _save_role(client: Client, name: str, queues: Sequence[str]) -> Role:
    """Create or replace a role (ConfigError for bad input, nothing changed)."""
    return await set_role(client.redis, client.settings.prefix, name, list(queues))


async def _remove_role(client: Client, name: str) -> bool:
    """Delete a role; return whether it existed (its workers keep their last queues)."""
    return await delete_role(client.redis, client.settings.prefix, name)


roles, aroles = twins(_roles)
role, arole = twins(_role)
save_role, asave_role = twins(_save_role)
remove_role, aremove_role = twins(_remove_role)
