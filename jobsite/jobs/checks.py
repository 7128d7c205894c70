"""System checks (`manage.py check`): engine settings, task modules, queues, schedules, backends,
health alerts."""

from __future__ import annotations

import importlib
import inspect
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.utils.module_loading import import_string
from redis.asyncio.connection import AbstractConnection

from engine import ConfigError, RedisUnavailable, redact_url, unused_retries, validate_queue_name
from jobsite.jobs import conf
from jobsite.jobs.history import alerts, health
from jobsite.jobs.history.retention import Horizon
from jobsite.jobs.tasks import schedules
from jobsite.jobs.tasks.registry import load_tasks

TAG = "jobsite"
# The check that talks to Redis also has a tag of its own, to run (or skip) it alone.
REDIS_TAG = "jobsite_redis"
BACKEND = "jobsite.jobs.tasks.backend.JobsiteBackend"
# The backend's path of 0.1 (jobsite/jobs/backends.py): it works, with a warning, until 0.3.
OLD_BACKEND = "jobsite.jobs.backends.JobsiteBackend"


@register(TAG)
def check_engine(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check settings.JOBSITE: its engine settings, its task modules and its queues."""
    engine = getattr(settings, "JOBSITE", None)
    if not isinstance(engine, dict):
        return [
            Error(
                "settings.JOBSITE is missing or not a dict.",
                hint='Set JOBSITE = {"REDIS_URL": "redis://...", "TASK_MODULES": [...], '
                '"QUEUES": ["default"]}.',
                id="jobsite.E001",
            )
        ]
    found: list[CheckMessage] = []
    conf.engine_settings.cache_clear()
    try:
        conf.engine_settings()
    except (ConfigError, TypeError, ValueError) as exc:
        found.append(Error(f"settings.JOBSITE is invalid: {exc}", id="jobsite.E002"))
    finally:
        conf.engine_settings.cache_clear()
    for module in conf.task_modules():
        try:
            importlib.import_module(module)
        except Exception as exc:  # the module's own error, whatever it is, is what to show
            found.append(
                Error(
                    f"JOBSITE['TASK_MODULES'] lists {module!r}, which cannot be imported: {exc!r}",
                    id="jobsite.E003",
                )
            )
    for queue in conf.queues():
        try:
            validate_queue_name(queue)
        except ConfigError as exc:
            found.append(Error(f"JOBSITE['QUEUES']: {exc}", id="jobsite.E004"))
    try:
        Horizon.now()
    except ConfigError as exc:
        found.append(Error(str(exc), id="jobsite.E008"))
    return found


@register(TAG)
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check JOBSITE["SCHEDULES"]: each entry names a known task and a valid schedule."""
    if not isinstance(getattr(settings, "JOBSITE", None), dict):
        return []  # E001 says so
    try:
        found = schedules.problems()
    except Exception:  # bad engine settings or task modules, whatever they raise: E002, E003
        return []
    return [
        Error(text, hint="See docs/django.md, 'Schedules in settings'.", id="jobsite.E005")
        for text in found
    ]


@register(TAG)
def check_health(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check JOBSITE["HEALTH"]: known keys, and a webhook URL that is http(s) with a secret."""
    if not isinstance(getattr(settings, "JOBSITE", None), dict):
        return []  # E001 says so
    try:
        options = health.settings()
    except ConfigError as exc:
        return [Error(str(exc), hint="See docs/django.md, 'Health and alerts'.", id="jobsite.E009")]
    url = str(options["WEBHOOK_URL"] or "")
    if not url:
        return []
    found: list[CheckMessage] = []
    if urlsplit(url).scheme not in alerts.SCHEMES:
        found.append(
            Error(
                'JOBSITE["HEALTH"]["WEBHOOK_URL"] must be an http:// or https:// URL.',
                id="jobsite.E010",
            )
        )
    if not str(options["WEBHOOK_SECRET"] or ""):
        found.append(
            Error(
                'JOBSITE["HEALTH"]["WEBHOOK_URL"] is set but WEBHOOK_SECRET is empty: every '
                "alert would be signed with an empty key, which anyone can forge.",
                hint='Set JOBSITE["HEALTH"]["WEBHOOK_SECRET"] to a long random value (from the '
                "environment), and give the receiver the same one.",
                id="jobsite.E011",
            )
        )
    return found


@register(TAG)
def check_retries(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn about tasks whose max_retries can never be used (nothing they raise is retried)."""
    if not isinstance(getattr(settings, "JOBSITE", None), dict):
        return []
    try:
        tasks = load_tasks(conf.task_modules())
    except Exception:  # a module that does not import is jobsite.E003's to name
        return []
    return [
        Warning(
            why,
            hint="List the exceptions to retry: @task(max_retries=..., expected_exceptions="
            "(ConnectionError, ...)), or raise Retry / RetryableError in the task. See "
            "docs/features.md, 'Retries'.",
            id="jobsite.W004",
        )
        for why in filter(None, map(unused_retries, tasks))
    ]


@register(TAG)
def check_task_backends(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn about django.tasks queues that no Jobsite worker serves, and the backend's old path.

    A backend with `"QUEUES": []` (any queue) names none to check here: the backend logs each
    queue outside JOBSITE["QUEUES"] the first time it sends a job there.
    """
    found: list[CheckMessage] = []
    served = set(conf.queues()) if isinstance(getattr(settings, "JOBSITE", None), dict) else set()
    for alias, params in getattr(settings, "TASKS", {}).items():
        if params.get("BACKEND") not in (BACKEND, OLD_BACKEND):
            continue
        if params.get("BACKEND") == OLD_BACKEND:
            found.append(
                Warning(
                    f"TASKS[{alias!r}]['BACKEND'] is {OLD_BACKEND}, the path before Jobsite 0.2: "
                    "it works until 0.3.",
                    hint=f"Set it to {BACKEND!r}.",
                    id="jobsite.W007",
                )
            )
        unserved = sorted(set(params.get("QUEUES", [])) - served)
        if unserved and not conf.option("ANY_QUEUE"):
            found.append(
                Warning(
                    f"TASKS[{alias!r}]['QUEUES'] has {unserved}, not in JOBSITE['QUEUES']: "
                    "tasks sent there would wait forever.",
                    hint="Add them to JOBSITE['QUEUES'] (or drop them from TASKS).",
                    id="jobsite.W001",
                )
            )
    return found


@register(TAG)
def check_apps(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the app's place in INSTALLED_APPS, django-ninja's, and the channel layer."""
    found: list[CheckMessage] = []
    apps = [apps_entry(a) for a in settings.INSTALLED_APPS]
    if "channels" in apps and apps.index("channels") < apps.index("jobsite.jobs"):
        found.append(
            Error(
                "'channels' is listed before 'jobsite.jobs' in INSTALLED_APPS: "
                "`manage.py runworker` would run Channels' worker, not Jobsite's.",
                hint="Move 'jobsite.jobs' above 'channels'.",
                id="jobsite.E006",
            )
        )
    if "ninja" not in apps:
        found.append(
            Warning(
                "'ninja' is not in INSTALLED_APPS: the API docs page loads Swagger UI "
                "from a CDN instead of this server.",
                hint="Add 'ninja' to INSTALLED_APPS.",
                id="jobsite.W002",
            )
        )
    if "default" not in getattr(settings, "CHANNEL_LAYERS", {}):
        found.append(
            Warning(
                "CHANNEL_LAYERS has no 'default' layer: dashboards look for changes every few "
                "seconds instead of being told of each one.",
                hint='Set CHANNEL_LAYERS = {"default": {"BACKEND": '
                '"channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [{"address": '
                'REDIS_URL, "socket_timeout": 10}]}}}.',
                id="jobsite.W005",
            )
        )
    return found


def apps_entry(entry: str) -> str:
    """Return the app name an INSTALLED_APPS entry stands for (an AppConfig path or a module)."""
    from django.apps import apps

    for config in apps.get_app_configs():
        if entry in (config.name, f"{config.__module__}.{type(config).__name__}"):
            return config.name
    return entry


def layer_read_timeout_s(host: Any) -> float | None:
    """Return how long a read of a channels_redis host's connections may take (None: no limit):
    its `socket_timeout`, else redis-py's default."""
    if isinstance(host, dict) and "socket_timeout" in host:
        return None if host["socket_timeout"] is None else float(host["socket_timeout"])
    url = host.get("address") if isinstance(host, dict) else host
    if isinstance(url, str):
        query = parse_qs(urlsplit(url).query)
        if "socket_timeout" in query:
            return float(query["socket_timeout"][0])
    default = inspect.signature(AbstractConnection.__init__).parameters["socket_timeout"].default
    return None if default is None else float(default)


@register(TAG)
def check_channel_layer(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check that a channels_redis layer's reads outlast its blocking read (BZPOPMIN)."""
    layer = getattr(settings, "CHANNEL_LAYERS", {}).get("default", {})
    if layer.get("BACKEND") != "channels_redis.core.RedisChannelLayer":
        return []
    block_s = import_string(layer["BACKEND"]).brpop_timeout
    for host in layer.get("CONFIG", {}).get("hosts") or [None]:  # None: its localhost
        read_s = layer_read_timeout_s(host)
        if read_s is not None and read_s <= block_s:
            return [
                Warning(
                    f"CHANNEL_LAYERS: the channel layer's Redis reads give up after {read_s:g} s "
                    f"(redis-py's socket_timeout), no longer than its {block_s} s wait for a "
                    "message: a dashboard socket without news fails its read every few seconds.",
                    hint=f'Give each host a longer one: {{"address": REDIS_URL, '
                    f'"socket_timeout": {block_s * 2}}} (see docs/install.md).',
                    id="jobsite.W006",
                )
            ]
    return []


@register(TAG, REDIS_TAG)
def check_redis(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check that the engine's Redis answers, within a second."""
    try:
        engine = conf.engine_settings()
    except (ConfigError, TypeError, ValueError):
        return []  # reported by check_engine
    from jobsite.jobs import services

    try:
        services.ping(timeout_s=1.0)
    except RedisUnavailable as exc:
        return [
            Warning(
                f"Redis at {redact_url(engine.redis_url)} does not answer: {exc}",
                hint="Start Redis, or point JOBSITE['REDIS_URL'] at a running server.",
                id="jobsite.W003",
            )
        ]
    return []
