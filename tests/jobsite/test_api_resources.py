"""The API as one router per resource: each at its own prefix, one dead-letter resource in the
schema, and the old /dlq paths kept as aliases that answer as before."""

from __future__ import annotations

import re

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient

from demo.wsgi import application as wsgi_app
from engine import EngineSettings
from jobsite.client import JobsiteClient
from jobsite.jobs import services
from jobsite.jobs.api.root import api
from jobsite.jobs.models import JobRecord

from .conftest import mirror_all, run_worker
from .test_api import call

pytestmark = pytest.mark.django_db(transaction=True)
KEBAB = re.compile(r"^/[a-z]+(-[a-z]+)*$")


def test_every_router_is_mounted_at_its_own_prefix() -> None:
    mounted = [
        (prefix, router) for prefix, router in api._routers if router is not api.default_router
    ]
    prefixes = [prefix for prefix, _ in mounted]
    assert len(prefixes) == len(set(prefixes)), prefixes
    assert len({id(router) for _, router in mounted}) == len(mounted)
    for prefix, router in mounted:
        assert prefix not in ("", "/"), "a router mounted at the root"
        assert KEBAB.match(prefix), prefix
        assert router.path_operations, f"{prefix}: a router without operations"
    assert not api.default_router.path_operations  # nothing is served from the root
    # Each module is named after its resource.
    for prefix, router in mounted:
        module = {
            op.view_func.__module__
            for ops in router.path_operations.values()
            for op in ops.operations
        }
        expected = "dead_letters" if prefix == "/dlq" else prefix.strip("/").replace("-", "_")
        assert module == {f"jobsite.jobs.api.{expected}"}, (prefix, module)
    # The old /dlq paths are the one alias router, left out of the schema.
    [aliases] = [router for prefix, router in mounted if prefix == "/dlq"]
    assert not any(
        op.include_in_schema for ops in aliases.path_operations.values() for op in ops.operations
    )


def test_the_schema_has_one_dead_letter_resource() -> None:
    paths = api.get_openapi_schema()["paths"]
    assert not [p for p in paths if "dlq" in p]
    dead = sorted(p.removeprefix("/api/v1") for p in paths if "dead" in p)
    assert dead == [
        "/dead-letters",
        "/dead-letters/counts",
        "/dead-letters/groups/{fingerprint}/mute",
        "/dead-letters/jobs",
        "/dead-letters/purge",
        "/dead-letters/resubmit",
    ]
    # /jobs and /job-counts take the same filters, under the same names.
    listed = {p["name"] for p in paths["/api/v1/jobs"]["get"]["parameters"]}
    counted = {p["name"] for p in paths["/api/v1/job-counts"]["get"]["parameters"]}
    filters = {"queue", "task", "task_like", "q", "since", "until", "fingerprint", "ids"}
    assert counted == filters and listed == filters | {"state", "sort", "cursor", "before", "limit"}


def _fail(engine: EngineSettings, web: WebClient, token: str, n: int) -> list[str]:
    ids = [
        call(web, "post", "/jobs", token, data={"task": "boom", "max_retries": 0}).json()["id"]
        for _ in range(n)
    ]
    async_to_sync(run_worker)(engine)
    return ids


def test_every_dlq_alias_answers_as_the_resource_does(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    booms = _fail(engine, web, token, 4)
    for query in ("", "?task=boom&limit=2&offset=1", "?task=boom&version=2", "?queue=nope"):
        alias = call(web, "get", f"/dlq{query}", token)
        assert alias.status_code == 200
        assert alias.json() == call(web, "get", f"/dead-letters/jobs{query}", token).json()
    assert call(web, "get", "/dlq?limit=0", token).status_code == 422
    # The aliases answer {count} as before; the resource {matched, changed, skipped}.
    purged = call(web, "post", "/dlq/purge", token, data={"queue": "default", "ids": [booms[0]]})
    assert purged.json() == {"count": 1}
    body = {"queue": "default", "ids": [booms[1], "never-dead"]}
    assert call(web, "post", "/dlq/resubmit", token, data=body).json() == {"count": 1}
    assert call(web, "post", "/dlq/purge", token, data={"queue": "default"}).status_code == 422
    left = [j["id"] for j in call(web, "get", "/dead-letters/jobs", token).json()]
    assert sorted(left) == sorted(booms[2:])  # a worker of 10 fails them in any order


def test_dead_letters_act_by_ids_and_by_queue(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    booms = _fail(engine, web, token, 3)
    async_to_sync(mirror_all)()
    ids = {"queue": "default", "ids": [booms[0], "never-dead"]}
    dry = call(web, "post", "/dead-letters/purge", token, data={**ids, "dry_run": True}).json()
    assert dry == {"matched": 1, "changed": 0, "skipped": {"not in the dead-letter queue": 1}}
    assert services.run_engine(lambda c: c.dead_letters.contains("default", [booms[0]])) == {
        booms[0]
    }  # a dry run changes nothing
    done = call(web, "post", "/dead-letters/purge", token, data=ids).json()
    assert done == {"matched": 1, "changed": 1, "skipped": {"not in the dead-letter queue": 1}}
    assert not JobRecord.objects.filter(id=booms[0]).exists()  # gone from the history too
    assert "purge" in LogEntry.objects.latest("id").change_message
    whole = {"queue": "default", "task": "boom"}
    counted = call(web, "post", "/dead-letters/resubmit", token, data={**whole, "dry_run": True})
    assert counted.json() == {"matched": 2, "changed": 0, "skipped": {}}
    resubmitted = call(web, "post", "/dead-letters/resubmit", token, data=whole).json()
    assert (resubmitted["matched"], resubmitted["changed"], resubmitted["skipped"]) == (2, 2, {})
    assert call(web, "get", "/dead-letters/jobs", token).json() == []
    for path, bad in [
        ("purge", {"queue": "default"}),  # purge takes ids or a group
        ("resubmit", {"ids": [booms[1]]}),  # ids without their queue
        ("resubmit", {"queue": "default", "ids": [booms[1]], "fingerprint": "ab"}),
        ("resubmit", {"queue": "default", "ids": [booms[1]], "task": "boom"}),
        ("resubmit", {"task": "boom"}),
    ]:
        answer = call(web, "post", f"/dead-letters/{path}", token, data=bad)
        assert answer.status_code == 422, (path, bad, answer.content)


def test_the_client_uses_the_dead_letter_resource(engine: EngineSettings, token: str) -> None:
    seen: list[str] = []

    def record(request: httpx.Request) -> None:
        seen.append(request.url.path)

    transport = httpx.WSGITransport(app=wsgi_app)
    web = WebClient()
    booms = _fail(engine, web, token, 2)
    with JobsiteClient("http://testserver", token, transport=transport) as client:
        client.http.event_hooks["request"] = [record]
        assert sorted(j["id"] for j in client.dlq(task="boom")) == sorted(booms)
        assert client.purge_dlq("default", [booms[0]])["changed"] == 1
        assert client.resubmit_dlq("default", ids=[booms[1]])["changed"] == 1
        assert client.dlq() == []
    assert seen == [
        "/api/v1/dead-letters/jobs",
        "/api/v1/dead-letters/purge",
        "/api/v1/dead-letters/resubmit",
        "/api/v1/dead-letters/jobs",
    ]
