"""The django.tasks backend's dotted path of 0.1, kept for one release (removed in 0.3).

`TASKS = {"default": {"BACKEND": "jobsite.jobs.backends.JobsiteBackend"}}` still works and warns
(DeprecationWarning, and the system check jobsite.W007); the backend lives in
`jobsite.jobs.tasks.backend`. Importing this module names the same class, so signal receivers
connected with `sender=JobsiteBackend` hear it either way.
"""

from __future__ import annotations

import warnings

from jobsite.jobs.tasks.backend import JobsiteBackend

OLD_PATH = "jobsite.jobs.backends.JobsiteBackend"
NEW_PATH = "jobsite.jobs.tasks.backend.JobsiteBackend"
MESSAGE = (
    f"{OLD_PATH} moved to {NEW_PATH} in Jobsite 0.2; the old path goes in 0.3: "
    "set TASKS[...]['BACKEND'] to the new one"
)

warnings.warn(MESSAGE, DeprecationWarning, stacklevel=2)

__all__ = ["JobsiteBackend"]
