"""The jobs app: mirror, admin, services, the django.tasks backend and runworker."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobsite.jobs"
    label = "jobsite"
    verbose_name = "Jobsite"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from engine import producer

        from . import (
            checks,  # noqa: F401 - registers the system checks
            services,
        )

        # An engine task's own `await task.enqueue()` and `task.delay()` go through the services
        # (the queue check, eager mode, the outbox inside a transaction), as enqueue() does.
        producer.install(services.asubmit, lambda job: services.submit(job, outbox=True))
