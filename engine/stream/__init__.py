"""The event stream and what follows it: its events parsed, hooks, tracing."""
