"""The worker: a Claimer, RunningJobs in a Book, a Flusher and a Shutdown, wired by Worker."""

from .worker import Worker

__all__ = ["Worker"]
