"""The dashboard's websocket: a snapshot on connect, then coalesced updates for its filter.

Opened by a user who may view jobs (`Perm.VIEW`), from this site's own origin (the router wraps
it in SameOriginValidator(AuthMiddlewareStack(...))). Every `RECHECK_S` the session and the
user's rights are read again: a logout, a deactivation or a lost permission closes the socket.
Clients never send commands here: actions go through the API. A client sends
`{"filter": {...}}` to change what it watches and `{"visible": false}` to pause while hidden;
anything else gets an error message and the socket stays up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.utils.module_loading import import_string
from pydantic import ValidationError

from engine import RedisUnavailable
from jobsite.jobs import services
from jobsite.jobs.api import live
from jobsite.jobs.permissions import Grant, Perm, user_allows

log = logging.getLogger("jobsite.consumers")
GROUP = "dashboard"
# At most this many snapshots per second reach one client, whatever the engine or it does.
MAX_RATE_HZ = 4
# How often the session and the user's rights are read again.
RECHECK_S = 2.0
# Close code: not allowed (or no longer).
FORBIDDEN = 4403
# Longest wait for the channel layer (on Redis) when joining the group; past it, the socket
# opens all the same and polls until it can join (Redis away must be said, not hang the page).
JOIN_TIMEOUT_S = 2.0


class DashboardConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """One browser tab, with one engine client (a services session) for its life."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not await database_sync_to_async(user_allows)(user, Perm.VIEW):
            await self.close(code=FORBIDDEN)
            return
        self.user_pk = user.pk
        # The rights GET /live narrows by too (a session's: every queue).
        self.rights = Grant(user)
        self.filter = live.Filter()
        self.visible = True
        self.dirty = True
        self.kind = "snapshot"
        self.grouped = False
        await self.accept()
        await self._join()
        self.flusher = asyncio.create_task(self._flush_loop())

    async def _join(self) -> None:
        """Join the group told of mirror batches; while that fails, poll (see `_flush`)."""
        try:
            await asyncio.wait_for(
                self.channel_layer.group_add(GROUP, self.channel_name), JOIN_TIMEOUT_S
            )
            self.grouped = True
        except (OSError, TimeoutError) as exc:  # the channel layer's Redis is away
            log.info("dashboard socket polls reason=channel_layer error=%s", type(exc).__name__)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "flusher"):
            self.flusher.cancel()
            if self.grouped:
                with contextlib.suppress(OSError, TimeoutError):
                    await asyncio.wait_for(
                        self.channel_layer.group_discard(GROUP, self.channel_name),
                        JOIN_TIMEOUT_S,
                    )
            await asyncio.wait([self.flusher])  # its session closes the engine client

    @classmethod
    async def decode_json(cls, text_data: str) -> Any:
        try:
            return orjson.loads(text_data)
        except orjson.JSONDecodeError:
            return None  # answered as a bad message

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        return orjson.dumps(content).decode()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        try:
            message = live.Message.model_validate(content)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}" for e in exc.errors()
            )
            await self.send_json({"type": "error", "detail": problems[:500]})
            return
        if message.filter is not None and message.filter != self.filter:
            self.filter = message.filter
            self.dirty = True
            self.kind = "snapshot"
        if message.visible is not None:
            self.visible = message.visible
            self.dirty = self.dirty or self.visible

    async def jobs_changed(self, message: dict[str, Any]) -> None:
        """A mirror batch was committed (group message type "jobs.changed")."""
        self.dirty = True

    async def _still_allowed(self) -> bool:
        """Read the session and the user again: still logged in, active, allowed?"""
        session_class = import_string(f"{settings.SESSION_ENGINE}.SessionStore")
        key = self.scope["session"].session_key
        user = await get_user({"session": session_class(key)}) if key else None
        return (
            user is not None
            and user.pk == self.user_pk
            and await database_sync_to_async(user_allows)(user, Perm.VIEW)
        )

    async def _flush_loop(self) -> None:
        """Send snapshots over one engine client until the socket closes."""
        async with services.session():
            await self._flush()

    async def _flush(self) -> None:
        """Send at most MAX_RATE_HZ snapshots a second; re-check rights every RECHECK_S."""
        checked = time.monotonic()
        while True:
            if time.monotonic() - checked >= RECHECK_S:
                checked = time.monotonic()
                if not await self._still_allowed():
                    log.info("dashboard socket closed reason=revoked user=%s", self.user_pk)
                    await self.close(code=FORBIDDEN)
                    return
                if not self.grouped:  # not told of changes: poll, and try to join again
                    self.dirty = True
                    await self._join()
            if self.dirty and self.visible:
                self.dirty = False
                try:
                    data = await live.snapshot(self.filter, self.rights)
                except RedisUnavailable:
                    self.dirty = True
                    await self.send_json(
                        {"type": "error", "detail": "Redis is unavailable", "redis": "down"}
                    )
                else:
                    await self.send_json({"type": self.kind, **data})
                    self.kind = "update"
            await asyncio.sleep(1 / MAX_RATE_HZ)
