"""The NinjaAPI, mounted at api/v1/ by the app's urls.

Staff session (CSRF on changes) or API token; every failure is answered as JSON.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.parser import Parser

from engine import ConfigError, DuplicateJob, PayloadTooLarge, RedisUnavailable, SerializationError
from jobsite.jobs.api.charts import router as charts_router
from jobsite.jobs.api.flows import router as flows
from jobsite.jobs.api.jobs import router
from jobsite.jobs.api.queues import router as queues
from jobsite.jobs.api.schedules import router as schedules_router
from jobsite.jobs.api.tokens import AUTH
from jobsite.jobs.api.triage import router as triage_router

log = logging.getLogger("jobsite.api")


class StrictJson(Parser):
    """Parse bodies as strict JSON: NaN, Infinity and duplicate-free garbage are refused."""

    def parse_body(self, request: HttpRequest) -> Any:
        return orjson.loads(request.body)


api = NinjaAPI(
    title="Jobsite API",
    version="1",
    urls_namespace="jobsite:api",  # nested in the app's namespace
    auth=AUTH,
    docs_decorator=staff_member_required,
    parser=StrictJson(),
)
api.add_router("/", router)
api.add_router("/schedules", schedules_router)
api.add_router("/", triage_router)
api.add_router("/charts", charts_router)
api.add_router("/flows", flows)
api.add_router("/queues", queues)


@api.exception_handler(RedisUnavailable)
def redis_down(request: HttpRequest, exc: RedisUnavailable) -> HttpResponse:
    response = api.create_response(
        request, {"detail": "Redis is unavailable; retry shortly"}, status=503
    )
    response["Retry-After"] = "1"
    return response


@api.exception_handler(PayloadTooLarge)
def too_large(request: HttpRequest, exc: PayloadTooLarge) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=413)


@api.exception_handler(SerializationError)
def not_json(request: HttpRequest, exc: SerializationError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=422)


@api.exception_handler(ConfigError)
def bad_option(request: HttpRequest, exc: ConfigError) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=422)


@api.exception_handler(DataError)
def bad_characters(request: HttpRequest, exc: DataError) -> HttpResponse:
    # e.g. PostgreSQL refuses NUL characters in text: the input is invalid, not the server.
    return api.create_response(request, {"detail": f"invalid input: {exc}"}, status=422)


@api.exception_handler(DuplicateJob)
def duplicate(request: HttpRequest, exc: DuplicateJob) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc)}, status=409)


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
