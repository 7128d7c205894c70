"""settings.ENGINE -> engine.EngineSettings, in one place."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings

from engine import EngineSettings
from engine.errors import ConfigError

# Keys of settings.ENGINE that are Django-side, not EngineSettings fields.
_DJANGO_KEYS = ("TASK_MODULES", "QUEUES")


@cache
def engine_settings() -> EngineSettings:
    """Return the EngineSettings built from settings.ENGINE."""
    values: dict[str, Any] = {k: v for k, v in settings.ENGINE.items() if k not in _DJANGO_KEYS}
    return EngineSettings.from_mapping(values)


def task_modules() -> list[str]:
    """Return the modules whose tasks workers may run."""
    return list(settings.ENGINE.get("TASK_MODULES", []))


def queues() -> list[str]:
    """Return the queues the mirror follows and workers serve by default."""
    return list(settings.ENGINE.get("QUEUES", ["default"]))


def bulk_max() -> int:
    """Return how many jobs one bulk request may change (JOBSITE_BULK_MAX, default 10,000)."""
    return int(getattr(settings, "JOBSITE_BULK_MAX", 10_000))


def check_queue(name: str) -> None:
    """Raise ConfigError for a queue outside ENGINE["QUEUES"], unless JOBSITE_ANY_QUEUE is on.

    A job on a queue nothing serves would wait forever; new queues are a deliberate choice.
    """
    if getattr(settings, "JOBSITE_ANY_QUEUE", False) or name in queues():
        return
    raise ConfigError(
        f"queue {name!r} is not one of ENGINE['QUEUES'] {queues()}; add it there "
        "(or set JOBSITE_ANY_QUEUE = True to allow any queue)"
    )
