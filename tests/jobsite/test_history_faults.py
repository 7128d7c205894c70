"""The history never loses a job: real runworker processes, a private redis-server, the
database of DATABASE_URL (SQLite by default, a file of its own; PostgreSQL: a database named
after the test one with `_faults`), default settings unless a test says otherwise.

Each test prints its figures and asserts 0 jobs without a row and 0 rows out of their final
state. Lean sizes (seconds); the full-size runs are `bin/bench-mirror --faults`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from bench.history_faults import Site, new_site, pause_run, pg_url, redis_for

from ..faultproxy import FaultProxy

# Jobs of a burst: 40,000 jobs write 120,000 events, past the 100,000 entries the stream was
# capped at before the cap followed the mirror (the jobs trimmed unread had no row, ever).
BURST = 40_000
# How long a lock or an unreachable database lasts (30 s in bin/bench-mirror --faults).
LOCK_S = FAULT_S = 12.0


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("history-faults")
    base = os.environ.get("DATABASE_URL", "")
    if base.startswith("postgres"):
        name = urlsplit(base).path.lstrip("/") or "jobsite"
        url = pg_url(base, f"{name}_faults")
    else:
        url = f"sqlite:///{tmp}/history.sqlite3"
    site = new_site(tmp, url)
    try:
        yield site
    finally:
        site.drop()


@pytest.fixture
def site(migrated: Site) -> Iterator[Site]:
    migrated.engine = {}
    with redis_for(migrated):
        yield migrated


def _check(site: Site, what: str, tally: object, seconds: float) -> None:
    print(f"\n{what}: {tally} settled_in_s={seconds:.1f}")
    assert site.tally().missing == 0
    assert site.tally().unsettled == 0


def test_a_paused_mirror_catches_up_exactly(site: Site) -> None:
    figures = asyncio.run(pause_run(site, BURST, pause_s=10))
    print(f"\npaused mirror: {figures}")
    assert figures["stream_entries_held"] >= 3 * BURST  # nothing it had not read was trimmed
    assert (figures["missing"], figures["unsettled"]) == (0, 0)
    assert figures["gaps"].get("gap_entries", 0) == 0


# Jobs of the other runs: enough to keep the worker and the mirror busy through the fault.
JOBS = 15_000


@contextlib.contextmanager
def history_locked(site: Site) -> Iterator[None]:
    """Hold the history table locked from another session (PostgreSQL LOCK TABLE; SQLite an
    open write transaction) until the block ends."""
    if site.postgres:
        import psycopg

        with psycopg.connect(site.db_url) as conn:
            conn.execute("LOCK TABLE jobsite_jobrecord IN ACCESS EXCLUSIVE MODE")
            yield
            conn.rollback()
    else:
        conn = sqlite3.connect(urlsplit(site.db_url).path, timeout=60, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
            conn.execute("ROLLBACK")
        finally:
            conn.close()


def _warm(site: Site, mirrors: int = 1, db_url: str | None = None) -> list[Any]:
    site.worker()
    procs = [site.mirror(f"mirror{i}", db_url=db_url) for i in range(mirrors)]
    asyncio.run(site.feed(500))
    tally, _ = site.settle(120)
    assert tally.missing == 0, tally
    return procs


def test_a_locked_history_table_is_waited_out_and_the_worker_beside_goes_on(
    site: Site,
) -> None:
    # One runworker process: the worker and the mirror side by side, with a synchronous
    # receiver of job_finished (run on the thread the process shares for such calls: before the
    # mirror had a database thread of its own, it queued behind the mirror's blocked write).
    site.start("both", "worker,mirror", "--concurrency", "200", env={"HISTORY_SYNC_RECEIVER": "1"})
    asyncio.run(site.feed(500))
    tally, _ = site.settle(120)
    assert tally.missing == 0, tally
    jobs = 2000  # a few seconds of work, well inside the lock
    with history_locked(site):
        began = time.monotonic()
        asyncio.run(site.feed(jobs))
        ran_s = asyncio.run(site.drained(timeout_s=LOCK_S))
        left = asyncio.run(site.queued())
        print(f"\n{jobs} jobs ran in {ran_s:.1f} s while the history table was locked")
        assert left == 0  # every job ran: the worker did not wait for the mirror's database
        time.sleep(max(0.0, LOCK_S - (time.monotonic() - began)))
    tally, seconds = site.settle()
    _check(site, f"history table locked {LOCK_S:g} s while {jobs} jobs ran", tally, seconds)


def test_a_burst_worker_waits_out_a_locked_table_before_it_exits(site: Site) -> None:
    """`runworker --burst` (worker and mirror) drains the streams before it exits: a history
    table locked past SQLite's busy timeout (and PostgreSQL's lock) is waited out, not a crash."""
    jobs = 5000
    asyncio.run(site.feed(jobs))
    proc = site.start("burst", "worker,mirror", "--burst", "--concurrency", "100")
    deadline = time.monotonic() + 60
    while "worker started" not in site.log("burst"):  # its checks ran on an unlocked database
        assert proc.poll() is None and time.monotonic() < deadline, site.log("burst")
        time.sleep(0.05)
    with history_locked(site):
        ran_s = asyncio.run(site.drained(timeout_s=60))
        time.sleep(8.0)  # past SQLite's 5 s busy timeout: the last drain waits too
        assert proc.poll() is None, site.log("burst")  # still waiting, not crashed
    assert proc.wait(timeout=120) == 0, site.log("burst")
    tally = site.tally()
    _check(site, f"burst of {jobs} jobs ({ran_s:.1f} s) through a locked table", tally, 0.0)


def test_postgres_unreachable_refusing_then_blackholed_is_waited_out(
    site: Site, tmp_path: Path
) -> None:
    if not site.postgres:
        pytest.skip("a network between the mirror and its database: PostgreSQL")
    parts = urlsplit(site.db_url)
    with FaultProxy(parts.port or 5432) as proxy:
        proxied = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
        _warm(site, db_url=proxied)
        proxy.refusing.set()
        proxy.reset_all()
        asyncio.run(site.feed(JOBS // 2))
        time.sleep(FAULT_S / 2)
        proxy.refusing.clear()
        proxy.blackholed.set()
        asyncio.run(site.feed(JOBS // 2))
        time.sleep(FAULT_S / 2)
        proxy.blackholed.clear()
        tally, seconds = site.settle()
    log = site.log("mirror0")
    waits = log.count("loop=mirror")
    print(f"\nmirror log lines while PostgreSQL was away: {waits}")
    assert waits <= FAULT_S + 2  # one a second at most
    _check(site, f"PostgreSQL refused then blackholed {FAULT_S:g} s", tally, seconds)


def test_a_mirror_killed_mid_batch_and_started_again_loses_nothing(site: Site) -> None:
    (mirror,) = _warm(site)
    asyncio.run(site.feed(JOBS))
    deadline = time.monotonic() + 30
    while site.tally().rows < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    Site.stop(mirror, signal.SIGKILL)
    asyncio.run(site.drained())
    site.mirror("mirror-again")
    tally, seconds = site.settle()
    took = "took over events a dead mirror" in site.log("mirror-again")
    print(f"\ntook over the dead mirror's pending entries at start: {took}")
    _check(site, f"mirror SIGKILLed mid-batch during {JOBS} jobs, started again", tally, seconds)


def test_two_mirrors_on_one_host_share_the_work(site: Site) -> None:
    _warm(site, mirrors=2)
    asyncio.run(site.feed(JOBS))
    tally, seconds = site.settle()
    _check(site, f"two mirrors, {JOBS} jobs", tally, seconds)


def test_the_hard_cap_reports_the_gap_rebuilds_and_counts_the_rest(site: Site) -> None:
    site.engine = {"EVENTS_MAXLEN": 3000}
    (mirror,) = _warm(site)
    Site.stop(mirror)
    # 300 jobs whose hashes expire after 1 s run first: all their 900 events are trimmed
    # unread, and their hashes go (lost: counted). Of the 1,200 jobs after them (3,600
    # events), 600 more events go past the cap of 3,000: those jobs are rebuilt.
    short, kept = 300, 1200
    asyncio.run(site.feed(short, result_ttl_s=1))
    asyncio.run(site.drained())
    asyncio.run(site.feed(kept))
    asyncio.run(site.drained())
    time.sleep(2.5)  # the short jobs' hashes expire; the cleaner trims past the group
    before = asyncio.run(site.redis_info())
    site.mirror("mirror-after")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        gaps = asyncio.run(site.redis_info())
        if gaps.get("gap_jobs", 0) and not gaps.get("missed", 0):
            break
        time.sleep(0.25)
    tally = site.tally()
    gaps = asyncio.run(site.redis_info())
    print(f"\nhard cap 3000 entries, mirror stopped: before={before} after={gaps} {tally}")
    assert before["gap_entries"] > 0 and before["stream_entries"] <= 3000
    assert gaps["gap_rebuilt"] > 0
    assert gaps.get("gap_unrecorded", 0) == 0
    assert tally.missing == gaps["gap_lost"] == short
    assert tally.unsettled == 0
    assert "event stream trimmed past the group" in site.log("worker")
    assert "rebuilt jobs whose events were trimmed unread" in site.log("mirror-after")


def test_jobs_past_a_full_missed_set_are_rebuilt_by_a_resync(site: Site) -> None:
    site.engine = {"EVENTS_MAXLEN": 300}
    (mirror,) = _warm(site)
    Site.stop(mirror)
    # 1,200 jobs (3,600 events) with the mirror away and a cap of 300 entries: about 3,300 go
    # unread, and the missed SET takes 100 jobs (a third of the cap); the rest are only counted.
    asyncio.run(site.feed(1200))
    asyncio.run(site.drained())
    deadline = time.monotonic() + 30
    # The cleaner trims down to the cap, past the full missed SET.
    while (info := asyncio.run(site.redis_info())).get("gap_unrecorded", 0) == 0 or info[
        "stream_entries"
    ] > 300:
        assert time.monotonic() < deadline, f"the cleaner never trimmed past the full SET: {info}"
        time.sleep(0.25)
    site.mirror("mirror-after")
    tally, _ = site.settle(120)
    # The resync writes its rows first and counts them after: wait for the count.
    deadline = time.monotonic() + 30
    while (gaps := asyncio.run(site.redis_info())).get("gap_resynced", 0) < gaps.get(
        "gap_unrecorded", 0
    ) and time.monotonic() < deadline:
        time.sleep(0.25)
    print(f"\nhard cap 300 entries, mirror away: {gaps} {tally}")
    assert gaps["gap_unrecorded"] > 0 and gaps["gap_jobs"] > 0
    assert tally.missing == 0 and tally.unsettled == 0, tally
    # The jobs only counted are rebuilt too, and no longer reported lost.
    assert gaps.get("gap_resynced", 0) == gaps["gap_unrecorded"]
    assert "resynced queue=default" in site.log("mirror-after")
    assert asyncio.run(site.gap_lost()) == (0, 0), gaps  # the metrics, the API
