"""The Django project loads and passes Django's system checks, on its defaults and in production."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.dev.devserver import RedisServer

ROOT = Path(__file__).resolve().parent.parent
# A private redis-server's URL for the projects these tests start (check W003 pings it).
redis_url = {"value": ""}


@pytest.fixture(autouse=True)
def private_redis(redis_server: RedisServer) -> Iterator[None]:
    redis_url["value"] = redis_server.url
    yield
    redis_url["value"] = ""


def project_env(**values: str) -> dict[str, str]:
    """Return this process's environment without any Django setting of ours, plus `values`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "JOBSITE_"))}
    for name in ("REDIS_URL", "CHANNELS_REDIS_URL", "DATABASE_URL", "STATIC_ROOT"):
        env.pop(name, None)
    if redis_url["value"]:
        env["REDIS_URL"] = redis_url["value"]
    return {
        **env,
        "DJANGO_SETTINGS_MODULE": "demo.settings",
        "SQLITE_PATH": ":memory:",
        **values,
    }


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


def production_env(**values: str) -> dict[str, str]:
    """The environment docs/security.md documents for production (no DJANGO_DEBUG/HTTPS)."""
    return project_env(
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="jobs.example.com",
        **values,
    )


def issues(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return set(re.findall(r"\((\w+\.[EW]\d+)\)", proc.stdout + proc.stderr))


def test_manage_check_passes() -> None:
    # the defaults: only the secret key they cannot do without
    proc = manage(
        project_env(DJANGO_SECRET_KEY=secrets.token_urlsafe(50)), "check", "--fail-level", "WARNING"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout


def test_defaults_are_production_settings() -> None:
    """DEBUG off and HTTPS on unless an environment variable says otherwise."""
    code = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, "
        "s.SECURE_HSTS_SECONDS > 0)"
    )
    proc = manage(project_env(DJANGO_SECRET_KEY=secrets.token_urlsafe(50)), "shell", "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].split() == ["False", "True", "True", "True", "True"]


def test_deploy_check_passes_with_the_documented_production_environment() -> None:
    proc = manage(
        production_env(DJANGO_HSTS_PRELOAD="1"), "check", "--deploy", "--fail-level", "WARNING"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout
    assert issues(proc) == set()


def test_deploy_check_without_hsts_preload_only_reports_w021() -> None:
    """DJANGO_HSTS_PRELOAD=1 does one thing Django checks: the preload directive (W021)."""
    proc = manage(production_env(), "check", "--deploy", "--fail-level", "WARNING")
    assert proc.returncode != 0
    assert issues(proc) == {"security.W021"}, proc.stdout + proc.stderr


def test_no_secret_key_without_debug_is_refused() -> None:
    # The server's entry points (what Daphne, Uvicorn or gunicorn load) refuse to start.
    proc = subprocess.run(
        [sys.executable, "-c", "import demo.asgi"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=project_env(),
    )
    assert proc.returncode != 0
    assert "django.core.exceptions.ImproperlyConfigured: DJANGO_SECRET_KEY is not set" in (
        proc.stderr
    )
    assert "secrets.token_urlsafe(50)" in proc.stderr  # the fix is in the message


def test_manage_py_on_a_fresh_clone_uses_a_local_key() -> None:
    # The demo project's manage.py: `check` and `migrate` work on a clean clone, and say which
    # key they used.
    proc = manage(project_env(), "check", "--fail-level", "WARNING")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "local secret key from" in proc.stderr
    path = ROOT / "var" / "secret_key"
    assert path.stat().st_mode & 0o077 == 0 and len(path.read_text()) >= 50


def test_debug_runs_with_a_throwaway_key() -> None:
    proc = manage(project_env(DJANGO_DEBUG="1"), "check", "--fail-level", "WARNING")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout
