"""A dead-man's switch per schedule: did its last tick fire, and did its job start, in time?

`schedule_health(client, queues, default_tolerance_s, recovery)` reads each repeatable, its next
due tick (`repeat_due`), its last tick's job (`repeat_last`), the job of the tick before that,
and the worker registry, and returns one `ScheduleHealth` per repeatable. States, worst first:

- `missed`: a tick due more than the tolerance ago has not fired (no scheduler ran: schedulers
  run in the workers of the schedule's queue).
- `late`: its last tick fired, but its job had not started within the tolerance of its tick.
- `overlap`: a run was still going when the next tick came; `skip_if_running` skipped that tick,
  else a second run started alongside.
- `no_worker`: no live worker serves its queue (its next tick will be missed).
- `recovering`: Redis was away lately (periodic/outages.py): a tick or run due while it was, or
  no live worker yet, within the grace its workers get to come back; never alerted.
- `ok`, or `paused` (not checked).

The tolerance is the repeatable's `tolerance_s`, else `default_tolerance_s`; for an `every_s`
repeatable never more than its interval, so a tick every second is missed within two ticks.
`swap_state` records a state and returns the previous one (SET ... GET), so any number of
checkers see each change once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from croniter import croniter

from ..job import JobState
from ..ops.handle import Handle
from ..producing.repeatable import Repeatable
from ..resources.duties.health import HealthMarks
from ..resources.duties.schedules import Schedules
from ..transport.connection import server_ms
from .outages import Recovery
from .outages import when as _when

# States, worst first.
STATES = ("missed", "late", "overlap", "no_worker", "recovering", "ok", "paused")
_WAITING = {JobState.SUBMITTED, JobState.SCHEDULED, JobState.BLOCKED}


@dataclass(frozen=True, slots=True)
class ScheduleHealth:
    """One schedule's state, the reasons in words, and the ticks it was judged on."""

    queue: str
    name: str
    state: str
    reasons: list[str] = field(default_factory=list)
    tolerance_s: float = 0.0
    # The tick it waits to fire (repeat_due) and the last tick that fired, in ms.
    due_ms: int | None = None
    last_tick_ms: int | None = None
    last_job: str | None = None
    skip_if_running: bool = False


def tick_of(rep: Repeatable, job_id: str | None) -> int | None:
    """Return the tick (ms) a tick's job id names ("name@ms"), or None (a manual run)."""
    if not job_id or not job_id.startswith(f"{rep.name}@"):
        return None
    tail = job_id.rpartition("@")[2]
    return int(tail) if tail.isdigit() else None


def tick_before(rep: Repeatable, tick_ms: int) -> int | None:
    """Return the tick before `tick_ms`, or None when there was none."""
    if rep.every_s is not None:
        before = round(tick_ms - rep.every_s * 1000)
    else:
        start = datetime.fromtimestamp(tick_ms / 1000, UTC).astimezone(rep.zone)
        before = int(croniter(str(rep.cron), start).get_prev(datetime).timestamp() * 1000)
    return before if before >= rep.start_at_ms else None


def tolerance_ms(rep: Repeatable, default_tolerance_s: float) -> int:
    """Return how late a tick may fire or its job start before it counts, in ms."""
    tol_s = rep.tolerance_s if rep.tolerance_s is not None else default_tolerance_s
    if rep.every_s is not None:
        tol_s = min(tol_s, rep.every_s)
    return int(tol_s * 1000)


async def schedule_health(
    client: Handle,
    queues: list[str],
    default_tolerance_s: float,
    recovery: Recovery | None = None,
) -> list[ScheduleHealth]:
    """Return the health of every repeatable of `queues` (with `recovery`, what the recent Redis
    outages explain is excused)."""
    schedules = Schedules(client.settings, client.redis, client.scripts)
    served = {q for w in await client.workers.list() for q in str(w.get("queues", "")).split(",")}
    # Server time apart from the read: a cluster refuses TIME in a pipeline (no key to route it).
    now_ms = await server_ms(client.redis, client.keys(queues[0]).repeat_due if queues else None)
    reps: list[tuple[Repeatable, int | None, str | None]] = []
    for raw, due_by, last in await schedules.stored(queues):
        for name, text in sorted(raw.items()):
            try:
                rep = Repeatable.from_json(text)
            except (ValueError, TypeError):
                continue  # the scheduler sets an unreadable one aside and logs it
            reps.append((rep, due_by.get(name), last.get(name)))
    # The last tick's job and the one before it, of each repeatable.
    ticks = []
    for rep, _, last_id in reps:
        tick = tick_of(rep, last_id)
        before = tick_before(rep, tick) if tick is not None else None
        ticks.append((rep.queue, last_id, f"{rep.name}@{before}"))
    jobs = await schedules.tick_jobs(ticks)
    out = []
    for (rep, due_ms, last_id), (last_state, started, before_state) in zip(reps, jobs, strict=True):
        out.append(
            _judge(
                rep,
                due_ms,
                last_id,
                last_state,
                int(started) if started else None,
                before_state,
                rep.queue in served,
                now_ms,
                tolerance_ms(rep, default_tolerance_s),
                recovery or Recovery(0),
            )
        )
    return out


def _judge(
    rep: Repeatable,
    due_ms: int | None,
    last_id: str | None,
    last_state: str | None,
    started_ms: int | None,
    before_state: str | None,
    served: bool,
    now_ms: int,
    tol_ms: int,
    recovery: Recovery,
) -> ScheduleHealth:
    """Return one repeatable's state from what Redis holds about it; what a recent outage
    explains is `recovering` (`held`), or nothing once it is over."""
    tick = tick_of(rep, last_id)
    found: dict[str, str] = {}
    held: list[str] = []

    def overdue(due: int, at_ms: int) -> bool:
        return at_ms - recovery.due_ms(rep.queue, due, tol_ms) > tol_ms

    if rep.paused:
        found["paused"] = "paused"
    else:
        if due_ms is not None and now_ms - due_ms > tol_ms:
            why = "no live worker serves its queue" if not served else "no scheduler fired it"
            if overdue(due_ms, now_ms):
                found["missed"] = f"the tick due at {_when(due_ms)} has not fired: {why}"
            else:
                held.append(f"the tick due at {_when(due_ms)} has not fired yet")
        if tick is not None and last_state in _WAITING and now_ms - tick > tol_ms:
            if overdue(tick, now_ms):
                found["late"] = f"the run of the tick at {_when(tick)} has not started"
            else:
                held.append(f"the run of the tick at {_when(tick)} has not started yet")
        elif tick is not None and started_ms is not None and overdue(tick, started_ms):
            late_s = (started_ms - tick) / 1000
            found["late"] = f"the run of the tick at {_when(tick)} started {late_s:.1f} s late"
        nxt = rep.next_after(tick) if tick is not None else None
        if rep.skip_if_running and last_state == JobState.STARTED and nxt and nxt <= now_ms:
            found["overlap"] = (
                f"the run of the tick at {_when(tick or 0)} was still going at the tick of "
                f"{_when(nxt)}: skip_if_running skipped it"
            )
        elif not rep.skip_if_running and before_state == JobState.STARTED and tick is not None:
            found["overlap"] = (
                f"the run before the tick at {_when(tick)} was still going: a second run "
                "started alongside (skip_if_running is off)"
            )
        if not served and recovery.recovering(rep.queue, now_ms) is None:
            found["no_worker"] = f"no live worker serves queue {rep.queue!r}"
        elif not served:
            held.append(f"no live worker serves queue {rep.queue!r} yet")
        outage = recovery.last(rep.queue)
        if held and outage is not None:
            found["recovering"] = f"{'; '.join(held)}: {recovery.said(outage)}"
    state = next((s for s in STATES if s in found), "ok")
    return ScheduleHealth(
        rep.queue,
        rep.name,
        state,
        [found[s] for s in STATES if s in found and s != "paused"],
        tol_ms / 1000,
        due_ms,
        tick,
        last_id,
        rep.skip_if_running,
    )


async def sample_dlq(client: Handle, queue: str, size: int, window_s: float, record: bool) -> int:
    """Return the queue's DLQ size at the start of the current window (`size` when none); with
    `record`, start a new window once this one is `window_s` old."""
    marks = HealthMarks(client.settings, client.redis, client.scripts)
    raw = await marks.get("dlq", queue) or ""
    now_ms = int(time.time() * 1000)
    then, _, at = raw.partition("|")
    if record and (not raw or now_ms - int(at) >= window_s * 1000):
        await marks.put("dlq", queue, f"{size}|{now_ms}")
    return int(then) if raw else size


async def swap_state(client: Handle, kind: str, name: str, state: str) -> str | None:
    """Record `state` of the schedule or queue `name`; return the one recorded before."""
    marks = HealthMarks(client.settings, client.redis, client.scripts)
    return await marks.swap(kind, name, state)
