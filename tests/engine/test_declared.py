"""Declared repeatables (schedules in settings): sync_declared and declare-4.lua on a real Redis."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from engine import (
    Client,
    ConfigError,
    EngineSettings,
    Repeatable,
    SyncReport,
    declared_repeatable,
    sync_declared,
)
from engine.periodic.scheduler import Scheduler
from engine.seam.scripts import DeclaredEntry
from engine.transport.connection import connect

from . import tasks as t


def nightly(cron: str = "0 3 * * *", tz: str = "Europe/Paris", *args: int) -> Repeatable:
    return declared_repeatable(
        "nightly", t.add.call(*(args or (1, 2))), limit_bytes=1 << 20, cron=cron, tz=tz
    )


def minutely(every_s: float = 60) -> Repeatable:
    return declared_repeatable("minutely", t.add.call(3, 4), limit_bytes=1 << 20, every_s=every_s)


async def state(client: Client) -> dict[str, object]:
    """Return the declared set, the repeatables and their next ticks of queue default."""
    k = client.keys("default")
    return {
        "declared": await client.redis.smembers(k.declared),
        "repeats": await client.redis.hgetall(k.repeats),
        "due": dict(await client.redis.zrange(k.repeat_due, 0, -1, withscores=True)),
    }


async def test_sync_creates_updates_and_removes(client: Client, settings: EngineSettings) -> None:
    k = client.keys("default")
    report = await sync_declared(settings, client.redis, [nightly(), minutely()])
    assert report == SyncReport(created=2)
    got = {rep.name: (rep, due) for rep, due in await client.repeats.list("default")}
    assert got["nightly"][0].origin == "settings" and not got["nightly"][0].overridden
    assert got["nightly"][0].job["task"] == "add" and got["nightly"][0].tz == "Europe/Paris"
    # every_s ticks on a grid from the epoch: the same whenever a worker syncs.
    assert got["minutely"][1] is not None and got["minutely"][1] % 60_000 == 0
    assert await client.redis.smembers(k.declared) == {"nightly", "minutely"}

    # Unchanged: nothing written, the next tick (moved on by a scheduler, say) stays.
    await client.redis.zadd(k.repeat_due, {"nightly": 123})
    before = await state(client)
    assert await sync_declared(settings, client.redis, [minutely(), nightly()]) == SyncReport()
    assert await state(client) == before

    # Changed: stored anew, its next tick computed again.
    report = await sync_declared(settings, client.redis, [nightly("0 4 * * *"), minutely()])
    assert report == SyncReport(updated=1)
    rep = await client.repeats.get("default", "nightly")
    assert rep is not None and rep.cron == "0 4 * * *"
    assert await client.redis.zscore(k.repeat_due, "nightly") not in (None, 123)

    # No longer declared: removed, with its next tick and last-tick record.
    await client.redis.hset(k.repeat_last, "minutely", "minutely@60000")
    report = await sync_declared(settings, client.redis, [nightly("0 4 * * *")])
    assert report == SyncReport(removed=1)
    assert await client.repeats.get("default", "minutely") is None
    assert await client.redis.zscore(k.repeat_due, "minutely") is None
    assert await client.redis.hget(k.repeat_last, "minutely") is None
    assert await client.redis.smembers(k.declared) == {"nightly"}

    # Nothing declared any more: the queue's declared set goes too.
    assert await sync_declared(settings, client.redis, []) == SyncReport(removed=1)
    assert await state(client) == {"declared": set(), "repeats": {}, "due": {}}


async def test_runtime_repeatables_are_never_touched(
    client: Client, settings: EngineSettings
) -> None:
    await client.repeats.add("cleanup", t.add.call(9, 9), every_s=30)
    await client.repeats.add("nightly", t.add.call(8, 8), every_s=45)  # a declared name, taken
    before = await state(client)
    report = await sync_declared(settings, client.redis, [nightly()])
    assert report == SyncReport(conflicts=("default/nightly",))
    assert await state(client) == before  # not declared: its removal would not touch it either
    assert await sync_declared(settings, client.redis, []) == SyncReport()
    assert await state(client) == before
    rep = await client.repeats.get("default", "nightly")
    assert rep is not None and (rep.origin, rep.every_s) == ("runtime", 45)


@pytest.mark.parametrize("edit", ["pause", "resume", "add"])
async def test_a_run_time_edit_overrides_until_the_declaration_goes(
    client: Client, settings: EngineSettings, edit: str
) -> None:
    await sync_declared(settings, client.redis, [nightly()])
    if edit == "pause":
        await client.repeats.pause("default", "nightly")
    elif edit == "resume":
        await client.repeats.resume("default", "nightly")
    else:
        await client.repeats.add("nightly", t.add.call(5, 5), cron="0 5 * * *")
    edited = await state(client)
    rep = await client.repeats.get("default", "nightly")
    assert rep is not None and rep.origin == "settings" and rep.overridden
    assert rep.paused is (edit == "pause")

    # A changed declaration does not clobber the run-time version ...
    report = await sync_declared(settings, client.redis, [nightly("0 6 * * *")])
    assert report == SyncReport(kept_overrides=1)
    assert await state(client) == edited
    # ... but dropping the declaration removes it.
    assert await sync_declared(settings, client.redis, []) == SyncReport(removed=1)
    assert await client.repeats.get("default", "nightly") is None


async def test_a_declared_repeatable_removed_at_run_time_comes_back_on_the_next_sync(
    client: Client, settings: EngineSettings
) -> None:
    await sync_declared(settings, client.redis, [nightly()])
    first = await state(client)
    assert await client.repeats.remove("default", "nightly")
    assert await sync_declared(settings, client.redis, [nightly()]) == SyncReport(created=1)
    assert await state(client) == first


async def test_declarations_move_between_queues(client: Client, settings: EngineSettings) -> None:
    await sync_declared(settings, client.redis, [nightly()])
    moved = declared_repeatable(
        "nightly", t.add.using(queue="reports").call(1, 2), limit_bytes=1 << 20, cron="0 3 * * *"
    )
    report = await sync_declared(settings, client.redis, [moved])
    assert report == SyncReport(created=1, removed=1)
    assert await client.repeats.get("default", "nightly") is None
    got = await client.repeats.get("reports", "nightly")
    assert got is not None and got.queue == "reports"


async def test_bad_declarations_are_refused(client: Client, settings: EngineSettings) -> None:
    with pytest.raises(ConfigError, match="declared twice"):
        await sync_declared(settings, client.redis, [nightly(), nightly("0 1 * * *")])
    with pytest.raises(ConfigError, match="depend"):
        declared_repeatable(
            "x", t.add.using(depends_on=["a"]).call(1, 2), limit_bytes=1 << 20, every_s=1
        )
    with pytest.raises(ConfigError, match="origin"):
        Repeatable(name="x", queue="default", job={}, every_s=1, origin="elsewhere")  # type: ignore[arg-type]
    assert await state(client) == {"declared": set(), "repeats": {}, "due": {}}


async def test_an_unreadable_declared_definition_is_replaced(
    client: Client, settings: EngineSettings
) -> None:
    k = client.keys("default")
    await sync_declared(settings, client.redis, [nightly()])
    await client.redis.hset(k.repeats, "nightly", "{not json")
    await client.redis.hset(k.repeats, "stranger", "{not json")  # not ours: left alone
    report = await sync_declared(settings, client.redis, [nightly(), minutely()])
    assert report.updated == 1 and report.conflicts == ()
    report = await sync_declared(
        settings,
        client.redis,
        [declared_repeatable("stranger", t.add.call(1, 1), limit_bytes=1 << 20, every_s=5)],
    )
    assert report.conflicts == ("default/stranger",) and report.removed == 2
    assert await client.redis.hget(k.repeats, "stranger") == "{not json"


async def test_many_concurrent_syncs_leave_one_schedule(
    client: Client, settings: EngineSettings
) -> None:
    declaration = [nightly(), minutely()]
    others = [connect(settings), connect(settings)]
    try:
        reports = await asyncio.gather(
            *(sync_declared(settings, client.redis, declaration) for _ in range(20)),
            *(sync_declared(settings, r, declaration) for r in others for _ in range(10)),
        )
    finally:
        for r in others:
            await r.aclose()
    assert sum(r.created for r in reports) == 2  # each name created by exactly one sync
    assert {(r.updated, r.removed, r.kept_overrides) for r in reports} == {(0, 0, 0)}
    got = await state(client)
    assert got["declared"] == {"nightly", "minutely"}
    assert got["repeats"] == {rep.name: rep.to_json().decode() for rep in declaration}
    assert set(got["due"]) == {"nightly", "minutely"}  # type: ignore[arg-type]
    k = client.keys("default")
    assert await client.redis.hlen(k.repeats) == 2

    # The same again with a changed declaration: one final state, whoever wins.
    changed = [nightly("0 4 * * *")]
    reports = await asyncio.gather(
        *(sync_declared(settings, client.redis, changed) for _ in range(20))
    )
    assert sum(r.updated for r in reports) == 1 and sum(r.removed for r in reports) == 1
    got = await state(client)
    assert got["declared"] == {"nightly"}
    assert got["repeats"] == {"nightly": changed[0].to_json().decode()}


async def test_a_run_time_edit_racing_a_removal_leaves_nothing_behind(
    client: Client, settings: EngineSettings
) -> None:
    for _ in range(20):
        await sync_declared(settings, client.redis, [nightly()])

        async def pause() -> None:
            with contextlib.suppress(ConfigError):  # removed first
                await client.repeats.pause("default", "nightly")

        await asyncio.gather(sync_declared(settings, client.redis, []), pause())
        # Paused first: overridden, then removed with its declaration. Removed first: the
        # pause finds nothing. Never a settings repeatable outside the declared set.
        await sync_declared(settings, client.redis, [])
        assert await state(client) == {"declared": set(), "repeats": {}, "due": {}}


async def test_declared_every_s_ticks_fire_on_the_grid(
    client: Client, settings: EngineSettings
) -> None:
    rep = declared_repeatable("tick", t.add.call(1, 1), limit_bytes=1 << 20, every_s=0.25)
    await sync_declared(settings, client.redis, [rep])
    scheduler = Scheduler(settings, client.redis, ["default"])
    stopping = asyncio.Event()
    run = asyncio.create_task(scheduler.run(stopping))
    await asyncio.sleep(1.1)
    stopping.set()
    await run
    k = client.keys("default")
    ids = [key.rsplit(":", 1)[1] async for key in client.redis.scan_iter(match=k.job("tick@*"))]
    assert 3 <= len(ids) <= 5
    assert all(int(i.split("@")[1]) % 250 == 0 for i in ids)
    job = await client.jobs.get(ids[0])
    assert (job.task, job.args, job.repeat) == ("add", [1, 1], "tick")


async def test_declare_script_on_its_own(client: Client) -> None:
    k = client.keys("default")
    rep = minutely()
    done = await client.scripts.declare(
        k, repeatables=[DeclaredEntry(rep.name, rep.to_json(), None)]
    )
    assert (done.created, done.updated, done.removed, done.kept_overrides) == (1, 0, 0, 0)
    assert await client.redis.zscore(k.repeat_due, "minutely") is None  # no tick given
    done = await client.scripts.declare(
        k, repeatables=[DeclaredEntry(rep.name, rep.to_json(), 60_000)]
    )
    assert (done.created, done.updated, done.conflicts) == (0, 0, ())  # same bytes: untouched
    assert await client.redis.zscore(k.repeat_due, "minutely") is None
    done = await client.scripts.declare(k, repeatables=[])
    assert done.removed == 1 and await client.redis.exists(k.declared, k.repeats) == 0
