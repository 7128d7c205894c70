"""The dashboard's websocket: a snapshot on connect, then coalesced updates for its filter.

Staff only (the router wraps it in AllowedHostsOriginValidator(AuthMiddlewareStack(...))).
Clients never send commands here: actions go through the API. A client sends
`{"filter": {...}}` to change what it watches and `{"visible": false}` to pause while hidden.
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import live

GROUP = "dashboard"
# At most this many messages per second reach one client, whatever the engine does.
MAX_RATE_HZ = 4


class DashboardConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """One browser tab."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_staff:
            await self.close(code=4403)
            return
        self.filter: dict[str, Any] = {}
        self.visible = True
        self.dirty = False
        await self.channel_layer.group_add(GROUP, self.channel_name)
        await self.accept()
        self.flusher = asyncio.create_task(self._flush_loop())
        await self.send_json({"type": "snapshot", **await live.snapshot(self.filter)})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "flusher"):
            self.flusher.cancel()
            await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict):
            return
        if isinstance(content.get("filter"), dict):
            self.filter = live.clean_filter(content["filter"])
            await self.send_json({"type": "snapshot", **await live.snapshot(self.filter)})
        if "visible" in content:
            self.visible = bool(content["visible"])
            self.dirty = self.dirty or self.visible

    async def jobs_changed(self, message: dict[str, Any]) -> None:
        """A mirror batch was committed (group message type "jobs.changed")."""
        self.dirty = True

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(1 / MAX_RATE_HZ)
            if self.dirty and self.visible:
                self.dirty = False
                await self.send_json({"type": "update", **await live.snapshot(self.filter)})
