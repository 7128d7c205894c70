"""Django's own `tests/tasks`, run against JobsiteBackend: fetched from Django's source
distribution on PyPI (never copied into this repository) and run in a process of their own.

`fetch.py` downloads the sdist of the installed Django once into `.cache/django-sdist/` and
extracts `tests/tasks`; `run.py` runs them (Django's test runner, a private redis-server, the
stand-ins of `standins.py` in place of Django's own backends) and writes a JSON report;
`tests/jobsite/test_django_own_tasks.py` asserts that every test ran passes. By hand:

    .venv/bin/python -m tests.django_suite            # fetch, run, print the counts
"""
