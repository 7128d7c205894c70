"""Redis away, slow or busy, as the server says it (services/reach.py): one state per process,
changed only on a transition, reported by the dashboard's socket, GET /live and every API answer;
the socket lives through it all, a channel layer whose reads time out included."""

from __future__ import annotations

import itertools
import logging
import signal
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from asgiref.sync import async_to_sync
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client as WebClient
from django.test import override_settings

from engine import EngineSettings, RedisRefused, RedisUnavailable
from engine.dev.devserver import RedisServer, free_port
from jobsite.jobs import conf
from jobsite.jobs.permissions import VIEWERS
from jobsite.jobs.services import reach
from jobsite.jobs.web import consumers

from .conftest import staff_user
from .test_consumers import ORIGIN, open_socket, session_cookie

# What Redis does to the socket and the reach state: the same on every database.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.any_database]
CHANNELS_REDIS = "channels_redis.core.RedisChannelLayer"


@pytest.fixture
def own_redis(engine: EngineSettings) -> Iterator[RedisServer]:
    """Point settings.JOBSITE at a redis-server of this test's own, to pause and resume."""
    with RedisServer() as server:
        with override_settings(JOBSITE={**settings.JOBSITE, "REDIS_URL": server.url}):
            conf.engine_settings.cache_clear()
            try:
                yield server
            finally:
                assert server.process is not None
                server.process.send_signal(signal.SIGCONT)
        conf.engine_settings.cache_clear()


def use_layer(config: dict[str, Any]) -> Any:
    """Return override_settings putting the channel layer `config` in place (made anew)."""
    channel_layers.backends.clear()
    return override_settings(CHANNEL_LAYERS={"default": config})


async def messages_for(socket: WebsocketCommunicator, seconds: float) -> list[dict[str, Any]]:
    """Return every message the socket sends during `seconds` (never a close)."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        # (receive_output's own timeout would cancel the consumer)
        if await socket.receive_nothing(timeout=min(0.1, left), interval=0.01):
            continue
        output = await socket.receive_output()
        assert output["type"] != "websocket.close", output
        got.append(orjson.loads(output["text"]))
    return got


def redis_of(messages: list[dict[str, Any]]) -> list[tuple[bool, int]]:
    return [(m["redis"]["up"], m["redis"]["since_ms"]) for m in messages]


@pytest.mark.parametrize("layer", ["memory", "redis_py_defaults"])
def test_an_open_socket_rides_out_a_paused_redis(
    own_redis: RedisServer,
    layer: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGSTOP under an open socket: stale snapshots saying down since one fixed time; after
    SIGCONT one transition to up; the socket stays open and nothing escapes the consumer.

    "redis_py_defaults" puts the channel layer on the same Redis with the hosts written as
    most projects write them: redis-py's reads then give up after 5 s, so the socket's wait for
    news fails too (the "Timeout reading from" that used to end the socket).
    """
    headers = ORIGIN + session_cookie(staff_user("staff", VIEWERS))
    config: dict[str, Any] = {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    if layer != "memory":
        config = {"BACKEND": CHANNELS_REDIS, "CONFIG": {"hosts": [own_redis.url]}}
    assert own_redis.process is not None
    caplog.set_level(logging.INFO, logger="jobsite")
    monkeypatch.setattr(consumers, "_layer_lost", False)

    async def go() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], bool]:
        socket, connected = await open_socket(headers)
        assert connected
        first = await socket.receive_json_from(timeout=5)
        assert own_redis.process is not None
        own_redis.process.send_signal(signal.SIGSTOP)
        try:
            await socket.send_json_to({"filter": {"task": "add"}})  # a read, at once
            paused = await messages_for(socket, 7.0)
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        back = await messages_for(socket, 4.0)
        alive = not socket.future.done()  # the consumer neither ended nor raised
        await socket.send_json_to({"filter": {}})
        fresh = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return first, paused, [*back, fresh], alive

    with use_layer(config):
        first, paused, back, alive = async_to_sync(go)()
    channel_layers.backends.clear()

    assert alive
    assert first["redis"]["up"] is True and "stale" not in first
    # down, since one time for the whole pause, later than the last transition known
    assert len(paused) >= 3, paused
    assert {s for _, s in redis_of(paused)} == {paused[0]["redis"]["since_ms"]}
    assert [up for up, _ in redis_of(paused)] == [False] * len(paused)
    assert all(m["stale"] is True for m in paused)
    assert paused[0]["redis"]["since_ms"] > first["redis"]["since_ms"]
    assert paused[0]["queues"] == first["queues"]  # the last good numbers, marked stale
    # after SIGCONT: exactly one transition, to up, after the outage began
    states = redis_of(paused + back)
    turns = [b for a, b in itertools.pairwise(states) if a != b]
    assert len(turns) == 1 and turns[0][0] is True, states
    assert turns[0][1] > paused[0]["redis"]["since_ms"]
    assert back[-1]["redis"]["up"] is True and "stale" not in back[-1]
    # logged once each, as key=value lines without a traceback
    unreachable = [r for r in caplog.records if "redis unreachable" in r.getMessage()]
    assert len(unreachable) == 1 and unreachable[0].exc_info is None
    assert unreachable[0].levelno == logging.WARNING
    assert sum("redis answers again" in r.getMessage() for r in caplog.records) == 1
    layer_lost = [r for r in caplog.records if "channel layer unreachable" in r.getMessage()]
    assert len(layer_lost) <= (layer != "memory")  # a join that timed out: warned once at most
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize(("host", "timeouts"), [("redis_py_defaults", True), ("timeout_10", False)])
def test_an_idle_socket_outlives_its_channel_layer_reads(
    own_redis: RedisServer,
    host: str,
    timeouts: bool,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis answering and nothing happening: with redis-py's 5 s read timeout, channels_redis'
    5 s BZPOPMIN fails its read ("Timeout reading from", which used to end the socket); the
    socket lives on, joins again and hears the group, and no outage is warned of. With reads
    allowed 10 s (demo/settings.py, docs/install.md), no read fails."""
    monkeypatch.setattr(consumers, "_layer_lost", False)
    headers = ORIGIN + session_cookie(staff_user("staff", VIEWERS))
    address: Any = own_redis.url
    if host == "timeout_10":
        address = {"address": own_redis.url, "socket_timeout": 10}
    caplog.set_level(logging.DEBUG, logger="jobsite")

    async def go() -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        socket, connected = await open_socket(headers)
        assert connected
        await socket.receive_json_from(timeout=5)
        idle = await messages_for(socket, 8.0)  # past the 5 s read and the next join
        await get_channel_layer().group_send("dashboard", {"type": "jobs.changed"})
        told = await messages_for(socket, 1.0)
        alive = not socket.future.done()
        await socket.disconnect()
        return idle, told, alive

    with use_layer({"BACKEND": CHANNELS_REDIS, "CONFIG": {"hosts": [address]}}):
        idle, told, alive = async_to_sync(go)()
    channel_layers.backends.clear()

    assert alive
    assert all(m["redis"]["up"] for m in idle + told)
    assert told, "the group's message reached no socket"
    failed = [r.getMessage() for r in caplog.records if "read failed" in r.getMessage()]
    assert bool(failed) is timeouts, failed
    assert all(m == "dashboard channel layer read failed error=TimeoutError" for m in failed)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_live_and_every_answer_say_redis_state(engine: EngineSettings) -> None:
    """GET /live says Redis' state in `redis`, every API answer in its Jobsite-Redis header; a
    503's since holds still through the outage; the way back is one transition, later."""
    web = WebClient()
    web.force_login(staff_user("staff", VIEWERS))
    ok = web.get("/api/v1/live")
    assert ok.status_code == 200 and ok.json()["redis"]["up"] is True
    assert ok["Jobsite-Redis"] == f"up {ok.json()['redis']['since_ms']}"
    away = {**settings.JOBSITE, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with override_settings(JOBSITE=away):
        conf.engine_settings.cache_clear()
        downs = [web.get("/api/v1/live") for _ in range(3)]
        history = web.get("/api/v1/jobs")  # the history answers from the database meanwhile
    conf.engine_settings.cache_clear()
    assert [d.status_code for d in downs] == [503] * 3
    states = [d.json()["redis"] for d in downs]
    assert states == [states[0]] * 3 and states[0]["up"] is False
    assert states[0]["since_ms"] > ok.json()["redis"]["since_ms"]
    assert {d["Jobsite-Redis"] for d in downs} == {f"down {states[0]['since_ms']}"}
    assert history.status_code == 200
    assert history["Jobsite-Redis"] == f"down {states[0]['since_ms']}"  # no false recovery
    again = web.get("/api/v1/live")
    assert again.status_code == 200
    assert again.json()["redis"]["up"] is True
    assert again.json()["redis"]["since_ms"] >= states[0]["since_ms"]
    page = web.get("/dashboard/")
    assert f'"since_ms": {again.json()["redis"]["since_ms"]}'.encode() in page.content


def test_the_state_changes_only_on_transitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reach, "_state", reach.Reach(up=True, since_ms=0))
    assert reach.answered() == reach.Reach(up=True, since_ms=0)  # no transition: no time
    down = reach.failed(RedisUnavailable("cannot reach Redis"))
    assert down.up is False and down.since_ms > 0
    time.sleep(0.002)
    assert reach.failed(RedisUnavailable("still not")) == down  # since the first failure
    up = reach.answered()
    assert up.up is True and up.since_ms > down.since_ms
    assert reach.answered() == up
    # a Redis that refuses writes (out of memory, a replica) still answers: no outage
    assert reach.failed(RedisRefused("OOM", "OOM command not allowed")) == up
    assert reach.failed(RedisRefused("LOADING", "loading the dataset")).up is False


def test_the_socket_polls_without_a_channel_layer(engine: EngineSettings) -> None:
    """No layer at all (W005): the socket opens and polls instead of failing on it."""
    headers = ORIGIN + session_cookie(staff_user("staff", VIEWERS))

    async def go() -> dict[str, Any]:
        socket, connected = await open_socket(headers)
        assert connected
        first: dict[str, Any] = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return first

    with override_settings(CHANNEL_LAYERS={}):
        channel_layers.backends.clear()
        first = async_to_sync(go)()
    channel_layers.backends.clear()
    assert first["type"] == "snapshot" and first["redis"]["up"] is True
