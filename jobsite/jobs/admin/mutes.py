"""The admin's list of muted dead-letter groups, with an "Unmute" action.

Mutes are made on the dashboard's Dead letters page or through the API; here they are listed
(the view permission) and lifted (`retry_job`, as resubmitting dead letters) through
services/mutes.py, the same door, checks and audit as the API's. Rows are never edited here.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja.errors import HttpError

from jobsite.jobs.admin.pages import when
from jobsite.jobs.models import DeadLetterMute
from jobsite.jobs.permissions import Grant, Perm, user_allows
from jobsite.jobs.services import mutes


@admin.register(DeadLetterMute)
class DeadLetterMuteAdmin(admin.ModelAdmin):
    list_display = ("queue", "fingerprint", "ends", "holding", "muted_by", "muted_at", "reason")
    list_filter = ("queue",)
    search_fields = ("fingerprint", "reason")
    ordering = ("queue", "fingerprint")
    actions = ["unmute"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, Perm.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return user_allows(request.user, Perm.VIEW)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # lifted by "Unmute", which audits it

    def has_unmute_permission(self, request: HttpRequest) -> bool:
        return user_allows(request.user, mutes.PERM)

    @admin.display(description="until")
    def ends(self, obj: DeadLetterMute) -> str:
        return when(obj.until) or "unmuted"

    @admin.display(description="holding", boolean=True)
    def holding(self, obj: DeadLetterMute) -> bool:
        return obj.active(timezone.now())

    @admin.action(description="Unmute selected dead-letter groups", permissions=["unmute"])
    def unmute(self, request: HttpRequest, queryset: QuerySet[DeadLetterMute]) -> None:
        rights = Grant(request.user)
        lifted: list[str] = []
        refused: list[str] = []
        for queue, fingerprint in queryset.values_list("queue", "fingerprint"):
            try:
                if mutes.unmute(rights, queue, fingerprint, via="admin") is not None:
                    lifted.append(f"{queue}/{fingerprint}")
            except HttpError as exc:
                refused.append(f"{queue}/{fingerprint}: {exc.message}")
        if lifted:
            said = "1 group unmuted" if len(lifted) == 1 else f"{len(lifted)} groups unmuted"
            self.message_user(request, f"{said}: {', '.join(lifted)}", messages.SUCCESS)
        for line in refused:
            self.message_user(request, line, messages.ERROR)
