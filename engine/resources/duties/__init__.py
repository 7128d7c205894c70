"""The Redis of a worker process's own duties: claiming, presence, job leases, the event feed,
schedules, cleaning and outages; each module holds every command for its concern."""
