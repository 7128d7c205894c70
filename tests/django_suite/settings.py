"""Settings of the run of Django's own tests/tasks (tests/django_suite/run.py): the jobs app,
an in-memory SQLite history, and JOBSITE on the private redis-server the run started."""

import os

SECRET_KEY = "django-own-tasks-" + "k" * 50
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.admin",  # the audit trail is the admin's LogEntry
    "jobsite.jobs",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
JOBSITE = {
    "REDIS_URL": os.environ.get("JOBSITE_SUITE_REDIS_URL", "redis://127.0.0.1:1/0"),
    "PREFIX": "djsuite",
    # Django's test tasks (tests/tasks/tasks.py), imported as the package `tasks`.
    "TASK_MODULES": ["tasks.tasks"],
    "QUEUES": ["default"],
    "SCHEDULER_INTERVAL_S": 0.05,
    "IDLE_WAIT_S": 0.2,
}
# Django's test classes set their own TASKS; this one is what tasks.tasks is made under.
TASKS = {"default": {"BACKEND": "jobsite.jobs.tasks.backend.JobsiteBackend", "QUEUES": []}}
# The worker's and the backend's own lines (warnings about the run's set-up) stay out of the way.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"engine": {"level": "ERROR"}, "jobsite": {"level": "ERROR"}},
}
