"""The dashboard's websocket: a snapshot on connect, then coalesced updates for its filter.

Opened by a user who may view jobs (`Perm.VIEW`), from this site's own origin (the router wraps
it in SameOriginValidator(AuthMiddlewareStack(...))). Every `RECHECK_S` the session and the
user's rights are read again: a logout, a deactivation or a lost permission closes the socket.
Clients never send commands here: actions go through the API. A client sends
`{"filter": {...}}` to change what it watches and `{"visible": false}` to pause while hidden;
anything else gets an error message and the socket stays up.

Redis away, slow or busy never ends the socket. Every snapshot says in `redis` whether Redis
answers, as this process saw it (services/reach.py); while it does not, the read is tried again
on the next tick and the last snapshot goes out every STALE_EVERY_S marked `stale`. A channel
layer that fails (its Redis away, or a read that timed out) is read again after LAYER_RETRY_S
and meanwhile the socket polls, as it does without a layer, and joins its group again.
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
from redis.exceptions import RedisError

from engine import RedisUnavailable
from jobsite.jobs import services
from jobsite.jobs.api import live
from jobsite.jobs.permissions import Grant, Perm, user_allows
from jobsite.jobs.services import reach

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
# What a channel layer on Redis raises when its Redis is away, slow or busy (channels_redis
# passes redis-py's errors on; TimeoutError is our own wait's).
LAYER_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError, RedisError)
# How long the socket waits after a failed channel layer read before the next one.
LAYER_RETRY_S = 1.0
# While Redis does not answer, the last snapshot goes out again this often, marked stale (the
# tab sees that the socket and the server live on, and the outage's "since" holding still).
STALE_EVERY_S = 1.0
# Without news, a snapshot is read anyway this often: workers' ages move on, and Redis going
# away is seen on a quiet system too.
REFRESH_S = 5.0

# Whether this process's sockets cannot join their group: warned once per outage.
_layer_lost = False


def _layer_failed(exc: BaseException) -> None:
    """Warn, once per outage of the process, that the channel layer does not answer."""
    global _layer_lost
    if not _layer_lost:
        _layer_lost = True
        log.warning("dashboard channel layer unreachable error=%s", type(exc).__name__)


def _layer_answered() -> None:
    global _layer_lost
    if _layer_lost:
        _layer_lost = False
        log.info("dashboard channel layer answers again")


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
        # The last snapshot read (sent again, marked stale, while Redis does not answer), when
        # one was last read, and the Redis state and time of the last message sent.
        self.last: dict[str, Any] | None = None
        self.read_at = time.monotonic()
        self.told: dict[str, Any] | None = None
        self.told_at = 0.0
        await self.accept()
        await self._join()
        self.flusher = asyncio.create_task(self._flush_loop())

    async def _join(self) -> None:
        """Join the group told of mirror batches; while that fails, poll (see `_flush`)."""
        if self.channel_layer is None:
            return  # no layer configured: poll
        try:
            await asyncio.wait_for(
                self.channel_layer.group_add(GROUP, self.channel_name), JOIN_TIMEOUT_S
            )
            self.grouped = True
            _layer_answered()
        except LAYER_ERRORS as exc:  # the channel layer's Redis is away, slow or busy
            _layer_failed(exc)

    # Channels sets `channel_receive` to the layer's read of this socket's channel and waits on
    # it beside the browser's messages: an exception out of it would end the socket. `_listen`
    # stands in for it.
    @property
    def channel_receive(self) -> Any:
        return self._listen

    @channel_receive.setter
    def channel_receive(self, receive: Any) -> None:
        self._layer_receive = receive

    async def _listen(self) -> dict[str, Any]:
        """Return the channel layer's next message; while reading fails, poll (see `_flush`).

        A read that fails is not yet an outage: a layer whose reads give up before its blocking
        wait for news does (jobsite.W006) while its Redis answers. Joining again tells: the
        join warns if the layer does not answer.
        """
        while True:
            try:
                message: dict[str, Any] = await self._layer_receive()
            except LAYER_ERRORS as exc:
                log.debug("dashboard channel layer read failed error=%s", type(exc).__name__)
                self.grouped = False  # poll, and join again (its Redis may have lost the group)
                await asyncio.sleep(LAYER_RETRY_S)
            else:
                _layer_answered()
                return message

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "flusher"):
            self.flusher.cancel()
            if self.grouped:
                with contextlib.suppress(*LAYER_ERRORS):
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
            state = reach.current()
            if not state.up or time.monotonic() - self.read_at >= REFRESH_S:
                self.dirty = True  # Redis away: try again on every tick; else now and then
            if self.visible and (self.dirty or state.shown() != self.told):
                await self._send_snapshot()
            await asyncio.sleep(1 / MAX_RATE_HZ)

    async def _send_snapshot(self) -> None:
        """Read and send the snapshot; if Redis does not answer, send the last one, stale."""
        self.dirty = False
        self.read_at = time.monotonic()
        try:
            data = await live.snapshot(self.filter, self.rights)
        except RedisUnavailable:  # noted, and logged once per outage, by services/reach.py
            self.dirty = True
            state = reach.current().shown()
            if state == self.told and time.monotonic() - self.told_at < STALE_EVERY_S:
                return
            last = self.last or {}
            data = {**last, "filter": self.filter.shown(), "stale": True, "redis": state}
            await self._send(data)
            return
        self.last = data
        await self._send(data)
        self.kind = "update"

    async def _send(self, data: dict[str, Any]) -> None:
        await self.send_json({"type": self.kind, **data})
        self.told, self.told_at = data["redis"], time.monotonic()
