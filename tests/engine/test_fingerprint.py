"""Error fingerprints: normalization, the top application frame, and the job hash's field."""

from __future__ import annotations

import json
import uuid

import pytest

from engine import Client, EngineSettings, Job
from engine.ops.fingerprint import (
    fingerprint,
    fingerprint_hash,
    is_application_file,
    normalize_message,
    of_exception,
    top_frame,
)
from engine.running.runner import error_info

from . import tasks as t
from .helpers import STORED, drain, sync_redis


def test_numbers_hex_ids_and_uuids_are_normalized() -> None:
    text = (
        f"order 1234 of user {uuid.uuid4()} failed at 0x7f3a9c after 2.5s "
        "(job 0195f1a2b3c4d5e6f708192a3b4c5d6e, ref 9f8e7d6c5b)"
    )
    assert normalize_message(text) == (
        "order <n> of user <uuid> failed at <hex> after <n>s (job <uuid>, ref <hex>)"
    )


def test_words_and_names_with_digits_are_kept() -> None:
    assert normalize_message("utf8 codec: deadbeef in   v2 table") == (
        "utf8 codec: deadbeef in v2 table"
    )


def test_messages_differing_only_in_numbers_and_ids_share_a_fingerprint() -> None:
    a = fingerprint("KeyError", f"no row 17 for {uuid.uuid4()}", "app.tasks:load")
    b = fingerprint("KeyError", f"no row 90210 for {uuid.uuid4().hex}", "app.tasks:load")
    assert a == b and len(a.hash) == 16


def test_type_message_and_frame_each_separate_fingerprints() -> None:
    base = fingerprint("KeyError", "no row 17", "app.tasks:load")
    assert fingerprint("ValueError", "no row 17", "app.tasks:load").hash != base.hash
    assert fingerprint("KeyError", "no column 17", "app.tasks:load").hash != base.hash
    assert fingerprint("KeyError", "no row 17", "app.tasks:save").hash != base.hash


def test_the_hash_of_a_type_alone_is_what_the_scripts_compute() -> None:
    assert fingerprint_hash("ParentFailed") == fingerprint("ParentFailed", "").hash


def _raise_in_app(n: int) -> None:
    json.loads(f"{{bad {n}")  # raises inside the standard library


def test_the_top_frame_skips_the_standard_library() -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        _raise_in_app(3)
    assert top_frame(info.value.__traceback__) == f"{__name__}:_raise_in_app"
    assert not is_application_file(json.__file__)
    assert not is_application_file(pytest.__file__)  # site-packages
    assert not is_application_file(Client.__module__ and __import__("engine").__file__)
    assert is_application_file(__file__)


def test_two_exceptions_from_different_functions_differ_only_by_frame() -> None:
    caught = []
    for fn, record in ((t._find, "1001"), (t._find, "20022"), (t._find_elsewhere, "33")):
        try:
            fn(record)
        except LookupError as exc:
            caught.append(of_exception(exc))
    first, second, elsewhere = caught
    assert first == second
    assert first.frame == "tests.engine.tasks:_find"
    assert elsewhere.frame == "tests.engine.tasks:_find_elsewhere"
    assert elsewhere.hash != first.hash and elsewhere.message == first.message


def test_the_error_record_carries_the_fingerprint_and_its_parts() -> None:
    job = Job(id="j", task="x", attempt=1)
    with pytest.raises(LookupError) as caught:
        t._find("abc123def456")
    exc = caught.value
    info = error_info(job, exc, "LookupError", str(exc))
    assert info["fingerprint"] == of_exception(exc).hash
    assert info["fingerprint_message"] == "record <hex> not found after <n> tries"
    assert info["fingerprint_frame"] == "tests.engine.tasks:_find"
    timeout = error_info(job, None, "Timeout", "timed out after 5s")
    assert (
        timeout["fingerprint"]
        == error_info(job, None, "Timeout", "timed out after 9s")["fingerprint"]
    )


async def test_a_failed_job_keeps_its_newest_fingerprint(settings: EngineSettings) -> None:
    async with Client(settings) as client:
        jobs = [
            await client.enqueue(t.lookup, "r-1001"),
            await client.enqueue(t.lookup, "r-2002"),
            await client.enqueue(t.lookup_elsewhere, "r-3003"),
        ]
        await drain(settings, [t.lookup, t.lookup_elsewhere])
        got = [await client.jobs.get(j.id) for j in jobs]
    assert [str(j.state) for j in got] == ["failed"] * 3
    assert got[0].fingerprint == got[1].fingerprint == got[0].errors[-1]["fingerprint"]
    assert got[2].fingerprint != got[0].fingerprint and got[2].fingerprint


async def test_a_script_made_error_is_fingerprinted_by_its_type(settings: EngineSettings) -> None:
    async with Client(settings) as client:
        parent = await client.enqueue(t.boom)
        child = await client.enqueue(
            t.add.using(depends_on=[parent], on_parent_failure="fail"), 1, 2
        )
        await drain(settings, [t.boom, t.add])
        got = await client.jobs.get(child.id)
    assert str(got.state) == "failed" and got.errors[-1]["type"] == "ParentFailed"
    assert got.fingerprint == fingerprint_hash("ParentFailed")
    with sync_redis(settings.redis_url, decode_responses=True) as r:
        key = client.keys("default").job(child.id)
        assert r.hget(key, STORED.fingerprint) == got.errors[-1]["fingerprint"]


def test_quoted_strings_are_normalized_apostrophes_are_not() -> None:
    xyz = normalize_message("no rate for currency 'XYZ'")
    assert xyz == normalize_message("no rate for currency 'QQQ'") == "no rate for currency '<s>'"
    assert normalize_message('unknown key "a b" in {"x": 1}') == 'unknown key "<s>" in {"<s>": <n>}'
    assert normalize_message("can't find the user's file") == "can't find the user's file"
