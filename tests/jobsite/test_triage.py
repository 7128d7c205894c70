"""Dead-letter triage (groups by fingerprint, resubmit and purge a group) and replays."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient
from django.test import override_settings

from engine import EngineSettings
from jobsite.jobs import services
from jobsite.jobs.history import reconcile
from jobsite.jobs.models import JobRecord
from jobsite.jobs.permissions import OPERATORS, Perm
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, run_worker, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
BASE = "/api/v1"


def call(token: str, method: str, path: str, body: Any = None) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    kwargs = {"data": body} if body is not None else {}
    return getattr(WebClient(), method)(
        BASE + path, content_type="application/json", **headers, **kwargs
    )


def fail_some(engine: EngineSettings) -> dict[str, list[str]]:
    """Fail 3 `lookup` jobs (ids in messages), 2 `lookup_elsewhere`, 1 `boom`; mirror them."""
    made = {
        "lookup": [services.enqueue(t.lookup, f"{n}-{n * 7919}").id for n in (11, 222, 3333)],
        "elsewhere": [services.enqueue(t.lookup_elsewhere, str(n)).id for n in (4, 55)],
        "boom": [services.enqueue(t.boom).id],
    }
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    return made


def by_task(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {next(iter(g["tasks"])): g for g in groups}


def test_dead_letters_are_grouped_by_fingerprint(engine: EngineSettings, token: str) -> None:
    made = fail_some(engine)
    services.enqueue(t.add, 1, 2)  # live: never a dead letter
    response = call(token, "get", "/dead-letters")
    assert response.status_code == 200, response.content
    groups = response.json()
    assert [g["count"] for g in groups] == [3, 2, 1]
    lookup = by_task(groups)["lookup"]
    assert lookup["tasks"] == {"lookup": 3}
    assert lookup["queues"] == ["default"]
    assert lookup["first_seen"] <= lookup["last_seen"]
    sample = lookup["sample"]
    assert sample["exception"] == "builtins.LookupError"
    assert sample["frame"] == "tests.engine.tasks:_find"
    assert sample["pattern"] == "record <n>-<n> not found after <n> tries"
    assert sample["job_id"] in made["lookup"] and "not found after 3 tries" in sample["message"]
    row = JobRecord.objects.get(id=made["lookup"][0])
    assert row.fingerprint == lookup["fingerprint"] == row.errors[-1]["fingerprint"]
    assert by_task(groups)["lookup_elsewhere"]["fingerprint"] != lookup["fingerprint"]
    narrowed = call(token, "get", "/dead-letters?task=boom").json()
    assert [(g["count"], list(g["tasks"])) for g in narrowed] == [(1, ["boom"])]


def test_a_group_is_resubmitted_whole_after_a_dry_run(engine: EngineSettings, token: str) -> None:
    made = fail_some(engine)
    fp = JobRecord.objects.get(id=made["lookup"][0]).fingerprint
    dry = call(token, "post", "/dead-letters/resubmit", {"fingerprint": fp, "dry_run": True})
    assert dry.json() == {"matched": 3, "changed": 0, "skipped": {}}
    assert JobRecord.objects.filter(state="failed").count() == 6
    assert not LogEntry.objects.exists()
    done = call(token, "post", "/dead-letters/resubmit", {"fingerprint": fp}).json()
    assert (done["matched"], done["changed"], done["skipped"]) == (3, 3, {})
    assert sorted(done["ids"]) == sorted(made["lookup"])  # to follow (test_workers_page.py)
    states = {
        i: str(services.run_engine(lambda c, i=i: c.jobs.get(i)).state)
        for ids in made.values()
        for i in ids
    }
    assert {states[i] for i in made["lookup"]} == {"submitted"}
    assert {states[i] for i in made["elsewhere"] + made["boom"]} == {"failed"}
    [entry] = LogEntry.objects.all()
    assert "resubmit" in entry.change_message and fp in entry.change_message
    assert "3 jobs" in entry.change_message


def test_a_group_is_purged_from_redis_and_the_history(engine: EngineSettings, token: str) -> None:
    made = fail_some(engine)
    fp = JobRecord.objects.get(id=made["elsewhere"][0]).fingerprint
    done = call(token, "post", "/dead-letters/purge", {"fingerprint": fp})
    assert done.json() == {"matched": 2, "changed": 2, "skipped": {}}
    assert not JobRecord.objects.filter(id__in=made["elsewhere"]).exists()
    assert JobRecord.objects.filter(id__in=made["lookup"]).count() == 3
    assert services.run_engine(
        lambda c: c.jobs.missing([(i, "default") for i in made["elsewhere"]])
    ) == set(made["elsewhere"])
    assert "purge" in LogEntry.objects.get().change_message


def test_group_bodies_are_checked(engine: EngineSettings, token: str) -> None:
    for body in ({"fingerprint": "XYZ!"}, {}, {"fingerprint": "ab", "extra": 1}):
        response = call(token, "post", "/dead-letters/purge", body)
        assert response.status_code == 422, (body, response.content)


def test_a_token_narrowed_to_a_queue_sees_and_changes_only_that_queue(
    engine: EngineSettings,
) -> None:
    made = fail_some(engine)
    other = make_token(staff_user("narrow", OPERATORS), queues=["other"])
    assert call(other, "get", "/dead-letters").json() == []
    fp = JobRecord.objects.get(id=made["boom"][0]).fingerprint
    refused = call(other, "post", "/dead-letters/resubmit", {"fingerprint": fp, "queue": "default"})
    assert refused.status_code == 403
    answer = call(other, "post", "/dead-letters/resubmit", {"fingerprint": fp})
    assert answer.json() == {"matched": 0, "changed": 0, "skipped": {}}
    viewer = make_token(staff_user("viewer", OPERATORS), permissions=[Perm.VIEW.value])
    assert call(viewer, "post", "/dead-letters/purge", {"fingerprint": fp}).status_code == 403


def finished(token: str, run: dict[str, Any]) -> dict[str, Any]:
    """Return a background bulk run once it is no longer running."""
    deadline = time.monotonic() + 30
    while (run := call(token, "get", f"/bulk/runs/{run['id']}").json())["state"] == "running":
        assert time.monotonic() < deadline, run
        time.sleep(0.05)
    return run


def test_a_group_past_the_cap_is_resubmitted_in_the_background(
    engine: EngineSettings, token: str
) -> None:
    made = fail_some(engine)
    fp = JobRecord.objects.get(id=made["lookup"][0]).fingerprint
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 2}):
        dry = call(token, "post", "/dead-letters/resubmit", {"fingerprint": fp, "dry_run": True})
        assert dry.json() == {"matched": 3, "changed": 0, "skipped": {}}
        began = call(token, "post", "/dead-letters/resubmit", {"fingerprint": fp})
    assert began.status_code == 202, began.content
    run = began.json()
    assert (run["action"], run["matched"], run["selector"]) == ("resubmit", 3, {"fingerprint": fp})
    run = finished(token, run)
    assert (run["state"], run["looked_at"], run["changed"], run["skipped"]) == ("done", 3, 3, {})
    # Redis' own word: out of the dead-letter queue and waiting, the other groups left alone.
    lookup = made["lookup"]
    assert services.run_engine(lambda c: c.dead_letters.contains("default", lookup)) == set()
    states = async_to_sync(services.ajob_fields)("default", lookup, ["state"])
    assert {found["state"] for found in states} == {"submitted"}
    others = made["elsewhere"] + made["boom"]
    assert services.run_engine(lambda c: c.dead_letters.contains("default", others)) == set(others)
    [entry] = LogEntry.objects.all()
    assert entry.change_message.startswith("resubmit via API token")
    assert "3 jobs matching" in entry.change_message and fp in entry.change_message
    narrowed = make_token(staff_user("narrow", OPERATORS), queues=["other"])
    assert call(narrowed, "get", f"/bulk/runs/{run['id']}").status_code in (403, 404)


def test_a_group_past_the_cap_is_purged_in_the_background(
    engine: EngineSettings, token: str
) -> None:
    made = fail_some(engine)
    fp = JobRecord.objects.get(id=made["lookup"][0]).fingerprint
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 2}):
        began = call(token, "post", "/dead-letters/purge", {"fingerprint": fp, "queue": "default"})
    assert began.status_code == 202, began.content
    run = finished(token, began.json())
    assert (run["action"], run["state"], run["looked_at"], run["changed"]) == (
        "purge",
        "done",
        3,
        3,
    )
    lookup = made["lookup"]
    pairs = [(i, "default") for i in lookup]
    assert services.run_engine(lambda c: c.jobs.missing(pairs)) == set(lookup)
    assert not JobRecord.objects.filter(id__in=lookup).exists()
    assert JobRecord.objects.filter(id__in=made["elsewhere"] + made["boom"]).count() == 3
    [entry] = LogEntry.objects.all()
    assert entry.change_message.startswith("purge via API token")
    assert "3 jobs matching" in entry.change_message
    narrowed = make_token(staff_user("narrow", OPERATORS), queues=["other"])
    assert call(narrowed, "get", f"/bulk/runs/{run['id']}").status_code in (403, 404)
    viewer = make_token(staff_user("viewer", OPERATORS), permissions=[Perm.VIEW.value])
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 2}):
        again = call(viewer, "post", "/dead-letters/purge", {"fingerprint": fp})
    assert again.status_code == 403


def test_replay_with_edited_arguments_links_both_ways(engine: EngineSettings, token: str) -> None:
    original = services.enqueue(t.divide, 6, 0).id
    async_to_sync(run_worker)(engine)
    answer = call(token, "post", f"/jobs/{original}/replay", {"args": [6, 3]})
    assert answer.status_code == 201, answer.content
    replay = answer.json()
    assert replay["task"] == "divide" and replay["args"] == [6, 3] and replay["id"] != original
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    again = call(token, "get", f"/jobs/{replay['id']}").json()
    assert again["state"] == "completed" and again["result"] == 2.0
    assert again["replay_of"] == original and again["replays"] == []
    first = call(token, "get", f"/jobs/{original}").json()
    assert first["state"] == "failed" and first["replays"] == [replay["id"]]
    assert first["replay_of"] == "" and first["fingerprint"]
    assert JobRecord.objects.get(id=replay["id"]).replay_of == original
    entries = LogEntry.objects.filter(change_message__contains="replay")
    assert {e.object_id for e in entries} == {original, replay["id"]}
    assert all(f"{original} -> {replay['id']}" in e.change_message for e in entries)


def test_replay_keeps_what_is_not_edited_and_refuses_bad_arguments(
    engine: EngineSettings, token: str
) -> None:
    original = services.enqueue(t.divide, 6, 0).id
    same = call(token, "post", f"/jobs/{original}/replay", {})
    assert same.status_code == 201 and same.json()["args"] == [6, 0]
    for body in ({"args": ["six", 3]}, {"args": [1, 2, 3]}, {"kwargs": {"c": 1}}, {"args": {}}):
        response = call(token, "post", f"/jobs/{original}/replay", body)
        assert response.status_code == 422, (body, response.content)
    assert call(token, "post", "/jobs/nope/replay", {}).status_code == 404
    assert LogEntry.objects.filter(change_message__contains="replay").count() == 2


def test_a_job_only_in_the_history_can_be_replayed(engine: EngineSettings, token: str) -> None:
    original = services.enqueue(t.divide, 1, 0).id
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    assert services.purge([(original, "default")]) == 1
    answer = call(token, "post", f"/jobs/{original}/replay", {"kwargs": {"b": 1}, "args": [5]})
    assert answer.status_code == 201, answer.content
    assert answer.json()["kwargs"] == {"b": 1} and answer.json()["replay_of"] == original


def tally(token: str, query: str = "") -> dict[str, dict[str, int]]:
    response = call(token, "get", f"/dead-letters/counts{query}")
    assert response.status_code == 200, response.content
    return {t.pop("queue"): t for t in response.json()}


def test_dead_letter_counts_of_redis_and_the_history_agree_or_say_why(
    engine: EngineSettings, token: str
) -> None:
    made = fail_some(engine)
    ids = [i for group in made.values() for i in group]
    whole = {"in_redis": 6, "in_history": 6, "without_row": 0, "checked": 6}
    assert tally(token)["default"] == whole
    # Two rows the history lost (a database restored from an older backup): counted, not hidden.
    JobRecord.objects.filter(id__in=ids[:2]).delete()
    assert tally(token)["default"] == {**whole, "in_history": 4, "without_row": 2}
    # Reconciliation hands them to the mirror (at the second look), which writes their rows.
    for _ in range(2):
        reconcile.find_unmirrored(["default"])
    async_to_sync(mirror_all)()
    assert tally(token, "?queue=default")["default"] == whole
    # Purged from Redis only (the cleaner pruning the DLQ): the history keeps the rows.
    services.purge([(ids[0], "default")])
    assert tally(token)["default"] == {**whole, "in_redis": 5, "checked": 5}


def test_dead_letter_counts_stay_in_a_narrowed_tokens_queues(engine: EngineSettings) -> None:
    fail_some(engine)
    other = make_token(staff_user("narrow", OPERATORS), queues=["other"])
    assert "default" not in tally(other)
    assert call(other, "get", "/dead-letters/counts?queue=default").status_code == 403
    assert call(other, "get", "/dead-letters/counts?queue=bad%20name").status_code == 422
