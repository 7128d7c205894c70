"""The dashboard websocket through Channels' WebsocketCommunicator: refusals, snapshot, rate."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client as WebClient

from engine import EngineSettings
from jobsite.asgi import application
from jobsite.jobs import services
from tests.engine import tasks as t

from .conftest import mirror_all

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = [(b"origin", b"http://localhost")]


def session_cookie(user: User | None) -> list[tuple[bytes, bytes]]:
    if user is None:
        return []
    web = WebClient()
    web.force_login(user)
    return [(b"cookie", f"sessionid={web.cookies['sessionid'].value}".encode())]


async def open_socket(headers: list[tuple[bytes, bytes]]) -> tuple[WebsocketCommunicator, bool]:
    socket = WebsocketCommunicator(application, "/ws/dashboard/", headers=headers)
    connected, _ = await socket.connect()
    return socket, connected


def test_anonymous_non_staff_and_foreign_origin_are_refused(engine: EngineSettings) -> None:
    plain = User.objects.create_user("plain", password="x")
    staff = User.objects.create_user("staff", password="x", is_staff=True)
    attempts = [
        ORIGIN,
        ORIGIN + session_cookie(plain),
        [(b"origin", b"http://evil.example"), *session_cookie(staff)],
        ORIGIN + session_cookie(staff),
    ]

    async def go() -> list[bool]:
        results = []
        for headers in attempts:
            socket, connected = await open_socket(headers)
            results.append(connected)
            await socket.disconnect()
        return results

    assert async_to_sync(go)() == [False, False, False, True]


def test_staff_gets_a_snapshot_and_coalesced_updates(engine: EngineSettings) -> None:
    staff = User.objects.create_user("staff", password="x", is_staff=True)
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
    staff = User.objects.create_user("staff", password="x", is_staff=True)
    headers = ORIGIN + session_cookie(staff)
    services.enqueue(t.add, 1, 2)
    services.enqueue(t.add_sync, 1, 2)
    async_to_sync(mirror_all)()

    async def go() -> list[str]:
        socket, _ = await open_socket(headers)
        await socket.receive_json_from(timeout=5)
        await socket.send_json_to({"filter": {"task": "add_sync", "bogus": "x"}})
        filtered = await socket.receive_json_from(timeout=5)
        await socket.send_json_to({"filter": {"since": "2999-01-01T00:00"}})
        future = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        assert future["jobs"] == [] and set(future["oldest_waiting_s"]) == {"default"}
        return [j["task"] for j in filtered["jobs"]]

    assert async_to_sync(go)() == ["add_sync"]


def test_dashboard_page_is_staff_only(engine: EngineSettings) -> None:
    web = WebClient()
    assert web.get("/dashboard/").status_code == 302
    web.force_login(User.objects.create_user("staff", password="x", is_staff=True))
    page = web.get("/dashboard/")
    assert page.status_code == 200 and b"dashboard.js" in page.content
    assert database_sync_to_async  # the consumers' DB access goes through it
