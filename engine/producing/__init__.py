"""What puts jobs into Redis: an enqueue's steps, submit calls, the sync client."""
