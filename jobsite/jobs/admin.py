"""Admin: the job history with filters and search, a timeline per job, and bulk actions.

Actions go through the engine (services); the admin never edits mirrored rows. With "select all
N", Django passes every row matching the current filter, not only the ticked page.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from . import services, tokens
from .models import ApiToken, Job, JobEvent, OutboxEntry, Queue, Worker

CANCELLABLE = ["submitted", "scheduled", "blocked", "started"]
RETRYABLE = ["failed", "stalled", "expired", "dropped", "cancelled"]
FINISHED = ["completed", *RETRYABLE]


def _confirm(
    modeladmin: JobAdmin,
    request: HttpRequest,
    queryset: QuerySet[Job],
    verb: str,
    eligible: QuerySet[Job],
    run: Callable[[list[tuple[str, str]]], Any],
    flag: int,
) -> HttpResponse | None:
    """Show a confirmation page with the count; on "yes", run the action and log it."""
    count = eligible.count()
    if request.POST.get("post") != "yes":
        return TemplateResponse(
            request,
            "admin/jobs/confirm_action.html",
            {
                **modeladmin.admin_site.each_context(request),
                "title": f"{verb.capitalize()} jobs",
                "verb": verb,
                "count": count,
                "skipped": queryset.count() - count,
                "queryset": queryset,
                "action": request.POST.get("action", ""),
                "select_across": request.POST.get("select_across") == "1",
            },
        )
    pairs = list(eligible.values_list("id", "queue"))
    outcome = run(pairs)
    LogEntry.objects.log_actions(
        request.user.pk,
        list(eligible),
        flag,
        change_message=f"{verb} via engine: {outcome}",
        single_object=False,
    )
    modeladmin.message_user(
        request, f"{verb}: {count} job(s) sent to the engine ({outcome}).", messages.SUCCESS
    )
    return None


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "task",
        "queue",
        "state",
        "attempt",
        "submitted_at",
        "completed_at",
        "worker",
    )
    list_filter = ("state", "queue", "task", "submitted_at", "completed_at")
    search_fields = ("=id", "task", "args", "kwargs", "errors")
    date_hierarchy = "submitted_at"
    list_per_page = 100
    show_full_result_count = False
    actions = ["cancel_jobs", "retry_jobs", "resubmit_dlq", "purge_jobs"]
    readonly_fields = (
        "id",
        "task",
        "version",
        "queue",
        "state",
        "priority",
        "attempt",
        "progress",
        "progress_message",
        "worker",
        "sent_at",
        "submitted_at",
        "started_at",
        "retried_at",
        "completed_at",
        "run_at",
        "args_json",
        "result_json",
        "timeline",
        "tracebacks",
    )
    exclude = ("args", "kwargs", "result", "errors", "last_event_id", "claimed_at", "heartbeat_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        """Show a job without save buttons: rows change only through events."""
        context = {
            **(extra_context or {}),
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
        }
        return super().change_view(request, object_id, form_url, extra_context=context)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("jobs.cancel_job")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("jobs.retry_job")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("jobs.purge_job")

    @admin.display(description="arguments")
    def args_json(self, obj: Job) -> str:
        return format_html(
            "<pre>{}</pre>", json.dumps({"args": obj.args, "kwargs": obj.kwargs}, indent=2)
        )

    @admin.display(description="result")
    def result_json(self, obj: Job) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.result, indent=2))

    @admin.display(description="history")
    def timeline(self, obj: Job) -> str:
        rows = JobEvent.objects.filter(job_id=obj.id).order_by("event_id")
        return format_html(
            "<table><tr><th>time</th><th>from</th><th>to</th><th>attempt</th><th>worker</th>"
            "<th>error</th></tr>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                ((e.at, e.from_state, e.to_state, e.attempt, e.worker, e.error) for e in rows),
            ),
        )

    @admin.display(description="errors per attempt")
    def tracebacks(self, obj: Job) -> str:
        return format_html_join(
            "",
            "<p><strong>attempt {}: {}</strong> {}</p><pre>{}</pre>",
            (
                (e.get("attempt"), e.get("type"), e.get("message"), e.get("traceback", ""))
                for e in obj.errors
                if isinstance(e, dict)
            ),
        )

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        eligible = queryset.filter(state__in=CANCELLABLE)
        return _confirm(self, request, queryset, "cancel", eligible, services.cancel, CHANGE)

    @admin.action(description="Retry selected jobs (new attempt series)", permissions=["retry"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        eligible = queryset.filter(state__in=RETRYABLE)
        return _confirm(self, request, queryset, "retry", eligible, services.resubmit, CHANGE)

    @admin.action(description="Resubmit selected jobs from the DLQ", permissions=["retry"])
    def resubmit_dlq(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        eligible = queryset.filter(state__in=["failed", "stalled", "expired", "dropped"])
        return _confirm(self, request, queryset, "resubmit", eligible, services.resubmit, CHANGE)

    @admin.action(description="Purge selected finished jobs", permissions=["purge"])
    def purge_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        eligible = queryset.filter(state__in=FINISHED)

        def run(pairs: list[tuple[str, str]]) -> int:
            purged = services.purge(pairs)
            ids = [job_id for job_id, _ in pairs]
            JobEvent.objects.filter(job_id__in=ids).delete()
            Job.objects.filter(id__in=ids).delete()
            return purged

        return _confirm(self, request, queryset, "purge", eligible, run, DELETION)


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    list_display = ("name", "paused", "submitted", "scheduled", "started", "dlq", "updated_at")
    actions = ["pause", "resume"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Queue._meta.fields]

    def _set(self, request: HttpRequest, queryset: QuerySet[Queue], paused: bool) -> None:
        names = list(queryset.values_list("name", flat=True))
        services.set_paused(names, paused)
        queryset.update(paused=paused)
        verb = "paused" if paused else "resumed"
        LogEntry.objects.log_actions(
            request.user.pk,
            list(queryset),
            CHANGE,
            change_message=f"{verb} via engine",
            single_object=False,
        )
        self.message_user(request, f"{verb} {len(names)} queue(s)", messages.SUCCESS)

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self._set(request, queryset, True)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        self._set(request, queryset, False)


class ViewOnlyAdmin(admin.ModelAdmin):
    """Rows written by Jobsite's loops: people look, they do not edit."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Worker)
class WorkerAdmin(ViewOnlyAdmin):
    list_display = ("id", "host", "pid", "queues", "concurrency", "heartbeat_at", "started_at")


@admin.register(OutboxEntry)
class OutboxAdmin(ViewOnlyAdmin):
    list_display = ("job_id", "queue", "created_at", "pushed_at")
    list_filter = ("pushed_at",)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    fields = ("name", "user", "revoked_at")
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        key = tokens.issue(obj) if not change else None
        super().save_model(request, obj, form, change)
        if key:
            self.message_user(
                request,
                f"Token {obj.name}: {key} (copy it now: it is not stored)",
                messages.WARNING,
            )

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"revoked {count} token(s)", messages.SUCCESS)
