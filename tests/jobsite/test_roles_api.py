"""Worker roles through the JSON API and the Python client (sync and async faces): create,
replace, read, delete; bad input gets a 4xx and changes nothing; the workers list shows each
worker's role and the role lists the workers following it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient
from django.test import override_settings

from demo.asgi import application as asgi_app
from engine import Client, EngineSettings, Worker, get_role, list_roles
from jobsite.client import AsyncJobsiteClient, InvalidRequest, NotFound
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.tasks.registry import load_tasks

from .conftest import MODULES, make_token, staff_user
from .test_client import sync_client

pytestmark = pytest.mark.django_db(transaction=True)
SERVED = ["default", "spare", "extract", "load", "web", "a", "b"]


@pytest.fixture(autouse=True)
def served(engine: EngineSettings) -> Iterator[None]:
    """Serve the queues these roles name: a role names only queues of JOBSITE["QUEUES"]."""
    from django.conf import settings

    with override_settings(JOBSITE={**settings.JOBSITE, "QUEUES": SERVED}):
        yield


def stored(engine: EngineSettings) -> list[Any]:
    async def read() -> list[Any]:
        async with Client(engine) as client:
            return [r.to_dict() for r in await list_roles(client.redis, engine.prefix)]

    return async_to_sync(read)()


def test_sync_client_create_replace_read_delete(engine: EngineSettings, token: str) -> None:
    with sync_client(token) as api:
        assert api.roles() == []
        made = api.set_role("etl", ["extract", "load"])
        assert made["name"] == "etl" and made["queues"] == ["extract", "load"]
        assert made["workers"] == [] and made["changed_at"]
        # no worker serves them yet: accepted, and said
        assert made["unserved"] == ["extract", "load"]
        assert made["warning"] == "no worker serves: extract, load"
        assert api.set_role("etl", ["load"])["queues"] == ["load"]
        api.set_role("api", ["web"])
        assert [r["name"] for r in api.roles()] == ["api", "etl"]
        assert api.role("etl")["queues"] == ["load"]
        assert api.delete_role("etl") is None
        with pytest.raises(NotFound):
            api.role("etl")
        with pytest.raises(NotFound):
            api.delete_role("etl")
        with pytest.raises(NotFound):
            api.role("no such")
        with pytest.raises(InvalidRequest):
            api.set_role("api", ["a", "a"])
    assert [r["name"] for r in stored(engine)] == ["api"]
    actions = set(LogEntry.objects.values_list("object_id", "change_message"))
    assert ("role/etl", "create via API token 'robot-token': queues extract,load") in actions
    assert ("role/etl", "delete via API token 'robot-token'") in actions


@pytest.mark.parametrize(
    "body",
    [
        {"queues": []},
        {"queues": ["a", "a"]},
        {"queues": ["a b"]},
        {"queues": "a,b"},
        {"queues": [1]},
        {"queues": [f"q{i}" for i in range(101)]},
        {"queues": ["a"], "extra": 1},
        {},
    ],
)
def test_bad_input_is_a_4xx_and_changes_nothing(
    engine: EngineSettings, token: str, body: dict[str, Any]
) -> None:
    web = WebClient()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    put = web.put("/api/v1/roles/keep", {"queues": ["a"]}, "application/json", **headers)
    assert put.status_code == 201
    before = stored(engine)
    response = web.put("/api/v1/roles/keep", body, "application/json", **headers)
    assert response.status_code in (400, 422), response.content
    assert "detail" in response.json()
    bad_name = web.put("/api/v1/roles/a%20b", {"queues": ["a"]}, "application/json", **headers)
    assert bad_name.status_code in (404, 422)
    assert stored(engine) == before


def test_permissions_and_token_scope(engine: EngineSettings) -> None:
    web = WebClient()
    viewer = {"HTTP_AUTHORIZATION": f"Bearer {make_token(staff_user('v', VIEWERS))}"}
    narrow = make_token(staff_user("n", OPERATORS), queues=["a"])
    scoped = {"HTTP_AUTHORIZATION": f"Bearer {narrow}"}
    assert web.get("/api/v1/roles", **viewer).status_code == 200
    assert web.get("/api/v1/roles").status_code == 401
    assert (
        web.put("/api/v1/roles/r", {"queues": ["a"]}, "application/json", **viewer).status_code
        == 403
    )
    assert (
        web.put("/api/v1/roles/r", {"queues": ["a"]}, "application/json", **scoped).status_code
        == 201
    )
    # A queue outside the token's scope, added or already named: refused, nothing changed.
    assert (
        web.put("/api/v1/roles/r", {"queues": ["a", "b"]}, "application/json", **scoped).status_code
        == 403
    )
    assert [r["queues"] for r in stored(engine)] == [["a"]]


def test_workers_show_their_role_and_roles_their_workers(
    engine: EngineSettings, token: str
) -> None:
    async def go() -> tuple[list[Any], dict[str, Any], list[str]]:
        transport = httpx.ASGITransport(app=asgi_app)
        async with AsyncJobsiteClient("http://testserver", token, transport=transport) as api:
            await api.set_role("etl", ["default", "spare"])
            worker = Worker(engine, load_tasks(MODULES), role="etl")
            running = asyncio.create_task(worker.run())
            deadline = time.monotonic() + 10
            while not (workers := await api.workers()):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            role = await api.role("etl")
            # A change reaches the running worker: the workers list shows its new queues.
            await api.set_role("etl", ["spare"])
            while (await api.workers())[0]["queues"] != "spare":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            async with Client(engine) as client:
                kept = await get_role(client.redis, engine.prefix, "etl")
            worker.stop()
            await running
            assert kept is not None
            return workers, role, list(kept.queues)

    workers, role, kept = async_to_sync(go)()
    assert (workers[0]["role"], workers[0]["queues"]) == ("etl", "default,spare")
    assert role["workers"] == [workers[0]["id"]]
    assert kept == ["spare"]


def test_runworker_role(engine: EngineSettings) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from jobsite.jobs import services
    from jobsite.jobs.services.roles import save_role
    from tests.engine import tasks as t

    with pytest.raises(CommandError, match="no role 'ghost'"):
        call_command("runworker", "--burst", "--only", "worker", "--role", "ghost")
    with pytest.raises(CommandError, match="role names"):
        call_command("runworker", "--burst", "--only", "worker", "--role", "a b")
    save_role("etl", ["default"])
    job = services.enqueue(t.add, 20, 22)
    call_command("runworker", "--burst", "--only", "worker", "--role", "etl")
    assert services.run_engine(lambda c: c.jobs.get(job.id)).result == 42
