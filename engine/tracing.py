"""Optional OpenTelemetry spans: enqueue -> run, the trace context carried in the job.

With the `opentelemetry-api` package installed (the `otel` extra), an enqueue opens a producer
span `jobsite.enqueue <task>` and writes its W3C context (`traceparent`, `tracestate`) as JSON
into each job's `trace_context` field; the worker runs the job inside a consumer span
`jobsite.run <task>` whose parent is that context. Without the package every function here
does nothing. Spans go wherever the application's OpenTelemetry SDK sends them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from . import serializer
from .errors import SerializationError
from .job import Job

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    ENABLED = True
except ImportError:  # the optional extra is not installed
    ENABLED = False

_TRACER = "jobsite.engine"


@contextlib.contextmanager
def enqueue_span(jobs: Sequence[Job]) -> Iterator[None]:
    """Open a producer span around an enqueue; give each job without a context its own."""
    if not ENABLED or not jobs:
        yield
        return
    tasks = {job.task for job in jobs}
    name = f"jobsite.enqueue {jobs[0].task}" if len(tasks) == 1 else "jobsite.enqueue"
    attributes: dict[str, str | int] = {
        "messaging.system": "jobsite",
        "messaging.destination.name": jobs[0].queue,
        "messaging.batch.message_count": len(jobs),
    }
    tracer = trace.get_tracer(_TRACER)
    with tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if carrier:
            context = serializer.dumps(carrier).decode()
            for job in jobs:
                if job.trace_context is None:
                    job.trace_context = context
        yield


def _parent(job: Job) -> Any:
    if not job.trace_context:
        return None
    try:
        carrier = serializer.loads(job.trace_context)
    except SerializationError:
        return None
    return propagate.extract(carrier) if isinstance(carrier, dict) else None


@contextlib.contextmanager
def run_span(job: Job) -> Iterator[Any]:
    """Run a job inside a consumer span `jobsite.run <task>`, child of its enqueue's context."""
    if not ENABLED:
        yield None
        return
    attributes: dict[str, str | int] = {
        "messaging.system": "jobsite",
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "jobsite.task": job.task,
        "jobsite.attempt": job.attempt,
    }
    tracer = trace.get_tracer(_TRACER)
    with tracer.start_as_current_span(
        f"jobsite.run {job.task}",
        context=_parent(job),
        kind=SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        yield span


def record_outcome(span: Any, kind: str | None, error: dict[str, Any] | None) -> None:
    """Mark the run span with how the attempt ended (an error status unless it completed)."""
    if span is None or kind is None:
        return
    span.set_attribute("jobsite.outcome", kind)
    if kind != "complete":
        message = f"{(error or {}).get('type', kind)}: {(error or {}).get('message', '')}"
        span.set_status(Status(StatusCode.ERROR, message[:200]))
