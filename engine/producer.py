"""The process's way to submit a task's job without a Client at hand: `await task.enqueue()`
and `task.delay()`, on the settings given to `configure` or through the submit
functions an application installs (the Django app installs its services: outbox, eager mode,
the queue check)."""

from __future__ import annotations

import asyncio
import threading
import weakref

from .client import Client
from .errors import ConfigError
from .job import Job
from .producing.syncclient import SyncClient
from .settings import EngineSettings
from .task import AsyncSubmit, SyncSubmit, route_submissions

_settings: EngineSettings | None = None
_installed: tuple[AsyncSubmit, SyncSubmit] | None = None
# One client per event loop: a client's connections belong to the loop that made them.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = weakref.WeakKeyDictionary()
# The sync client of the configured settings (thread-safe: every thread of the process shares it).
_sync_client: SyncClient | None = None
_sync_lock = threading.Lock()


def configure(settings: EngineSettings) -> None:
    """Submit `task.enqueue()` and `task.delay()` jobs to the Redis of `settings` (the last of
    `configure` and `install` called wins)."""
    global _settings, _installed, _sync_client
    _settings, _installed = settings, None
    _clients.clear()
    with _sync_lock:
        old, _sync_client = _sync_client, None
    if old is not None:
        old.close()


def install(async_submit: AsyncSubmit, sync_submit: SyncSubmit) -> None:
    """Route `task.enqueue()` and `task.delay()` through an application's own submit functions
    (the last of `configure` and `install` called wins)."""
    global _installed
    _installed = (async_submit, sync_submit)


def _chosen_settings() -> EngineSettings:
    if _settings is None:
        raise ConfigError(
            "task.enqueue() and task.delay() need engine.configure(settings) first "
            "(a Django project with the jobsite app has it done from settings.JOBSITE)"
        )
    return _settings


async def asubmit(job: Job) -> Job:
    """Submit `job` from async code."""
    if _installed is not None:
        return await _installed[0](job)
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = Client(_chosen_settings())
    await client.enqueue_many([job])
    return job


def submit(job: Job) -> Job:
    """Submit `job` from sync code (not from inside a running event loop: await enqueue())."""
    if _installed is not None:
        return _installed[1](job)
    global _sync_client
    settings = _chosen_settings()
    with _sync_lock:
        if _sync_client is None or _sync_client.settings != settings:
            _sync_client = SyncClient(settings)
        client = _sync_client
    client.enqueue_many([job])
    return job


# `Task.enqueue` and `Task.delay` submit through this module (the core does no I/O of its own).
route_submissions(asubmit, submit)
