"""Jobsite's job engine: asyncio workers on Redis. Never imports Django."""

from . import producer, serializer
from .arguments import argument_schema, check_arguments, check_job_arguments
from .cli import add_probe_arguments, parse_queues, run_probe
from .client import Client
from .dev.devserver import RedisServer
from .errors import (
    ArgumentTypeError,
    CheckpointTooLarge,
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
    ReplicaAckTimeout,
    Retry,
    RetryableError,
    SerializationError,
    UnknownParent,
    UnknownTask,
    WrongState,
)
from .fields import F, JobFields
from .job import (
    DEAD_STATES,
    ENDED_STATES,
    LIVE_STATES,
    RETRYABLE_STATES,
    TERMINAL_STATES,
    Job,
    JobState,
    claimed_ms,
    state_vocabulary,
)
from .keys import (
    CHOSEN_JOB_ID_PATTERN,
    JOB_ID_PATTERN,
    QueueKeys,
    check_chosen_job_id,
    check_job_id,
    health_key,
    validate_queue_name,
    version_tag,
)
from .limits import Deduplication
from .ops import control
from .periodic.declared import SyncReport, declared_repeatable, sync_declared
from .periodic.outages import Outage, OutageWatch, Recovery, recent_outages, recovery_grace_ms
from .periodic.schedule_health import STATES as SCHEDULE_STATES
from .periodic.schedule_health import ScheduleHealth, sample_dlq, schedule_health, swap_state
from .periodic.scheduler import Scheduler
from .producer import configure
from .producing.repeatable import Repeatable
from .producing.submit import with_callbacks
from .producing.syncclient import SyncClient
from .resources import drain
from .resources.clearing import CLEARABLE
from .resources.duties.feed import EventReader
from .resources.explain import WAITING_STATES, Reason, explain
from .resources.metrics import GroupLag, Histogram, Metrics, QueueMetrics
from .resources.roles import (
    MAX_ROLE_QUEUES,
    Role,
    check_role_name,
    check_role_queues,
    delete_role,
    get_role,
    list_roles,
    set_role,
)
from .result import Err, JobError, JobFailed, Ok, TaskResult, outcome_of
from .running.context import JobContext
from .running.isolate import Isolation
from .running.runner import error_info
from .settings import EngineSettings, redact_url
from .stream.events import IDLE_MS, Event, ids_by_queue
from .stream.hooks import Hook, HookEvent
from .task import (
    PER_CALL_OPTIONS,
    Callback,
    Registry,
    Task,
    TaskOptions,
    bind_or_raise,
    collect_tasks,
    task,
    task_ref,
    unused_retries,
)
from .transport.cluster import is_cluster
from .transport.connection import connect, server_ms
from .transport.reconnect import Reconnect, run_periodic
from .transport.serverinfo import ServerInfo, server_info
from .worker import Worker
from .worker.exitbound import ExitBudget, ExitGuard

__all__ = [
    "CHOSEN_JOB_ID_PATTERN",
    "CLEARABLE",
    "DEAD_STATES",
    "ENDED_STATES",
    "IDLE_MS",
    "JOB_ID_PATTERN",
    "LIVE_STATES",
    "MAX_ROLE_QUEUES",
    "PER_CALL_OPTIONS",
    "RETRYABLE_STATES",
    "SCHEDULE_STATES",
    "TERMINAL_STATES",
    "WAITING_STATES",
    "ArgumentTypeError",
    "Callback",
    "CheckpointTooLarge",
    "Client",
    "ConfigError",
    "Deduplication",
    "DuplicateJob",
    "EngineError",
    "EngineSettings",
    "Err",
    "Event",
    "EventReader",
    "ExitBudget",
    "ExitGuard",
    "F",
    "GroupLag",
    "Histogram",
    "Hook",
    "HookEvent",
    "InvalidArguments",
    "Isolation",
    "Job",
    "JobContext",
    "JobError",
    "JobFailed",
    "JobFields",
    "JobIdTaken",
    "JobNotFound",
    "JobState",
    "JobTimeout",
    "LeaseLost",
    "LoopCrashed",
    "Metrics",
    "Ok",
    "Outage",
    "OutageWatch",
    "PayloadTooLarge",
    "QueueKeys",
    "QueueMetrics",
    "Reason",
    "Reconnect",
    "Recovery",
    "RedisRefused",
    "RedisServer",
    "RedisUnavailable",
    "Registry",
    "Repeatable",
    "ReplicaAckTimeout",
    "Retry",
    "RetryableError",
    "Role",
    "ScheduleHealth",
    "Scheduler",
    "SerializationError",
    "ServerInfo",
    "SyncClient",
    "SyncReport",
    "Task",
    "TaskOptions",
    "TaskResult",
    "UnknownParent",
    "UnknownTask",
    "Worker",
    "WrongState",
    "add_probe_arguments",
    "argument_schema",
    "bind_or_raise",
    "check_arguments",
    "check_chosen_job_id",
    "check_job_arguments",
    "check_job_id",
    "check_role_name",
    "check_role_queues",
    "claimed_ms",
    "collect_tasks",
    "configure",
    "connect",
    "control",
    "declared_repeatable",
    "delete_role",
    "drain",
    "error_info",
    "explain",
    "get_role",
    "health_key",
    "ids_by_queue",
    "is_cluster",
    "list_roles",
    "outcome_of",
    "parse_queues",
    "producer",
    "recent_outages",
    "recovery_grace_ms",
    "redact_url",
    "run_periodic",
    "run_probe",
    "sample_dlq",
    "schedule_health",
    "serializer",
    "server_info",
    "server_ms",
    "set_role",
    "state_vocabulary",
    "swap_state",
    "sync_declared",
    "task",
    "task_ref",
    "unused_retries",
    "validate_queue_name",
    "version_tag",
    "with_callbacks",
]
