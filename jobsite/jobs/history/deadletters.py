"""Dead letters grouped by error fingerprint, read from the history.

A dead letter is a job whose row is in a DLQ state (dead in the engine's vocabulary and still
resubmittable: failed, stalled, dropped, expired). Groups are keyed by the row's `fingerprint`
(engine.ops.fingerprint, copied from the job hash by the mirror); rows without one (an expiry
records no error) form the group "". Reads use the partial index jobsite_job_fingerprint.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet

from jobsite.jobs import services
from jobsite.jobs.models import DEAD, RETRYABLE, JobRecord, dead
from jobsite.jobs.permissions import Grant

# In the DLQ: ended without success and resubmittable (so never `lost`, never `cancelled`).
DLQ_STATES = [s for s in DEAD if s in RETRYABLE]
# Groups one page shows at most, largest first.
MAX_GROUPS = 200


@dataclass
class Sample:
    """What one job of a group says about the error: the newest job's last error record."""

    job_id: str
    exception: str
    type: str
    message: str
    frame: str
    # The message as the fingerprint saw it (numbers and ids normalized): what the group shares.
    pattern: str
    # Why the failure was not retried ("": not recorded, as before it was).
    not_retried: str = ""


@dataclass
class Group:
    """Dead letters sharing a fingerprint."""

    fingerprint: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None
    tasks: dict[str, int] = field(default_factory=dict)
    queues: list[str] = field(default_factory=list)
    sample: Sample | None = None


def dead_rows(
    rights: Grant, queue: str | None = None, task: str | None = None
) -> QuerySet[JobRecord]:
    """Return the dead-letter rows this request may see, of `queue` and `task` when given."""
    return dead_in(rights.queues, queue, task)


def dead_in(
    scope: list[str] | None, queue: str | None = None, task: str | None = None
) -> QuerySet[JobRecord]:
    """Return the dead-letter rows of the queues `scope` (None: every queue), of `queue` and
    `task` when given."""
    rows = dead(JobRecord.objects.filter(state__in=DLQ_STATES))
    if scope is not None:
        rows = rows.filter(queue__in=scope)
    if queue:
        rows = rows.filter(queue=queue)
    if task:
        rows = rows.filter(task=task)
    return rows


def _sample(row: JobRecord | None) -> Sample | None:
    """Return the sample of a group from its newest row (None: no row)."""
    if row is None:
        return None
    errors = [e for e in row.errors if isinstance(e, dict)] if isinstance(row.errors, list) else []
    last: dict[str, Any] = errors[-1] if errors else {}
    said = [t.get("error", "") for t in row.transitions or [] if isinstance(t, dict)]
    return Sample(
        job_id=row.id,
        exception=str(last.get("exception") or last.get("type") or row.state),
        type=str(last.get("type") or row.state),
        message=str(last.get("message") or next((s for s in reversed(said) if s), "")),
        frame=str(last.get("fingerprint_frame") or ""),
        pattern=str(last.get("fingerprint_message") or ""),
        not_retried=str(last.get("not_retried") or ""),
    )


def groups(rows: QuerySet[JobRecord], limit: int = MAX_GROUPS) -> list[Group]:
    """Return the groups of `rows`, largest first: counts, first and last seen, tasks, a sample."""
    found = list(
        rows.values("fingerprint")
        .annotate(n=Count("id"), first=Min("completed_at"), last=Max("completed_at"))
        .order_by("-n", "fingerprint")[:limit]
    )
    keys = [g["fingerprint"] for g in found]
    tasks: dict[str, dict[str, int]] = defaultdict(dict)
    queues: dict[str, set[str]] = defaultdict(set)
    per_task = rows.filter(fingerprint__in=keys).values("fingerprint", "task", "queue")
    for r in per_task.annotate(n=Count("id")).order_by():
        by_task = tasks[r["fingerprint"]]
        by_task[r["task"]] = by_task.get(r["task"], 0) + r["n"]
        queues[r["fingerprint"]].add(r["queue"])
    out = []
    for g in found:
        key = g["fingerprint"]
        newest = rows.filter(fingerprint=key).order_by("-completed_at", "-id")
        sample = _sample(newest.only("id", "state", "errors", "transitions").first())
        ranked = dict(sorted(tasks[key].items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(Group(key, g["n"], g["first"], g["last"], ranked, sorted(queues[key]), sample))
    return out


@dataclass(frozen=True, slots=True)
class MutedDead:
    """A queue's dead letters in its muted groups: all the history holds, and those that died
    within the health window."""

    total: int = 0
    recent: int = 0


def muted_dead(queue: str, fingerprints: Collection[str], since: datetime) -> MutedDead:
    """Count the dead letters of `queue` in the groups `fingerprints`, all and since `since`."""
    if not fingerprints:
        return MutedDead()
    rows = dead(JobRecord.objects.filter(state__in=DLQ_STATES, queue=queue))
    found = rows.filter(fingerprint__in=list(fingerprints)).aggregate(
        total=Count("id"), recent=Count("id", filter=Q(completed_at__gte=since))
    )
    return MutedDead(int(found["total"] or 0), int(found["recent"] or 0))


def group_pairs(
    rows: QuerySet[JobRecord], fingerprint: str, cap: int
) -> tuple[list[tuple[str, str]], int]:
    """Return up to `cap` + 1 (job id, queue) pairs of a group, and how many it holds."""
    chosen = rows.filter(fingerprint=fingerprint)
    pairs = list(chosen.order_by("id").values_list("id", "queue")[: cap + 1])
    return pairs, chosen.count() if len(pairs) > cap else len(pairs)


@dataclass
class Tally:
    """One queue's dead letters as Redis and the history count them.

    `in_redis` is the queue's DLQ (what the Overview shows); `in_history` its rows in a DLQ
    state. They differ for two honest reasons: the history keeps rows after the cleaner pruned
    the DLQ (by age or length), and a dead letter reaches the history only once the mirror or
    reconciliation wrote its row. `without_row` counts the second: DLQ ids the history has no
    row for (of the first `checked` ids; `checked < in_redis` past TALLY_MAX).
    """

    queue: str
    in_redis: int
    in_history: int
    without_row: int
    checked: int


# The most DLQ ids a tally looks up (ZSCAN pages of TALLY_PAGE): a DLQ is pruned to
# dlq_max_len (10,000 by default), so one tally usually sees it whole.
TALLY_MAX = 20_000
TALLY_PAGE = 1000


def tally(rights: Grant, queues: list[str]) -> list[Tally]:
    """Count each queue's dead letters in Redis and in the history, and the DLQ ids without a
    row (reconciliation hands those to the mirror, which writes them from their hashes)."""
    states = {q.name: q.counts.get("dlq", 0) for q in services.queue_states(queues)}
    rows = dict(
        dead_rows(rights)
        .filter(queue__in=queues)
        .order_by()
        .values_list("queue")
        .annotate(n=Count("id"))
        .values_list("queue", "n")
    )
    out = []
    for queue in queues:
        cursor, seen, without = 0, set[str](), 0
        while len(seen) < TALLY_MAX:
            cursor, ids = services.run_engine(
                lambda c: c.dead_letters.scan(queue, cursor, TALLY_PAGE)  # noqa: B023 (the bridge calls it at once)
            )
            fresh = [i for i in dict.fromkeys(ids) if i not in seen]  # ZSCAN may repeat an id
            seen.update(fresh)
            known = set(JobRecord.objects.filter(id__in=fresh).values_list("id", flat=True))
            without += sum(1 for i in fresh if i not in known)
            if cursor == 0:
                break
        out.append(Tally(queue, states.get(queue, 0), rows.get(queue, 0), without, len(seen)))
    return out
