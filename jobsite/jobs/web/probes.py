"""`/healthz` and `/readyz` of the web app: no authentication, no secrets, cheap every second.

healthz: the process serves requests. readyz: the database and Redis each answer within
PROBE_TIMEOUT_S; the answer names which failed by kind only (no host, no message). Both take
GET and HEAD only: any other method is a 405, not CSRF's 403 page (they change nothing, so
they are exempt from CSRF, which would otherwise answer first).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from jobsite.jobs import services

PROBE_TIMEOUT_S = 1.0
# Checks run here so that a database or Redis that hangs costs a probe PROBE_TIMEOUT_S at most.
_checks = ThreadPoolExecutor(max_workers=4, thread_name_prefix="readyz")


def _database() -> None:
    """Connect to the default database afresh and run SELECT 1 (what a new request would get,
    not a pooled connection that may outlive the server)."""
    connection = connections.create_connection("default")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        connection.close()


def _redis() -> None:
    services.ping(timeout_s=PROBE_TIMEOUT_S)


def _answer(future: Future[None]) -> str:
    try:
        future.result(timeout=PROBE_TIMEOUT_S + 0.5)
    except FutureTimeout:
        return "timeout"
    except Exception as exc:
        return f"error: {type(exc).__name__}"
    return "ok"


@csrf_exempt
@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Answer 200 while the process serves requests."""
    return JsonResponse({"status": "ok"})


@csrf_exempt
@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Answer 200 when the database and Redis answer, else 503 naming which did not."""
    checks = _checks.submit(_database), _checks.submit(_redis)  # both at once
    database, redis = (_answer(check) for check in checks)
    ready = database == "ok" and redis == "ok"
    body = {"status": "ok" if ready else "unavailable", "database": database, "redis": redis}
    return JsonResponse(body, status=200 if ready else 503)
