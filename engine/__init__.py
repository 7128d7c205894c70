"""Jobsite's job engine: asyncio workers on Redis. Never imports Django."""

from .client import Client
from .context import JobContext
from .errors import (
    ConfigError,
    DuplicateJob,
    EngineError,
    InvalidArguments,
    JobNotFound,
    JobTimeout,
    LeaseLost,
    PayloadTooLarge,
    RedisUnavailable,
    Retry,
    RetryableError,
    SerializationError,
    UnknownTask,
    WrongState,
)
from .job import TERMINAL_STATES, Job, JobState
from .keys import QueueKeys
from .result import TaskResult
from .settings import EngineSettings
from .task import Registry, Task, TaskOptions, collect_tasks, task, task_ref
from .worker import Worker

__all__ = [
    "TERMINAL_STATES",
    "Client",
    "ConfigError",
    "DuplicateJob",
    "EngineError",
    "EngineSettings",
    "InvalidArguments",
    "Job",
    "JobContext",
    "JobNotFound",
    "JobState",
    "JobTimeout",
    "LeaseLost",
    "PayloadTooLarge",
    "QueueKeys",
    "RedisUnavailable",
    "Registry",
    "Retry",
    "RetryableError",
    "SerializationError",
    "Task",
    "TaskOptions",
    "TaskResult",
    "UnknownTask",
    "Worker",
    "WrongState",
    "collect_tasks",
    "task",
    "task_ref",
]
