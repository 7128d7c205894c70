"""The reverse link of a replay: the jobs that replay a job (their `replay_of` is its id)."""

from __future__ import annotations

from jobsite.jobs.models import JobRecord


async def areplays_of(job_id: str) -> list[str]:
    """Return the ids of the replays of a job, oldest first, as far as the history knows."""
    # The exclude repeats the partial index's condition: SQLite uses such an index only when the
    # query states its condition (without it, a job page scans the history: docs/benchmarks.md).
    rows = (
        JobRecord.objects.filter(replay_of=job_id).exclude(replay_of="").order_by("sent_at", "id")
    )
    return [i async for i in rows.values_list("id", flat=True)]
