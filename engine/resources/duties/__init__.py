"""The Redis of a worker process's own duties: claiming, presence and fences, parents' results,
the event feed, schedules, health marks, cleaning and outages; each module holds every plain
command for its concern (the transitions themselves go through the typed scripts)."""
