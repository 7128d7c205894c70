"""Every key each Lua script touches hashes to its queue's cluster slot.

Read from the server's side: MONITOR shows each script call and, after it, every command the
script ran; `COMMAND GETKEYS` names those commands' keys exactly. A workload runs every script
through the engine's own paths (a burst worker, the scheduler, the cleaner, the client, the
mirror's reader), so a key built inside Lua from the wrong prefix fails here long before a
Redis Cluster refuses it in production.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import defaultdict
from typing import Any

import redis
from redis.crc import key_slot

from engine import Client, EngineSettings, JobState, QueueKeys, declared_repeatable, task_ref
from engine import drain as engine_drain
from engine.dev.devserver import RedisServer
from engine.keys import SCRIPT_KEYS
from engine.periodic.cleaner import Cleaner
from engine.periodic.declared import sync_declared
from engine.resources.duties.feed import EventReader
from engine.seam.scripts import Scripts, load_sources

from . import tasks as t
from .helpers import drain

STOP = "key-slot-test:stop-monitor"


def _monitor(server: RedisServer, lines: list[dict[str, Any]], ready: threading.Event) -> None:
    with redis.Redis(port=server.port, decode_responses=True) as r, r.monitor() as monitor:
        ready.set()
        for line in monitor.listen():
            if STOP in line["command"]:
                return
            lines.append(line)


async def _workload(settings: EngineSettings) -> None:
    """Run every script at least once, each through the code that calls it in production."""
    async with Client(settings) as c:
        scripts, slow = Scripts(c.redis, settings.prefix), QueueKeys(settings.prefix, "slow")
        tick = declared_repeatable("tick", t.add.call(1, 1), limit_bytes=10_000, every_s=0.05)
        await sync_declared(settings, c.redis, [tick])  # declare
        later = await c.enqueue(t.add.using(delay_s=600), 1, 2)  # submit
        await c.jobs.cancel([later.id])  # cancel
        parent = t.add.call(2, 3)
        await c.enqueue_flow([t.add.using(depends_on=[parent]).call(4, 5), parent])
        failing = await c.enqueue(t.flaky.using(retry_delay_s=0.01))
        await c.enqueue(t.add.using(delay_s=0.05), 6, 7)
        await c.enqueue(t.progressing)
        await c.enqueue(t.logging_async, 2)
        await c.enqueue(t.checkpointing, 2)
        await c.enqueue(t.waits, 1.2)  # lives past a heartbeat
        keyed = t.add.using(rate_limit="1/m", rate_key="k", on_rate_limit="drop")
        await c.enqueue_many([keyed.call(1, 1), keyed.call(2, 2)])  # a rate key's budget
        waiting = t.add.using(rate_limit="100/s", rate_key="k2")  # its slot taken at claim
        await c.enqueue_many([waiting.call(3, 3), waiting.call(4, 4)])
        await asyncio.sleep(0.1)
        # claim, begin, complete, retry, fail, heartbeat, progress, log, checkpoint, promote,
        # submit ticks
        tasks = [t.add, t.flaky, t.progressing, t.logging_async, t.checkpointing, t.waits]
        await drain(settings, tasks)
        assert (await c.jobs.get(failing.id)).state is JobState.FAILED
        assert await c.jobs.resubmit("default", [failing.id]) == 1  # resubmit
        assert await c.jobs.purge("default", [later.id]) == 1  # purge
        reader = EventReader(c.redis, settings, ["default"])
        assert failing.id in await reader.job_hashes("default", [failing.id])  # snapshot
        # A queue no worker serves: a job expires, two are claimed and handed back by hand.
        await c.enqueue(t.add.using(queue="slow", ttl_s=0.01), 1, 1)
        for n in range(2):
            await c.enqueue(t.add.using(queue="slow"), n, n)
        await asyncio.sleep(0.05)
        await Cleaner(settings, c.redis, ["slow"]).tick()  # reap, expire, prune
        stalled, released = await scripts.claim(
            slow,
            events_maxlen=1000,
            max_jobs=2,
            lease_ms=30_000,
            worker_id="w1",
            result_ttl_ms=60_000,
        )
        await scripts.stall(
            slow,
            events_maxlen=1000,
            worker_id="w1",
            job_id=stalled.id,
            token=stalled.token,
            error_json=b"{}",
            short_reason="stalled by hand",
            ttl_ms=60_000,
        )
        await scripts.release(
            slow,
            events_maxlen=1000,
            worker_id="w1",
            job_id=released.id,
            token=released.token,
            reason="handed back",
        )
        [lost] = await scripts.claim(  # a claim whose reply the worker never saw
            slow,
            events_maxlen=1000,
            max_jobs=1,
            lease_ms=30_000,
            worker_id="w1",
            result_ttl_ms=60_000,
        )
        assert await scripts.disown(slow, events_maxlen=1000, worker_id="w1", held=[]) == [lost.id]
        # A job of a version no worker has is set aside (claim), then a drain cancels it.
        aside = await c.enqueue(task_ref("nobody.home", version=9))
        await drain(settings, [t.add])
        assert (await c.queues.counts("default"))["waiting_version"] >= 1
        assert await engine_drain.begin(c, "default", by="test") is not None
        assert await engine_drain.run(c, "default") >= 1
        assert (await c.jobs.get(aside.id)).state is JobState.CANCELLED


def _keys_of(r: redis.Redis, command: str) -> list[str]:
    """Return the keys a logged command names, as the server sees them."""
    parts = command.split(" ")
    try:
        return [str(k) for k in r.command_getkeys(*parts)]
    except redis.ResponseError:  # a command with no keys (TIME)
        return []


def test_every_key_a_script_touches_is_in_its_queues_slot() -> None:
    lines: list[dict[str, Any]] = []
    shas = {hashlib.sha1(src.encode()).hexdigest(): v for v, (_, src) in load_sources().items()}
    with RedisServer() as server:
        ready = threading.Event()
        watcher = threading.Thread(target=_monitor, args=(server, lines, ready), daemon=True)
        watcher.start()
        assert ready.wait(5)
        settings = EngineSettings.from_url(server.url, scheduler_interval_s=0.05, idle_wait_s=0.2)
        asyncio.run(_workload(settings))
        with redis.Redis(port=server.port, decode_responses=True) as r:
            r.get(STOP)
            watcher.join(10)
            calls: dict[str, list[set[int]]] = defaultdict(list)
            verb = None
            for i, line in enumerate(lines):
                command = line["command"]
                if line.get("client_type") != "lua":
                    head = command.split(" ")
                    verb = shas.get(head[1]) if head[0] == "EVALSHA" else None
                    if verb is not None:
                        declared = head[3 : 3 + int(head[2])]
                        calls[verb].append({key_slot(k.encode()) for k in declared})
                    continue
                before = lines[max(0, i - 4) : i + 1]
                assert verb is not None, f"a script command with no script call before: {before}"
                calls[verb][-1] |= {key_slot(k.encode()) for k in _keys_of(r, command)}
    assert set(calls) == set(SCRIPT_KEYS), f"scripts never run: {set(SCRIPT_KEYS) - set(calls)}"
    spread = {verb: slots for verb, runs in calls.items() for slots in runs if len(slots) != 1}
    assert not spread, f"scripts touching keys in more than one slot: {spread}"
