"""Declared repeatables: make Redis hold exactly the schedules a declaration (settings) lists.

`sync_declared` runs declare-4.lua once per queue, so workers that start together and sync the
same declaration leave one repeatable per name and one `declared` set per queue. It creates,
updates and removes only repeatables of origin "settings": run-time ones are never touched. A
declared one changed at run time (overridden) is kept as changed until its declaration goes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from ..errors import ConfigError
from ..job import Job
from ..keys import QueueKeys, validate_queue_name
from ..producing.repeatable import Repeatable, template
from ..resources.duties.schedules import Schedules
from ..seam.scripts import Declared, DeclaredEntry, scripts_for
from ..settings import EngineSettings
from ..transport.connection import server_ms

log = logging.getLogger("engine.declared")


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one sync changed, over every queue."""

    created: int = 0
    updated: int = 0
    removed: int = 0
    kept_overrides: int = 0
    # "queue/name" of declared names that run-time repeatables hold (left alone).
    conflicts: tuple[str, ...] = ()


def declared_repeatable(
    name: str,
    job: Job,
    *,
    limit_bytes: int,
    every_s: float | None = None,
    cron: str | None = None,
    tz: str = "UTC",
    skip_if_running: bool = False,
    tolerance_s: float | None = None,
) -> Repeatable:
    """Return declared repeatable `name`: a copy of `job` (a `task.call(...)`) each tick.

    Its ticks never depend on when it is synced: `every_s` ones are on a grid from the epoch
    (every_s=3600 fires on the hour), so every sync of one declaration stores the same bytes.
    """
    return Repeatable(
        name=name,
        queue=job.queue,
        job=template(job, limit_bytes),
        every_s=every_s,
        cron=cron,
        tz=tz,
        skip_if_running=skip_if_running,
        tolerance_s=tolerance_s,
        origin="settings",
    )


def _by_queue(reps: Sequence[Repeatable]) -> dict[str, dict[str, Repeatable]]:
    """Group a declaration by queue, marked origin "settings"; refuse a name declared twice."""
    out: dict[str, dict[str, Repeatable]] = {}
    for rep in reps:
        names = out.setdefault(rep.queue, {})
        if rep.name in names:
            raise ConfigError(f"repeatable {rep.name!r} is declared twice in queue {rep.queue!r}")
        names[rep.name] = dataclasses.replace(rep, origin="settings", overridden=False)
    return out


def first_tick_ms(rep: Repeatable, now_ms: int) -> int | None:
    """Return the first tick of a declared repeatable from now (None when paused)."""
    return None if rep.paused else rep.next_after(now_ms - 1)


def _valid(queue: str) -> bool:
    try:
        validate_queue_name(queue)
    except ConfigError:
        return False
    return True


async def sync_declared(
    settings: EngineSettings,
    redis: Redis,
    declared: Sequence[Repeatable],
    queues: Iterable[str] = (),
) -> SyncReport:
    """Make the declared repeatables in Redis exactly `declared`, one atomic step per queue.

    Args:
        settings: the engine settings (their prefix).
        redis: a client.
        declared: the whole declaration. Declared repeatables a previous sync stored that are
            not in it are removed, in every queue Redis knows and in `queues`.
        queues: more queues to look in for repeatables no longer declared.
    """
    wanted = _by_queue(declared)
    scripts = scripts_for(redis, settings)
    known = await Schedules(settings, redis, scripts).note_queues(list(wanted))
    now_ms = await server_ms(redis)
    done: dict[str, Declared] = {}
    for queue in sorted(q for q in {*wanted, *known, *queues} if _valid(q)):
        entries = [
            DeclaredEntry(
                rep.name, rep.to_json(), None if rep.paused else rep.next_after(now_ms - 1)
            )
            for rep in wanted.get(queue, {}).values()
        ]
        done[queue] = await scripts.declare(QueueKeys(settings.prefix, queue), repeatables=entries)
    conflicts = tuple(f"{q}/{name}" for q, d in done.items() for name in d.conflicts)
    for conflict in conflicts:
        log.warning("declared repeatable left alone: a run-time one has its name at=%s", conflict)
    return SyncReport(
        created=sum(d.created for d in done.values()),
        updated=sum(d.updated for d in done.values()),
        removed=sum(d.removed for d in done.values()),
        kept_overrides=sum(d.kept_overrides for d in done.values()),
        conflicts=conflicts,
    )
