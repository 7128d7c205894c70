"""Turn jobs into submit-13.lua calls: payload checks, flow order, dedup and limit keys."""

from __future__ import annotations

import graphlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import serializer
from ..errors import ConfigError
from ..fields import FORMATS, NAMES
from ..job import Job
from ..keys import QueueKeys
from ..seam.scripts import Scripts, Submission, read_submission, submit_argv
from ..settings import EngineSettings
from ..task import json_args

# Fields the hash does not take from the client: the script's own, the key's (id, queue); by
# hash format.
_SCRIPT_FIELDS = {
    fmt: frozenset(names[n] for n in ("state", "submitted_at_ms", "run_at_ms", "id", "queue"))
    for fmt, names in NAMES.items()
}


@dataclass(frozen=True, slots=True)
class Tick:
    """A repeatable's tick: written only while `due_ms` is still its next tick."""

    name: str
    due_ms: int
    next_ms: int
    skip_if_running: bool
    # Ticks it may fire in all (0: no limit): the script ends it after the last.
    limit: int = 0


def default_queue_timeout(job: Job, settings: EngineSettings) -> None:
    """Give a job whose task and call set no queue_timeout_s the settings' QUEUE_TIMEOUT."""
    if job.queue_timeout_ms is None:
        queue_s = settings.queue_timeout_for(job.queue)
        if queue_s is not None:
            job.queue_timeout_ms = int(queue_s * 1000)


def flow_order(jobs: Sequence[Job]) -> list[Job]:
    """Return jobs with parents first; refuse cycles and parents in another queue."""
    by_id = {job.id: job for job in jobs}
    for job in jobs:
        for parent in job.parents:
            if parent == job.id:
                raise ConfigError(f"job {job.id} depends on itself")
            if parent in by_id and by_id[parent].queue != job.queue:
                raise ConfigError(
                    f"job {job.id} in queue {job.queue!r} depends on {parent} in queue "
                    f"{by_id[parent].queue!r}: a flow stays in one queue"
                )
    graph = graphlib.TopologicalSorter({job.id: job.parents for job in jobs})
    try:
        order = list(graph.static_order())
    except graphlib.CycleError as exc:
        raise ConfigError(f"depends_on forms a cycle: {' -> '.join(exc.args[1])}") from None
    return [by_id[i] for i in order if i in by_id]


def with_callbacks(jobs: list[Job]) -> list[Job]:
    """Return `jobs` followed by their callbacks (`Job.callbacks`; each once, so a list that
    already holds them comes back as it is): each a child of its job, in its queue and flow,
    called with its id as `parent_id`. No job with callbacks: `jobs` itself."""
    if not any(job.callbacks for job in jobs):
        return jobs
    out, seen = list(jobs), {id(job) for job in jobs}
    for job in out:  # grows as it goes: a callback made by hand may carry its own
        for callback in job.callbacks:
            callback.parents = [job.id]
            callback.queue, callback.flow_id = job.queue, job.flow_id
            callback.kwargs = {**callback.kwargs, "parent_id": job.id}
            if id(callback) not in seen:
                seen.add(id(callback))
                out.append(callback)
    return out


def job_spec(
    job: Job,
    keys: QueueKeys,
    limit_bytes: int,
    tick: Tick | None = None,
    last_of: str | None = None,
    ride: str | None = None,
    fmt: int = 1,
) -> bytes:
    """Return one job's submit-13.lua argument (checks the payload size); `last_of` names the
    repeatable whose last run the job becomes (a run made by hand); `ride` the repeatable whose
    tick, taken by an earlier job of the call, this job goes with (a flow's other jobs); `fmt`
    the hash format of the Redis (engine/seam/hashformat.py), whose names the fields take."""
    fields = FORMATS[fmt]
    args, kwargs = json_args(job, limit_bytes)
    extras: dict[str, Any] = {}
    keyed: list[str] = []
    if job.parents:
        extras["parents"] = list(job.parents)
        if job.runs_on is not None:
            extras["runs_on"] = job.runs_on
    if job.dedup_id is not None:
        dedup_key = keys.dedup(job.dedup_id)
        keyed += (fields.dedup_key, dedup_key)
        extras["dedup"] = [dedup_key, job.dedup_mode, job.dedup_ttl_ms or 0]
    if job.ttl_ms is not None or job.good_until_ms is not None or job.queue_timeout_ms is not None:
        extras["limits"] = True
    if job.concurrency_key is not None:
        active, waiting = keys.concurrency(job.concurrency_key)
        keyed += (fields.ckey_active, active, fields.ckey_waiting, waiting)
        extras["keyed"] = True
    if job.rate_key is not None:
        keyed += (fields.rate_budget, keys.rate(job.rate_key))
    if job.on_rate_limit is not None:  # decided at submit: the script takes the slot
        budget = keys.rate(job.rate_key) if job.rate_key is not None else ""
        extras["rate"] = [job.on_rate_limit, job.rate_interval_ms, budget]
    if tick is not None:
        extras["repeat"] = [
            tick.name,
            str(tick.due_ms),
            tick.next_ms,
            "1" if tick.skip_if_running else "0",
            tick.limit,
        ]
    if last_of is not None:
        extras["last_of"] = last_of
    if ride is not None:
        extras["ride"] = ride
    spec: list[Any] = [
        job.id,
        "" if job.delay_ms is None else str(job.delay_ms),
        "" if job.run_at_ms is None else str(job.run_at_ms),
        str(job.priority),
        extras,
        fields.task,
        job.task,
    ]
    # The job's hash fields (Job.to_hash) but the script's own and those at their defaults.
    if job.version != 1:
        spec += (fields.version, str(job.version))
    if job.priority != 0:
        spec += (fields.priority, str(job.priority))
    script_fields = _SCRIPT_FIELDS[fmt]
    for name, value in job.set_fields(fmt):
        if name not in script_fields:
            spec += (name, value)
    spec += (fields.args, args.decode())
    if kwargs != b"{}":
        spec += (fields.kwargs, kwargs.decode())
    spec += keyed
    return serializer.dumps(spec)


def submit_args(
    settings: EngineSettings, keys: QueueKeys, specs: list[bytes], atomic: bool = False
) -> list[Any]:
    """Return submit-13.lua's ARGV for `specs` (what the async and the sync clients send)."""
    return submit_argv(
        keys,
        events_maxlen=settings.stream.emergency_maxlen,
        replaced_ttl_ms=settings.default_result_ttl_s * 1000,
        atomic=atomic,
        jobs=specs,
    )


async def submit(
    scripts: Scripts,
    settings: EngineSettings,
    keys: QueueKeys,
    specs: list[bytes],
    atomic: bool = False,
) -> Submission:
    """Run submit-13.lua; return what it did with each job; a refused batch raises."""
    argv = submit_args(settings, keys, specs, atomic)
    return read_submission(keys, await scripts.raw["submit"](keys, argv))
