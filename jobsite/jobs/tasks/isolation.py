"""Load the worker's tasks in the engine's isolation child (engine/running/isolate.py).

The child is a fresh interpreter: Django is set up first, from the DJANGO_SETTINGS_MODULE it
inherited from `runworker`, so that task modules may import models.
"""

from __future__ import annotations

import django

from engine import Isolation, Task


def load(*modules: str) -> list[Task]:
    """Set Django up, then return the tasks of `modules` (django Tasks wrapped)."""
    django.setup()
    from jobsite.jobs.tasks.registry import load_tasks

    return load_tasks(list(modules))


def isolation(modules: list[str]) -> Isolation:
    """Return how runworker's isolation child loads `modules`."""
    return Isolation(f"{__name__}.load", tuple(modules))
