"""settings.JOBSITE, the app's one settings dict, read in one place.

Its keys are every `EngineSettings` field in upper case (REDIS_URL, PREFIX, ...) plus the
Django-side ones in `DJANGO_KEYS`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from engine import ConfigError, EngineSettings

# Django-side keys of settings.JOBSITE and their defaults; the rest are EngineSettings fields.
DJANGO_KEYS: dict[str, Any] = {
    "TASK_MODULES": [],
    "QUEUES": ["default"],
    "SCHEDULES": [],
    "BULK_MAX": 10_000,
    "ANY_QUEUE": False,
    "EAGER": False,
    "RECONCILE": "lost",
    "METRICS_TOKEN": "",
    # The history in the database: days kept after a job ended (None: forever), per state.
    "JOB_RETENTION_DAYS": 7,
    "JOB_RETENTION_DAYS_BY_STATE": {"failed": 90},
    # Schedule and queue health, alerts (jobsite/jobs/history/health.py: DEFAULTS).
    "HEALTH": {},
}


# The Django names of two engine settings (seconds; None: no limit), and their per-queue form
# QUEUE_TIMEOUTS = {"reports": {"WORKER_TIMEOUT": 600, "QUEUE_TIMEOUT": 300}}.
TIMEOUT_KEYS = {"WORKER_TIMEOUT": "worker_timeout_s", "QUEUE_TIMEOUT": "queue_timeout_s"}


def values() -> dict[str, Any]:
    """Return settings.JOBSITE (ConfigError when it is missing or not a dict)."""
    found = getattr(settings, "JOBSITE", None)
    if not isinstance(found, dict):
        raise ConfigError('settings.JOBSITE must be a dict, e.g. {"REDIS_URL": "redis://..."}')
    return found


def option(name: str) -> Any:
    """Return one Django-side option of settings.JOBSITE, or its default."""
    return values().get(name, DJANGO_KEYS[name])


def _reservation_s() -> int | None:
    """Return how long a chosen job id stays reserved for its queue: a day longer than the
    history's longest retention (None: for good, as a history kept for good)."""
    found = values()
    days = [found.get("JOB_RETENTION_DAYS", DJANGO_KEYS["JOB_RETENTION_DAYS"])]
    by_state = found.get("JOB_RETENTION_DAYS_BY_STATE", DJANGO_KEYS["JOB_RETENTION_DAYS_BY_STATE"])
    if isinstance(by_state, dict):
        days += list(by_state.values())
    if any(d is None for d in days):
        return None
    numbers = [d for d in days if isinstance(d, int | float) and not isinstance(d, bool)]
    # (Other values are the retention check's to name: jobsite.E008.)
    return int((max(numbers, default=0) + 1) * 86_400)


@cache
def engine_settings() -> EngineSettings:
    """Return the EngineSettings built from settings.JOBSITE."""
    engine = {k: v for k, v in values().items() if k not in DJANGO_KEYS}
    for name, field in TIMEOUT_KEYS.items():
        if name in engine:
            engine[field] = engine.pop(name)
    engine.setdefault("CHOSEN_ID_TTL_S", _reservation_s())
    per_queue = engine.pop("QUEUE_TIMEOUTS", None)
    if per_queue is not None:
        if not isinstance(per_queue, dict) or not all(
            isinstance(v, dict) for v in per_queue.values()
        ):
            raise ConfigError(
                'QUEUE_TIMEOUTS maps queues to {"WORKER_TIMEOUT": s, "QUEUE_TIMEOUT": s}'
            )
        engine["queue_timeouts"] = {
            queue: {TIMEOUT_KEYS.get(k, k): v for k, v in limits.items()}
            for queue, limits in per_queue.items()
        }
    return EngineSettings.from_mapping(engine)


@cache
def _served() -> frozenset[str] | None:
    """Return the queues enqueues may use (JOBSITE["QUEUES"]), or None with ANY_QUEUE on."""
    found = values()
    if found.get("ANY_QUEUE", False):
        return None
    return frozenset(found.get("QUEUES", DJANGO_KEYS["QUEUES"]))


@receiver(setting_changed)
def _forget(*, setting: str, **_: Any) -> None:
    if setting == "JOBSITE":
        engine_settings.cache_clear()
        _served.cache_clear()


def task_modules() -> list[str]:
    """Return the modules whose tasks workers may run."""
    return list(option("TASK_MODULES"))


def queues() -> list[str]:
    """Return the queues the mirror follows and workers serve by default."""
    return list(option("QUEUES"))


def bulk_max() -> int:
    """Return how many jobs one bulk request may change (BULK_MAX, default 10,000)."""
    return int(option("BULK_MAX"))


def check_queue(name: str) -> None:
    """Raise ConfigError for a queue outside JOBSITE["QUEUES"], unless ANY_QUEUE is on.

    A job on a queue nothing serves would wait forever; new queues are a deliberate choice.
    """
    served = _served()  # read once per JOBSITE: this runs on every enqueue
    if served is None or name in served:
        return
    raise ConfigError(
        f"queue {name!r} is not one of JOBSITE['QUEUES'] {queues()}; add it there "
        "(or set JOBSITE['ANY_QUEUE'] = True to allow any queue)"
    )
