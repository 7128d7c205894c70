"""Worker roles in the JSON API (/roles): list, read, create or replace (PUT), delete.

A role names the queues its workers (`runworker --role`) claim from; a change reaches them
within about a second, without a restart. Reading needs the view permission (as /workers does);
a change needs `change_queuerecord` (as pausing a queue does) on every queue the role names
before and after it. Every change is audited.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from engine import MAX_ROLE_QUEUES, ConfigError, check_role_name
from jobsite.jobs import audit
from jobsite.jobs.api.schemas import ERRORS, QUEUE, Out
from jobsite.jobs.models import WorkerRecord
from jobsite.jobs.permissions import Grant, Perm, aneed
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


def _require_queues(rights: Grant, queues: list[str]) -> None:
    for queue in queues:
        rights.require(Perm.CHANGE_QUEUE, queue)


@router.get("", response={200: list[RoleOut], **ERRORS})
async def list_roles(request: HttpRequest) -> list[RoleOut]:
    """Every role, by name, with its queues and the workers following it."""
    await aneed(request, Perm.VIEW)
    return [role_out(s) for s in await aroles()]


@router.get("/{name}", response={200: RoleOut, **ERRORS})
async def get_role(request: HttpRequest, name: str) -> RoleOut:
    """One role."""
    await aneed(request, Perm.VIEW)
    found = await arole(_named(name))
    if found is None:
        raise HttpError(404, f"no role named {name!r}")
    return role_out(found)


@router.put("/{name}", response={200: RoleOut, 201: RoleOut, **ERRORS})
async def put_role(request: HttpRequest, name: str, body: RoleIn) -> Status[RoleOut]:
    """Create (201) or replace (200) a role; its running workers follow within a second."""
    rights = await aneed(request, Perm.CHANGE_QUEUE)
    check_role_name(name)  # ConfigError: 422
    current = await arole(name)
    before = list(current.role.queues) if current is not None else []
    await sync_to_async(_require_queues)(rights, [*before, *body.queues])
    saved = await asave_role(name, body.queues)
    action = "create" if current is None else "edit"
    outcome = f"queues {','.join(body.queues)}"
    await audit.arecord(rights.user, action, [_audited(name)], rights.via, WorkerRecord, outcome)
    followers = current.workers if current is not None else []
    return Status(201 if current is None else 200, role_out(RoleState(saved, followers)))


@router.delete("/{name}", response={204: None, **ERRORS})
async def delete_role(request: HttpRequest, name: str) -> Status[None]:
    """Delete a role; the workers following it keep their last queues."""
    rights = await aneed(request, Perm.CHANGE_QUEUE)
    current = await arole(_named(name))
    if current is None:
        raise HttpError(404, f"no role named {name!r}")
    await sync_to_async(_require_queues)(rights, list(current.role.queues))
    await aremove_role(name)
    await audit.arecord(rights.user, "delete", [_audited(name)], rights.via, WorkerRecord)
    return Status(204, None)
