"""Time the history's queries in-process with Django: API, dashboard snapshot, admin.

Each probe is called once cold (the first call of this process), then 20 times warm; the
figure is the p95 of the warm calls. A probe whose first call takes longer than SLOW_S gets
only 3 warm calls (so a query that misses by far does not take minutes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from bench import history_data as data

WARM = 20
SLOW_S = 5.0
LIST_MS, SEARCH_MS, STATS_MS, ADMIN_MS = 10.0, 200.0, 100.0, 200.0
# A task of middling popularity (about 1.7 % of the jobs).
TASK = data.TASKS[20]
QUEUE = "payments"


@dataclass
class Timing:
    """What one probe measured (milliseconds), or the error it raised."""

    name: str
    target_ms: float
    cold_ms: float = 0.0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    calls: int = 0
    error: str = ""
    sql_ms: float = 0.0  # time in SQL of one more call (sum over its queries)
    queries: int = 0
    explain: str = ""
    samples: list[float] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """Tell whether the probe ran and its p95 met the target."""
        return not self.error and self.p95_ms <= self.target_ms


def timed(name: str, target_ms: float, fn: Callable[[], object]) -> Timing:
    """Call `fn` cold once and warm WARM times; return the timing (errors are recorded)."""
    out = Timing(name, target_ms)

    def once() -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1000

    try:
        out.cold_ms = once()
        runs = WARM if out.cold_ms < SLOW_S * 1000 else 3
        out.samples = sorted(once() for _ in range(runs))
    except Exception as exc:  # a failing probe is reported, the run goes on
        out.error = f"{type(exc).__name__}: {exc}"[:300]
        return out
    n = len(out.samples)
    out.calls = n
    out.p50_ms = out.samples[n // 2]
    out.p95_ms = out.samples[max(0, int(n * 0.95) - 1)]
    return out


def capture(fn: Callable[[], object]) -> list[dict[str, Any]]:
    """Run `fn` once; return the queries it ran, slowest first."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        fn()
    return sorted(captured.captured_queries, key=lambda q: -float(q["time"]))


def explain(queries: list[dict[str, Any]], top: int = 2) -> str:
    """Return EXPLAIN ANALYZE of the `top` slowest of `queries`."""
    from django.db import connection

    postgres = connection.vendor == "postgresql"
    parts = []
    with connection.cursor() as cursor:
        for query in queries[:top]:
            head = "EXPLAIN (ANALYZE, BUFFERS) " if postgres else "EXPLAIN QUERY PLAN "
            cursor.execute(head + query["sql"])
            plan = "\n".join(str(row[-1] if not postgres else row[0]) for row in cursor.fetchall())
            parts.append(f"-- {float(query['time']) * 1000:.1f} ms\n{query['sql']}\n\n{plan}")
    return "\n\n".join(parts)


def clients() -> tuple[Any, Any]:
    """Return a test client with a superuser's bearer token, and one logged in to the admin."""
    from django.contrib.auth.models import User
    from django.test import Client

    from jobsite.jobs.api.tokens import issue
    from jobsite.jobs.models import ApiToken

    user, _ = User.objects.get_or_create(username="bench-history")
    user.is_staff = user.is_superuser = True
    user.save()
    ApiToken.objects.filter(user=user).delete()
    token = ApiToken(user=user, name="bench-history")
    key = issue(token)
    token.save()
    admin = Client()
    admin.force_login(user)
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}"), admin


def getter(client: Any, path: str, **params: object) -> Callable[[], Any]:
    """Return a function that GETs `path` and checks for a 200."""
    url = path + ("?" + urlencode(params) if params else "")

    def get() -> Any:
        response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"GET {url}: {response.status_code} {response.content[:200]!r}")
        return response

    return get


def probes() -> list[tuple[str, float, Callable[[], object]]]:
    """Return every probe: (name, target ms, function)."""
    from django.utils import timezone

    from jobsite.jobs.api import live

    api, admin = clients()
    jobs = getter(api, "/api/v1/jobs")
    page = jobs().json()
    for _ in range(8):
        page = getter(api, "/api/v1/jobs", cursor=page["next_cursor"])().json()
    tenth = {"cursor": page["next_cursor"]}
    failed = getter(api, "/api/v1/jobs", state="failed")().json()["items"][0]["id"]
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    hit, miss = {"q": data.ARGS_HIT}, {"q": data.NO_MATCH}
    return [
        ("API list, unfiltered", LIST_MS, jobs),
        ("API list, state=failed", LIST_MS, getter(api, "/api/v1/jobs", state="failed")),
        (f"API list, queue={QUEUE}", LIST_MS, getter(api, "/api/v1/jobs", queue=QUEUE)),
        (f"API list, task={TASK}", LIST_MS, getter(api, "/api/v1/jobs", task=TASK)),
        ("API list, since=1 h ago", LIST_MS, getter(api, "/api/v1/jobs", since=since)),
        ("API list, 10th cursor page", LIST_MS, getter(api, "/api/v1/jobs", **tenth)),
        (f"API list, q={data.ARGS_HIT} (in args)", SEARCH_MS, getter(api, "/api/v1/jobs", **hit)),
        (f"API list, q={data.NO_MATCH} (no match)", SEARCH_MS, getter(api, "/api/v1/jobs", **miss)),
        ("API job detail (failed job)", LIST_MS, getter(api, f"/api/v1/jobs/{failed}")),
        ("API queues", LIST_MS, getter(api, "/api/v1/queues")),
        ("API stats, minutes=60", STATS_MS, getter(api, "/api/v1/stats", minutes=60)),
        ("API stats, minutes=1440", STATS_MS, getter(api, "/api/v1/stats", minutes=1440)),
        (
            "dashboard snapshot (history part)",
            STATS_MS,
            lambda: live._history(live.Filter(), data.QUEUES),
        ),
        (
            "dashboard snapshot, state=failed",
            STATS_MS,
            lambda: live._history(live.Filter(state="failed"), data.QUEUES),
        ),
        ("admin changelist", ADMIN_MS, getter(admin, "/admin/jobsite/jobrecord/")),
        (
            "admin, state=failed",
            ADMIN_MS,
            getter(admin, "/admin/jobsite/jobrecord/", state__exact="failed"),
        ),
        (f"admin, q={data.ARGS_HIT}", ADMIN_MS, getter(admin, "/admin/jobsite/jobrecord/", **hit)),
    ]


def run(on_result: Callable[[Timing], None] = lambda t: None) -> list[Timing]:
    """Time every probe; explain the queries of those that miss their target."""
    out = []
    for name, target, fn in probes():
        timing = timed(name, target, fn)
        if not timing.error:
            queries = capture(fn)
            timing.queries = len(queries)
            timing.sql_ms = sum(float(q["time"]) for q in queries) * 1000
            # Explain a miss whose SQL is a real part of it (not one that loses in Python).
            if not timing.ok and timing.sql_ms > target * 0.3:
                try:
                    timing.explain = explain(queries)
                except Exception as exc:
                    timing.explain = f"(explain failed: {exc})"
        on_result(timing)
        out.append(timing)
    return out
