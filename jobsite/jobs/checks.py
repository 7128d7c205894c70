"""System checks (`manage.py check`): engine settings, task modules, queues, schedules, backends."""

from __future__ import annotations

import importlib
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from engine.errors import ConfigError
from engine.keys import validate_queue_name

from . import conf, schedules

TAG = "jobsite"
BACKEND = "jobsite.jobs.backends.JobsiteBackend"


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
def check_task_backends(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn about django.tasks queues that no Jobsite worker serves."""
    found: list[CheckMessage] = []
    served = set(conf.queues()) if isinstance(getattr(settings, "JOBSITE", None), dict) else set()
    for alias, params in getattr(settings, "TASKS", {}).items():
        if params.get("BACKEND") != BACKEND:
            continue
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
