"""Each Lua script on its own, called directly against a real redis-server."""

from __future__ import annotations

import asyncio
import inspect
import re
from importlib import resources
from typing import Any, get_args, get_type_hints

import pytest

from engine import Client, JobState
from engine.errors import (
    PHRASES,
    SCRIPT_ERRORS,
    Code,
    DuplicateJob,
    JobNotFound,
    LeaseLost,
    UnknownParent,
    WrongState,
)
from engine.seam.scripts import BeginJob, Claimed, Scripts, load_sources

from . import tasks as t
from .helpers import STORED


async def claim_one(client: Client, worker: str = "w1", limit: int = 1) -> Claimed:
    k = client.keys("default")
    rows = await client.scripts.claim(
        k,
        events_maxlen=1000,
        max_jobs=limit,
        lease_ms=30_000,
        worker_id=worker,
        result_ttl_ms=60_000,
    )
    return rows[0]


def test_error_table() -> None:
    assert {
        Code.NOT_FOUND: JobNotFound,
        Code.LEASE_LOST: LeaseLost,
        Code.WRONG_STATE: WrongState,
        Code.DUPLICATE_ID: DuplicateJob,
        Code.UNKNOWN_PARENT: UnknownParent,
    } == SCRIPT_ERRORS
    assert set(SCRIPT_ERRORS) | {Code.OK} == set(Code) == set(PHRASES) | {Code.OK}


def test_lua_headers_name_the_return_codes_of_the_enum() -> None:
    """Every negative code a script header promises is a Code, said with that Code's phrase."""
    said: dict[str, list[tuple[int, str]]] = {}
    for entry in (resources.files("engine") / "lua").iterdir():
        if not entry.name.endswith(".lua"):
            continue
        header = entry.read_text(encoding="utf-8").split("]]", 1)[0]
        returns = header.partition("Returns:")[2].split("Events:")[0]
        found = re.findall(r"(?<!\()(-\d+)[ ,]+(?:\(([^)]*)\)|([a-z][a-z ]*[a-z]))", returns)
        said[entry.name] = [(int(n), (a or b).strip()) for n, a, b in found]
    wrong = [
        (name, n, phrase)
        for name, codes in said.items()
        for n, phrase in codes
        if n not in Code or not phrase.startswith(PHRASES[Code(n)])
    ]
    assert not wrong, wrong
    promised = {Code(n) for codes in said.values() for n, _ in codes}
    assert promised == set(Code) - {Code.OK}, promised


_ARGV = re.compile(r"(?<=\s\s)ARGV\[\d+(?:\.\.)?\]\s+(.+?)(?=\s{2,}ARGV\[|\s{2,}then |\n|$)")
_THEN = re.compile(r"\bthen (?:one JSON array )?(?:per )?([^\n]*(?:\n  [a-z][^\n]*)*)")
# ARGV the seam derives itself: from the queue's keys, a group's length, scripts.BUCKETS_ARG,
# a field's name (engine/fields.py).
_DERIVED = (
    "job key prefix",
    "queue name",
    "children set key prefix",
    "number of",
    "histogram bucket bounds",
    "unserved zset key prefix",
    "that field's name in the other format",
)


def _says(name: str, text: str) -> bool:
    """Return whether each word of a Python name appears in a header's text."""
    text = text.lower().replace("_", " ")
    return all(word in text or word.rstrip("s") in text for word in name.split("_"))


def _header_argv(verb: str, source: str) -> tuple[list[str], str | None]:
    """Return the header's ARGV the caller gives, in order, and its trailing 'then ...' clause."""
    header = source.split("]]", 1)[0]
    argv_part = header[re.search(r"^\s+ARGV\[", header, re.M).start() : header.index("Returns:")]
    given = [d for d in _ARGV.findall(argv_part) if not d.lower().startswith(_DERIVED)]
    then = _THEN.search(argv_part)
    return given, then[1] if then else None


def _keyword_params(method: Any) -> list[str]:
    """Return a method's keyword parameters; `**options: Unpack[TD]` gives TD's keys."""
    out = []
    for p in inspect.signature(method).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            out.append(p.name)
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            (options,) = get_args(get_type_hints(method, include_extras=True)[p.name])
            out += list(get_type_hints(options))
    return out


def test_each_typed_method_takes_its_headers_argv_in_order() -> None:
    """Scripts.<verb>'s keyword parameters name the header's ARGV (and per-job fields) in order."""
    sources = load_sources()
    assert {v for v in vars(Scripts) if not v.startswith("_")} == set(sources)
    for verb, (_, source) in sources.items():
        method = getattr(Scripts, verb)
        params = _keyword_params(method)
        given, then = _header_argv(verb, source)
        texts = given if then is None else [*given, then]
        assert len(params) == len(texts), (verb, params, texts)
        for name, text in zip(params, texts, strict=True):
            assert _says(name, text), (verb, name, text)
        if then is None:
            continue
        item = get_args(get_type_hints(method)[params[-1]])
        fields = getattr(item[0], "_fields", None) if item else None
        if fields is not None:  # one NamedTuple per job: its fields are the header's
            listed = re.sub(r"\([^)]*\)", "", then.partition(":")[2]).split(",")
            assert len(fields) == len(listed), (verb, fields, listed)
            for field, text in zip(fields, listed, strict=True):
                assert _says(field, text), (verb, field, text)


async def test_key_count_is_checked(client: Client) -> None:
    with pytest.raises(ValueError, match="claim takes 12 keys"):
        await client.scripts.raw["claim"](["only-one"], [])


async def test_scripts_survive_noscript(client: Client) -> None:
    await client.redis.script_flush()
    job = await client.enqueue(t.add, 1, 2)
    assert (await client.jobs.get(job.id)).state is JobState.SUBMITTED


async def test_claim_sets_lease_token_and_skips_vanished_ids(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 2)
    await client.redis.zadd(k.submitted, {"ghost": 0})  # an id without a hash
    row = await claim_one(client, limit=2)
    assert row.id == job.id and row.attempt == 1 and row.token and row.task == "add"
    got = await client.jobs.get(job.id)
    assert got.state is JobState.STARTED and got.worker == "w1" and got.token == row.token
    lease = await client.redis.zscore(k.started, job.id)
    assert lease is not None and lease > got.claimed_at_ms  # type: ignore[operator]
    assert await client.redis.zcard(k.submitted) == 0


async def test_claim_begins_what_starts_at_once_and_only_claims_what_may_wait(
    client: Client,
) -> None:
    """A begun claim counts the attempt and the queue wait as begin-2.lua does; a job of a held
    task, a job with options of its own and a suspect are only claimed."""
    k = client.keys("default")
    plain = await client.enqueue(t.add, 1, 2)
    held = await client.enqueue(t.limited)
    own = await client.enqueue(t.add.using(timeout_s=5), 3, 4)
    suspect = await client.enqueue(t.add, 5, 6)
    await client.redis.hset(k.job(suspect.id), STORED.stalls, "1")
    rows = await client.scripts.claim(
        k,
        events_maxlen=1000,
        max_jobs=10,
        lease_ms=30_000,
        worker_id="w1",
        result_ttl_ms=60_000,
        begin=True,
        held=["limited"],
    )
    begun = {r.id: r.begun for r in rows}
    assert begun == {plain.id: 1, held.id: 0, own.id: 0, suspect.id: 0}
    got = await client.jobs.get(plain.id)
    assert got.attempt == 1 and got.begun == "1" and got.started_at_ms == got.claimed_at_ms
    assert got.heartbeat_at_ms is None  # its task has not heartbeat yet: no field for it
    for waiting in (held, own, suspect):
        job = await client.jobs.get(waiting.id)
        assert job.attempt == 0 and job.begun == "0" and job.started_at_ms is None
    stats = await client.redis.hgetall(k.stats)
    assert [f for f in stats if f.startswith("wait|")] == [
        f for f in stats if f.startswith("wait|add|")
    ]
    assert (
        sum(int(v) for f, v in stats.items() if f.startswith("wait|add|") and "sum" not in f) == 1
    )
    # begin-2.lua then begins the held one when it starts.
    held_row = next(r for r in rows if r.id == held.id)
    assert await client.scripts.begin(
        k, lease_ms=30_000, jobs=[BeginJob(held.id, held_row.token, False)]
    ) == [1]


async def test_a_job_begun_at_its_claim_keeps_no_claim_stamp_of_its_own(client: Client) -> None:
    """claimed_at_ms is stored only while a claim has not begun its job: one begun at once was
    claimed at its start, which readers take (Job, the history's rows), and a stamp left by an
    earlier claim that was handed back goes when a claim begins the job."""
    k = client.keys("default")
    held = await client.enqueue(t.limited)
    claim = {"events_maxlen": 1000, "lease_ms": 30_000, "worker_id": "w1", "result_ttl_ms": 60_000}
    (row,) = await client.scripts.claim(k, max_jobs=1, begin=True, held=["limited"], **claim)
    assert row.begun == 0 and await client.redis.hexists(k.job(held.id), STORED.claimed_at_ms)
    claimed_first = (await client.jobs.get(held.id)).claimed_at_ms
    assert claimed_first is not None
    assert (
        await client.scripts.release(
            k, events_maxlen=1000, worker_id="w1", job_id=held.id, token=row.token, reason="test"
        )
        == 0
    )
    (again,) = await client.scripts.claim(k, max_jobs=1, begin=True, **claim)
    assert again.id == held.id and again.begun == 1
    fields = await client.redis.hgetall(k.job(held.id))
    assert STORED.claimed_at_ms not in fields
    got = await client.jobs.get(held.id)
    assert got.claimed_at_ms == got.started_at_ms == int(fields[STORED.started_at_ms])
    assert got.claimed_at_ms >= claimed_first


async def test_claim_wakes_the_next_worker_while_jobs_remain(client: Client) -> None:
    k = client.keys("default")
    await client.enqueue_many([t.add.call(i, i) for i in range(3)])
    await client.redis.delete(k.marker)
    await claim_one(client)
    assert await client.redis.zcard(k.marker) == 1


async def test_promote_moves_only_due_jobs(client: Client) -> None:
    k = client.keys("default")
    due = await client.enqueue(t.add.using(delay_s=0.001), 1, 1)
    later = await client.enqueue(t.add.using(delay_s=60), 1, 1)
    await asyncio.sleep(0.01)
    promoted, wait_ms, codes = await client.scripts.promote(k, events_maxlen=1000, max_jobs=100)
    assert promoted == 1 and 58_000 < wait_ms <= 60_000 and codes == ()
    assert (await client.jobs.get(due.id)).state is JobState.SUBMITTED
    assert (await client.jobs.get(later.id)).state is JobState.SCHEDULED


async def test_promote_by_id_runs_scheduled_jobs_now_and_reports_the_others(
    client: Client,
) -> None:
    """Run now: the given scheduled jobs (a delayed one, a retry in its backoff) become
    submitted whatever their due time, with the scheduled -> submitted event; a job not
    scheduled and an unknown id are reported, not raised, and left as they were."""
    k = client.keys("default")
    later = await client.enqueue(t.add.using(delay_s=600), 1, 1)
    await client.enqueue(t.add.using(delay_s=900), 2, 2)  # not asked: stays
    backoff = await client.enqueue(t.add, 3, 3)
    row = await claim_one(client)
    assert row.id == backoff.id
    assert await client.scripts.begin(
        k, lease_ms=30_000, jobs=[BeginJob(backoff.id, row.token, False)]
    ) == [1]
    await client.scripts.retry(
        k,
        events_maxlen=1000,
        worker_id="w1",
        job_id=backoff.id,
        token=row.token,
        delay_ms=600_000,
        error_json=b'{"type":"X"}',
        short_error="X",
        ttl_ms=5000,
    )
    ready = await client.enqueue(t.add, 4, 4)
    assert [j.id for j in await client.queues.scheduled("default", retrying=True)] == [backoff.id]
    first, _ = await client.queues.scheduled("default", retrying=False)
    assert first.id == later.id
    before = len(await client.redis.xrange(k.events))

    done = await client.jobs.run_now("default", [later.id, backoff.id, ready.id, "ghost"])

    assert done == {
        later.id: "promoted",
        backoff.id: "promoted",
        ready.id: "not_scheduled",
        "ghost": "not_found",
    }
    for job_id in (later.id, backoff.id, ready.id):
        assert (await client.jobs.get(job_id)).state is JobState.SUBMITTED
    assert await client.redis.zcard(k.scheduled) == 1
    assert await client.redis.zscore(k.submitted, later.id) is not None
    events = [f for _, f in (await client.redis.xrange(k.events))[before:]]
    moved = {(f["job"], f["from"], f["to"]) for f in events}
    assert moved == {
        (later.id, "scheduled", "submitted"),
        (backoff.id, "scheduled", "submitted"),
    }, events
    assert (await client.jobs.get(backoff.id)).attempt == 1  # its attempt series goes on


async def test_fail_without_dlq_expires_and_with_wrong_token_is_refused(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)
    row = await claim_one(client)
    await client.redis.hset(k.job(job.id), STORED.dlq, "0")

    async def fail(token: str) -> int:
        return await client.scripts.fail(
            k,
            events_maxlen=1000,
            worker_id="w1",
            job_id=job.id,
            token=token,
            state="failed",
            error_json=b'{"type":"X"}',
            short_error="X",
            ttl_ms=5000,
        )

    assert await fail("wrong") == Code.LEASE_LOST
    assert await fail(row.token) == Code.OK
    assert await fail(row.token) == Code.LEASE_LOST  # token cleared
    assert await client.redis.zscore(k.dlq, job.id) is None
    assert 0 < await client.redis.pttl(k.job(job.id)) <= 5000
    assert (await client.jobs.get(job.id)).errors == [{"type": "X"}]


async def test_retry_appends_errors_and_requeues(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)

    async def retry(job_id: str, token: str, error_json: bytes) -> int:
        return await client.scripts.retry(
            k,
            events_maxlen=1000,
            worker_id="w1",
            job_id=job_id,
            token=token,
            delay_ms=None,
            error_json=error_json,
            short_error="e",
            ttl_ms=1000,
        )

    for n in (1, 2):
        row = await claim_one(client)
        assert await retry(job.id, row.token, f'{{"n":{n}}}'.encode()) == Code.OK
    got = await client.jobs.get(job.id)
    assert got.state is JobState.SUBMITTED and got.errors == [{"n": 1}, {"n": 2}]
    assert await retry("nope", "1", b"{}") == Code.NOT_FOUND


async def test_resubmit_refuses_live_jobs(client: Client) -> None:
    k = client.keys("default")
    job = await client.enqueue(t.add, 1, 1)
    codes = await client.scripts.resubmit(
        k, events_maxlen=1000, ttl_ms=60_000, job_ids=[job.id, "nope"]
    )
    assert codes == [-3, -1]


async def test_disown_hands_back_only_this_workers_unheld_jobs(client: Client) -> None:
    """A claim that began jobs, whose reply was lost: those go back with their attempt undone;
    the jobs the worker holds, and another worker's, stay started."""
    k = client.keys("default")
    for n in range(4):
        await client.enqueue(t.add, n, n)
    claim = {"events_maxlen": 1000, "lease_ms": 30_000, "result_ttl_ms": 60_000, "begin": True}
    kept, lost = await client.scripts.claim(k, max_jobs=2, worker_id="w1", **claim)
    other = (await client.scripts.claim(k, max_jobs=1, worker_id="w2", **claim))[0]
    assert lost.attempt == 1 and lost.begun == 1
    handed = await client.scripts.disown(k, events_maxlen=1000, worker_id="w1", held=[kept.token])
    assert handed == [lost.id]
    back = await client.jobs.get(lost.id)
    assert back.state is JobState.SUBMITTED and back.attempt == 0 and back.token is None
    assert (await client.jobs.get(kept.id)).state is JobState.STARTED
    assert (await client.jobs.get(other.id)).state is JobState.STARTED
    assert set(await client.redis.zrange(k.started, 0, -1)) == {kept.id, other.id}
    last = (await client.redis.xrevrange(k.events, count=1))[0][1]
    assert (last["job"], last["from"], last["to"], last["attempt"]) == (
        lost.id,
        "started",
        "submitted",
        "0",
    )
    assert await client.scripts.disown(k, events_maxlen=1000, worker_id="w1", held=[]) == [kept.id]


def test_each_script_defines_only_the_helpers_it_calls() -> None:
    # Every helper is a closure made again on each call: one a script never calls is dropped.
    for verb, (_, source) in load_sources().items():
        code = re.sub(r"--\[\[.*?\]\]|--[^\n]*", " ", source, flags=re.DOTALL)
        defined = re.findall(r"^(?:local function (\w+)|(\w+) = function)\(", code, re.MULTILINE)
        for name in {a or b for a, b in defined}:
            calls = re.findall(rf"(?<![\w.]){name}\(", code)
            assert len(calls) > 1 or re.search(rf"\b{name}\b(?!\()", code), (verb, name)
    # A helper that only other helpers call is kept with them.
    submit = load_sources()["submit"][1]
    assert "local function note(" in submit  # deduplicate calls it
    assert "local function owned(" not in submit and "local function stall(" not in submit


def test_submit_makes_the_rare_helpers_only_for_a_batch_that_needs_them() -> None:
    # A second `--@include common` inside with_rare() defines what only that function calls.
    submit = load_sources()["submit"][1]
    start = submit.index("local function with_rare()")
    inner = submit[start : submit.index("if rare then with_rare() end")]
    outer = submit.replace(inner, "")
    rare = ("deduplicate", "take_tick", "record_tick", "fail_child", "append_error")
    for name in (*rare, "attach_parents", "deadline_of"):
        assert f"local function {name}(" in inner and f"local function {name}(" not in outer
    for name in ("queue", "emit", "make_ready"):
        assert f"local function {name}(" in outer and f"local function {name}(" not in inner
    # Values of an include go where what uses them goes (the tables of parents and deadlines).
    for name in ("DEAD", "LIMITS"):
        assert f"local {name} = {{" in inner and f"local {name} = {{" not in outer
    assert submit.count("local rcall = redis.call") == 1
