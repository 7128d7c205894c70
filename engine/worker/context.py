"""What every collaborator of one worker shares: its settings, id, Redis, scripts and lifecycle."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from ..seam.scripts import Scripts
from ..settings import EngineSettings
from .lifecycle import Lifecycle


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """One worker's shared parts, handed to each collaborator instead of each part apart."""

    settings: EngineSettings
    worker_id: str
    # The worker's client for commands and scripts (waits on markers have their own).
    redis: Redis
    scripts: Scripts
    life: Lifecycle
