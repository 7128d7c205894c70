"""The django.tasks side: the backend, its task class, the task registry, eager runs, schedules."""
