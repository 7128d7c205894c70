"""GET /api/v1/live: the dashboard's snapshot over HTTP, the one its websocket sends, with the
same permission and a token's narrowing to its queues."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import Client as WebClient
from django.test import override_settings

from engine import EngineSettings
from jobsite.jobs import conf, services
from jobsite.jobs.permissions import VIEWERS
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, staff_user
from .test_consumers import ORIGIN, open_socket, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ["default", "billing"]


@pytest.fixture
def two_queues(engine: EngineSettings) -> Iterator[EngineSettings]:
    from django.conf import settings

    with override_settings(JOBSITE={**settings.JOBSITE, "QUEUES": QUEUES}):
        conf.engine_settings.cache_clear()
        yield conf.engine_settings()
    conf.engine_settings.cache_clear()


def socket_snapshot(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        socket, connected = await open_socket(headers)
        assert connected
        got: dict[str, Any] = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return got

    return async_to_sync(go)()


def test_http_and_socket_give_the_same_snapshot(two_queues: EngineSettings) -> None:
    staff = staff_user("staff", VIEWERS)
    services.enqueue(t.add, 1, 2)
    services.enqueue(t.add.using(queue="billing"), 3, 4)
    async_to_sync(mirror_all)(queues=QUEUES)
    pushed = socket_snapshot(ORIGIN + session_cookie(staff))
    web = WebClient()
    web.force_login(staff)
    answer = web.get("/api/v1/live")
    assert answer.status_code == 200, answer.content
    polled = answer.json()
    assert pushed.pop("type") == "snapshot"
    # ages of the oldest waiting jobs grow between the two calls; everything else is equal
    ages = [set(polled.pop("oldest_waiting_s")), set(pushed.pop("oldest_waiting_s"))]
    assert ages == [set(QUEUES)] * 2
    assert polled == pushed
    assert polled["queues"]["billing"]["submitted"] == 1
    assert [j["task"] for j in polled["jobs"]] == ["add", "add"]


def test_filters_and_refusals(two_queues: EngineSettings) -> None:
    services.enqueue(t.add, 1, 2)
    services.enqueue(t.add_sync, 1, 2)
    async_to_sync(mirror_all)(queues=QUEUES)
    web = WebClient()
    assert web.get("/api/v1/live").status_code == 401
    web.force_login(staff_user("bare"))  # staff without the view permission
    assert web.get("/api/v1/live").status_code in (401, 403)
    web.force_login(staff_user("viewer", VIEWERS))
    filtered = web.get("/api/v1/live", {"task": "add_sync"}).json()
    assert filtered["filter"] == {"task": "add_sync"}
    assert [j["task"] for j in filtered["jobs"]] == ["add_sync"]
    assert web.get("/api/v1/live", {"state": "nonsense"}).status_code == 422


def test_a_token_sees_only_its_queues(two_queues: EngineSettings) -> None:
    services.enqueue(t.add, 1, 2)
    billing = services.enqueue(t.add.using(queue="billing"), 3, 4)
    async_to_sync(mirror_all)(queues=QUEUES)
    key = make_token(staff_user("b-view", VIEWERS), queues=["billing"])
    answer = WebClient().get("/api/v1/live", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert answer.status_code == 200, answer.content
    seen = answer.json()
    assert set(seen["queues"]) == set(seen["paused"]) == {"billing"}
    assert set(seen["oldest_waiting_s"]) <= {"billing"}
    assert [j["id"] for j in seen["jobs"]] == [billing.id]
