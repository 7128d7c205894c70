"""Search texts with control characters are refused on every surface that takes one, by name.

A NUL cut SQLite's LIKE pattern short, so `q=%00zz` matched every row (a bulk cancel chose
every job); now the API answers 422, the dashboard socket an error, the admin a 422 page.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import Client as WebClient

from engine import EngineSettings
from jobsite.jobs import services
from jobsite.jobs.api.root import api
from jobsite.jobs.models import JobRecord
from jobsite.jobs.permissions import VIEWERS
from jobsite.jobs.search import check_text, text_search
from tests.engine import tasks as t

from .conftest import mirror_all, staff_user
from .test_api import call
from .test_consumers import ORIGIN, open_socket, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)
# Each bad text, and how the refusal names it.
BAD = [("\x00zz", "U+0000"), ("\x00x", "U+0000"), ("ab\x1bc", "U+001B"), ("a\x7fb", "U+007F")]
BAD += [("\tuser", "U+0009"), ("user\n", "U+000A"), ("x\x85y", "U+0085")]


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def search_surfaces() -> tuple[list[str], list[tuple[str, str]]]:
    """Return the API operations taking `q`: paths of GETs with a query parameter `q`, and
    (method, path) of those with `q` in their JSON body."""
    schema = api.get_openapi_schema()
    in_query, in_body = [], []
    for path, methods in schema["paths"].items():
        path = path.removeprefix("/api/v1").replace("{name}", "default")
        for method, op in methods.items():
            if any(p["name"] == "q" for p in op.get("parameters", [])):
                in_query.append(path)
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            if "q" in _resolve(schema, body.get("schema", {})).get("properties", {}):
                in_body.append((method, path))
    return in_query, in_body


def test_the_check_names_each_control_character() -> None:
    for text, name in BAD:
        with pytest.raises(ValueError, match=re.escape(name)):
            check_text(text)
    assert check_text("user-4567 ünï «x» 日本") == "user-4567 ünï «x» 日本"
    with pytest.raises(ValueError, match=re.escape("U+0000, U+0007")):
        check_text("\x07a\x00b\x00")
    with pytest.raises(ValueError, match=re.escape("U+0000")):  # the search itself refuses it too
        text_search(JobRecord.objects.all(), "\x00zz")


def test_every_api_surface_taking_q_refuses_control_characters(
    engine: EngineSettings, token: str
) -> None:
    ids = [services.enqueue(t.add.using(delay_s=60), i, i).id for i in range(5)]
    async_to_sync(mirror_all)()
    web = WebClient()
    in_query, in_body = search_surfaces()
    assert {"/jobs", "/job-counts"} <= set(in_query)
    assert {("post", "/bulk/cancel"), ("post", "/bulk/retry")} <= set(in_body)
    for text, name in BAD:
        for path in in_query:
            answer = call(web, "get", path, token, data={"q": text})
            assert answer.status_code == 422, (path, text, answer.content)
            assert name in str(answer.json()["detail"]), (path, answer.json())
        for method, path in in_body:
            answer = call(web, method, path, token, data={"q": text, "dry_run": True})
            assert answer.status_code == 422, (path, text, answer.content)
            assert name in str(answer.json()["detail"]), (path, answer.json())
    # Refused, not matched: nothing was cancelled, and a plain search still counts right.
    cancelled = call(web, "post", "/bulk/cancel", token, data={"q": "\x00x"})
    assert cancelled.status_code == 422
    assert all(services.run_engine(lambda c, i=i: c.jobs.get(i)).state == "scheduled" for i in ids)
    counts = call(web, "get", "/job-counts", token, data={"q": "zz-none"}).json()
    assert counts["total"] == 0
    assert call(web, "get", "/job-counts", token, data={"q": ids[0]}).json()["total"] == 1


def test_the_dashboard_socket_refuses_a_filter_with_control_characters(
    engine: EngineSettings,
) -> None:
    headers = ORIGIN + session_cookie(staff_user("staff", VIEWERS))

    async def go() -> list[dict[str, Any]]:
        socket, connected = await open_socket(headers)
        assert connected
        await socket.receive_json_from(timeout=5)
        got = []
        for text, _ in BAD:
            await socket.send_json_to({"filter": {"q": text}})
            got.append(await socket.receive_json_from(timeout=5))
        await socket.disconnect()
        return got

    for (_, name), answer in zip(BAD, async_to_sync(go)(), strict=True):
        assert answer["type"] == "error" and name in answer["detail"], answer


def test_the_admin_search_refuses_control_characters(engine: EngineSettings) -> None:
    ids = [services.enqueue(t.add.using(delay_s=60), i, i).id for i in range(3)]
    async_to_sync(mirror_all)()
    web = WebClient()
    web.force_login(User.objects.create_superuser("boss", "boss@example.com", "pw"))
    for text, name in BAD:
        page = web.get("/admin/jobsite/jobrecord/", {"q": text})
        assert page.status_code == 422, (text, page.status_code)
        content = page.content.decode()
        assert name in content and not any(i in content for i in ids)
    page = web.get("/admin/jobsite/jobrecord/", {"q": ids[0]})
    assert page.status_code == 200 and ids[0] in page.content.decode()
