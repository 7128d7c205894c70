"""Every public operation of the engine's client is reachable from the JSON API or the Python
client of the API, or says why not, or is named as not reachable yet (a list that only shrinks).

The walk reads the client's resources (`client.jobs`, `client.queues`, `client.dead_letters`,
`client.workers`, `client.repeats`) and the root's own methods; a new engine operation fails the
test until it is given its surfaces here.
"""

from __future__ import annotations

import inspect

from engine import Client, EngineSettings
from jobsite.client import JobsiteClient
from jobsite.jobs.api.root import api

# Engine operation -> (API operations "METHOD /path" below /api/v1, JobsiteClient methods).
EXPOSED: dict[str, tuple[list[str], list[str]]] = {
    "enqueue": (["POST /jobs"], ["submit"]),
    "enqueue_flow": (["POST /flows"], ["submit_flow"]),
    "enqueue_many": (["POST /jobs/batch"], ["submit_batch"]),
    "repeats.run_now": (["POST /schedules/{queue}/{schedule}/run"], ["run_schedule"]),
    "jobs.get": (["GET /jobs/{job_id}"], ["get"]),
    "jobs.wait": ([], ["wait"]),
    "jobs.outcome": ([], ["outcome"]),
    "jobs.result": ([], ["result"]),
    "jobs.cancel": (["DELETE /jobs/{job_id}", "POST /bulk/cancel"], ["cancel", "cancel_many"]),
    "jobs.resubmit": (["POST /jobs/{job_id}/retry", "POST /bulk/retry"], ["retry", "retry_many"]),
    "jobs.run_now": (
        ["POST /jobs/{job_id}/run-now", "POST /bulk/run-now"],
        ["run_now", "run_now_many"],
    ),
    "jobs.dedup_holder": (["GET /queues/{name}/deduplication/{dedup_id}"], ["deduplication"]),
    "jobs.free_dedup": (
        ["DELETE /queues/{name}/deduplication/{dedup_id}"],
        ["free_deduplication"],
    ),
    "jobs.purge": (["POST /dead-letters/purge"], ["purge_dlq"]),
    "queues.names": (["GET /queues"], ["queues"]),
    "queues.states": (["GET /queues"], ["queues"]),
    "queues.counts": (["GET /queues/{name}"], ["queue"]),
    "queues.is_paused": (["GET /queues/{name}"], ["queue"]),
    "queues.pause": (
        ["POST /queues/{name}/pause", "PUT /queues/{name}/limits"],
        ["pause_queue", "set_queue_limits"],
    ),
    "queues.resume": (
        ["POST /queues/{name}/resume", "PUT /queues/{name}/limits"],
        ["resume_queue", "set_queue_limits"],
    ),
    "queues.set_rate_limit": (["PUT /queues/{name}/limits"], ["set_queue_limits"]),
    "queues.rate_limit_ms": (["GET /queues/{name}"], ["queue"]),
    "queues.set_max_running": (["PUT /queues/{name}/limits"], ["set_queue_limits"]),
    "queues.max_running": (["GET /queues/{name}"], ["queue"]),
    "queues.concurrency_keys": (["GET /queues/{name}"], ["queue"]),
    "queues.history_gaps": (["GET /queues/{name}"], ["queue"]),
    "queues.scheduled": (["GET /scheduled"], ["scheduled"]),
    "queues.clear_state": (["POST /queues/{name}/clear"], ["clear_queue"]),
    "dead_letters.list": (["GET /dead-letters/jobs"], ["dlq"]),
    "dead_letters.scan": (["GET /dead-letters/counts"], ["dead_letter_counts"]),
    "dead_letters.resubmit": (["POST /dead-letters/resubmit"], ["resubmit_dlq"]),
    "workers.list": (["GET /workers"], ["workers"]),
    "workers.control": (["POST /workers/control"], ["control_workers"]),
    "workers.send": (["POST /workers/control"], ["control_workers"]),
    "repeats.add": (["POST /schedules"], ["create_schedule"]),
    "repeats.get": (["GET /schedules/{queue}/{schedule}"], ["schedule"]),
    "repeats.list": (["GET /schedules"], ["schedules"]),
    "repeats.fired": (["GET /schedules"], ["schedules"]),
    "repeats.last_runs": (["GET /schedules"], ["schedules"]),
    "repeats.pause": (["POST /schedules/{queue}/{schedule}/pause"], ["pause_schedule"]),
    "repeats.resume": (["POST /schedules/{queue}/{schedule}/resume"], ["resume_schedule"]),
    "repeats.remove": (["DELETE /schedules/{queue}/{schedule}"], ["delete_schedule"]),
}
# Operations no API caller should have, and why.
INTERNAL = {
    "aclose": "closes the client's own connections",
    "ping": "the process's own liveness; the API answers GET /health",
    "metrics": "read by /metrics (Prometheus, outside the API, its own token) and GET /health",
    "jobs.fields": "the app's narrow reads (a flow's states); GET /jobs/{job_id} gives the job",
    "jobs.missing": "reconciliation's check of live rows against Redis",
    "jobs.scan_ids": "reconciliation's walk over a queue's job hashes",
    "jobs.mark_missed": "hands jobs without a row to the mirror (reconciliation)",
    "queues.waiting": "the test kit's enqueued_jobs; operators list waiting jobs by GET /jobs",
    "queues.due_by": "the test kit's run_jobs(until=); operators see scheduled jobs by GET "
    "/scheduled and run them with POST /bulk/run-now",
    "dead_letters.contains": "the API's check of the ids a dead-letter action names",
    "repeats.first_run": "what enqueue does with a job that repeats (repeat_every_s)",
}
# Operations a developer or an operator should reach and cannot yet: this list only shrinks.
NOT_YET: dict[str, str] = {}


def operations() -> set[str]:
    """Return the client's public operations: `resource.method`, or `method` of the root."""
    client = Client(EngineSettings())
    found = set()
    for name, _ in inspect.getmembers(type(client), inspect.iscoroutinefunction):
        if not name.startswith("_"):
            found.add(name)
    for resource in ("jobs", "queues", "dead_letters", "workers", "repeats"):
        kind = type(getattr(client, resource))
        for name, _ in inspect.getmembers(kind, inspect.iscoroutinefunction):
            if not name.startswith("_"):
                found.add(f"{resource}.{name}")
    return found


def test_every_engine_operation_has_its_surfaces_or_says_why() -> None:
    listed = [*EXPOSED, *INTERNAL, *NOT_YET]
    assert len(listed) == len(set(listed)), "an operation is listed twice"
    assert operations() == set(listed), (
        f"not listed: {sorted(operations() - set(listed))}; "
        f"gone: {sorted(set(listed) - operations())}"
    )


def test_every_surface_named_exists() -> None:
    paths = api.get_openapi_schema()["paths"]
    schema = {f"{m.upper()} {p.removeprefix('/api/v1')}" for p, ops in paths.items() for m in ops}
    for operation, (api_ops, client_methods) in EXPOSED.items():
        assert api_ops or client_methods, operation
        assert set(api_ops) <= schema, (operation, set(api_ops) - schema)
        for method in client_methods:
            assert callable(getattr(JobsiteClient, method, None)), (operation, method)
