"""The connection to Redis: clients from settings, held connections, failover, faults."""
