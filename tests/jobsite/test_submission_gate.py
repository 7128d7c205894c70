"""One gate for every submission: every door through which a job comes to exist is found from
the code and attacked with another queue's job id; each must refuse it, and the job keeps its
queue, its row and its secrets.
"""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.db import transaction
from ninja.openapi.schema import OpenAPISchema

from engine import EngineSettings, Job, JobIdTaken
from engine.keys import id_owner_key
from jobsite.jobs import services
from jobsite.jobs.api.root import api as ninja_api
from jobsite.jobs.models import JobRecord, OutboxEntry
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.services import submission
from tests.engine import tasks as t

from .conftest import make_token, staff_user
from .test_job_identity import api, mirror
from .test_job_identity import two_queues as two_queues

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def _forget(settings: EngineSettings, job_id: str, queue: str) -> None:
    """Make Redis forget a job and its id's reservation (a day later, or a queue cleared)."""
    with redis.Redis.from_url(settings.redis_url) as r:
        r.delete(id_owner_key(settings.prefix, job_id))
        r.delete(f"{settings.prefix}:{{{queue}}}:job:{job_id}")


@pytest.fixture
def victims(two_queues: EngineSettings) -> Iterator[list[str]]:
    """Two default jobs only the history remembers: one id the engine made, one chosen."""
    made = services.enqueue(t.add.using(delay_s=600), 1, 2)
    chosen = services.enqueue(t.add.using(delay_s=600, job_id="invoice-7"), 3, 4)
    mirror()
    for job in (made, chosen):
        _forget(two_queues, job.id, "default")
    yield [made.id, chosen.id]


def _untouched(ids: list[str]) -> None:
    rows = {r.id: r for r in JobRecord.objects.filter(id__in=ids)}
    assert {r.queue for r in rows.values()} == {"default"}
    assert all(len(r.transitions) == 1 for r in rows.values())
    assert not OutboxEntry.objects.filter(job_id__in=ids).exists()


# The API's doors: every operation whose request body takes a `job_id`, at any depth.


def _takes_job_id(schema: dict[str, Any], node: Any, seen: frozenset[str] = frozenset()) -> bool:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in seen:
            name = ref.rsplit("/", 1)[-1]
            return _takes_job_id(schema, schema["components"]["schemas"][name], seen | {ref})
        if "job_id" in node.get("properties", {}):
            return True
        return any(_takes_job_id(schema, v, seen) for v in node.values())
    if isinstance(node, list):
        return any(_takes_job_id(schema, v, seen) for v in node)
    return False


def api_doors() -> set[tuple[str, str]]:
    """Return (method, path) of every operation whose body schema has a job_id."""
    schema: OpenAPISchema = ninja_api.get_openapi_schema(path_prefix="")
    found = set()
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            body = op.get("requestBody")
            if body is not None and _takes_job_id(schema, body):
                found.add((method, path))
    return found


# The body each door gets: another queue's id, submitted to billing.
ATTACKS: dict[tuple[str, str], Callable[[str], Any]] = {
    ("post", "/jobs"): lambda victim: {
        "task": "add",
        "args": [6, 6],
        "queue": "billing",
        "job_id": victim,
    },
    ("post", "/jobs/batch"): lambda victim: {
        "jobs": [{"task": "add", "args": [6, 6], "queue": "billing", "job_id": victim}]
    },
    ("post", "/flows"): lambda victim: {
        "jobs": [
            {"ref": "a", "task": "add", "args": [6, 6], "queue": "billing", "job_id": victim},
            {"ref": "b", "task": "add", "args": [1, 1], "queue": "billing", "depends_on": ["a"]},
        ]
    },
    ("post", "/schedules"): lambda victim: {
        "name": "grab",
        "queue": "billing",
        "every_s": 60,
        "flow": {
            "jobs": [{"ref": "a", "task": "add", "args": [6, 6], "job_id": victim}],
        },
    },
    ("put", "/schedules/{queue}/{schedule}"): lambda victim: {
        "every_s": 60,
        "flow": {"jobs": [{"ref": "a", "task": "add", "args": [6, 6], "job_id": victim}]},
    },
}


def test_every_api_door_that_takes_a_job_id_is_attacked() -> None:
    assert api_doors() == set(ATTACKS), "a new operation takes job_id: add it to ATTACKS"


@pytest.mark.parametrize("door", sorted(ATTACKS))
def test_an_api_door_refuses_another_queues_id(door: tuple[str, str], victims: list[str]) -> None:
    key = make_token(staff_user("billing-op", OPERATORS), queues=["billing"])
    viewer = make_token(staff_user("billing-view", VIEWERS), queues=["billing"])
    method, path = door
    path = path.replace("{queue}", "billing").replace("{schedule}", "grab")
    if method == "put":  # an edit needs a schedule to edit
        grab = {"name": "grab", "task": "add", "args": [1, 1], "queue": "billing", "every_s": 60}
        assert api("post", "/schedules", key, grab).status_code == 201
    for victim in victims:
        answer = api(method, path, key, ATTACKS[door](victim))
        # Refused: taken (409), or not the caller's to give at all (422: a schedule's ticks
        # name their jobs themselves).
        assert answer.status_code == (422 if "schedules" in path else 409), answer.content
        assert "default" not in answer.content.decode()
        assert api("get", f"/jobs/{victim}", viewer).status_code == 403
    mirror()
    _untouched(victims)


def test_a_flow_reusing_another_queues_job_ids_is_refused(victims: list[str]) -> None:
    key = make_token(staff_user("billing-op", OPERATORS), queues=["billing"])
    for victim in victims:
        answer = api("post", "/flows", key, ATTACKS[("post", "/flows")](victim))
        assert answer.status_code == 409, answer.content
        assert answer.json()["detail"] == f"job ids are taken: {victim}"
    mirror()
    _untouched(victims)


# The Python doors: every function of the app that calls the gate, found from the code.


def functions_where(package: str, hit: Callable[[ast.AST], bool]) -> set[str]:
    """Return `module:function` of each function under `package` with a node `hit` accepts."""
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and any(hit(sub) for sub in ast.walk(node)):
                found.add(f"{module}:{node.name}")
    return found


def _calls_the_gate(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) in ("admit", "aadmit")


def gate_callers() -> set[str]:
    """Return `module:function` of each function in jobsite/ calling admit or aadmit."""
    return functions_where("jobsite", _calls_the_gate)


def _as_billing(victim: str) -> Job:
    job = t.add.using(queue="billing", job_id=victim).call(6, 6)
    return job


def _outbox(victim: str) -> None:
    with transaction.atomic():
        services.submit(_as_billing(victim), outbox=True)


def _engine_task(victim: str) -> None:
    t.add.using(queue="billing", job_id=victim).delay(6, 6)


# Each door of Python code, by the gate caller it goes through.
PYTHON_DOORS: dict[str, Callable[[str], Any]] = {
    "services.submit": lambda v: services.submit(_as_billing(v), outbox=False),
    "services.submit in a transaction (outbox)": _outbox,
    "services.asubmit": lambda v: async_to_sync(services.asubmit)(_as_billing(v)),
    "services.enqueue": lambda v: services.enqueue(t.add.using(queue="billing", job_id=v), 6, 6),
    "services.aenqueue": lambda v: async_to_sync(services.aenqueue)(
        t.add.using(queue="billing", job_id=v), 6, 6
    ),
    "services.push (reconciliation)": lambda v: services.push([_as_billing(v)]),
    "an engine task's delay()": _engine_task,
}
# (The django.tasks backend makes every id itself and submits through services.submit.)
# Which gate caller each door reaches (the door walk fails when a caller has no door here).
COVERED = {
    "jobsite.jobs.services.__init__:submit",
    "jobsite.jobs.services.__init__:asubmit",
    "jobsite.jobs.services.__init__:push",
    "jobsite.jobs.services.submission:push_outbox",
    "jobsite.jobs.api.jobs:submit",
    "jobsite.jobs.api.jobs:submit_batch",
    "jobsite.jobs.api.jobs:replay",
    "jobsite.jobs.api.flows:submit_flow",
}


def test_every_caller_of_the_gate_has_a_door_attacked() -> None:
    assert gate_callers() == COVERED, "a new door calls the gate: attack it here"


@pytest.mark.parametrize("door", sorted(PYTHON_DOORS))
def test_a_python_door_refuses_another_queues_id(door: str, victims: list[str]) -> None:
    for victim in victims:
        with pytest.raises(JobIdTaken):
            PYTHON_DOORS[door](victim)
    mirror()
    _untouched(victims)


def test_the_relay_drops_an_outbox_row_whose_id_another_queue_took(victims: list[str]) -> None:
    for victim in victims:
        job = _as_billing(victim)
        OutboxEntry.objects.create(
            job_id=victim, queue="billing", job=submission.outbox_payload(job)
        )
    mine = _as_billing("billing-1")
    OutboxEntry.objects.create(job_id=mine.id, queue="billing", job=submission.outbox_payload(mine))
    assert services.relay_once(older_than_s=0) == 1  # the row that may go, went
    assert services.run_engine(lambda c: c.jobs.get("billing-1")).queue == "billing"
    mirror()
    _untouched(victims)


def _runs_the_submit_script(sub: ast.AST) -> bool:
    is_eval = (
        isinstance(sub, ast.Call)
        and getattr(sub.func, "id", "") == "Eval"
        and isinstance(sub.args[0], ast.Constant)
        and sub.args[0].value == "submit"
    )
    is_raw = isinstance(sub, ast.Subscript) and (
        isinstance(sub.slice, ast.Constant) and sub.slice.value == "submit"
    )
    is_call = isinstance(sub, ast.Call) and (
        getattr(sub.func, "id", "") == "submit"  # producing.submit.submit
        or getattr(sub.func, "attr", "") == "_submit"
        or (  # the enqueue's own submit step, driven from elsewhere
            getattr(sub.func, "attr", "") == "submit"
            and getattr(getattr(sub.func, "value", None), "attr", "") in ("_enqueuer", "enqueuer")
        )
    )
    return is_eval or is_raw or is_call


def _engine_submitters() -> set[str]:
    """Return `module:function` of each engine function that runs the submit script."""
    return functions_where("engine", _runs_the_submit_script)


def test_the_engine_submits_through_its_checks_or_under_tick_ids() -> None:
    """The submit script runs from the enqueue's checked steps (reservation, other queues'
    hashes), from the typed twin, or for schedule ticks, whose ids carry '@' (no caller may
    choose one)."""
    assert _engine_submitters() == {
        "engine.producing.enqueueing:submit",  # from Enqueuer.enqueue, after reserve_ids
        "engine.producing.submit:submit",  # the scheduler's ticks
        "engine.periodic.scheduler:fire",  # ticks: ids name@<ms>
        "engine.resources.repeats:run_now",  # a schedule's "run now": ids name@<ms>m
        "engine.seam.scripts:submit",  # the typed twin of submit-13.lua
    }


def test_a_refused_batch_gives_its_reservations_back(two_queues: EngineSettings) -> None:
    services.enqueue(t.add.using(delay_s=600, job_id="held"), 1, 2)
    batch = [_as_billing("mine-1"), _as_billing("held"), _as_billing("mine-2")]

    async def engine_many() -> None:
        from engine import Client

        async with Client(two_queues) as client:
            await client.enqueue_many(batch)

    with pytest.raises(JobIdTaken):
        asyncio.run(engine_many())
    with redis.Redis.from_url(two_queues.redis_url) as r:
        for job_id in ("mine-1", "mine-2"):
            assert r.get(id_owner_key(two_queues.prefix, job_id)) is None
        assert r.get(id_owner_key(two_queues.prefix, "held")) == b"default"
    # And the ids are free for billing afterwards.
    assert services.submit(_as_billing("mine-1"), outbox=False).queue == "billing"


def test_reservations_outlast_the_history(two_queues: EngineSettings) -> None:
    from django.conf import settings
    from django.test import override_settings

    from jobsite.jobs import conf

    assert two_queues.chosen_id_ttl_s == 91 * 86_400  # failures kept 90 days, and a day more
    values = {**settings.JOBSITE, "JOB_RETENTION_DAYS": None}
    with override_settings(JOBSITE=values):
        assert conf.engine_settings().chosen_id_ttl_s is None
        services.enqueue(t.add.using(delay_s=600, job_id="kept"), 1, 2)
        with redis.Redis.from_url(two_queues.redis_url) as r:
            assert r.ttl(id_owner_key(two_queues.prefix, "kept")) == -1  # kept for good
    conf.engine_settings.cache_clear()


def test_the_409_is_the_same_for_the_own_queue_and_another(two_queues: EngineSettings) -> None:
    services.enqueue(t.add.using(delay_s=600, job_id="mine"), 1, 2)
    key = make_token(staff_user("op", OPERATORS))
    body = {"task": "add", "args": [1, 1], "job_id": "mine"}
    own = api("post", "/jobs", key, body)
    other = api("post", "/jobs", key, {**body, "queue": "billing"})
    assert own.status_code == other.status_code == 409
    assert own.json() == other.json() == {"detail": "job ids are taken: mine"}


def test_a_flow_schedule_counts_jobs_per_second(two_queues: EngineSettings) -> None:
    from django.conf import settings
    from django.test import override_settings

    key = make_token(staff_user("op", OPERATORS))
    flow = {"jobs": [{"ref": f"j{i}", "task": "add", "args": [i, i]} for i in range(10)]}
    values = {**settings.JOBSITE, "MIN_REPEAT_INTERVAL_S": 1}
    with override_settings(JOBSITE=values):
        fast = api("post", "/schedules", key, {"name": "burst", "every_s": 5, "flow": flow})
        assert fast.status_code == 422, fast.content
        assert "at least 10 s for a flow of 10 jobs" in fast.json()["detail"]
        slow = api("post", "/schedules", key, {"name": "burst", "every_s": 10, "flow": flow})
        assert slow.status_code == 201, slow.content
    assert json.loads(slow.content)["name"] == "burst"


def _django_task(a: Any, b: Any) -> None:
    from . import dj_tasks

    dj_tasks.add.enqueue(a, b)


# Each door of Python code that makes a job of a task, given the task's two arguments.
TYPED_DOORS: dict[str, Callable[[Any, Any], Any]] = {
    "services.submit": lambda a, b: services.submit(t.add.call(a, b), outbox=False),
    "services.asubmit": lambda a, b: async_to_sync(services.asubmit)(t.add.call(a, b)),
    "services.enqueue": lambda a, b: services.enqueue(t.add, a, b),
    "services.enqueue in a transaction (outbox)": lambda a, b: _in_atomic(
        lambda: services.enqueue(t.add, a, b)
    ),
    "services.aenqueue": lambda a, b: async_to_sync(services.aenqueue)(t.add, a, b),
    "an engine task's delay()": lambda a, b: t.add.delay(a, b),
    "a django.tasks task's enqueue()": _django_task,
}


def _in_atomic(fn: Callable[[], Any]) -> Any:
    with transaction.atomic():
        return fn()


def _waiting() -> int:
    return services.run_engine(lambda c: c.queues.counts("default"))["submitted"]


@pytest.mark.parametrize("door", sorted(TYPED_DOORS))
def test_every_door_checks_argument_types_when_asked(door: str, engine: EngineSettings) -> None:
    from django.conf import settings
    from django.test import override_settings

    from engine import ArgumentTypeError

    checked = {**settings.JOBSITE, "CHECK_ARGUMENT_TYPES": True}
    with override_settings(JOBSITE=checked):
        with pytest.raises(
            ArgumentTypeError, match=r"argument 'a': Input should be a valid integer"
        ):
            TYPED_DOORS[door]("1", 2)
        assert _waiting() == 0 and not OutboxEntry.objects.exists()  # nothing went anywhere
        TYPED_DOORS[door](1, 2)
    assert _waiting() == 1
    TYPED_DOORS[door]("1", 2)  # off (the default): the door takes it as before
    assert _waiting() == 2
