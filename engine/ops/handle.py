"""What an operation needs of a client: `Store` (its settings, Redis, scripts) and `Handle`
(with the reads of its resources), which engine/client.py's Client is.

The operations sit below the client and its resources: they take them as a parameter typed by
these faces, never by importing them.
"""

from __future__ import annotations

from typing import Any, Protocol

from redis.asyncio import Redis

from ..job import Job
from ..keys import QueueKeys
from ..seam.scripts import Scripts
from ..settings import EngineSettings


class Store(Protocol):
    """Settings, the connection, the typed scripts and the keys of a queue."""

    @property
    def settings(self) -> EngineSettings: ...

    @property
    def redis(self) -> Redis: ...

    @property
    def scripts(self) -> Scripts: ...

    def keys(self, queue: str) -> QueueKeys: ...


class JobReads(Protocol):
    async def get(self, job_id: str, queue: str | None = None) -> Job: ...


class QueueReads(Protocol):
    async def counts(self, queue: str) -> dict[str, int]: ...


class WorkerReads(Protocol):
    async def list(self) -> list[dict[str, Any]]: ...


class Handle(Store, Protocol):
    """A client: its store and the reads the operations share."""

    @property
    def jobs(self) -> JobReads: ...

    @property
    def queues(self) -> QueueReads: ...

    @property
    def workers(self) -> WorkerReads: ...
