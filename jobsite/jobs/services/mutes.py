"""Muted dead-letter groups: the one door to mute and unmute a group of a queue, everywhere.

A mute names a queue and an error fingerprint (a dead-letter group, history/deadletters.py).
While it holds (until `until`, or until unmuted) the group's new dead letters are recorded and
counted as ever, but raise no alert: health leaves them out of a queue's dead-letter growth and
says how many are muted (history/health.py), and the Dead letters page folds the group at the
bottom. The API (and the dashboard through it) and the admin all come here, so they share the
checks:

- the fingerprint is 1 to 32 hex digits (the group of jobs that recorded no error cannot be
  muted), the queue a valid queue name, `for_s` None (until unmuted) or 1 to MAX_FOR_S, the
  reason at most REASON_CHARS: ConfigError (a ValueError);
- it needs `retry_job`, what resubmitting dead letters needs, on the mute's queue: HttpError
  403 saying what is missing (a token narrowed to other queues among them);
- each change is audited as a change of the mute (`queue/fingerprint`), with its end and reason.

Muting a group muted already replaces its mute (its end, reason and author).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from engine import ConfigError, validate_queue_name
from jobsite.jobs import audit
from jobsite.jobs.models import DeadLetterMute
from jobsite.jobs.permissions import Grant, Perm

log = logging.getLogger("jobsite.mutes")

FINGERPRINT = re.compile(r"[0-9a-f]{1,32}")
# The longest mute with an end: a year (longer ones are "until unmuted").
MAX_FOR_S = 366 * 86_400
REASON_CHARS = 500
# What muting and unmuting need: the permission of the dead-letter actions (resubmit).
PERM = Perm.RETRY


@dataclass(frozen=True, slots=True)
class Unmuted:
    """A mute as it was when it was lifted."""

    queue: str
    fingerprint: str
    until: datetime | None


def _checked(queue: str, fingerprint: str, for_s: int | None = None, reason: str = "") -> None:
    """Raise ConfigError naming the first argument that is not valid."""
    if not FINGERPRINT.fullmatch(fingerprint):
        raise ConfigError(f"a fingerprint is 1 to 32 lowercase hex digits, not {fingerprint!r}")
    validate_queue_name(queue)
    if for_s is not None and not 1 <= for_s <= MAX_FOR_S:
        raise ConfigError(f"for_s must be 1 to {MAX_FOR_S} seconds, or null (until unmuted)")
    if len(reason) > REASON_CHARS:
        raise ConfigError(f"the reason is at most {REASON_CHARS} characters")


def _said(until: datetime | None, reason: str) -> str:
    """Describe a mute for the audit log."""
    end = f"until {until.isoformat(timespec='seconds')}" if until else "until unmuted"
    return end + (f"; {reason}" if reason else "")


def mute(
    rights: Grant,
    queue: str,
    fingerprint: str,
    for_s: int | None = None,
    reason: str = "",
    via: str | None = None,
) -> DeadLetterMute:
    """Mute dead-letter group `fingerprint` of `queue` for `for_s` seconds (None: until
    unmuted), after the checks; audit it (`via`: where it came from, else the grant's).

    Args:
        rights: who mutes, narrowed by the API token the request came with, if any.
        queue: the queue whose dead letters of the group stop alerting.
        fingerprint: the group's error fingerprint.
        for_s: how long the mute holds, in seconds; None until someone unmutes it.
        reason: why, in the operator's words (shown beside the group).
        via: the surface, for the audit log ("admin"); default: the grant's.
    """
    _checked(queue, fingerprint, for_s, reason)
    rights.require(PERM, queue)
    now = timezone.now()
    until = None if for_s is None else now + timedelta(seconds=for_s)
    author = rights.user if getattr(rights.user, "pk", None) is not None else None
    with transaction.atomic():
        row, _ = DeadLetterMute.objects.update_or_create(
            queue=queue,
            fingerprint=fingerprint,
            defaults={"until": until, "muted_by": author, "muted_at": now, "reason": reason},
        )
        audit.record(
            rights.user, "mute", [str(row)], via or rights.via, DeadLetterMute, _said(until, reason)
        )
    log.info("dead-letter group muted queue=%s fingerprint=%s until=%s", queue, fingerprint, until)
    return row


def unmute(rights: Grant, queue: str, fingerprint: str, via: str | None = None) -> Unmuted | None:
    """Lift the mute of group `fingerprint` of `queue` after the checks; audit it; return the
    mute lifted (None: there was none)."""
    _checked(queue, fingerprint)
    rights.require(PERM, queue)
    with transaction.atomic():
        row = DeadLetterMute.objects.select_for_update().filter(
            queue=queue, fingerprint=fingerprint
        )
        found = row.first()
        if found is None:
            return None
        row.delete()
        audit.record(
            rights.user, "unmute", [str(found)], via or rights.via, DeadLetterMute, "unmuted"
        )
    log.info("dead-letter group unmuted queue=%s fingerprint=%s", queue, fingerprint)
    return Unmuted(queue, fingerprint, found.until)


amute = sync_to_async(mute)
aunmute = sync_to_async(unmute)


def holding(
    queues: Iterable[str] | None = None, now: datetime | None = None
) -> QuerySet[DeadLetterMute]:
    """Return the mutes that hold at `now` (default: now), of `queues` when given."""
    rows = DeadLetterMute.objects.filter(Q(until__isnull=True) | Q(until__gt=now or timezone.now()))
    return rows if queues is None else rows.filter(queue__in=list(queues))


def muted(queues: Iterable[str] | None = None) -> dict[str, dict[str, DeadLetterMute]]:
    """Return the mutes holding now, by queue then fingerprint."""
    out: dict[str, dict[str, DeadLetterMute]] = {}
    for row in holding(queues).select_related("muted_by"):
        out.setdefault(row.queue, {})[row.fingerprint] = row
    return out
