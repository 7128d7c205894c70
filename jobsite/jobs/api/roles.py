"""Worker roles in the JSON API (/roles): list, read, create or replace (PUT), delete.

A role names the queues its workers (`runworker --role`) claim from; a change reaches them
within about a second, without a restart. Reading needs the view permission (as /workers does),
and a token limited to queues sees only the roles within them. A change needs
`change_queuerecord` (as pausing a queue does) on every queue it touches, the live followers'
included; each queue must be one of JOBSITE["QUEUES"]. A queue no live worker serves is accepted
(its workers may start later) and said: the answer's `unserved` and `warning`. The checks live
in services/roles.py, shared with the admin. Every change is audited.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from engine import MAX_ROLE_QUEUES, ConfigError, check_role_name
from jobsite.jobs import audit
from jobsite.jobs.api.schemas import ERRORS, QUEUE, Out
from jobsite.jobs.models import WorkerRecord
from jobsite.jobs.permissions import Perm, aneed
from jobsite.jobs.services.roles import RoleState, aremove_role, arole, aroles, asave_role

router = Router(tags=["roles"])


class RoleIn(Schema):
    """The queues of a role, in the order its workers claim from them."""

    model_config = ConfigDict(extra="forbid")

    queues: list[Annotated[str, Field(pattern=QUEUE)]] = Field(
        ..., min_length=1, max_length=MAX_ROLE_QUEUES
    )


class RoleOut(Out):
    name: str
    queues: list[str]
    changed_at: datetime
    # The live workers that follow the role.
    workers: list[str]


class RoleChangeOut(RoleOut):
    # The followers whose queues this change replaced (they move within about a second).
    moved: list[str]
    # The role's queues no live worker serves (accepted: its workers may start later).
    unserved: list[str]
    # "no worker serves: x, y" when `unserved` names any, else null.
    warning: str | None


def role_out(state: RoleState) -> RoleOut:
    """Return a role as the API shows it."""
    role = state.role
    return RoleOut(
        name=role.name,
        queues=list(role.queues),
        changed_at=datetime.fromtimestamp(role.changed_at_ms / 1000, UTC),
        workers=state.workers,
    )


def _audited(name: str) -> str:
    return f"role/{name}"


def _named(name: str) -> str:
    """Answer 404 for a role name that cannot exist (so nothing odd reaches Redis)."""
    try:
        return check_role_name(name)
    except ConfigError:
        raise HttpError(404, f"no role named {name!r}") from None


@router.get("", response={200: list[RoleOut], **ERRORS})
async def list_roles(request: HttpRequest) -> list[RoleOut]:
    """Every role the caller may see, by name, with its queues and the workers following it."""
    rights = await aneed(request, Perm.VIEW)
    return [role_out(s) for s in await aroles(rights)]


@router.get("/{name}", response={200: RoleOut, **ERRORS})
async def get_role(request: HttpRequest, name: str) -> RoleOut:
    """One role (404 also for a role outside the token's queues)."""
    rights = await aneed(request, Perm.VIEW)
    found = await arole(_named(name), rights)
    if found is None:
        raise HttpError(404, f"no role named {name!r}")
    return role_out(found)


@router.put("/{name}", response={200: RoleChangeOut, 201: RoleChangeOut, **ERRORS})
async def put_role(request: HttpRequest, name: str, body: RoleIn) -> Status[RoleChangeOut]:
    """Create (201) or replace (200) a role; its running workers follow within a second."""
    rights = await aneed(request, Perm.CHANGE_QUEUE)
    change = await asave_role(name, body.queues, rights)  # ConfigError: 422
    action = "create" if change.created else "edit"
    await audit.arecord(
        rights.user, action, [_audited(name)], rights.via, WorkerRecord, change.outcome()
    )
    out = RoleChangeOut(
        **role_out(change.state).model_dump(),
        moved=change.moved,
        unserved=list(change.unserved),
        warning=change.warning(),
    )
    return Status(201 if change.created else 200, out)


@router.delete("/{name}", response={204: None, **ERRORS})
async def delete_role(request: HttpRequest, name: str) -> Status[None]:
    """Delete a role; the workers following it keep their last queues."""
    rights = await aneed(request, Perm.CHANGE_QUEUE)
    if await aremove_role(_named(name), rights) is None:
        raise HttpError(404, f"no role named {name!r}")
    await audit.arecord(rights.user, "delete", [_audited(name)], rights.via, WorkerRecord)
    return Status(204, None)
