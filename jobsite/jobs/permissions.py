"""Who may do what: one table from operations to Django permissions, for every surface.

The admin, the API, the dashboard and the websocket all ask `Grant.allows`, so a user has the
same rights everywhere: an active staff user with the Django permission, narrowed further by
the scope of the API token the request came with, if any.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.http import HttpRequest
from ninja.errors import HttpError

if TYPE_CHECKING:
    from jobsite.jobs.models import ApiToken

APP_LABEL = "jobsite"


class Perm(StrEnum):
    """A permission codename of the app, one per kind of operation."""

    VIEW = "view_jobrecord"  # read jobs, workers, queues, stats; open the live socket
    SUBMIT = "add_jobrecord"  # submit a job through the API
    CANCEL = "cancel_job"
    RETRY = "retry_job"  # retry, bulk retry, DLQ resubmit, replay, mute a dead-letter group
    PURGE = "purge_job"
    CHANGE_QUEUE = "change_queuerecord"  # pause, resume, limits, schedules
    CONTROL_WORKER = "change_workerrecord"  # quiet, resume, stop workers

    @property
    def full(self) -> str:
        """Return the name `User.has_perm` takes (`app_label.codename`)."""
        return f"{APP_LABEL}.{self.value}"

    @property
    def label(self) -> str:
        """Return what the permission allows, in an operator's words (the token form's choices)."""
        return LABELS[self]


# What each permission allows, as docs/security.md's table words it.
LABELS: dict[Perm, str] = {
    Perm.VIEW: "Read jobs, queues, workers, schedules and stats",
    Perm.SUBMIT: "Submit jobs",
    Perm.CANCEL: "Cancel jobs; drain a queue",
    Perm.RETRY: (
        "Retry, resubmit and replay jobs; run a scheduled job now; mute dead-letter groups"
    ),
    Perm.PURGE: "Purge finished jobs",
    Perm.CHANGE_QUEUE: "Pause, resume and limit queues; change schedules and worker roles",
    Perm.CONTROL_WORKER: "Quiet, resume and stop workers",
}


# The groups the data migration creates; the admin pages of queues and workers need their
# own view permissions, so viewers get those too.
VIEWERS = "Jobsite viewers"
OPERATORS = "Jobsite operators"
_READ = [Perm.VIEW, "view_queuerecord", "view_workerrecord"]
GROUPS: dict[str, list[str]] = {
    VIEWERS: _READ,
    OPERATORS: [
        *_READ,
        Perm.SUBMIT,
        Perm.CANCEL,
        Perm.RETRY,
        Perm.PURGE,
        Perm.CHANGE_QUEUE,
        Perm.CONTROL_WORKER,
    ],
}


def user_allows(user: Any, perm: Perm) -> bool:
    """Tell whether an active staff user holds `perm` (superusers hold every permission)."""
    return bool(
        user is not None
        and user.is_authenticated
        and user.is_active
        and user.is_staff
        and user.has_perm(perm.full)
    )


@dataclass(frozen=True)
class Grant:
    """The rights of one request: its user, narrowed by its API token's scope."""

    user: Any
    token: ApiToken | None = None

    @property
    def queues(self) -> list[str] | None:
        """Return the queues the request is limited to, or None for every queue."""
        return list(self.token.queues) if self.token is not None and self.token.queues else None

    @property
    def via(self) -> str:
        """Describe where the request came from, for the audit log."""
        return f"API token {self.token.name!r}" if self.token is not None else "session"

    def narrow(self, rows: QuerySet[Any]) -> QuerySet[Any]:
        """Narrow rows with a `queue` column to the queues this request may see."""
        scope = self.queues
        return rows if scope is None else rows.filter(queue__in=scope)

    def narrow_workers(self, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep the workers serving a queue this request may see, each showing only those
        queues, the jobs it runs from them and its outcomes in them."""
        scope = self.queues
        if scope is None:
            return workers
        out = []
        for worker in workers:
            queues = [q for q in str(worker.get("queues", "")).split(",") if q in scope]
            if queues:
                jobs = [j for j in worker.get("current_jobs", []) if j.get("queue") in scope]
                outcomes = {q: n for q, n in worker.get("outcomes", {}).items() if q in scope}
                out.append(
                    {
                        **worker,
                        "queues": ",".join(queues),
                        "current_jobs": jobs,
                        "outcomes": outcomes,
                    }
                )
        return out

    def allows(self, perm: Perm, queue: str | None = None) -> bool:
        """Tell whether this request may do `perm` (on `queue`, when given)."""
        if not user_allows(self.user, perm):
            return False
        if self.token is not None and self.token.permissions and perm not in self.token.permissions:
            return False
        scope = self.queues
        return scope is None or queue is None or queue in scope

    def require(self, perm: Perm, queue: str | None = None) -> None:
        """Raise a 403 naming what is missing unless `allows(perm, queue)`."""
        if not user_allows(self.user, perm):
            raise HttpError(403, f"this needs the permission {perm.full}")
        if not self.allows(perm):
            raise HttpError(403, f"this API token is not allowed {perm.full}")
        if not self.allows(perm, queue):
            raise HttpError(403, f"this API token is not allowed on queue {queue!r}")

    async def arequire(self, perm: Perm, queue: str | None = None) -> None:
        """Async twin of `require` (the user's permissions may be read from the database)."""
        await sync_to_async(self.require)(perm, queue)


def grant(request: HttpRequest) -> Grant:
    """Return the rights of an authenticated API request (set by the API's auth)."""
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, Grant) else Grant(request.user)


def need(request: HttpRequest, perm: Perm, queue: str | None = None) -> Grant:
    """Require `perm` (on `queue`) of an API request; return its grant."""
    rights = grant(request)
    rights.require(perm, queue)
    return rights


async def aneed(request: HttpRequest, perm: Perm, queue: str | None = None) -> Grant:
    """Async twin of `need` (the user's permissions may be read from the database)."""
    return await sync_to_async(need)(request, perm, queue)
