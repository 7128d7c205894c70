"""Muting a dead-letter group (/dead-letters/groups/{fingerprint}/mute): mute it in a queue for a
while or until unmuted (POST), unmute it (DELETE), and the mutes each group of GET /dead-letters
carries.

A muted group's dead letters are recorded and counted as ever, but raise no alert. Every check
(the fingerprint, the queue, `retry_job` on that queue) and the audit live in services/mutes.py,
shared with the admin.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from django.http import HttpRequest
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from jobsite.jobs.api.schemas import ERRORS, QUEUE, Out
from jobsite.jobs.models import DeadLetterMute
from jobsite.jobs.permissions import grant
from jobsite.jobs.services import mutes

router = Router(tags=["dead-letters"])
FINGERPRINT = r"^[0-9a-f]{1,32}$"


class MuteIn(Schema):
    """Mute a group in `queue` for `for_s` seconds (null: until unmuted), saying why."""

    model_config = ConfigDict(extra="forbid")

    queue: str = Field(..., pattern=QUEUE)
    for_s: int | None = Field(None, ge=1, le=mutes.MAX_FOR_S)
    reason: str = Field("", max_length=mutes.REASON_CHARS)


class MuteOut(Out):
    """A group muted in one queue: until when (null: until unmuted), by whom, when and why."""

    queue: str
    fingerprint: str
    until: datetime | None
    muted_by: str
    muted_at: datetime
    reason: str


def mute_out(row: DeadLetterMute) -> MuteOut:
    """Return a mute as the API answers it."""
    by = row.muted_by.get_username() if row.muted_by is not None else ""
    return MuteOut(
        queue=row.queue,
        fingerprint=row.fingerprint,
        until=row.until,
        muted_by=by,
        muted_at=row.muted_at,
        reason=row.reason,
    )


class GroupMutes(NamedTuple):
    """The mutes of one group, in the queues it is listed in."""

    mutes: list[MuteOut]
    # Muted in every queue it is listed in.
    muted: bool
    # When the first of its mutes ends (null: muted until unmuted, or not muted).
    muted_until: datetime | None


def of_group(
    held: dict[str, dict[str, DeadLetterMute]], fingerprint: str, queues: list[str]
) -> GroupMutes:
    """Return the mutes holding for group `fingerprint` in `queues` (`held`: mutes.muted())."""
    rows = [held[q][fingerprint] for q in queues if fingerprint in held.get(q, {})]
    muted = bool(queues) and len(rows) == len(queues)
    ends = [r.until for r in rows if r.until is not None]
    return GroupMutes([mute_out(r) for r in rows], muted, min(ends) if muted and ends else None)


FingerprintPath = Path(..., pattern=FINGERPRINT)  # type: ignore[type-arg]


@router.post("/{fingerprint}/mute", response={200: MuteOut, **ERRORS})
def mute_dead_letter_group(
    request: HttpRequest,
    body: MuteIn,
    fingerprint: str = FingerprintPath,
) -> MuteOut:
    """Mute a dead-letter group in a queue: its dead letters are still recorded and counted but
    raise no alert, for `for_s` seconds or until unmuted (a new mute replaces the old)."""
    row = mutes.mute(grant(request), body.queue, fingerprint, body.for_s, body.reason)
    return mute_out(row)


@router.delete("/{fingerprint}/mute", response={204: None, **ERRORS})
def unmute_dead_letter_group(
    request: HttpRequest,
    fingerprint: str = FingerprintPath,
    queue: str = Query(..., pattern=QUEUE),  # type: ignore[type-arg]
) -> Status[None]:
    """Unmute a dead-letter group in a queue: its dead letters alert again (404: not muted)."""
    if mutes.unmute(grant(request), queue, fingerprint) is None:
        raise HttpError(404, f"dead-letter group {fingerprint} is not muted in queue {queue!r}")
    return Status(204, None)
