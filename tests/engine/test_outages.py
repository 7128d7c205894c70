"""Redis outages as health sees them: what a watch records, and what a recovery excuses."""

from __future__ import annotations

import asyncio
import dataclasses

from engine import Client, EngineSettings, Outage, OutageWatch, Recovery, recovery_grace_ms
from engine.dev.devserver import RedisServer
from engine.keys import outages_key
from engine.periodic import outages
from engine.periodic.schedule_health import schedule_health

from . import tasks as t


def test_the_grace_is_a_liveness_window_a_beat_and_a_reconnect() -> None:
    s = EngineSettings()
    assert recovery_grace_ms(s) == 2000 + 500 + 1000 + 1000
    longer = dataclasses.replace(s, liveness_window_s=10.0, heartbeat_interval_s=2.0)
    assert recovery_grace_ms(longer) == 10_000 + 2000 + 1000 + 1000


def test_a_recovery_excuses_only_queues_served_before_and_only_within_its_grace() -> None:
    outage = Outage(away_ms=10_000, back_ms=30_000, served=frozenset({"default"}))
    recovery = Recovery(grace_ms=5000, outages=(outage,), now_ms=31_000)
    assert recovery.recovering("default") == outage
    assert recovery.recovering("default", now_ms=34_999) == outage
    assert recovery.recovering("default", now_ms=35_000) is None  # the grace is over
    assert recovery.recovering("other") is None  # nobody served it before: not the outage's doing
    assert Recovery(5000, (dataclasses.replace(outage, served=None),), 31_000).recovering("other")


def test_a_deadline_redis_was_away_for_moves_past_the_grace() -> None:
    outage = Outage(away_ms=10_000, back_ms=30_000, served=frozenset({"default"}))
    recovery = Recovery(grace_ms=5000, outages=(outage,))
    # Due during the outage, or before it with its tolerance running into it: due at 35 s.
    assert recovery.due_ms("default", 20_000, 1000) == 35_000
    assert recovery.due_ms("default", 9500, 1000) == 35_000
    # Past its tolerance before Redis went away: late anyway.
    assert recovery.due_ms("default", 8000, 1000) == 8000
    # Due after the grace, or in a queue nobody served: as it was.
    assert recovery.due_ms("default", 40_000, 1000) == 40_000
    assert recovery.due_ms("other", 20_000, 1000) == 20_000
    # One outage after another: the second moves the deadline the first moved.
    second = Outage(away_ms=35_500, back_ms=50_000, served=None)
    both = Recovery(grace_ms=5000, outages=(outage, second))
    assert both.due_ms("default", 20_000, 1000) == 55_000


def test_an_outage_round_trips_through_its_zset_member() -> None:
    outage = Outage(1, 2, "restarted", frozenset({"b", "a"}))
    assert Outage.loads(outage.dumps()) == outage
    assert Outage.loads(Outage(1, 2).dumps()) == Outage(1, 2)
    assert Outage.loads("not json") is None and Outage.loads('{"away_ms": 1}') is None


async def test_a_watch_records_the_outage_it_saw_end_with_the_queues_served_before(
    client: Client,
) -> None:
    watch = OutageWatch()
    first = await watch.look(client, 4500)
    assert first.outages == () and watch.seen_ms == first.now_ms
    watch.saw(["default", "emails"])
    watch.failed()
    watch.failed()  # the first failure counts
    back = await watch.look(client, 4500)
    [outage] = back.outages
    assert (outage.away_ms, outage.back_ms) == (first.now_ms, back.now_ms)
    assert (outage.how, outage.served) == ("unreachable", frozenset({"default", "emails"}))
    assert back.recovering("default") == outage and back.recovering("lonely") is None
    again = await watch.look(client, 4500)  # nothing failed since: nothing more recorded
    assert again.outages == (outage,)
    read = await outages.recent_outages(client, 4500)  # any process reads the same
    assert read.outages == (outage,) and read.grace_ms == 4500


async def test_a_watch_that_never_looked_before_a_failure_excuses_every_queue(
    client: Client,
) -> None:
    watch = OutageWatch()
    watch.failed()
    await asyncio.sleep(0.2)
    [outage] = (await watch.look(client, 4500)).outages
    assert outage.served is None and 150 <= outage.back_ms - outage.away_ms <= 2000


async def test_only_the_last_outages_are_kept(client: Client) -> None:
    watch = OutageWatch()
    for _ in range(outages.KEPT + 5):
        watch.failed()
        await asyncio.sleep(0.003)  # two outages never start and end in the same millisecond
        await watch.look(client, 4500)
    kept = (await outages.recent_outages(client, 4500)).outages
    assert len(kept) == outages.KEPT
    assert [o.back_ms for o in kept] == sorted(o.back_ms for o in kept)  # oldest first
    assert await client.redis.zcard(outages_key(client.settings.prefix)) == outages.KEPT


async def test_a_watch_sees_a_restart_between_two_looks() -> None:
    server = RedisServer().start()
    try:
        async with Client(EngineSettings.from_url(server.url)) as client:
            watch = OutageWatch()
            watch.saw(["default"])
            await watch.look(client, 4500)
            server.stop()
            server.start()
            for _ in range(50):  # the client reconnects (no failure noted: only the restart)
                try:
                    back = await watch.look(client, 4500)
                    break
                except ConnectionError:
                    await asyncio.sleep(0.1)
            [outage] = back.outages
            assert outage.how == "restarted" and outage.served == frozenset({"default"})
            assert "Redis restarted between" in outage.said()
            assert (await watch.look(client, 4500)).outages == (outage,)  # seen once
    finally:
        server.stop()


async def test_a_schedule_is_recovering_within_the_grace_and_unserved_after_it(
    client: Client,
) -> None:
    await client.repeats.add("beat", t.add.using(queue="lonely").call(1, 2), every_s=1)
    await asyncio.sleep(2.2)  # its first tick is missed: nobody serves "lonely"
    [plain] = await schedule_health(client, ["lonely"], 60)
    assert plain.state == "missed"
    now_ms = (await outages.recent_outages(client, 0)).now_ms
    lately = Outage(now_ms - 5000, now_ms - 100, served=frozenset({"lonely"}))
    within = Recovery(4500, (lately,), now_ms)
    [held] = await schedule_health(client, ["lonely"], 60, within)
    assert held.state == "recovering", held.reasons
    [reason] = held.reasons
    assert "has not fired yet" in reason and "no live worker serves queue 'lonely' yet" in reason
    assert "Redis was unreachable between" in reason and "to renew" in reason
    # Nobody served the queue before the outage: nothing to excuse.
    unserved = Recovery(4500, (dataclasses.replace(lately, served=frozenset()),), now_ms)
    [(state, _)] = [
        (h.state, h.reasons) for h in await schedule_health(client, ["lonely"], 60, unserved)
    ]
    assert state == "missed"
    # The grace and the tolerance after it over (Redis back 10 s ago): judged as ever.
    long_ago = dataclasses.replace(lately, away_ms=now_ms - 12_000, back_ms=now_ms - 10_000)
    over = Recovery(4500, (long_ago,), now_ms)
    assert [h.state for h in await schedule_health(client, ["lonely"], 60, over)] == ["missed"]
