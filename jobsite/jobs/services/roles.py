"""Worker roles (engine/resources/roles.py): the one door to read and change them, everywhere.

A role names the queues its workers claim from; a change reaches its running workers within
about a second. Each role is shown with the live workers that follow it. The API, the admin and
Python code all come here, so they share the checks:

- a change names a valid role and 1 to MAX_ROLE_QUEUES distinct queues, each one of
  JOBSITE["QUEUES"] (with ANY_QUEUE on, another queue is logged, not refused): ConfigError;
- it needs `change_queuerecord` on every queue it touches: the new ones, the stored role's and
  those the live workers following the name serve now (a deleted role's workers still follow
  its name and move with the next role of that name): 403;
- a token limited to queues sees only the roles whose queues, and whose followers' queues, all
  lie within them; any other role is treated as absent.
- a queue of the role that no live worker serves (none follows the role, none other serves it)
  is accepted, since a role may be made before its workers start, and said:
  `RoleChange.warning()`, "no worker serves: x, y".

`rights=None` is trusted code (a script, a test): no permission checks, the same input checks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from ninja.errors import HttpError

from engine import (
    Client,
    ConfigError,
    Role,
    check_role_name,
    check_role_queues,
    delete_role,
    get_role,
    list_roles,
    set_role,
)
from jobsite.jobs.conf import check_queue
from jobsite.jobs.conf import queues as configured_queues
from jobsite.jobs.permissions import Grant, Perm
from jobsite.jobs.services import arun_engine, run_engine
from jobsite.jobs.services.engineloop import twins

log = logging.getLogger("jobsite.roles")

# A live worker following a role: its id -> the queues it serves now, in claim order.
Followers = dict[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class RoleState:
    """A role and the live workers that follow it, each with the queues it serves now."""

    role: Role
    followers: Followers = field(default_factory=dict)

    @property
    def workers(self) -> list[str]:
        """Return the ids of the workers following the role, sorted."""
        return sorted(self.followers)

    def touches(self) -> set[str]:
        """Return every queue of the role and of its followers."""
        return {*self.role.queues, *_served_by(self.followers)}


@dataclass(frozen=True, slots=True)
class RoleChange:
    """A role as saved, whether it is new, and the followers whose queues it replaced."""

    state: RoleState
    created: bool
    # The live workers that now move to the role's queues (they follow within about a second).
    moved: list[str]
    # The role's queues no live worker serves (none follows the role, none other serves them):
    # accepted, since a role may be made before its workers start, but said.
    unserved: tuple[str, ...] = ()

    def outcome(self) -> str:
        """Describe the change for the audit log."""
        said = f"queues {','.join(self.state.role.queues)}"
        return said + (f"; moved workers {','.join(self.moved)}" if self.moved else "")

    def warning(self) -> str | None:
        """Say which of the role's queues no worker serves, if any."""
        return f"no worker serves: {', '.join(self.unserved)}" if self.unserved else None


def _served_by(followers: Followers) -> set[str]:
    return {queue for queues in followers.values() for queue in queues}


def _following_any(workers: list[dict[str, Any]]) -> Followers:
    """Return every live worker with the queues it serves now."""
    return {
        str(w["id"]): tuple(q for q in str(w.get("queues", "")).split(",") if q) for w in workers
    }


def _following(workers: list[dict[str, Any]], name: str) -> Followers:
    """Return the live workers following role `name`, with the queues each serves now."""
    return _following_any([w for w in workers if w.get("role") == name])


def _visible(state: RoleState, rights: Grant | None) -> bool:
    """Tell whether `rights` may see the role: every queue it touches lies within its scope."""
    scope = None if rights is None else rights.queues
    return scope is None or state.touches() <= set(scope)


def _checked(name: str, queues: Sequence[str]) -> tuple[str, ...]:
    """Return the role's queues if name and queues are valid and served, else ConfigError."""
    check_role_name(name)
    wanted = check_role_queues(queues)
    for queue in wanted:
        try:
            check_queue(queue)
        except ConfigError as exc:
            raise ConfigError(f"role {name!r}: {exc}") from None
    served = set(configured_queues())
    if outside := [q for q in wanted if q not in served]:
        log.warning(
            "role names queues outside JOBSITE['QUEUES'] (ANY_QUEUE is on) role=%s queues=%s",
            name,
            ",".join(outside),
        )
    return wanted


def _require(
    rights: Grant | None, name: str, wanted: Sequence[str], now: Role | None, followers: Followers
) -> None:
    """Refuse (403) a change unless `rights` may change every queue it touches."""
    if rights is None:
        return
    rights.require(Perm.CHANGE_QUEUE)
    for queue in wanted:  # the queues the caller named: say which
        rights.require(Perm.CHANGE_QUEUE, queue)
    touched = {*(now.queues if now is not None else ()), *_served_by(followers)}
    if not all(rights.allows(Perm.CHANGE_QUEUE, q) for q in touched):
        # Not naming the queue: the caller may not see it.
        raise HttpError(
            403,
            f"role {name!r} or a worker following it serves a queue this API token is not "
            "allowed on",
        )


def _moved(followers: Followers, queues: tuple[str, ...]) -> list[str]:
    return sorted(w for w, serving in followers.items() if serving != queues)


async def _roles(client: Client) -> list[RoleState]:
    """Return every role, by name, with the workers following each."""
    workers = await client.workers.list()
    found = await list_roles(client.redis, client.settings.prefix)
    return [RoleState(r, _following(workers, r.name)) for r in found]


async def _current(client: Client, name: str) -> tuple[Role | None, Followers]:
    """Return role `name` (None: none stored) and the live workers following that name."""
    found = await get_role(client.redis, client.settings.prefix, name)
    return found, _following(await client.workers.list(), name)


_all_roles, _aall_roles = twins(_roles)
_read, _aread = twins(_current)


def roles(rights: Grant | None = None) -> list[RoleState]:
    """Return the roles `rights` may see, by name, with the workers following each."""
    return [s for s in _all_roles() if _visible(s, rights)]


async def aroles(rights: Grant | None = None) -> list[RoleState]:
    """Async twin of `roles`."""
    return [s for s in await _aall_roles() if _visible(s, rights)]


def _shown(found: tuple[Role | None, Followers], rights: Grant | None) -> RoleState | None:
    now, followers = found
    state = None if now is None else RoleState(now, followers)
    return state if state is not None and _visible(state, rights) else None


def role(name: str, rights: Grant | None = None) -> RoleState | None:
    """Return role `name` with its followers; None when there is none or `rights` may not see it."""
    return _shown(_read(check_role_name(name)), rights)


async def arole(name: str, rights: Grant | None = None) -> RoleState | None:
    """Async twin of `role`."""
    return _shown(await _aread(check_role_name(name)), rights)


def _change(
    found: tuple[Role | None, Followers], saved: Role, workers: list[dict[str, Any]]
) -> RoleChange:
    """Return the change that saved `saved` over `found`, given every live worker."""
    now, followers = found
    served = set(saved.queues) if followers else _served_by(_following_any(workers))
    unserved = tuple(q for q in saved.queues if q not in served)
    if unserved:
        log.info(
            "role saved with queues no worker serves role=%s queues=%s",
            saved.name,
            ",".join(unserved),
        )
    moved = _moved(followers, saved.queues)
    return RoleChange(RoleState(saved, followers), now is None, moved, unserved)


def save_role(name: str, queues: Sequence[str], rights: Grant | None = None) -> RoleChange:
    """Create or replace role `name` after every check; return what changed.

    ConfigError for bad input or a queue outside JOBSITE["QUEUES"]; HttpError 403 for a queue
    `rights` may not change. Either way nothing changes.
    """
    wanted = _checked(name, queues)
    found = _read(name)
    _require(rights, name, wanted, *found)
    saved = run_engine(lambda c: set_role(c.redis, c.settings.prefix, name, list(wanted)))
    return _change(found, saved, [] if found[1] else run_engine(lambda c: c.workers.list()))


async def asave_role(name: str, queues: Sequence[str], rights: Grant | None = None) -> RoleChange:
    """Async twin of `save_role`."""
    wanted = _checked(name, queues)
    found = await _aread(name)
    await sync_to_async(_require)(rights, name, wanted, *found)
    saved = await arun_engine(lambda c: set_role(c.redis, c.settings.prefix, name, list(wanted)))
    workers = [] if found[1] else await arun_engine(lambda c: c.workers.list())
    return _change(found, saved, workers)


def remove_role(name: str, rights: Grant | None = None) -> RoleState | None:
    """Delete role `name` after the permission checks; return it (None: there was none).

    Its workers keep their last queues. HttpError 403 for a queue `rights` may not change.
    """
    found = _read(check_role_name(name))
    if found[0] is None:
        return None
    _require(rights, name, (), *found)
    removed = run_engine(lambda c: delete_role(c.redis, c.settings.prefix, name))
    return RoleState(found[0], found[1]) if removed else None


async def aremove_role(name: str, rights: Grant | None = None) -> RoleState | None:
    """Async twin of `remove_role`."""
    found = await _aread(check_role_name(name))
    if found[0] is None:
        return None
    await sync_to_async(_require)(rights, name, (), *found)
    removed = await arun_engine(lambda c: delete_role(c.redis, c.settings.prefix, name))
    return RoleState(found[0], found[1]) if removed else None
