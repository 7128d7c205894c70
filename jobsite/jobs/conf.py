"""settings.ENGINE -> engine.EngineSettings, in one place."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings

from engine import EngineSettings

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
