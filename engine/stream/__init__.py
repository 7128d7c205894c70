"""The event stream and what follows it: the reader, transition hooks, hooks, tracing."""
