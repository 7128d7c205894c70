"""Jobsite's job engine: asyncio workers on Redis. Never imports Django."""

from . import serializer
from .cli import parse_queues
from .client import Client
from .connection import connect, server_ms
from .context import JobContext
from .declared import SyncReport, declared_repeatable, sync_declared
from .devserver import RedisServer
from .errors import (
    ConfigError,
    DuplicateJob,
    EngineError,
    InvalidArguments,
    JobNotFound,
    JobTimeout,
    LeaseLost,
    LoopCrashed,
    PayloadTooLarge,
    RedisRefused,
    RedisUnavailable,
    Retry,
    RetryableError,
    SerializationError,
    UnknownParent,
    UnknownTask,
    WrongState,
)
from .events import IDLE_MS, Event, EventReader
from .hooks import Hook, HookEvent
from .isolate import Isolation
from .job import (
    DEAD_STATES,
    ENDED_STATES,
    LIVE_STATES,
    RETRYABLE_STATES,
    TERMINAL_STATES,
    Job,
    JobState,
    state_vocabulary,
)
from .keys import JOB_ID_PATTERN, QueueKeys, check_job_id, validate_queue_name
from .limits import Deduplication
from .metrics import Histogram, Metrics, QueueMetrics
from .reconnect import Reconnect, run_periodic
from .repeat import Repeatable
from .result import TaskResult
from .runner import error_info
from .settings import EngineSettings, redact_url
from .task import PER_CALL_OPTIONS, Registry, Task, TaskOptions, collect_tasks, task, task_ref
from .worker import Worker

__all__ = [
    "DEAD_STATES",
    "ENDED_STATES",
    "IDLE_MS",
    "JOB_ID_PATTERN",
    "LIVE_STATES",
    "PER_CALL_OPTIONS",
    "RETRYABLE_STATES",
    "TERMINAL_STATES",
    "Client",
    "ConfigError",
    "Deduplication",
    "DuplicateJob",
    "EngineError",
    "EngineSettings",
    "Event",
    "EventReader",
    "Histogram",
    "Hook",
    "HookEvent",
    "InvalidArguments",
    "Isolation",
    "Job",
    "JobContext",
    "JobNotFound",
    "JobState",
    "JobTimeout",
    "LeaseLost",
    "LoopCrashed",
    "Metrics",
    "PayloadTooLarge",
    "QueueKeys",
    "QueueMetrics",
    "Reconnect",
    "RedisRefused",
    "RedisServer",
    "RedisUnavailable",
    "Registry",
    "Repeatable",
    "Retry",
    "RetryableError",
    "SerializationError",
    "SyncReport",
    "Task",
    "TaskOptions",
    "TaskResult",
    "UnknownParent",
    "UnknownTask",
    "Worker",
    "WrongState",
    "check_job_id",
    "collect_tasks",
    "connect",
    "declared_repeatable",
    "error_info",
    "parse_queues",
    "redact_url",
    "run_periodic",
    "serializer",
    "server_ms",
    "state_vocabulary",
    "sync_declared",
    "task",
    "task_ref",
    "validate_queue_name",
]
