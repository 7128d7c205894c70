"""What an operation needs of a client: `Handle`, which engine/client.py's Client is.

The operations sit below the client (it calls some of them): they take it as a parameter typed
by this face, never by importing it.
"""

from __future__ import annotations

from typing import Any, Protocol

from redis.asyncio import Redis

from ..job import Job
from ..keys import QueueKeys
from ..seam.scripts import Scripts
from ..settings import EngineSettings


class Handle(Protocol):
    """A client's settings, Redis, scripts and the reads the operations share."""

    @property
    def settings(self) -> EngineSettings: ...

    @property
    def redis(self) -> Redis: ...

    @property
    def scripts(self) -> Scripts: ...

    def keys(self, queue: str) -> QueueKeys: ...

    async def get(self, job_id: str, queue: str | None = None) -> Job: ...

    async def counts(self, queue: str) -> dict[str, int]: ...

    async def workers(self) -> list[dict[str, Any]]: ...

    async def scan_job_ids(
        self, queue: str, cursor: int = 0, count: int = 1000
    ) -> tuple[int, list[str]]: ...
