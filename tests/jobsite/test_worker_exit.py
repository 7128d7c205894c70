"""A runworker process told to stop exits within its bound, whatever Redis and the database do.

Real `manage.py runworker` processes (every loop, and `--only worker`), each on a private
redis-server and a database of its own (PostgreSQL on 127.0.0.1:5432 when it answers, else a
SQLite file), busy with jobs. SIGTERM races the Redis server going away (SHUTDOWN NOSAVE,
SIGTERM, SIGKILL, or SIGSTOP: a server that hangs instead of refusing) at a random offset of up
to 300 ms either way, and in some rounds the database too (new connections refused and every
backend terminated, or its tables locked so writes hang). Every round asserts the process is
gone within shutdown_grace_s + shutdown_exit_s + EXIT_SLACK_S of the signal; in half the rounds
a second SIGTERM follows, and the process is gone within FORCED_EXIT_S + EXIT_SLACK_S of it.

The races were seen in teardowns: processes idle 20-30 minutes after SIGTERM, deaf to a second
one (the exit waited, without a deadline, for outcomes a Redis that had gone would never take).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
import redis

from engine import Client, EngineSettings
from engine.dev.devserver import RedisServer
from engine.worker.exitbound import EXIT_SLACK_S, FORCED_EXIT_S

from . import exit_tasks

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 1.0
EXIT_S = 2.0
ENGINE = {
    "SHUTDOWN_GRACE_S": GRACE_S,
    "SHUTDOWN_EXIT_S": EXIT_S,
    "ISOLATION_PROCESSES": 1,
    "IDLE_WAIT_S": 0.2,
}
# The documented bounds (docs/deploy.md): after the first signal, and after a second one.
BOUND_S = GRACE_S + EXIT_S + EXIT_SLACK_S
FORCED_BOUND_S = FORCED_EXIT_S + EXIT_SLACK_S
# What a loaded machine adds to a measured exit (processes of other rounds share the cores).
LOAD_S = 1.0
ROUNDS = 8
AT_ONCE = 4
REDIS_FAULTS = ("nosave", "sigterm", "sigkill", "sigstop")
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
# The tables whose writes a "lock" fault hangs: the mirror's and the relay's.
LOCKED = ("jobsite_jobrecord", "jobsite_outboxentry")


def _postgres() -> bool:
    """Say whether to use PostgreSQL: it answers, and DATABASE_URL does not ask for SQLite."""
    if os.environ.get("DATABASE_URL", "").startswith("sqlite"):
        return False
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN, connect_timeout=2):
            return True
    except Exception:
        return False


@dataclass
class Databases:
    """A migrated database, copied for each round: a PostgreSQL template or a SQLite file."""

    tmp: Path
    postgres: bool
    template: str = ""
    made: list[str] = field(default_factory=list)

    def url(self, name: str) -> str:
        if self.postgres:
            return PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
        return f"sqlite:///{self.tmp / name}.sqlite3"

    def migrate(self) -> None:
        self.template = f"jobsite_exit_{os.getpid()}"
        if self.postgres:
            self._admin(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')
            self._admin(f'CREATE DATABASE "{self.template}"')
            self.made.append(self.template)
        env = runworker_env("redis://127.0.0.1:1/0", self.url(self.template))
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True
        )

    def new(self, name: str) -> str:
        """Return the URL of a fresh copy of the migrated database."""
        if self.postgres:
            self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
            self.made.append(name)
        else:
            src = sqlite3.connect(self.tmp / f"{self.template}.sqlite3")
            dst = sqlite3.connect(self.tmp / f"{name}.sqlite3")
            with contextlib.closing(src), contextlib.closing(dst):
                src.backup(dst)
        return self.url(name)

    def drop_all(self) -> None:
        for name in reversed(self.made):
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def fault(self, name: str, kind: str) -> Iterator[None]:
        """Make the database fail until the block ends: "gone" (new connections refused, every
        backend terminated: PostgreSQL) or "lock" (the history and outbox tables locked, so
        their writes hang)."""
        if kind == "gone":
            self._admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            self._admin(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
            )
            try:
                yield
            finally:
                self._admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        elif self.postgres:
            import psycopg

            with psycopg.connect(self.url(name)) as conn:
                conn.execute(f"LOCK TABLE {', '.join(LOCKED)} IN ACCESS EXCLUSIVE MODE")
                yield
                conn.rollback()
        else:
            lite = sqlite3.connect(self.tmp / f"{name}.sqlite3", timeout=60, isolation_level=None)
            try:
                lite.execute("BEGIN IMMEDIATE")  # every writer waits (20 s busy timeout)
                yield
                lite.execute("ROLLBACK")
            finally:
                lite.close()

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(sql)


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    dbs = Databases(tmp_path_factory.mktemp("worker-exit"), postgres=_postgres())
    dbs.migrate()
    try:
        yield dbs
    finally:
        if dbs.postgres:
            dbs.drop_all()


def runworker_env(redis_url: str, db_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "bench.history_settings",  # demo.settings + JOBSITE_ENGINE
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "tests-only-" + "k" * 50),
        "DATABASE_URL": db_url,
        "REDIS_URL": redis_url,
        "JOBSITE_TASK_MODULES": "tests.jobsite.exit_tasks",
        "JOBSITE_ENGINE": orjson.dumps(ENGINE).decode(),
    }


@dataclass
class Plan:
    """One round: which process, which faults, when."""

    index: int
    only_worker: bool
    redis_fault: str
    offset_s: float  # > 0: Redis goes that long after the SIGTERM; < 0: before it
    db_fault: str | None
    db_offset_s: float
    sync_job: bool  # a sync job whose thread sleeps on past the bound
    second_after_s: float | None  # a second SIGTERM this long after the first
    busy_s: float  # how long the worker runs jobs before the race


@dataclass
class Outcome:
    plan: Plan
    exit_s: float = -1.0  # from the first SIGTERM (-1: not gone within the bound)
    after_second_s: float | None = None
    status: int | None = None
    late: str = ""  # what went wrong, with the log's tail

    def __str__(self) -> str:
        p = self.plan
        second = f"{self.after_second_s:.2f}" if self.after_second_s is not None else "-"
        second_at = f"{p.second_after_s:.2f}" if p.second_after_s is not None else "-"
        return (
            f"round={p.index} only_worker={p.only_worker} redis={p.redis_fault} "
            f"offset_ms={p.offset_s * 1000:+.0f} db={p.db_fault or '-'} sync_job={p.sync_job} "
            f"second_after_s={second_at} exit_s={self.exit_s:.2f} "
            f"after_second_s={second} status={self.status}"
        )


def plans(rng: random.Random, postgres: bool) -> list[Plan]:
    db_faults = ("gone", "lock") if postgres else ("lock",)
    out = []
    for i in range(ROUNDS):
        out.append(
            Plan(
                index=i,
                only_worker=i % 2 == 1,
                redis_fault=REDIS_FAULTS[i % len(REDIS_FAULTS)],
                offset_s=rng.uniform(-0.3, 0.3),
                db_fault=rng.choice(db_faults) if i % 3 == 0 else None,
                db_offset_s=rng.uniform(-0.3, 0.3),
                sync_job=i % 5 == 2,
                second_after_s=rng.uniform(0.1, 1.0) if i % 4 in (1, 2) else None,
                busy_s=rng.uniform(0.1, 0.6),
            )
        )
    return out


async def feed(url: str, sync_job: bool) -> None:
    async with Client(EngineSettings.from_url(url)) as client:
        calls = [exit_tasks.noop.call(n) for n in range(2000)]
        calls += [exit_tasks.nap.call(0.6) for _ in range(4)]
        if sync_job:
            calls.append(exit_tasks.sync_nap.call(30.0))
        await client.enqueue_many(calls)


def redis_goes(server: RedisServer, fault: str) -> None:
    assert server.process is not None
    if fault == "nosave":
        with contextlib.suppress(redis.RedisError):
            redis.Redis(port=server.port, socket_timeout=2).shutdown(nosave=True)
    else:
        sig = {"sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL, "sigstop": signal.SIGSTOP}
        server.process.send_signal(sig[fault])


def gone_within(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    while proc.poll() is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def race(plan: Plan, dbs: Databases, tmp: Path) -> Outcome:
    """Run one round: start a busy runworker, race its SIGTERM against Redis (and the database)
    going away, time its exit."""
    out = Outcome(plan)
    name = f"{dbs.template}_r{plan.index}"
    log = tmp / f"round{plan.index}.log"
    with RedisServer() as server, contextlib.ExitStack() as stack:
        db_url = dbs.new(name)
        asyncio.run(feed(server.url, plan.sync_job))
        only = ["--only", "worker"] if plan.only_worker else []
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--concurrency", "20", *only],
                cwd=ROOT,
                env=runworker_env(server.url, db_url),
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        stack.callback(_kill_group, proc)
        stack.callback(_resume, server)
        deadline = time.monotonic() + 60
        while b"worker started" not in log.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        time.sleep(plan.busy_s)
        # The events of the race, in time order from now.
        events: list[tuple[float, str]] = [
            (max(0.0, -plan.offset_s), "sigterm"),
            (max(0.0, plan.offset_s), "redis"),
        ]
        if plan.db_fault is not None:
            events.append((max(0.0, plan.offset_s + plan.db_offset_s), "db"))
        began = time.monotonic()
        signalled = 0.0
        for at_s, what in sorted(events):
            time.sleep(max(0.0, began + at_s - time.monotonic()))
            if what == "sigterm":
                signalled = time.monotonic()
                os.kill(proc.pid, signal.SIGTERM)
            elif what == "redis":
                redis_goes(server, plan.redis_fault)
            else:
                assert plan.db_fault is not None
                stack.enter_context(dbs.fault(name, plan.db_fault))
        bound_at = signalled + BOUND_S + LOAD_S
        if plan.second_after_s is not None:
            second_at = signalled + plan.second_after_s
            if not gone_within(proc, second_at):
                os.kill(proc.pid, signal.SIGTERM)
                second_at = time.monotonic()
                if gone_within(proc, second_at + FORCED_BOUND_S + LOAD_S):
                    out.after_second_s = time.monotonic() - second_at
                else:
                    out.late = "a second SIGTERM did not end it\n" + log.read_text()[-4000:]
        if gone_within(proc, bound_at):
            out.exit_s = time.monotonic() - signalled
            out.status = proc.returncode
        elif not out.late:  # late: does a second SIGTERM end it at least?
            os.kill(proc.pid, signal.SIGTERM)
            again = time.monotonic()
            ended = gone_within(proc, again + FORCED_BOUND_S + LOAD_S)
            out.late = f"second SIGTERM ended it: {ended}\n" + log.read_text()[-4000:]
    return out


def _resume(server: RedisServer) -> None:
    """Let a SIGSTOPped server go on, so that its cleanup can stop it."""
    if server.process is not None and server.process.poll() is None:
        server.process.send_signal(signal.SIGCONT)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End what is left of the round's processes (the runworker and its isolation child)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_sigterm_racing_redis_and_the_database_going_away_exits_within_the_bound(
    databases: Databases, tmp_path: Path
) -> None:
    assert shutil.which("redis-server")
    draw = int(os.environ.get("EXIT_RACE_DRAW", time.time_ns() % 100_000))
    began = time.monotonic()
    with ThreadPoolExecutor(AT_ONCE) as pool:
        outcomes = list(
            pool.map(
                lambda p: race(p, databases, tmp_path),
                plans(random.Random(draw), databases.postgres),
            )
        )
    took = time.monotonic() - began
    print(
        f"\ndraw={draw} database={'postgresql' if databases.postgres else 'sqlite'} "
        f"rounds={len(outcomes)} wall_s={took:.1f} bound_s={BOUND_S:g} "
        f"forced_bound_s={FORCED_BOUND_S:g}"
    )
    for outcome in outcomes:
        print(outcome)
    late = [o for o in outcomes if o.late]
    assert not late, "\n\n".join(f"{o}\n{o.late}" for o in late)
    for outcome in outcomes:
        assert outcome.exit_s <= BOUND_S + LOAD_S, outcome
        if outcome.after_second_s is not None:
            assert outcome.after_second_s <= FORCED_BOUND_S + LOAD_S, outcome
        # 0: a clean exit (what was not written is logged, left to the leases); 128 + 15: the
        # guard ended a process that a thread held (a sync job's, a hung database call's); -15:
        # a second SIGTERM after the event loop closed, the default action.
        assert outcome.status in (0, 128 + signal.SIGTERM, -signal.SIGTERM), outcome
