"""Optional OpenTelemetry spans: enqueue -> run, the trace context carried in the job.

With the `opentelemetry-api` package installed (the `otel` extra), an enqueue opens a producer
span `jobsite.enqueue <task>` and writes its W3C context (`traceparent`, `tracestate`) as JSON
into each job's `trace_context` field; the worker runs the job inside a consumer span
`jobsite.run <task>` whose parent is that context. Without the package every function here
does nothing, and so does it while the application has set up no tracer provider (an SDK).
Spans go wherever that SDK sends them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, cast

from .. import serializer
from ..errors import SerializationError
from ..job import Job

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    ENABLED = True
except ImportError:  # the optional extra is not installed
    ENABLED = False

_TRACER = "jobsite.engine"
# Whether the environment names a provider for the API to load (OTEL_PYTHON_TRACER_PROVIDER),
# as it was when the engine was imported: a process is given its environment as it starts.
_PROVIDER_IN_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
# What stands for "the API no longer has that attribute" (a later release): ask it.
_UNKNOWN = object()
# What run_span returns while tracing is off (a shared null context yielding None).
OFF: contextlib.nullcontext[None] = contextlib.nullcontext()
# The tracer of the provider last seen: (provider, tracer).
_cached: tuple[Any, Any] = (None, None)


def _tracer() -> Any:
    """Return a tracer of the application's provider, or None while none is set up.

    Without an SDK provider the API would still build a non-recording span per call, for
    nothing: the worker skips that on its hot path.
    """
    global _cached
    if not ENABLED:
        return None
    # While no provider is set, get_tracer_provider looks its name up in os.environ on every
    # call (on every enqueue and every run); the global it would fill says as much.
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _PROVIDER_IN_ENV:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    if _cached[0] is not provider:
        _cached = (provider, provider.get_tracer(_TRACER))
    return _cached[1]


def active() -> bool:
    """Tell whether spans are made: the package is there and an SDK provider is set up."""
    return _tracer() is not None


@contextlib.contextmanager
def enqueue_span(jobs: Sequence[Job]) -> Iterator[None]:
    """Open a producer span around an enqueue; give each job without a context its own."""
    tracer = _tracer()
    if tracer is None or not jobs:
        yield
        return
    tasks = {job.task for job in jobs}
    name = f"jobsite.enqueue {jobs[0].task}" if len(tasks) == 1 else "jobsite.enqueue"
    attributes: dict[str, str | int] = {
        "messaging.system": "jobsite",
        "messaging.destination.name": jobs[0].queue,
        "messaging.batch.message_count": len(jobs),
    }
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


def run_span(job: Job) -> contextlib.AbstractContextManager[Any]:
    """Return the context of a consumer span `jobsite.run <task>`, child of the enqueue's.

    The span is what it yields; None (a shared null context) while tracing is off.
    """
    tracer = _tracer()
    if tracer is None:
        return OFF
    attributes: dict[str, str | int] = {
        "messaging.system": "jobsite",
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "jobsite.task": job.task,
        "jobsite.attempt": job.attempt,
    }
    return cast(
        contextlib.AbstractContextManager[Any],
        tracer.start_as_current_span(
            f"jobsite.run {job.task}",
            context=_parent(job),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
        ),
    )


def record_outcome(span: Any, kind: str | None, error: dict[str, Any] | None) -> None:
    """Mark the run span with how the attempt ended (an error status unless it completed)."""
    if span is None or kind is None:
        return
    span.set_attribute("jobsite.outcome", kind)
    if kind != "complete":
        message = f"{(error or {}).get('type', kind)}: {(error or {}).get('message', '')}"
        span.set_status(Status(StatusCode.ERROR, message[:200]))
