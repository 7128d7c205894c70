"""Every operation of the JSON API is reachable from its Python client (jobsite/client.py), or
says why not: test_surfaces.py walks the engine's operations to the API and the client; this
walks the API's to the client.

The walk reads the operations of the API's OpenAPI schema (the docs pages and the old /dlq
aliases are not in it); a new operation fails the test until a client method is mapped to it
here, or INTERNAL says why it has none. Each method mapped is called against a recording
transport: it must send its operation's method and path, and only that request.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import httpx

from jobsite.client import AsyncJobsiteClient, JobsiteClient
from jobsite.jobs.api.root import api

# API operation "METHOD /path" below /api/v1 -> the JobsiteClient methods that call it.
CLIENT: dict[str, list[str]] = {
    "POST /jobs": ["submit"],
    "GET /jobs": ["jobs"],
    "POST /jobs/batch": ["submit_batch"],
    "GET /jobs/{job_id}": ["get"],
    "DELETE /jobs/{job_id}": ["cancel"],
    "POST /jobs/{job_id}/retry": ["retry"],
    "POST /jobs/{job_id}/replay": ["replay"],
    "POST /jobs/{job_id}/run-now": ["run_now"],
    "GET /job-counts": ["job_counts"],
    "POST /bulk/cancel": ["cancel_many"],
    "POST /bulk/retry": ["retry_many"],
    "POST /bulk/run-now": ["run_now_many"],
    "GET /bulk/runs/{run_id}": ["bulk_run"],
    "GET /dead-letters": ["dead_letter_groups"],
    "GET /dead-letters/counts": ["dead_letter_counts"],
    "GET /dead-letters/jobs": ["dlq"],
    "POST /dead-letters/resubmit": ["resubmit_dlq"],
    "POST /dead-letters/purge": ["purge_dlq"],
    "POST /dead-letters/groups/{fingerprint}/mute": ["mute_dead_letter_group"],
    "DELETE /dead-letters/groups/{fingerprint}/mute": ["unmute_dead_letter_group"],
    "POST /flows": ["submit_flow"],
    "GET /flows": ["flows"],
    "GET /flows/{flow_id}": ["flow"],
    "GET /queues": ["queues"],
    "GET /queues/{name}": ["queue"],
    "POST /queues/{name}/pause": ["pause_queue"],
    "POST /queues/{name}/resume": ["resume_queue"],
    "PUT /queues/{name}/limits": ["set_queue_limits"],
    "POST /queues/{name}/drain": ["drain_queue"],
    "GET /queues/{name}/drain": ["drain_status"],
    "GET /queues/{name}/deduplication/{dedup_id}": ["deduplication"],
    "DELETE /queues/{name}/deduplication/{dedup_id}": ["free_deduplication"],
    "POST /queues/{name}/clear": ["clear_queue"],
    "GET /roles": ["roles"],
    "GET /roles/{name}": ["role"],
    "PUT /roles/{name}": ["set_role"],
    "DELETE /roles/{name}": ["delete_role"],
    "GET /scheduled": ["scheduled"],
    "GET /schedules": ["schedules"],
    "POST /schedules": ["create_schedule", "create_flow_schedule"],
    "GET /schedules/{queue}/{schedule}": ["schedule"],
    "PUT /schedules/{queue}/{schedule}": ["edit_schedule"],
    "DELETE /schedules/{queue}/{schedule}": ["delete_schedule"],
    "POST /schedules/{queue}/{schedule}/pause": ["pause_schedule"],
    "POST /schedules/{queue}/{schedule}/resume": ["resume_schedule"],
    "POST /schedules/{queue}/{schedule}/run": ["run_schedule"],
    "GET /workers": ["workers"],
    "POST /workers/control": ["control_workers"],
    "GET /health": ["health"],
    "GET /scaling": ["scaling"],
    "GET /stats": ["stats"],
    "GET /charts": ["charts"],
    "GET /task-stats": ["task_stats"],
    "GET /tasks": ["tasks"],
}
# Operations the client leaves out, and why.
INTERNAL = {
    "GET /live": "the dashboard's own snapshot (what its websocket sends), polled by a page whose "
    "socket cannot connect; a script reads the same from queues(), workers(), jobs() and "
    "dead_letter_groups()",
}
# Public methods of the sync client that send no request of their own, and what they do.
HELPERS = {
    "close": "closes the client's connection pool",
    "why": "reads GET /jobs/{job_id} (its `waiting`) through get",
    "checkpoint": "reads GET /jobs/{job_id} (its `checkpoint`) through get",
    "progress": "polls GET /jobs/{job_id} through get",
    "wait": "polls GET /jobs/{job_id} through get, through progress",
    "outcome": "polls GET /jobs/{job_id} through wait, its end as Ok or Err",
    "result": "polls GET /jobs/{job_id} through outcome, its end unwrapped",
}


def operations() -> set[str]:
    """Return the API's operations as "METHOD /path" below /api/v1."""
    paths = api.get_openapi_schema()["paths"]
    return {f"{m.upper()} {p.removeprefix('/api/v1')}" for p, ops in paths.items() for m in ops}


def test_every_api_operation_has_a_client_method_or_says_why() -> None:
    assert not set(CLIENT) & set(INTERNAL), "an operation is both mapped and internal"
    listed = set(CLIENT) | set(INTERNAL)
    assert operations() == listed, (
        f"no client method and no reason: {sorted(operations() - listed)}; "
        f"gone from the API: {sorted(listed - operations())}"
    )
    assert all(CLIENT.values()), "an operation mapped to no method: say why in INTERNAL instead"


def placeholders(method: Any) -> list[str]:
    """Return a value for each required positional parameter of `method` (self aside)."""
    wanted = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = list(inspect.signature(method).parameters.values())[1:]
    return [f"p{n}" for n, p in enumerate(parameters) if p.kind in wanted and p.default is p.empty]


def template(operation: str) -> tuple[str, re.Pattern[str]]:
    """Return an operation's HTTP method and a pattern of its paths (a parameter: one segment)."""
    method, path = operation.split(" ", 1)
    return method, re.compile("/api/v1" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


def test_every_method_mapped_exists_and_sends_its_operation() -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={})

    transport = httpx.MockTransport(answer)
    with JobsiteClient("http://testserver", "js_x", transport=transport) as client:
        for operation, names in CLIENT.items():
            verb, path = template(operation)
            for name in names:
                assert callable(getattr(JobsiteClient, name, None)), (operation, name)
                assert callable(getattr(AsyncJobsiteClient, name, None)), (operation, name)
                sent.clear()
                getattr(client, name)(*placeholders(getattr(JobsiteClient, name)))
                assert len(sent) == 1, (operation, name, sent)
                request = sent[0]
                assert request.method == verb, (operation, name, request.method)
                assert path.match(request.url.path), (operation, name, request.url.path)


def test_every_public_client_method_is_mapped_or_a_helper() -> None:
    public = {
        name
        for name, _ in inspect.getmembers(JobsiteClient, inspect.isfunction)
        if not name.startswith("_")
    }
    mapped = {name for names in CLIENT.values() for name in names}
    assert public == mapped | set(HELPERS), (
        f"neither mapped nor a helper: {sorted(public - mapped - set(HELPERS))}; "
        f"gone from the client: {sorted((mapped | set(HELPERS)) - public)}"
    )
