"""Optional OpenTelemetry: enqueue -> run spans, the context carried in the job."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from engine import Client, EngineSettings, SyncClient
from engine.stream import tracing

from . import tasks as t
from .helpers import STORED, drain

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    """Install an SDK provider once (OpenTelemetry refuses to replace a global one)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        sdk = TracerProvider()
        sdk.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(sdk)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def named(finished: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in finished if s.name == name]
    return span


async def test_run_span_is_a_child_of_the_enqueue(
    client: Client, settings: EngineSettings, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("test").start_as_current_span("request"):
        ok = await client.enqueue(t.add, 1, 2)
        bad = await client.enqueue(t.boom)
    stored = await client.redis.hget(client.keys("default").job(ok.id), STORED.trace_context)
    assert stored is not None and "traceparent" in stored
    await drain(settings, [t.add, t.boom])
    finished = spans.get_finished_spans()
    request = named(finished, "request")
    enqueue = named(finished, "jobsite.enqueue add")
    run = named(finished, "jobsite.run add")
    assert enqueue.kind is SpanKind.PRODUCER and run.kind is SpanKind.CONSUMER
    assert enqueue.parent is not None and enqueue.parent.span_id == request.context.span_id
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    assert run.context.trace_id == request.context.trace_id
    assert run.attributes is not None and run.attributes["messaging.message.id"] == ok.id
    assert run.attributes["jobsite.outcome"] == "complete"
    assert run.status.status_code is StatusCode.UNSET
    failed = named(finished, "jobsite.run boom")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["jobsite.outcome"] == "failed"
    boom_enqueue = named(finished, "jobsite.enqueue boom")
    carried = (await client.jobs.get(bad.id)).trace_context or ""
    assert format(boom_enqueue.context.span_id, "016x") in carried


async def test_off_without_the_package(
    client: Client, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "ENABLED", False)
    job = await client.enqueue(t.add, 1, 2)
    assert (await client.jobs.get(job.id)).trace_context is None
    assert spans.get_finished_spans() == ()
    code = (
        "import sys; sys.modules['opentelemetry'] = None; from engine.stream import tracing; "
        "assert not tracing.ENABLED; print('off')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "off", done.stderr


def test_a_sync_enqueue_opens_the_same_span(
    settings: EngineSettings, spans: InMemorySpanExporter
) -> None:
    """SyncClient runs the client's steps: its producer span is a child of the caller's span,
    and the job carries that context."""
    with SyncClient(settings) as sync, trace.get_tracer("test").start_as_current_span("view"):
        job = sync.enqueue(t.add, 1, 2)
        stored = sync.redis.hget(sync._enqueuer.keys("default").job(job.id), STORED.trace_context)
    assert stored is not None and "traceparent" in stored
    finished = spans.get_finished_spans()
    view, enqueue = named(finished, "view"), named(finished, "jobsite.enqueue add")
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None and enqueue.parent.span_id == view.context.span_id
