"""Admin pages for schedules, which live in Redis: a list with actions, and add/edit forms.

The Schedule model has no table; these views replace the changelist and forms with ones that
go through the engine. The view permission lists them, `change_queuerecord` changes them (the
same checks as the API), and every change is audited.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from engine import ConfigError, EngineError, RedisUnavailable
from jobsite.jobs import audit, conf, services
from jobsite.jobs.admin.pages import page_context, refused
from jobsite.jobs.api.schedules import schedule_out
from jobsite.jobs.models import Schedule
from jobsite.jobs.permissions import Perm, user_allows
from jobsite.jobs.services import known_queues
from jobsite.jobs.services.schedules import (
    run_schedule,
    save_schedule,
    schedule,
    schedules,
    set_schedule_paused,
)
from jobsite.jobs.tasks.registry import known_tasks
from jobsite.jobs.tasks.schedules import runtime_job

# What each action did, in the words of its message.
DONE = {"pause": "paused", "resume": "resumed", "run": "run now", "delete": "deleted"}

# Changelist action -> what it does to one schedule (queue, name); returns a note or None.
ACTIONS = {
    "pause_schedules": ("pause", "Pause selected schedules"),
    "resume_schedules": ("resume", "Resume selected schedules"),
    "run_schedules": ("run", "Run selected schedules now"),
    "delete_schedules": ("delete", "Delete selected schedules"),
}


def _apply(verb: str, queue: str, name: str) -> str | None:
    """Do `verb` to one schedule; return the outcome to audit, or None when it is gone."""
    if verb in ("pause", "resume"):
        return verb if set_schedule_paused(queue, name, verb == "pause") else None
    if verb == "run":
        job = run_schedule(queue, name)
        return None if job is None else job.id
    return "deleted" if services.run_engine(lambda c: c.repeats.remove(queue, name)) else None


class JsonField(forms.CharField):
    """A JSON value of one type (list or dict), typed as text."""

    def __init__(self, kind: type, **kwargs: Any) -> None:
        self.kind = kind
        super().__init__(widget=forms.Textarea(attrs={"rows": 2, "cols": 60}), **kwargs)

    def clean(self, value: Any) -> Any:
        text = super().clean(value) or ("[]" if self.kind is list else "{}")
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(parsed, self.kind):
            raise forms.ValidationError(f"must be a JSON {self.kind.__name__}")
        return parsed


class ScheduleForm(forms.Form):
    name = forms.CharField(max_length=113)
    queue = forms.CharField(max_length=100, required=False, help_text="default: the task's")
    task = forms.ChoiceField(choices=())
    args = JsonField(list, required=False, help_text='a JSON list, e.g. [1, "a"]')
    kwargs = JsonField(dict, required=False, help_text='a JSON object, e.g. {"n": 1}')
    every_s = forms.FloatField(required=False, min_value=0.001, label="every (seconds)")
    cron = forms.CharField(required=False, max_length=200, help_text="e.g. 0 3 * * *")
    tz = forms.CharField(max_length=100, initial="UTC", label="time zone")
    skip_if_running = forms.BooleanField(required=False)
    paused = forms.BooleanField(required=False)
    repeat_limit = forms.IntegerField(
        required=False, min_value=1, label="runs in all", help_text="empty: no end"
    )

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["task"].choices = [(n, n) for n in sorted(known_tasks())]  # type: ignore[attr-defined]
        if editing:
            for fixed in ("name", "queue"):
                self.fields[fixed].disabled = True

    def save(self, editing: bool) -> bool:
        """Store the schedule; on a problem, add it to the form's errors and return False."""
        data = self.cleaned_data
        try:
            job = runtime_job(data["task"], data["args"], data["kwargs"], data["queue"] or None)
            stored = save_schedule(
                data["name"],
                job,
                exists=editing,
                every_s=data["every_s"],
                cron=data["cron"] or None,
                tz=data["tz"],
                skip_if_running=data["skip_if_running"],
                paused=data["paused"],
                repeat_limit=data["repeat_limit"],
            )
        except (ConfigError, EngineError) as exc:
            self.add_error(None, str(exc))
            return False
        if stored is None:
            self.add_error("name", "a schedule of this name exists" if not editing else "gone")
            return False
        self.cleaned_data["queue"] = job.queue
        return True


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Schedules from Redis: listed with next runs and last run; changed through the engine."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, Perm.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return user_allows(request.user, Perm.VIEW)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, Perm.CHANGE_QUEUE)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return user_allows(request.user, Perm.CHANGE_QUEUE)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return user_allows(request.user, Perm.CHANGE_QUEUE)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", wrap(self.changelist_view), name=f"{name}_changelist"),
            path("add/", wrap(self.add_view), name=f"{name}_add"),
            path(
                "<str:queue>/<str:schedule_name>/change/",
                wrap(self.edit_view),
                name=f"{name}_change",
            ),
        ]

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return page_context(self, request, title, **extra)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """List every schedule; a POST runs one of ACTIONS on the selected ones."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            try:
                return self._act(request)
            except RedisUnavailable as exc:
                refused(
                    request, exc, "the action may not have been done: try again once it answers"
                )
                return HttpResponseRedirect(request.path)
        rows = None  # (not listed: Redis does not answer)
        try:
            queues = sorted({*conf.queues(), *known_queues()})
            rows = [schedule_out(s) for s in schedules(queues)]
        except RedisUnavailable as exc:
            refused(
                request, exc, "the schedules live there: none can be listed or changed meanwhile"
            )
        context = self._context(
            request,
            "Schedules",
            the_list=True,
            rows=rows,
            actions=[(k, label) for k, (_, label) in ACTIONS.items()],
            may_change=self.has_change_permission(request),
        )
        return TemplateResponse(request, "admin/jobsite/schedules.html", context)

    def _act(self, request: HttpRequest) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        action = request.POST.get("action", "")
        if action not in ACTIONS:
            self.message_user(request, f"unknown action {action!r}", messages.ERROR)
            return HttpResponseRedirect(request.path)
        verb = ACTIONS[action][0]
        done: list[str] = []
        for selected in request.POST.getlist("_selected_action"):
            queue, _, name = selected.partition("/")
            outcome = _apply(verb, queue, name) if queue and name else None
            if outcome is None:
                said = f"{selected} was not {DONE[verb]}: there is no such schedule"
                self.message_user(request, said, messages.WARNING)
                continue
            audit.record(request.user, verb, [selected], "admin", model=Schedule, outcome=outcome)
            done.append(selected)
        if done:
            count = "1 schedule" if len(done) == 1 else f"{len(done)} schedules"
            said = f"{count} {DONE[verb]}: {', '.join(done)}"
            self.message_user(request, said, messages.SUCCESS)
        return HttpResponseRedirect(request.path)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        """Create a schedule."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = ScheduleForm(request.POST or None, initial={"tz": "UTC"})
        return self._form(request, form, editing=False, title="Add schedule")

    def edit_view(self, request: HttpRequest, queue: str, schedule_name: str) -> HttpResponse:
        """Edit a schedule (a declared one becomes overridden)."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        try:
            found = schedule(queue, schedule_name) if _valid(queue) else None
        except RedisUnavailable as exc:
            refused(request, exc, "the schedules live there: none can be changed meanwhile")
            return HttpResponseRedirect(reverse("admin:jobsite_schedule_changelist"))
        if found is None:
            self.message_user(request, f"no schedule {queue}/{schedule_name}", messages.WARNING)
            return HttpResponseRedirect(reverse("admin:jobsite_schedule_changelist"))
        out = schedule_out(found)
        if out.flow is not None:  # this form holds one task's call, not a graph
            self.message_user(
                request,
                f"{queue}/{schedule_name} submits a flow: change it through the API "
                "(PUT /api/v1/schedules/...)",
                messages.WARNING,
            )
            return HttpResponseRedirect(reverse("admin:jobsite_schedule_changelist"))
        initial = {
            **out.model_dump(),
            "args": json.dumps(out.args),
            "kwargs": json.dumps(out.kwargs),
        }
        form = ScheduleForm(request.POST or None, initial=initial, editing=True)
        return self._form(
            request, form, editing=True, title=f"Edit schedule {queue}/{schedule_name}", shown=out
        )

    def _form(
        self, request: HttpRequest, form: ScheduleForm, editing: bool, title: str, shown: Any = None
    ) -> HttpResponse:
        if request.method == "POST" and form.is_valid() and form.save(editing):
            where = f"{form.cleaned_data['queue']}/{form.cleaned_data['name']}"
            audit.record(
                request.user, "edit" if editing else "create", [where], "admin", model=Schedule
            )
            self.message_user(request, f"saved schedule {where}", messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:jobsite_schedule_changelist"))
        context = self._context(request, title, form=form, shown=shown)
        return TemplateResponse(request, "admin/jobsite/schedule_form.html", context)


def _valid(queue: str) -> bool:
    from engine import validate_queue_name

    try:
        validate_queue_name(queue)
    except ConfigError:
        return False
    return True
