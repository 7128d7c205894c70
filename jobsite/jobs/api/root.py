"""The NinjaAPI, mounted at api/v1/ by the app's urls.

Staff session (CSRF on changes) or API token; every failure is answered as JSON. Every answer
says in its `Jobsite-Redis` header whether Redis answers, as this process last saw it
(services/reach.py): "up <ms>" or "down <ms>", since when.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import orjson
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import HttpError
from ninja.parser import Parser

from engine import (
    ConfigError,
    DuplicateJob,
    JobIdTaken,
    PayloadTooLarge,
    RedisUnavailable,
    SerializationError,
)
from jobsite.jobs.api import (
    bulk,
    charts,
    dead_letters,
    flows,
    health,
    job_counts,
    jobs,
    live,
    queues,
    roles,
    scaling,
    scheduled,
    schedules,
    stats,
    task_stats,
    tasks,
    workers,
)
from jobsite.jobs.api.tokens import AUTH
from jobsite.jobs.services import reach

log = logging.getLogger("jobsite.api")


class DuplicateKey(ValueError):
    """A JSON object of a request body names one key twice."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(f"duplicate key {key!r} in the JSON body")
        found[key] = value
    return found


class StrictJson(Parser):
    """Parse bodies as strict JSON: NaN, Infinity and an object naming a key twice are refused
    (a 400 that names the key; otherwise the last value would silently win)."""

    def parse_body(self, request: HttpRequest) -> Any:
        data = orjson.loads(request.body)  # the strict, fast check first
        if isinstance(data, dict | list):
            json.loads(request.body, object_pairs_hook=_no_duplicates)
        return data


# The header every API answer carries: Redis' state as this process last saw it.
REDIS_HEADER = "Jobsite-Redis"


class JobsiteAPI(NinjaAPI):
    """NinjaAPI whose every answer says Redis' state in the REDIS_HEADER."""

    def create_response(
        self,
        request: HttpRequest,
        data: Any,
        *,
        status: int | None = None,
        temporal_response: HttpResponse | None = None,
    ) -> HttpResponse:
        response = super().create_response(
            request, data, status=status, temporal_response=temporal_response
        )
        response[REDIS_HEADER] = reach.current().header()
        return response


api = JobsiteAPI(
    title="Jobsite API",
    version="1",
    urls_namespace="jobsite:api",  # nested in the app's namespace
    auth=AUTH,
    docs_decorator=staff_member_required,
    parser=StrictJson(),
)
# One router per resource, each at its own prefix (the module's name, kebab-case).
RESOURCES = {
    "/jobs": jobs.router,
    "/job-counts": job_counts.router,
    "/bulk": bulk.router,
    "/dead-letters": dead_letters.router,
    "/flows": flows.router,
    "/queues": queues.router,
    "/roles": roles.router,
    "/scheduled": scheduled.router,
    "/schedules": schedules.router,
    "/workers": workers.router,
    "/live": live.router,
    "/health": health.router,
    "/scaling": scaling.router,
    "/stats": stats.router,
    "/charts": charts.router,
    "/task-stats": task_stats.router,
    "/tasks": tasks.router,
}
for _prefix, _router in RESOURCES.items():
    api.add_router(_prefix, _router)
# The old paths of the dead letters, answering as before (not in the schema).
api.add_router("/dlq", dead_letters.dlq_aliases)


@api.exception_handler(RedisUnavailable)
def redis_down(request: HttpRequest, exc: RedisUnavailable) -> HttpResponse:
    state = reach.failed(exc)
    response = api.create_response(
        request,
        {"detail": "Redis is unavailable; retry shortly", "redis": state.shown()},
        status=503,
    )
    response["Retry-After"] = "1"
    return response


# Engine errors answered with their own message, and the status each stands for.
ANSWERED_AS_IS: dict[type[Exception], int] = {
    PayloadTooLarge: 413,
    SerializationError: 422,
    ConfigError: 422,
}


@api.exception_handler(DuplicateJob)
@api.exception_handler(JobIdTaken)
def id_taken(request: HttpRequest, exc: Exception | type[Exception]) -> HttpResponse:
    # The same words whether the caller's queue or another holds the id: the answer never says
    # which queue, nor what job (docs/security.md, "One job, one identity").
    ids = getattr(exc, "ids", ())
    detail = f"job ids are taken: {', '.join(ids)}" if ids else "a job id is taken"
    return api.create_response(request, {"detail": detail}, status=409)


# (ninja types a handler's exception as the instance or its class.)
def _as_is(status: int) -> Callable[[HttpRequest, Exception | type[Exception]], HttpResponse]:
    def answer(request: HttpRequest, exc: Exception | type[Exception]) -> HttpResponse:
        return api.create_response(request, {"detail": str(exc)}, status=status)

    return answer


for _kind, _status in ANSWERED_AS_IS.items():
    api.add_exception_handler(_kind, _as_is(_status))


@api.exception_handler(DataError)
def bad_characters(request: HttpRequest, exc: DataError) -> HttpResponse:
    # e.g. PostgreSQL refuses NUL characters in text: the input is invalid, not the server.
    return api.create_response(request, {"detail": f"invalid input: {exc}"}, status=422)


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # django-ninja words every parser error "Cannot parse request body": say which key.
    cause = exc.__cause__
    detail = str(cause) if isinstance(cause, DuplicateKey) else str(exc)
    return api.create_response(request, {"detail": detail}, status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def body_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return api.create_response(
        request, {"detail": "request body too large (DATA_UPLOAD_MAX_MEMORY_SIZE)"}, status=413
    )


@api.exception_handler(Exception)
def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    # Logged with its traceback for the operator; the caller learns nothing about the server.
    log.exception("api error method=%s path=%s", request.method, request.path)
    return api.create_response(request, {"detail": "internal server error"}, status=500)
