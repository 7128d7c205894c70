"""A repeatable job: a job template (or a flow's) and when to submit it, every N seconds or by a
cron expression in a time zone; its ticks' jobs and the stored form. No I/O: the resource that
stores repeatables is engine/resources/repeats.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from .. import serializer
from ..errors import ConfigError, EngineError
from ..fields import F
from ..job import Job
from ..task import epoch_s, json_args
from .submit import flow_order

# Its ticks' job ids are the name, "@" and a 14-digit time: they must follow the job-id rule.
_NAME = re.compile(r"^[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,112}$")
# The field of `repeat_last` counting a repeatable's fired ticks (repeat_ticks.lua spells it too).
FIRED = "fired|"
# Hash fields of a job template that each tick sets afresh.
_PER_TICK = (F.id, F.state, F.sent_at_ms, F.repeat)

# Who made a repeatable: `Repeats.add` at run time, or a sync of declared schedules.
Origin = Literal["runtime", "settings"]
ORIGINS: tuple[Origin, ...] = ("runtime", "settings")


@dataclass(frozen=True, slots=True)
class Repeatable:
    """A job template and when to submit it: `every_s` seconds from `start_at_ms`, or `cron`."""

    name: str
    queue: str
    job: dict[str, str]
    every_s: float | None = None
    cron: str | None = None
    tz: str = "UTC"
    skip_if_running: bool = False
    start_at_ms: int = 0
    end_at_ms: int | None = None
    paused: bool = False
    origin: Origin = "runtime"
    # A declared repeatable (origin "settings") changed at run time: syncs keep it as it is.
    overridden: bool = False
    # How late a tick may fire or its job start before its health says so (None: the default;
    # engine/periodic/schedule_health.py).
    tolerance_s: float | None = None
    # Ticks it fires, then it ends (None: no end but end_at).
    repeat_limit: int | None = None
    # A whole flow each tick (a scheduled flow): one template per job, parents first, each
    # {"job": hash fields, "parents": [indexes of earlier jobs]}; `job` is the first one's.
    flow: list[dict[str, Any]] | None = None
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"repeatable names are 1-113 of [A-Za-z0-9._:-], not starting with '.'; "
                f"got {self.name!r}"
            )
        if (self.every_s is None) == (self.cron is None):
            raise ConfigError("a repeatable needs exactly one of every_s and cron")
        if self.every_s is not None and not (
            isinstance(self.every_s, int | float)
            and math.isfinite(self.every_s)
            and self.every_s > 0
        ):
            raise ConfigError(f"every_s must be a positive number of seconds, got {self.every_s!r}")
        if self.cron is not None and not (
            isinstance(self.cron, str) and croniter.is_valid(self.cron)
        ):
            raise ConfigError(f"invalid cron expression: {self.cron!r}")
        try:
            object.__setattr__(self, "zone", ZoneInfo(self.tz))
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigError(f"unknown time zone: {self.tz!r}") from None
        if self.end_at_ms is not None and self.end_at_ms < self.start_at_ms:
            raise ConfigError("end_at must not be before start_at")
        if self.tolerance_s is not None and not (
            isinstance(self.tolerance_s, int | float)
            and not isinstance(self.tolerance_s, bool)
            and math.isfinite(self.tolerance_s)
            and self.tolerance_s > 0
        ):
            raise ConfigError(f"tolerance_s must be a positive number, got {self.tolerance_s!r}")
        if self.origin not in ORIGINS:
            raise ConfigError(f"origin must be one of {ORIGINS}, got {self.origin!r}")
        if self.repeat_limit is not None and (
            isinstance(self.repeat_limit, bool)
            or not isinstance(self.repeat_limit, int)
            or self.repeat_limit < 1
        ):
            raise ConfigError(
                f"repeat_limit must be a whole number >= 1, got {self.repeat_limit!r}"
            )
        if self.flow is not None:
            _check_flow(self.name, self.flow)

    def next_after(self, after_ms: int) -> int | None:
        """Return the first tick strictly after `after_ms`, or None when none is left."""
        if self.every_s is not None:
            every_ms = self.every_s * 1000
            k = (
                0
                if after_ms < self.start_at_ms
                else math.floor((after_ms - self.start_at_ms) / every_ms) + 1
            )
            tick = round(self.start_at_ms + k * every_ms)
        else:
            base = max(after_ms, self.start_at_ms - 1)
            start = datetime.fromtimestamp(base / 1000, UTC).astimezone(self.zone)
            times = croniter(str(self.cron), start)
            nxt: datetime = times.get_next(datetime)
            # As cron does: when clocks go back, a job at a fixed hour runs in the first pass
            # of the repeated hour only; one with a wildcard hour runs in both.
            while "*" not in str(self.cron).split()[1] and _second_pass(nxt):
                nxt = times.get_next(datetime)
            tick = int(nxt.timestamp() * 1000)
        if self.end_at_ms is not None and tick > self.end_at_ms:
            return None
        return tick

    def check_fires(self, now_ms: int, min_interval_s: float) -> None:
        """Raise ConfigError unless this repeatable can fire and submits at most one job per
        `min_interval_s`: a tick of one job `min_interval_s` or more apart, a tick of a flow of
        N jobs N times that (a cron is sampled over its next few ticks)."""
        size = len(self.flow) if self.flow else 1
        least_s = min_interval_s * size
        per = f" for a flow of {size} jobs" if size > 1 else ""
        if self.every_s is not None:
            if self.every_s < least_s:
                raise ConfigError(
                    f"every_s must be at least {least_s:g} s{per} (min_repeat_interval_s "
                    f"{min_interval_s:g} s a job), got {self.every_s:g}"
                )
            return
        ticks: list[int] = []
        try:
            after = max(now_ms, self.start_at_ms)
            while len(ticks) < 5 and (tick := self.next_after(after)) is not None:
                ticks.append(after := tick)
        except (CroniterBadDateError, OverflowError, ValueError):
            raise ConfigError(f"cron expression {self.cron!r} never fires") from None
        gaps = [b - a for a, b in itertools.pairwise(ticks)]
        if gaps and min(gaps) < least_s * 1000:
            raise ConfigError(
                f"cron expression {self.cron!r} fires {min(gaps) / 1000:g} s apart; the least "
                f"interval is {least_s:g} s{per} (min_repeat_interval_s {min_interval_s:g} s a "
                "job)"
            )

    def job_for(self, due_ms: int) -> Job:
        """Return the job of the tick due at `due_ms` (its id names the repeatable and the tick)."""
        fields = {**self.job, F.id: f"{self.name}@{due_ms}", F.repeat: self.name}
        job = Job.from_hash(fields)
        job.sent_at_ms = int(time.time() * 1000)
        return job

    def jobs_for(self, due_ms: int, first_id: str | None = None) -> list[Job]:
        """Return the jobs of one tick, parents first: the job, or every job of the flow (the
        first has the tick's id, which is also the flow's id; the others add `.<index>`)."""
        root = first_id or f"{self.name}@{due_ms}"
        if self.flow is None:
            job = self.job_for(due_ms)
            job.id = root
            return [job]
        ids = [root if i == 0 else f"{root}.{i}" for i in range(len(self.flow))]
        jobs = []
        for i, member in enumerate(self.flow):
            job = Job.from_hash({**member["job"], F.id: ids[i], F.repeat: self.name})
            job.parents = [ids[p] for p in member["parents"]]
            job.flow_id = root
            job.sent_at_ms = int(time.time() * 1000)
            jobs.append(job)
        return jobs

    def to_json(self) -> bytes:
        """Return the stored definition."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return serializer.dumps(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Repeatable:
        """Build from a stored definition."""
        data: dict[str, Any] = serializer.loads(raw)
        return cls(**data)


def template(job: Job, limit_bytes: int) -> dict[str, str]:
    """Return the hash fields each tick's job copies from `job` (checks its payload)."""
    if job.parents:
        raise ConfigError("a repeatable job cannot depend on other jobs (depends_on)")
    json_args(job, limit_bytes)
    fields = job.to_hash()
    for name in _PER_TICK:
        fields.pop(name, None)
    return fields


def flow_template(name: str, jobs: Sequence[Job], limit_bytes: int) -> list[dict[str, Any]]:
    """Return the templates of a flow schedule's jobs (parents first); ConfigError for a
    parent outside the flow, a cycle, or more than one queue."""
    jobs = flow_order(list(jobs))
    index = {job.id: i for i, job in enumerate(jobs)}
    out: list[dict[str, Any]] = []
    for job in jobs:
        outside = [p for p in job.parents if p not in index]
        if outside:
            raise ConfigError(
                f"a scheduled flow's jobs depend only on jobs of the flow, not {outside[0]!r}"
            )
        bare = dataclasses.replace(job, parents=[], flow_id=None)
        out.append({"job": template(bare, limit_bytes), "parents": [index[p] for p in job.parents]})
    if len({job.queue for job in jobs}) > 1:
        raise ConfigError("a flow stays in one queue; give every job the same queue")
    _check_flow(name, out)
    return out


def _check_flow(name: str, flow: list[dict[str, Any]]) -> None:
    if not isinstance(flow, list) or not flow:
        raise ConfigError("a scheduled flow needs at least one job")
    # The ids `name@<14 digits>.<index>` must stay within a job id's 128 characters.
    if len(name) + 16 + len(str(len(flow))) > 128:
        raise ConfigError(f"the name of a scheduled flow of {len(flow)} jobs is too long: {name!r}")
    for i, member in enumerate(flow):
        parents = member.get("parents") if isinstance(member, dict) else None
        if not isinstance(member.get("job"), dict) or not isinstance(parents, list):
            raise ConfigError(f"flow job {i} must be {{job, parents}}")
        if any(not isinstance(p, int) or not 0 <= p < i for p in parents):
            raise ConfigError(f"flow job {i} must depend on earlier jobs only")


def _second_pass(when: datetime) -> bool:
    """Tell whether `when` is the second occurrence of its wall time (clocks went back)."""
    wall = when.replace(tzinfo=None)
    first = wall.replace(tzinfo=when.tzinfo, fold=0).utcoffset()
    second = wall.replace(tzinfo=when.tzinfo, fold=1).utcoffset()
    return first != second and when.utcoffset() == second


def parse(raw: str | bytes, lenient: bool) -> Repeatable | None:
    """Return a stored definition; with `lenient`, None for one that cannot be read."""
    try:
        return Repeatable.from_json(raw)
    except (EngineError, TypeError, ValueError):
        if lenient:
            return None
        raise


def epoch_ms(value: datetime | float | None) -> int | None:
    if value is None:
        return None
    return int((epoch_s(value) if isinstance(value, datetime) else value) * 1000)
