"""Admin: the job history with filters and search, a timeline per job, and bulk actions.

Job actions (actions.py) take the API's way of changing many jobs; the admin never edits
mirrored rows. With "select all N", Django passes every row matching the current filter, not
only the ticked page.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import SEARCH_VAR
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

if TYPE_CHECKING:
    from django.contrib.auth.models import User

from engine import control
from jobsite.jobs import audit, services
from jobsite.jobs.admin.actions import confirm
from jobsite.jobs.admin.listing import BoundedPaginator, QueueFilter, TaskFilter
from jobsite.jobs.admin.pages import TIME_FORMAT as TIME_FORMAT
from jobsite.jobs.admin.pages import NeedsRedis, page_context, when
from jobsite.jobs.admin.roles import RolePages
from jobsite.jobs.api import tokens
from jobsite.jobs.api.schemas import QUEUE_NAME
from jobsite.jobs.models import (
    ApiToken,
    JobRecord,
    OutboxEntry,
    QueueRecord,
    WorkerRecord,
)
from jobsite.jobs.permissions import Perm, user_allows
from jobsite.jobs.search import check_text, text_search


def _search_refused(request: HttpRequest) -> str | None:
    """Return why the list's search term is refused (control characters), or None."""
    try:
        check_text(request.GET.get(SEARCH_VAR, ""))
    except ValueError as exc:
        return str(exc)
    return None


def _time_of(field: str) -> Callable[[admin.ModelAdmin[JobRecord], JobRecord], str | None]:
    """Show the job's datetime `field` as `when` does, under the field's own name and ordering."""

    @admin.display(description=field.replace("_", " "), ordering=field)
    def show(modeladmin: admin.ModelAdmin[JobRecord], obj: JobRecord) -> str | None:
        return when(getattr(obj, field))

    return show


@admin.register(JobRecord)
class JobAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "task",
        "queue",
        "state",
        "attempt",
        "submitted",
        "completed",
        "worker",
    )
    # Cheap at millions of rows: no DISTINCT for choices, no date drill-down, a bounded count,
    # and the API's text search (id, task, arguments, errors) through its index.
    list_filter = ("state", QueueFilter, TaskFilter, "submitted_at")
    search_fields = ("search",)
    list_per_page = 100
    paginator = BoundedPaginator
    show_full_result_count = False
    actions = ["cancel_jobs", "retry_jobs", "resubmit_dlq", "purge_jobs"]
    readonly_fields = (
        "id",
        "dashboard_link",
        "task",
        "version",
        "queue",
        "state",
        "priority",
        "attempt",
        "progress",
        "progress_message",
        "worker",
        "sent",
        "submitted",
        "started",
        "retried",
        "completed",
        "run_at_time",
        "args_json",
        "result_json",
        "timeline",
        "tracebacks",
    )
    # The raw JSON of the transitions stays out: `timeline` shows them as a table; the times
    # are shown by the methods below, in TIME_FORMAT.
    exclude = (
        "sent_at",
        "submitted_at",
        "started_at",
        "retried_at",
        "completed_at",
        "run_at",
        "args",
        "kwargs",
        "result",
        "errors",
        "last_event_id",
        "claimed_at",
        "heartbeat_at",
        "transitions",
    )

    sent = _time_of("sent_at")
    submitted = _time_of("submitted_at")
    started = _time_of("started_at")
    retried = _time_of("retried_at")
    completed = _time_of("completed_at")
    run_at_time = _time_of("run_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[JobRecord], search_term: str
    ) -> tuple[QuerySet[JobRecord], bool]:
        """Search as the API's `q` does (the whole term, through the search index), once: the
        count and the page then read the ids it found."""
        if not search_term.strip() or _search_refused(request):
            return queryset, False
        return text_search(queryset, search_term, ids_up_to=BoundedPaginator.cap), False

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobRecord]:
        """Return no rows under a refused search term (Django's search form would drop a NUL
        and show, and let actions pick, every row)."""
        rows = super().get_queryset(request)
        return rows.none() if _search_refused(request) else rows

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Show the list; a search term with control characters is a 422 naming them."""
        refused = _search_refused(request)
        if refused is None:
            return super().changelist_view(request, extra_context)
        self.message_user(request, refused, messages.ERROR)
        response = super().changelist_view(request, extra_context)
        if response.status_code == 200:  # the page, with nothing found (not a redirect)
            response.status_code = 422
        return response

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

    def action_checkbox(self, obj: JobRecord) -> SafeString:
        """Render the row's checkbox as Django does, without a template per row (faster)."""
        label = format_html(_("Select this object for an action - {}"), str(obj))
        html = '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">'
        return format_html(html, helpers.ACTION_CHECKBOX_NAME, obj.pk, label)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, Perm.CANCEL)

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, Perm.RETRY)

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, Perm.PURGE)

    @admin.display(description="dashboard")
    def dashboard_link(self, obj: JobRecord) -> str:
        url = reverse("jobsite:job", args=[obj.pk])
        return format_html('<a href="{}">open this job in the dashboard</a>', url)

    @admin.display(description="arguments")
    def args_json(self, obj: JobRecord) -> str:
        return format_html(
            "<pre>{}</pre>", json.dumps({"args": obj.args, "kwargs": obj.kwargs}, indent=2)
        )

    @admin.display(description="result")
    def result_json(self, obj: JobRecord) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.result, indent=2))

    @admin.display(description="history")
    def timeline(self, obj: JobRecord) -> str:
        rows = obj.timeline()
        return format_html(
            "<table><tr><th>time</th><th>from</th><th>to</th><th>attempt</th><th>worker</th>"
            "<th>error</th></tr>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                (
                    (
                        when(t["at"]),
                        t.get("from"),
                        t.get("to"),
                        t.get("attempt"),
                        t.get("worker"),
                        t.get("error"),
                    )
                    for t in rows
                ),
            ),
        )

    @admin.display(description="errors per attempt")
    def tracebacks(self, obj: JobRecord) -> str:
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
    def cancel_jobs(
        self, request: HttpRequest, queryset: QuerySet[JobRecord]
    ) -> HttpResponse | None:
        return confirm(self, request, queryset, "cancel")

    @admin.action(description="Retry selected jobs (new attempt series)", permissions=["retry"])
    def retry_jobs(
        self, request: HttpRequest, queryset: QuerySet[JobRecord]
    ) -> HttpResponse | None:
        return confirm(self, request, queryset, "retry")

    @admin.action(description="Resubmit selected jobs from the DLQ", permissions=["retry"])
    def resubmit_dlq(
        self, request: HttpRequest, queryset: QuerySet[JobRecord]
    ) -> HttpResponse | None:
        return confirm(self, request, queryset, "resubmit")

    @admin.action(description="Purge selected finished jobs", permissions=["purge"])
    def purge_jobs(
        self, request: HttpRequest, queryset: QuerySet[JobRecord]
    ) -> HttpResponse | None:
        return confirm(self, request, queryset, "purge")


@admin.register(QueueRecord)
class QueueAdmin(NeedsRedis):
    meanwhile = "the queues below are as last copied from it; pausing and resuming wait for it"
    list_display = ("name", "paused", "submitted", "scheduled", "started", "dlq", "updated_at")
    actions = ["pause", "resume"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in QueueRecord._meta.fields]

    def _set(self, request: HttpRequest, queryset: QuerySet[QueueRecord], paused: bool) -> None:
        names = list(queryset.values_list("name", flat=True))
        services.set_paused(names, paused)
        queryset.update(paused=paused)
        audit.record(
            request.user, "pause" if paused else "resume", names, "admin", model=QueueRecord
        )
        verb = "paused" if paused else "resumed"
        count = f"1 queue {verb}" if len(names) == 1 else f"{len(names)} queues {verb}"
        self.message_user(request, f"{count}: {', '.join(names)}", messages.SUCCESS)

    @admin.action(description="Pause selected queues", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[QueueRecord]) -> None:
        self._set(request, queryset, True)

    @admin.action(description="Resume selected queues", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[QueueRecord]) -> None:
        self._set(request, queryset, False)


# What a worker order tells, in the operator's words.
ORDERS = {
    "quiet": "stop claiming and finish what runs",
    "resume": "claim jobs again",
    "stop": "finish what runs, then exit",
}


class ViewOnlyAdmin(admin.ModelAdmin):
    """Rows written by Jobsite's loops: people look, they do not edit."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WorkerRecord)
class WorkerAdmin(RolePages, NeedsRedis, ViewOnlyAdmin):
    meanwhile = "the workers below are as last copied from it; orders wait until it answers again"
    list_display = (
        "id",
        "host",
        "pid",
        "role",
        "queues",
        "concurrency",
        "heartbeat_at",
        "started_at",
    )
    actions = ("quiet_workers", "resume_workers", "stop_workers")

    def get_urls(self) -> list[URLPattern]:
        return self.role_urls() + super().get_urls()

    def has_control_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, Perm.CONTROL_WORKER)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A row is the registry as last copied (reconciliation drops workers that left it):
        # deleting one would do nothing to the process, so no "Delete selected" beside the
        # orders that do.
        return False

    def _order(self, request: HttpRequest, queryset: QuerySet[WorkerRecord], what: str) -> None:
        """Give the selected workers that are still live an order; audit and report it."""
        wanted = set(queryset.values_list("id", flat=True))
        live = [w for w in services.run_engine(lambda c: c.workers.list()) if w["id"] in wanted]
        order = control.order(what)
        told = services.run_engine(lambda c: c.workers.send(order, live))
        audit.record(request.user, f"worker {what}", told, "admin", model=WorkerRecord)
        gone = len(wanted) - len(told)
        if told:
            workers = "1 worker" if len(told) == 1 else f"{len(told)} workers"
            self.message_user(request, f"{workers} told to {ORDERS[what]}", messages.SUCCESS)
        if gone:
            one = "1 worker was not told: it is no longer live"
            several = f"{gone} workers were not told: they are no longer live"
            self.message_user(request, one if gone == 1 else several, messages.WARNING)

    @admin.action(description=f"Quiet: {ORDERS['quiet']}", permissions=["control"])
    def quiet_workers(self, request: HttpRequest, queryset: QuerySet[WorkerRecord]) -> None:
        self._order(request, queryset, "quiet")

    @admin.action(description="Resume claiming", permissions=["control"])
    def resume_workers(self, request: HttpRequest, queryset: QuerySet[WorkerRecord]) -> None:
        self._order(request, queryset, "resume")

    @admin.action(description="Stop gracefully", permissions=["control"])
    def stop_workers(self, request: HttpRequest, queryset: QuerySet[WorkerRecord]) -> None:
        self._order(request, queryset, "stop")


@admin.register(OutboxEntry)
class OutboxAdmin(ViewOnlyAdmin):
    list_display = ("job_id", "queue", "created_at", "pushed_at")
    list_filter = ("pushed_at",)


class TokenForm(forms.ModelForm):
    """A token's name, expiry and scope; its owner is never a field of the form."""

    permissions = forms.MultipleChoiceField(
        choices=[(p.value, p.label) for p in Perm],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Leave all unticked to act with every permission of the owner.",
    )
    queues = forms.CharField(
        required=False, help_text="Comma-separated queue names; empty for every queue."
    )

    class Meta:
        model = ApiToken
        # (revoked_at: read-only on a token's page, set by the "Revoke" action alone)
        fields: tuple[str, ...] = ("name", "expires_at", "permissions", "queues")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial["queues"] = ", ".join(self.instance.queues or [])

    def clean_queues(self) -> list[str]:
        names = [q.strip() for q in self.cleaned_data["queues"].split(",") if q.strip()]
        bad = [q for q in names if not QUEUE_NAME.fullmatch(q)]
        if bad:
            raise forms.ValidationError(f"not a queue name: {', '.join(bad)}")
        return names


class OwnedTokenForm(TokenForm):
    """The form a superuser adds a token with: it may be made for another staff user."""

    owner = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True, is_staff=True),
        help_text="The token acts as this user; it can never be moved to another.",
    )

    class Meta(TokenForm.Meta):
        fields = ("owner", *TokenForm.Meta.fields)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens belong to whoever made them; only a superuser makes one for someone else.

    The key is shown once, on the page that answers the "save" (never in a message cookie).
    """

    form = TokenForm
    list_display = (
        "name",
        "user",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("revoked_at",)
    actions = ["revoke"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        rows = super().get_queryset(request).select_related("user")
        return rows if request.user.is_superuser else rows.filter(user=request.user)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any
    ) -> Any:
        if obj is None and request.user.is_superuser:
            kw["form"] = OwnedTokenForm
        return super().get_form(request, obj, change=change, **kw)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"owner": request.user.pk}

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["user", "prefix", "revoked_at"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if not change:
            # (the admin serves signed-in staff only: no anonymous user here)
            obj.user = form.cleaned_data.get("owner") or cast("User", request.user)
            request.jobsite_token_key = tokens.issue(obj)  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url: Any = None) -> Any:
        """Answer the new token's page with its key, once."""
        title = f"API token {obj.name}"
        key = request.jobsite_token_key  # type: ignore[attr-defined]
        context = page_context(self, request, title, token=obj, key=key)
        return TemplateResponse(request, "jobsite/token_key.html", context)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        said = "1 token revoked" if count == 1 else f"{count} tokens revoked"
        self.message_user(request, f"{said}: refused from now on", messages.SUCCESS)


from jobsite.jobs.admin import mutes as admin_mutes  # noqa: E402,F401  (muted dead-letter groups)
from jobsite.jobs.admin import schedules as admin_schedules  # noqa: E402,F401  (schedules: admin pages of their own)
