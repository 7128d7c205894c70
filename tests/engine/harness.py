"""Reliability harness: worker subprocesses, the execution ledger, and the audit (I1 to I6)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from engine import TERMINAL_STATES, QueueKeys
from engine.fields import both, either

from .helpers import sync_redis

TERMINAL_NAMES = frozenset(s.value for s in TERMINAL_STATES)

TUNABLES = {
    "lease_ms": 2000,
    "heartbeat_interval_s": 0.3,
    "cleaner_interval_s": 0.5,
    "liveness_window_s": 1.0,
    "scheduler_interval_s": 0.1,
    "idle_wait_s": 0.2,
    "shutdown_grace_s": 1.0,
    "events_maxlen": 1_000_000,
}


class WorkerProc:
    """One `python -m engine worker` subprocess in its own process group."""

    def __init__(
        self,
        url: str,
        ledger: Path,
        *,
        concurrency: int = 10,
        queues: str | None = "default",
        env: dict[str, str] | None = None,
        tunables: bool = True,
        tasks: str = "tests.engine.chaos_tasks",
        extra: tuple[str, ...] = (),
        **overrides: Any,
    ) -> None:
        settings = {**(TUNABLES if tunables else {}), **overrides}
        self.cmd = [
            sys.executable,
            "-m",
            "engine",
            "worker",
            "--url",
            url,
            "--tasks",
            tasks,
            *(("--queues", queues) if queues is not None else ()),
            "--concurrency",
            str(concurrency),
        ]
        for name, value in settings.items():
            self.cmd += ["--set", f"{name}={value}"]
        self.cmd += extra
        self.env = {
            **os.environ,
            "PYTHONPATH": os.getcwd(),
            "JOBSITE_LEDGER": str(ledger),
            **(env or {}),
        }
        self.log = ledger.with_name(f"worker-{time.monotonic_ns()}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProc:
        """Start the worker process."""
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Send `sig` to the worker's whole process group."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def wait(self, timeout_s: float = 30) -> int:
        """Wait for the process to exit; return its status."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout_s)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Kill the process group if it still runs."""
        if self.alive():
            self.signal(signal.SIGKILL)
            self.wait()


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@dataclass
class Audit:
    """Findings of the audit; every list should be empty and `lost` zero."""

    jobs: int
    lost: list[str] = field(default_factory=list)
    in_two_places: list[str] = field(default_factory=list)
    duplicates: int = 0
    unexplained: list[str] = field(default_factory=list)
    terminal_twice: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    counters_shrank: list[str] = field(default_factory=list)
    states: dict[str, int] = field(default_factory=dict)

    def assert_clean(self) -> None:
        assert not self.lost, f"I1 lost: {self.lost[:5]}"
        assert not self.in_two_places, f"I2: {self.in_two_places[:5]}"
        assert not self.unexplained, f"I3 unexplained duplicates: {self.unexplained[:5]}"
        assert not self.terminal_twice, f"I4: {self.terminal_twice[:5]}"
        assert not self.leftovers, f"I5: {self.leftovers[:5]}"
        assert not self.counters_shrank, f"I6: {self.counters_shrank[:5]}"


def audit(
    url: str,
    ids: list[str],
    ledger: Path,
    faulted_pids: set[int],
    queue: str = "default",
    prefix: str = "jobsite",
    max_stalls: int = 100,
    expected_runs: int = 1,
) -> Audit:
    """Check invariants I1 to I6 over `ids` after the queue drained.

    A job may run `expected_runs` times (retries); every run beyond that must follow a run on a
    worker that faulted (killed, or exited at a failpoint), else it is an unexplained duplicate.
    """
    keys = QueueKeys(prefix, queue)
    report = Audit(jobs=len(ids))
    with sync_redis(url, decode_responses=True) as r:
        pipe = r.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(keys.job(job_id), both("state", "token", "stalls"))
            for name in (keys.submitted, keys.scheduled, keys.started, keys.dlq):
                pipe.zscore(name, job_id)
            pipe.pttl(keys.job(job_id))
        rows = pipe.execute()
        events = r.xrange(keys.events)
        started_left = r.zcard(keys.started)
    states: dict[str, int] = defaultdict(int)
    for i, job_id in enumerate(ids):
        fields, *places, ttl_ms = rows[i * 6 : (i + 1) * 6]
        state, token, stalls = either(fields)  # in the Redis's hash format, whichever it is
        states[str(state)] += 1
        if state not in TERMINAL_NAMES:
            report.lost.append(f"{job_id}:{state}")
        if sum(p is not None for p in places) > 1:
            report.in_two_places.append(job_id)
        if token is not None:
            report.leftovers.append(f"{job_id}:token")
        if state in TERMINAL_NAMES and places[3] is None and ttl_ms == -1:
            report.leftovers.append(f"{job_id}:kept forever")  # nothing else would delete it
        if stalls is not None and int(stalls) > max_stalls:
            report.counters_shrank.append(f"{job_id}:stalls={stalls}")
    if started_left:
        report.leftovers.append(f"started has {started_left} entries")
    report.states = dict(states)
    terminal: dict[str, int] = defaultdict(int)
    attempts: dict[str, list[int]] = defaultdict(list)
    for _, e in events:
        if e["to"] in TERMINAL_NAMES:
            terminal[e["job"]] += 1
        if e["to"] == "started" and e["from"] == "submitted":
            attempts[e["job"]].append(int(e["attempt"]))
    wanted = set(ids)
    report.terminal_twice = [j for j, n in terminal.items() if n > 1 and j in wanted]
    report.counters_shrank += [j for j, a in attempts.items() if a != sorted(a)]
    starts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in read_ledger(ledger):
        if line["kind"] == "start":
            starts[line["id"]].append(line)
    for job_id, runs in starts.items():
        extra = len(runs) - expected_runs
        if extra <= 0:
            continue
        report.duplicates += extra
        faulted_runs = sum(1 for run in runs[:-1] if run["pid"] in faulted_pids)
        if extra > faulted_runs:
            report.unexplained.append(f"{job_id}: {[run['pid'] for run in runs]}")
    return report


def handbacks(
    url: str, ledger: Path, kill_times: dict[int, float], queue: str = "default"
) -> list[float]:
    """Return, per job a SIGKILL cut off, the seconds from the kill to its hand-back.

    The hand-back is the first `started -> submitted | stalled` event of the job after the kill:
    the cleaner's part of the recovery. When the job runs again after that depends on the queue
    (a killed worker's begun jobs are suspects, run one per isolation child).
    """
    lines = read_ledger(ledger)
    ended = {(x["id"], x["pid"]) for x in lines if x["kind"] == "end"}
    cut = [
        (x["id"], kill_times[x["pid"]])
        for x in lines
        if x["kind"] == "start" and x["pid"] in kill_times and (x["id"], x["pid"]) not in ended
    ]
    back: dict[str, list[float]] = defaultdict(list)
    with sync_redis(url, decode_responses=True) as r:
        for _, e in r.xrange(QueueKeys("jobsite", queue).events):
            if e["from"] == "started" and e["to"] in ("submitted", "stalled"):
                back[e["job"]].append(int(e["at"]) / 1000)
    return sorted(min(at for at in back[job] if at > killed) - killed for job, killed in cut)
