"""The history's gap counters in a queue's stats hash (trim-3.lua, the mirror): what they add up to.

`gap_entries` events were trimmed before the mirror's group read them; `gap_jobs` jobs of
those went to the missed SET, of which the mirror rebuilt `gap_rebuilt` from their hashes and
found `gap_lost` gone; `gap_unrecorded` more could only be counted (the SET was full), of which
a resync of every job hash covered `gap_resynced`.
"""

from __future__ import annotations

from collections.abc import Mapping

GAP_FIELDS = (
    "gap_entries",
    "gap_jobs",
    "gap_unrecorded",
    "gap_resynced",
    "gap_rebuilt",
    "gap_lost",
)


def _count(stats: Mapping[str, str | bytes | int | None], name: str) -> int:
    return int(stats.get(name) or 0)


def uncovered(stats: Mapping[str, str | bytes | int | None]) -> int:
    """Return the jobs only counted (`gap_unrecorded`) that no resync has rebuilt yet."""
    return max(0, _count(stats, "gap_unrecorded") - _count(stats, "gap_resynced"))


def lost(stats: Mapping[str, str | bytes | int | None]) -> int:
    """Return the jobs whose history may lack rows: found gone, or counted and not resynced."""
    return _count(stats, "gap_lost") + uncovered(stats)
