"""The jobs app: mirror, admin, services, the django.tasks backend and runworker."""

from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobsite.jobs"
    label = "jobsite"
    verbose_name = "Jobsite"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from jobsite.jobs import checks  # noqa: F401 - registers the system checks
        from jobsite.jobs.services import run_eagerly_with
        from jobsite.jobs.tasks.eager import run_inline

        run_eagerly_with(run_inline)
