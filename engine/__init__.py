"""Jobsite's job engine: asyncio workers on Redis. Never imports Django."""

from .client import Client
from .context import JobContext
from .declared import SyncReport, declared_repeatable, sync_declared
from .errors import (
    ConfigError,
    DuplicateJob,
    EngineError,
    InvalidArguments,
    JobIdTaken,
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
from .explain import Reason, explain
from .hooks import Hook, HookEvent
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
from .keys import (
    CHOSEN_JOB_ID_PATTERN,
    JOB_ID_PATTERN,
    QueueKeys,
    check_chosen_job_id,
    check_job_id,
    validate_queue_name,
    version_tag,
)
from .limits import Deduplication
from .metrics import Histogram, Metrics, QueueMetrics
from .producer import configure
from .repeat import Repeatable
from .result import TaskResult
from .settings import EngineSettings, redact_url
from .task import PER_CALL_OPTIONS, Registry, Task, TaskOptions, collect_tasks, task, task_ref
from .worker import Worker

__all__ = [
    "CHOSEN_JOB_ID_PATTERN",
    "DEAD_STATES",
    "ENDED_STATES",
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
    "Histogram",
    "Hook",
    "HookEvent",
    "InvalidArguments",
    "Job",
    "JobContext",
    "JobIdTaken",
    "JobNotFound",
    "JobState",
    "JobTimeout",
    "LeaseLost",
    "LoopCrashed",
    "Metrics",
    "PayloadTooLarge",
    "QueueKeys",
    "QueueMetrics",
    "Reason",
    "RedisRefused",
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
    "check_chosen_job_id",
    "check_job_id",
    "collect_tasks",
    "configure",
    "declared_repeatable",
    "explain",
    "redact_url",
    "state_vocabulary",
    "sync_declared",
    "task",
    "task_ref",
    "validate_queue_name",
    "version_tag",
]
