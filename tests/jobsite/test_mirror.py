"""The mirror: stream -> rows, idempotent, replay-safe, crash-safe, resync after a trim."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.db import DatabaseError, connection, transaction

from engine import Client, EngineSettings, QueueKeys
from engine.stream.events import Event
from jobsite.jobs.history import batches, bulkwrite
from jobsite.jobs.history import mirror as mirror_module
from jobsite.jobs.history.batches import apply_batch
from jobsite.jobs.history.mirror import Mirror
from jobsite.jobs.history.reconcile import find_unmirrored
from jobsite.jobs.history.rows import ALL_BUT_ID, row_values
from jobsite.jobs.models import JobRecord, JobSearch
from tests.engine import tasks as t

from .conftest import mirror_all, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def stream(engine: EngineSettings) -> list[tuple[str, dict[str, str]]]:
    with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
        return r.xrange(QueueKeys(engine.prefix, "default").events)


async def make_history(engine: EngineSettings) -> list[str]:
    async with Client(engine) as client:
        jobs = await client.enqueue_many(
            [t.add.call(i, i) for i in range(20)]
            + [t.boom.call(), t.flaky.using(max_retries=1).call()]
        )
    await run_worker(engine)
    return [j.id for j in jobs]


def changes(entries: list[tuple[str, dict[str, str]]]) -> int:
    """Return how many stream entries are state changes (not progress reports)."""
    return sum(1 for _, f in entries if f.get("from") != f.get("to"))


def kept_changes() -> int:
    """Return the state changes the rows hold, after checking none is held twice."""
    ids = [t["id"] for row in JobRecord.objects.all() for t in row.transitions]
    assert len(ids) == len(set(ids))
    return len(ids)


def test_mirror_writes_rows_and_history(engine: EngineSettings) -> None:
    ids = async_to_sync(make_history)(engine)
    async_to_sync(mirror_all)()
    assert JobRecord.objects.count() == 22
    assert JobRecord.objects.filter(state="completed").count() == 20
    boom = JobRecord.objects.get(id=ids[20])
    assert boom.state == "failed" and boom.errors[0]["type"] == "ValueError"
    assert JobRecord.objects.get(id=ids[0]).result == 0
    assert kept_changes() == changes(stream(engine))
    flaky = [(t["from"], t["to"]) for t in JobRecord.objects.get(id=ids[21]).transitions]
    assert flaky[0] == ("unsubmitted", "submitted") and flaky[-1] == ("started", "failed")
    # Begun at their claims: no claim stamp in the hash, the row takes the latest start.
    first = JobRecord.objects.get(id=ids[0])
    assert first.claimed_at is not None and first.claimed_at == first.started_at
    # Options of its own: only claimed, then begun (begin-2.lua); its own stamp, before its start.
    retried = JobRecord.objects.get(id=ids[21])
    assert retried.retried_at is not None and retried.claimed_at is not None
    assert retried.claimed_at <= retried.retried_at


def test_a_batch_rolled_back_in_a_fresh_session_does_not_break_the_next(
    engine: EngineSettings,
) -> None:
    """The first batch of a session makes its staging tables; a rollback drops them again."""
    async_to_sync(make_history)(engine)
    events = [Event.from_entry("default", eid, f) for eid, f in stream(engine)]
    connection.close()  # the next statement opens a fresh session
    with pytest.raises(RuntimeError), transaction.atomic():
        apply_batch(events, {})
        raise RuntimeError("the commit never comes")
    assert not JobRecord.objects.exists()
    apply_batch(events, {})
    assert JobRecord.objects.count() == 22
    assert kept_changes() == changes(stream(engine))


def test_a_row_written_behind_the_mirrors_back_is_updated_not_lost(
    engine: EngineSettings,
) -> None:
    """A row the mirror did not see under its lock makes the fast insert fail; the batch then
    goes through the upsert and still lands."""
    row = {"id": "behind", "queue": "default", "task": "x", "state": "submitted"}
    done = {**row, "state": "completed", "completed_at_ms": str(int(time.time() * 1000))}
    with transaction.atomic():
        bulkwrite.upsert([bulkwrite.Staged("behind", "0001", "[]", row_values(row))], ["state"])
    with transaction.atomic():
        staged = bulkwrite.Staged("behind", "0002", "[]", row_values(done))
        bulkwrite.upsert([staged], ALL_BUT_ID, stored_ids=set())
    written = JobRecord.objects.get(id="behind")
    assert (written.state, written.last_event_id) == ("completed", "0002")
    assert written.completed_at is not None
    JobSearch.objects.create(job_id="stray", text="old words")
    with transaction.atomic():
        bulkwrite.upsert_search([("stray", "new\twords \\ here"), ("fresh", "x")], stored_ids=set())
    texts = dict(JobSearch.objects.values_list("job_id", "text"))
    assert texts == {"stray": "new\twords \\ here", "fresh": "x"}


def test_behind_a_burst_each_row_is_written_once(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job enqueued before any ran: the mirror, behind, carries a job whose hash is
    ahead of its events read so far (unacked) until its later events come, then writes it once.
    """
    ids = async_to_sync(make_history)(engine)
    written: list[str] = []
    real = batches.write_batch

    def counting(batch: batches.Batch, *args: Any) -> int:
        written.extend(s.job for s in batch.jobs)
        return real(batch, *args)

    monkeypatch.setattr(batches, "write_batch", counting)
    group = QueueKeys(engine.prefix, "default").events

    async def drain() -> int:
        mirror = Mirror(["default"], consumer="burst", batch=8)
        try:
            await mirror.start()
            assert await mirror.step(block_ms=50) == 8  # 8 'submitted' of jobs that ran since
            await mirror.settle()
            assert written == []
            assert (await mirror.redis.xpending(group, "mirror"))["pending"] == 8
            while await mirror.step(block_ms=50):
                pass
            assert (await mirror.redis.xpending(group, "mirror"))["pending"] == 0
            return mirror.applied
        finally:
            await mirror.aclose()

    assert async_to_sync(drain)() == len(stream(engine))
    assert sorted(written) == sorted(ids)  # one row write per job
    assert JobRecord.objects.filter(state="completed").count() == 20
    assert kept_changes() == changes(stream(engine))


def test_what_was_carried_is_written_a_batch_at_a_time(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `carry_max` everything carried is written, but never more than about `batch`
    events at once (each job's events together): a batch's memory stays bounded by `batch`
    however much was carried."""
    ids = async_to_sync(make_history)(engine)
    sizes: list[int] = []
    real = batches.write_batch

    def counting(batch: batches.Batch, *args: Any) -> int:
        sizes.append(batch.size)
        return real(batch, *args)

    monkeypatch.setattr(batches, "write_batch", counting)

    entries = stream(engine)
    most_of_one_job = max(Counter(f.get("job") for _, f in entries).values())
    assert async_to_sync(mirror_all)("capped", batch=8, carry_max=16) == len(entries)
    assert len(sizes) > 3 and max(sizes) < 8 + most_of_one_job, sizes
    assert JobRecord.objects.count() == len(ids)
    assert kept_changes() == changes(entries)


def test_carried_entries_outlive_a_mirror_that_stops(engine: EngineSettings) -> None:
    """A mirror that stops while it carries entries leaves them pending: the next one, started
    under the same name, writes them (nothing is lost, nothing is counted twice)."""
    async_to_sync(make_history)(engine)
    group = QueueKeys(engine.prefix, "default").events

    async def carry_then_stop() -> None:
        mirror = Mirror(["default"], consumer="carrier", batch=8)
        try:
            await mirror.start()
            assert await mirror.step(block_ms=50) == 8
            await mirror.settle()
            assert (await mirror.redis.xpending(group, "mirror"))["pending"] == 8
        finally:
            await mirror.aclose()  # the carried entries are dropped from memory, not acked

    async_to_sync(carry_then_stop)()
    assert not JobRecord.objects.exists()
    assert async_to_sync(mirror_all)("carrier") == len(stream(engine))
    assert JobRecord.objects.filter(state="completed").count() == 20
    assert kept_changes() == changes(stream(engine))


def test_search_texts_commit_with_their_rows(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a batch writes its search texts on a connection of its own, alongside
    the rows; the rows commit only once their texts did: a failed text write leaves both to
    the retry."""
    ids = async_to_sync(make_history)(engine)
    monkeypatch.setattr(bulkwrite, "ASIDE_MIN_TEXTS", 1)
    threads: list[str] = []
    real = bulkwrite.write_texts

    def refused(*args: object, **kwargs: object) -> None:
        threads.append(threading.current_thread().name)
        raise DatabaseError("the search table refuses")

    monkeypatch.setattr(bulkwrite, "write_texts", refused)
    monkeypatch.setattr(bulkwrite, "upsert_search", refused)  # the in-line path (SQLite)
    with pytest.raises(DatabaseError):
        async_to_sync(mirror_all)()
    aside = connection.vendor == "postgresql"
    assert threads and all(n.startswith("mirror-search") == aside for n in threads)
    assert not JobRecord.objects.exists() and not JobSearch.objects.exists()
    monkeypatch.undo()
    monkeypatch.setattr(bulkwrite, "ASIDE_MIN_TEXTS", 1)
    monkeypatch.setattr(bulkwrite, "write_texts", real)
    async_to_sync(mirror_all)()  # the same consumer takes up its pending entries
    assert JobRecord.objects.count() == 22
    assert set(JobSearch.objects.values_list("job_id", flat=True)) == set(ids)


def test_replay_and_old_events_change_nothing(engine: EngineSettings) -> None:
    ids = async_to_sync(make_history)(engine)
    async_to_sync(mirror_all)()
    before = {j.id: (j.state, j.last_event_id) for j in JobRecord.objects.all()}
    events = [Event.from_entry("default", eid, f) for eid, f in stream(engine)]
    apply_batch(events, {})  # the whole stream again, without hashes
    old = [e for e in events if e.to_state == "submitted" and e.job == ids[0]]
    apply_batch(old, {})  # an old event alone
    assert {j.id: (j.state, j.last_event_id) for j in JobRecord.objects.all()} == before
    assert kept_changes() == changes(stream(engine))


def test_mirror_killed_before_ack_applies_each_event_once(engine: EngineSettings) -> None:
    async_to_sync(make_history)(engine)

    async def crash_then_restart() -> None:
        first = Mirror(["default"], consumer="m1")
        await first.reader.ensure_groups()
        events = await first.reader.read(500, 100)
        assert events
        # the process dies after reading (and even after committing) but before XACK
        await asyncio.to_thread(lambda: None)
        await first.aclose()
        second = Mirror(["default"], consumer="m1")
        await second.start()  # re-reads its pending entries
        while await second.step(block_ms=50):
            pass
        await second.aclose()
        other = Mirror(["default"], consumer="m2")  # nothing is left pending for anyone
        assert await other.reader.pending(100, min_idle_ms=0) == []
        await other.aclose()

    async_to_sync(crash_then_restart)()
    assert kept_changes() == changes(stream(engine))
    assert JobRecord.objects.filter(state="completed").count() == 20


def test_other_consumer_reclaims_a_dead_consumers_entries(engine: EngineSettings) -> None:
    async_to_sync(make_history)(engine)

    async def go() -> int:
        dead = Mirror(["default"], consumer="dead")
        await dead.reader.ensure_groups()
        taken = len(await dead.reader.read(500, 100))
        await dead.aclose()
        alive = Mirror(["default"], consumer="alive")
        claimed = await alive.reader.pending(500, min_idle_ms=0)
        await alive.apply(claimed)
        await alive.aclose()
        return taken

    taken = async_to_sync(go)()
    assert taken > 0 and kept_changes() == changes(stream(engine)[:taken])


def test_a_running_mirror_takes_over_what_a_dead_one_left_unacked(
    engine: EngineSettings,
) -> None:
    """A mirror that dies after reading is not started again: the one still running applies
    its entries once they were idle long enough, without a restart of its own."""
    async_to_sync(make_history)(engine)

    async def go() -> tuple[int, int]:
        dead = Mirror(["default"], consumer="dead")
        await dead.reader.ensure_groups()
        taken = len(await dead.reader.read(500, 100))
        await dead.aclose()  # died before its ack; its entries stay pending under its name
        alive = Mirror(["default"], consumer="alive", reclaim_every_s=0.05, reclaim_idle_ms=300)
        stopping = asyncio.Event()
        running = asyncio.create_task(alive.run(stopping))
        deadline = time.monotonic() + 10
        while alive.applied < taken and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stopping.set()
        await running
        left = await alive.redis.xpending(QueueKeys(engine.prefix, "default").events, "mirror")
        await alive.aclose()
        return taken, left["pending"]

    taken, left = async_to_sync(go)()
    assert taken > 0 and left == 0
    assert kept_changes() == changes(stream(engine))
    assert JobRecord.objects.filter(state="completed").count() == 20


def test_resync_when_the_stream_was_trimmed_past_the_mirror(engine: EngineSettings) -> None:
    ids = async_to_sync(make_history)(engine)
    key = QueueKeys(engine.prefix, "default").events
    with redis.Redis.from_url(engine.redis_url) as r:
        r.xgroup_create(key, "mirror", id="0")
        r.xtrim(key, maxlen=0)
    async_to_sync(mirror_all)()
    assert JobRecord.objects.filter(id__in=ids).count() == 22
    assert JobRecord.objects.filter(state="completed").count() == 20


def test_a_resync_writes_only_the_rows_that_did_not_record_their_end(
    engine: EngineSettings,
) -> None:
    ids = async_to_sync(make_history)(engine)
    async_to_sync(mirror_all)()
    JobRecord.objects.filter(id__in=ids[:5]).delete()  # lost in the database
    JobRecord.objects.filter(id=ids[5]).update(state="started", completed_at=None)  # behind
    JobRecord.objects.filter(id__in=ids[6:]).update(result="kept")  # what a write would undo

    async def resync() -> int:
        mirror = Mirror(["default"], consumer="mirror-resync")
        try:
            return await mirror.gaps.resync("default")
        finally:
            await mirror.aclose()

    assert async_to_sync(resync)() == 6
    assert JobRecord.objects.filter(id__in=ids, state__in=["completed", "failed"]).count() == 22
    assert set(JobRecord.objects.filter(result="kept").values_list("id", flat=True)) == set(ids[6:])


def test_reconcile_hands_jobs_without_a_row_to_the_mirror(engine: EngineSettings) -> None:
    ids = async_to_sync(make_history)(engine)
    async_to_sync(mirror_all)()
    JobRecord.objects.filter(id__in=ids[:5]).delete()  # rows lost in the database
    assert find_unmirrored(["default"]) == 0  # once: it may be on its way
    assert find_unmirrored(["default"]) == 5  # twice, a pass apart: handed to the mirror
    with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
        assert r.smembers(QueueKeys(engine.prefix, "default").missed) == set(ids[:5])
    async_to_sync(mirror_all)()  # the mirror rebuilds them from their hashes
    assert JobRecord.objects.filter(id__in=ids).count() == 22
    assert find_unmirrored(["default"]) == 0


def test_poison_payloads_are_mirrored_as_text(engine: EngineSettings) -> None:
    keys = QueueKeys(engine.prefix, "default")
    with redis.Redis.from_url(engine.redis_url) as r:
        r.hset(
            keys.job("poison"),
            mapping={
                "id": "poison",
                "task": "x",
                "state": "submitted",
                "args": b'["\xff',
                "kwargs": "{",
                "progress_message": "half \x00 way",
            },
        )
        r.xadd(
            keys.events,
            {
                "job": "poison",
                "from": "unsubmitted",
                "to": "submitted",
                "at": str(int(time.time() * 1000)),
            },
        )
    async_to_sync(mirror_all)()
    row = JobRecord.objects.get(id="poison")
    assert isinstance(row.args, str) and row.args.startswith('["') and row.kwargs == "{"
    assert row.progress_message == "half \ufffd way"  # PostgreSQL text refuses NUL


async def logged_jobs(engine: EngineSettings) -> list[str]:
    """Run an async job that logs 5 lines (3 kept) and a sync one that logs 3; return their ids."""
    async with Client(engine) as client:
        jobs = [
            await client.enqueue(t.logging_async, 5),
            await client.enqueue(t.logging_sync, ["one", "nul \x00 here", "ünï 🚀"]),
        ]
    await run_worker(dataclasses.replace(engine, job_log_max_lines=3))
    return [j.id for j in jobs]


def test_log_lines_reach_the_row(engine: EngineSettings) -> None:
    capped, synced = async_to_sync(logged_jobs)(engine)
    async_to_sync(mirror_all)()
    row = JobRecord.objects.get(id=capped)
    assert row.state == "completed"
    assert [x["message"] for x in row.logs] == [f"line {i} of attempt 1" for i in (2, 3, 4)]
    assert {x["attempt"] for x in row.logs} == {1} and row.logs_dropped == 2
    assert all(isinstance(x["at_ms"], int) and x["at_ms"] > 0 for x in row.logs)
    row = JobRecord.objects.get(id=synced)
    # PostgreSQL's jsonb refuses NUL: the mirror stores U+FFFD in its place (as for errors).
    assert [x["message"] for x in row.logs] == ["one", "nul \ufffd here", "ünï 🚀"]
    assert row.logs_dropped == 0


async def log_while_running(engine: EngineSettings) -> tuple[list[str], str]:
    """Mirror while a job that logged is still running; return its row's lines and state."""
    async with Client(engine) as client:
        job = await client.enqueue(t.log_then_wait, "halfway", 1.0)
        worker = asyncio.create_task(run_worker(engine))
        try:
            for _ in range(200):
                if (await client.jobs.get(job.id)).logs:
                    break
                await asyncio.sleep(0.02)
            await mirror_all()
            row = await JobRecord.objects.aget(id=job.id)
        finally:
            await worker
    return [x["message"] for x in row.logs], row.state


def test_a_log_line_reaches_the_row_of_a_running_job(engine: EngineSettings) -> None:
    assert async_to_sync(log_while_running)(engine) == (["halfway"], "started")


async def fingerprinted(engine: EngineSettings) -> tuple[list[str], str]:
    """Fail two `lookup` jobs, then submit a replay of the first; return their ids."""
    async with Client(engine) as client:
        jobs = [await client.enqueue(t.lookup, "17"), await client.enqueue(t.lookup, "4242")]
        await run_worker(engine)
        replay = t.add.call(1, 2)
        replay.replay_of = jobs[0].id
        await client.enqueue_many([replay])
    return [j.id for j in jobs], replay.id


@pytest.mark.parametrize("trimmed", [False, True], ids=["events", "resync"])
def test_fingerprint_and_replay_of_reach_the_row(engine: EngineSettings, trimmed: bool) -> None:
    (first, second), replay = async_to_sync(fingerprinted)(engine)
    if trimmed:  # the mirror finds the stream trimmed past it and resyncs from the hashes
        key = QueueKeys(engine.prefix, "default").events
        with redis.Redis.from_url(engine.redis_url) as r:
            r.xgroup_create(key, "mirror", id="0")
            r.xtrim(key, maxlen=0)
    async_to_sync(mirror_all)()
    rows = {r.id: r for r in JobRecord.objects.all()}
    assert rows[first].state == "failed" and len(rows[first].fingerprint) == 16
    assert (
        rows[first].fingerprint == rows[second].fingerprint == rows[first].errors[-1]["fingerprint"]
    )
    assert rows[replay].replay_of == first and rows[replay].fingerprint == ""
    assert rows[first].replay_of == ""
    assert list(JobRecord.objects.filter(replay_of=first).values_list("id", flat=True)) == [replay]


def test_notes_of_folded_submits_change_no_row_and_are_acked(engine: EngineSettings) -> None:
    """A deduplicated or debounced submit leaves a note (from = to), not a transition: the
    mirror acks it and writes no row for it, even for a holder whose hash is gone."""

    async def feed() -> tuple[str, str, str]:
        async with Client(engine) as client:
            throttled = t.add.using(deduplication={"id": "t", "mode": "throttle", "ttl_s": 60})
            gone = await client.enqueue(throttled, 1, 1)
            await client.redis.delete(client.keys("default").job(gone.id))  # its hash expired
            await client.enqueue(throttled, 2, 2)  # ignored: a note on a job Redis forgot
            debounced = t.add.using(debounce={"id": "d"}, delay_s=60)
            old = await client.enqueue(debounced, 3, 3)
            new = await client.enqueue(debounced, 4, 4)
            return gone.id, old.id, new.id

    gone, old, new = async_to_sync(feed)()
    notes = [f for _, f in stream(engine) if "note" in f]
    assert [f["note"] for f in notes] == ["deduplicated", "debounced"]
    applied = async_to_sync(mirror_all)()
    assert applied == len(stream(engine))  # every entry, notes included, applied and acked
    rows = {r.id: r for r in JobRecord.objects.all()}
    assert rows[old].state == "cancelled" and rows[new].state == "scheduled"
    assert [tr["to"] for tr in rows[old].transitions] == ["scheduled", "cancelled"]
    assert rows[gone].state == "submitted"  # from its own event, not the note's empty state


def test_the_mirror_keeps_its_connection_across_batches_whatever_conn_max_age(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CONN_MAX_AGE 0 (Django's default) ends a connection with each request; a mirror writing
    # batch after batch keeps it, and drops it only once it broke.
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    connection.ensure_connection()
    connection.close_at = time.monotonic()  # what Django sets for CONN_MAX_AGE 0
    closed: list[bool] = []
    monkeypatch.setattr(connection, "close", lambda: closed.append(True))
    for _ in range(2):
        mirror_module._closing_stale(JobRecord.objects.count)
    assert closed == []
    connection.errors_occurred = True
    monkeypatch.setattr(connection, "is_usable", lambda: False)
    mirror_module._closing_stale(JobRecord.objects.count)
    assert closed == [True]


def test_a_gap_check_with_nothing_to_repair_leaves_the_batch_being_written(
    engine: EngineSettings,
) -> None:
    # The check runs every second: waiting for the batch being written each time would stop
    # the next read from overlapping its write.
    async def check() -> int:
        mirror = Mirror(["default"], consumer="checker")
        try:
            await mirror.reader.ensure_groups()
            mirror._writing = asyncio.get_running_loop().create_future()  # a write under way
            return await asyncio.wait_for(mirror.gaps.repair(), timeout=5)
        finally:
            mirror._writing = None
            await mirror.aclose()

    assert async_to_sync(check)() == 0


def test_a_mirror_gives_memory_back_when_it_falls_idle_after_a_backlog(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobsite.jobs import heap
    from jobsite.jobs.history import mirror as mirror_module

    given: list[int] = []
    monkeypatch.setattr(heap, "give_back", lambda: given.append(1))
    monkeypatch.setattr(mirror_module, "GIVE_BACK_BATCH", 9)
    async_to_sync(make_history)(engine)  # 22 jobs, 3 or more events each

    async def drain() -> None:
        mirror = Mirror(["default"], consumer="idle")
        try:
            await mirror.start()
            while await mirror.step(block_ms=50):
                pass
            assert given == [1]
            await mirror.step(block_ms=50)  # idle again, nothing new applied
            assert given == [1]
        finally:
            await mirror.aclose()

    async_to_sync(drain)()


def test_a_busy_mirror_gives_memory_back_without_falling_idle(
    engine: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobsite.jobs import heap
    from jobsite.jobs.history import mirror as mirror_module

    given: list[int] = []
    monkeypatch.setattr(heap, "give_back", lambda: given.append(1))
    monkeypatch.setattr(mirror_module, "GIVE_BACK_BATCH", 10**9)  # never for falling idle
    monkeypatch.setattr(mirror_module, "GIVE_BACK_BUSY_S", 0.0)  # due at each busy step
    async_to_sync(make_history)(engine)  # 22 jobs, 3 or more events each

    async def drain() -> tuple[int, int]:
        mirror = Mirror(["default"], consumer="busy", batch=5)  # a write in flight each step
        try:
            await mirror.start()
            while await mirror.step(block_ms=50):
                pass
            return len(given), mirror.applied
        finally:
            await mirror.aclose()

    gave, applied = async_to_sync(drain)()
    assert applied > 10 and gave >= 1
