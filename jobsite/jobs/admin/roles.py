"""The admin's page of worker roles (from Redis): listed with the workers following each,
created or replaced by a form, deleted by a button.

Roles have no model of their own: the page hangs off the workers' admin
(`workerrecord/roles/`). The view permission lists them, `change_queuerecord` changes them; the
checks (served queues, the permission on every queue a change touches) are the API's, in
services/roles.py. Every change is audited, with the workers it moved.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from ninja.errors import HttpError

from engine import ConfigError, RedisUnavailable
from jobsite.jobs import audit
from jobsite.jobs.admin.pages import page_context, refused
from jobsite.jobs.api.roles import role_out
from jobsite.jobs.models import WorkerRecord
from jobsite.jobs.permissions import Grant, Perm, user_allows
from jobsite.jobs.services.roles import RoleChange, remove_role, roles, save_role


class RoleForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="[A-Za-z0-9._-], as queue names")
    queues = forms.CharField(
        max_length=10_100,
        help_text="comma-separated, each one of JOBSITE['QUEUES'], in claim order",
    )

    def save(self, rights: Grant) -> RoleChange | None:
        """Create or replace the role; on a problem, add it to the form's errors, return None."""
        data = self.cleaned_data
        queues = [q.strip() for q in data["queues"].split(",") if q.strip()]
        try:
            return save_role(data["name"], queues, rights)
        except ConfigError as exc:
            self.add_error(None, str(exc))
        except HttpError as exc:
            self.add_error(None, exc.message)
        return None


class RolePages(admin.ModelAdmin):
    """Part of the workers' admin: the roles page."""

    def role_urls(self) -> list[URLPattern]:
        """Return the roles page's URL (`admin:jobsite_workerrecord_roles`)."""
        wrap = self.admin_site.admin_view
        name = f"{self.opts.app_label}_{self.opts.model_name}_roles"
        return [path("roles/", wrap(self.roles_view), name=name)]

    def roles_view(self, request: HttpRequest) -> HttpResponse:
        """List every role; a POST saves the form's role or deletes the one named."""
        if not user_allows(request.user, Perm.VIEW):
            raise PermissionDenied
        may_change = user_allows(request.user, Perm.CHANGE_QUEUE)
        form = RoleForm(request.POST if "save" in request.POST else None)
        if request.method == "POST":
            if not may_change:
                raise PermissionDenied
            try:
                if "delete" in request.POST:
                    return self._delete(request, request.POST["delete"])
                if form.is_valid() and (change := form.save(Grant(request.user))) is not None:
                    self._saved(request, change)
                    return HttpResponseRedirect(request.path)
            except RedisUnavailable as exc:
                refused(request, exc, "nothing was changed: try again once it answers")
                return HttpResponseRedirect(request.path)
        rows = None  # (not listed: Redis does not answer)
        try:
            rows = [role_out(s) for s in roles(Grant(request.user))]
        except RedisUnavailable as exc:
            refused(request, exc, "the roles live there: none can be listed or changed meanwhile")
        context = page_context(
            self, request, "Worker roles", rows=rows, form=form, may_change=may_change
        )
        return TemplateResponse(request, "admin/jobsite/roles.html", context)

    def _saved(self, request: HttpRequest, change: RoleChange) -> None:
        name, queues = change.state.role.name, change.state.role.queues
        audit.record(
            request.user, "save", [f"role/{name}"], "admin", WorkerRecord, change.outcome()
        )
        moved = f"; moved workers {', '.join(change.moved)}" if change.moved else ""
        self.message_user(request, f"saved role {name}: {', '.join(queues)}{moved}")
        if (warning := change.warning()) is not None:
            self.message_user(request, f"role {name}: {warning}", messages.WARNING)

    def _delete(self, request: HttpRequest, name: str) -> HttpResponse:
        try:
            found = remove_role(name, Grant(request.user)) is not None
        except ConfigError:
            found = False
        except HttpError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(request.path)
        if found:
            audit.record(request.user, "delete", [f"role/{name}"], "admin", WorkerRecord)
            self.message_user(request, f"deleted role {name}; its workers keep their queues")
        else:
            self.message_user(request, f"no role {name!r}", messages.WARNING)
        return HttpResponseRedirect(request.path)
