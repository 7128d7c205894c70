"""The dashboard websocket through Channels' WebsocketCommunicator: refusals, snapshot, rate."""

from __future__ import annotations

import asyncio
import time

import django
import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client as WebClient

from demo.asgi import application
from engine import EngineSettings
from jobsite.jobs import services
from jobsite.jobs.permissions import VIEWERS
from tests.engine import tasks as t

from .conftest import mirror_all, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
HOST = [(b"host", b"localhost:8000")]
ORIGIN = [(b"origin", b"http://localhost:8000"), *HOST]


def session_cookie(user: User | None) -> list[tuple[bytes, bytes]]:
    if user is None:
        return []
    web = WebClient()
    web.force_login(user)
    return [(b"cookie", f"sessionid={web.cookies['sessionid'].value}".encode())]


async def open_socket(headers: list[tuple[bytes, bytes]]) -> tuple[WebsocketCommunicator, bool]:
    socket = WebsocketCommunicator(application, "/ws/jobsite/dashboard/", headers=headers)
    connected, _ = await socket.connect()
    return socket, connected


def test_anonymous_non_staff_and_foreign_origin_are_refused(engine: EngineSettings) -> None:
    plain = User.objects.create_user("plain", password="x")
    bare = staff_user("bare")  # staff, no permission
    staff = staff_user("staff", VIEWERS)
    attempts = [
        ORIGIN,
        ORIGIN + session_cookie(plain),
        ORIGIN + session_cookie(bare),
        [(b"origin", b"http://evil.example"), *HOST, *session_cookie(staff)],
        # the same host name on another port or scheme is another origin
        [(b"origin", b"http://localhost:1234"), *HOST, *session_cookie(staff)],
        [(b"origin", b"https://localhost:8000"), *HOST, *session_cookie(staff)],
        [(b"origin", b"http://127.0.0.1:9999"), *HOST, *session_cookie(staff)],
        HOST + session_cookie(staff),  # no Origin at all
        ORIGIN + session_cookie(staff),
    ]

    async def go() -> list[bool]:
        results = []
        for headers in attempts:
            socket, connected = await open_socket(headers)
            results.append(connected)
            await socket.disconnect()
        return results

    assert async_to_sync(go)() == [False] * 8 + [True]


def test_staff_gets_a_snapshot_and_coalesced_updates(engine: EngineSettings) -> None:
    staff = staff_user("staff", VIEWERS)
    headers = ORIGIN + session_cookie(staff)
    services.enqueue(t.add, 1, 2)
    async_to_sync(mirror_all)()

    async def go() -> tuple[dict, int, float]:
        socket, connected = await open_socket(headers)
        assert connected
        snapshot = await socket.receive_json_from(timeout=5)
        layer = get_channel_layer()
        start = time.monotonic()
        while time.monotonic() - start < 1.0:  # a busy engine: a batch every 5 ms for 1 s
            await layer.group_send("dashboard", {"type": "jobs.changed"})
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)
        received = socket.output_queue.qsize()
        for _ in range(received):
            await socket.receive_json_from()
        await socket.send_json_to({"visible": False})
        await asyncio.sleep(0.3)
        while not socket.output_queue.empty():
            await socket.receive_json_from()
        for _ in range(20):
            await layer.group_send("dashboard", {"type": "jobs.changed"})
        hidden = await socket.receive_nothing(timeout=0.6)
        await socket.disconnect()
        return snapshot, received, hidden

    snapshot, received, hidden = async_to_sync(go)()
    assert snapshot["type"] == "snapshot"
    assert snapshot["queues"]["default"]["submitted"] == 1
    assert [j["task"] for j in snapshot["jobs"]] == ["add"]
    assert 2 <= received <= 6  # about 4 a second, though ~200 batches landed
    assert hidden is True  # nothing is sent to a hidden tab


def test_filter_changes_the_snapshot(engine: EngineSettings) -> None:
    staff = staff_user("staff", VIEWERS)
    headers = ORIGIN + session_cookie(staff)
    services.enqueue(t.add, 1, 2)
    services.enqueue(t.add_sync, 1, 2)
    async_to_sync(mirror_all)()

    async def go() -> list[str]:
        socket, _ = await open_socket(headers)
        await socket.receive_json_from(timeout=5)
        await socket.send_json_to({"filter": {"task": "add_sync"}})
        filtered = await socket.receive_json_from(timeout=5)
        await socket.send_json_to({"filter": {"since": "2999-01-01T00:00"}})
        future = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        assert future["jobs"] == [] and set(future["oldest_waiting_s"]) == {"default"}
        return [j["task"] for j in filtered["jobs"]]

    assert async_to_sync(go)() == ["add_sync"]


def test_dashboard_page_needs_the_view_permission(engine: EngineSettings) -> None:
    web = WebClient()
    assert web.get("/dashboard/").status_code == 302
    web.force_login(staff_user("bare"))
    assert web.get("/dashboard/").status_code == 403
    web.force_login(staff_user("staff", VIEWERS))
    page = web.get("/dashboard/")
    assert page.status_code == 200 and b"dashboard.js" in page.content
    if django.VERSION >= (6, 0):  # Django 5.2 has no CSP: the demo settings go without
        nonce = page["Content-Security-Policy"].split("'nonce-")[1].split("'")[0]
        assert f'nonce="{nonce}"'.encode() in page.content
    assert b"<script>" not in page.content  # no inline script without the nonce


async def _drain(socket: WebsocketCommunicator, quiet_s: float = 0.4) -> list[dict]:
    """Return every message until `quiet_s` pass without one."""
    got = []
    while not await socket.receive_nothing(timeout=quiet_s):
        got.append(await socket.receive_json_from())
    return got


def test_bad_messages_get_an_error_and_the_socket_stays_up(engine: EngineSettings) -> None:
    headers = ORIGIN + session_cookie(staff_user("staff", VIEWERS))

    async def go() -> tuple[list[dict], dict]:
        socket, connected = await open_socket(headers)
        assert connected
        await socket.receive_json_from(timeout=5)
        errors = []
        for bad in (
            '{"filter": {"since": "not a date"}}',
            '{"filter": {"state": "nonsense"}}',
            '{"filter": {"bogus": 1}}',
            '{"filter": [1, 2]}',
            "[null, null]",
            "{not json",
            '{"hello": 1}',
        ):
            await socket.send_to(text_data=bad)
            errors.append(await socket.receive_json_from(timeout=5))
        await socket.send_json_to({"filter": {"task": "add"}})
        still = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return errors, still

    errors, still = async_to_sync(go)()
    assert [e["type"] for e in errors] == ["error"] * 7
    assert "since" in errors[0]["detail"] and "state" in errors[1]["detail"]
    assert still["type"] == "snapshot" and still["filter"] == {"task": "add"}


def test_a_burst_of_filter_changes_is_coalesced(engine: EngineSettings) -> None:
    headers = ORIGIN + session_cookie(staff_user("staff", VIEWERS))

    async def go() -> tuple[list[dict], float]:
        socket, _ = await open_socket(headers)
        await socket.receive_json_from(timeout=5)
        start = time.monotonic()
        for n in range(300):
            await socket.send_json_to({"filter": {"q": f"text-{n}"}})
        got = await _drain(socket)
        elapsed = time.monotonic() - start
        await socket.disconnect()
        return got, elapsed

    got, elapsed = async_to_sync(go)()
    assert got and got[-1]["filter"] == {"q": "text-299"}  # the last filter wins
    assert len(got) <= 4 * elapsed + 1, (len(got), elapsed)  # at most 4 snapshots a second


@pytest.mark.parametrize("revoke", ["deactivate", "logout", "drop_permission"])
def test_an_open_socket_closes_when_its_rights_go(engine: EngineSettings, revoke: str) -> None:
    staff = staff_user("staff", VIEWERS)
    headers = ORIGIN + session_cookie(staff)

    def take_away() -> None:
        if revoke == "deactivate":
            User.objects.filter(pk=staff.pk).update(is_active=False)
        elif revoke == "logout":
            Session.objects.all().delete()
        else:
            staff.groups.clear()

    async def go() -> tuple[float, int]:
        socket, connected = await open_socket(headers)
        assert connected
        await socket.receive_json_from(timeout=5)
        await database_sync_to_async(take_away)()
        start = time.monotonic()
        while True:
            message = await socket.receive_output(timeout=6)
            if message["type"] == "websocket.close":
                return time.monotonic() - start, message["code"]

    closed_after_s, code = async_to_sync(go)()
    assert closed_after_s < 5 and code == 4403
