"""The jobs app: mirror, admin, services, the django.tasks backend and runworker."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobsite.jobs"
    label = "jobsite"
    verbose_name = "Jobsite"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from engine import check_job_arguments, producer
        from jobsite.jobs import (
            checks,  # noqa: F401 - registers the system checks
            services,
        )
        from jobsite.jobs.tasks.eager import run_inline
        from jobsite.jobs.tasks.registry import known_tasks

        services.run_eagerly_with(run_inline)
        services.check_arguments_with(lambda job: check_job_arguments(job, known_tasks()))
        # An engine task's own `await task.enqueue()` and `task.delay()` go through the services
        # (the queue check, eager mode, the outbox inside a transaction), as enqueue() does.
        producer.install(services.asubmit, lambda job: services.submit(job, outbox=True))
