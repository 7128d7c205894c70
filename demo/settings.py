"""Django settings for Jobsite: SQLite by default, the engine configured from JOBSITE.

Safe by default: DEBUG off, no start-up without a secret key, HTTPS-only cookies, HSTS and a
redirect to HTTPS, a Content-Security-Policy with nonces. Local conveniences are explicit
environment variables (`bin/run` sets them for its loopback-only server):

- `DJANGO_DEBUG=1`: debug pages (never in production); a throw-away secret key if none is set.
- `DJANGO_HTTPS=0`: plain HTTP (cookies without `Secure`, no HSTS, no redirect).

Production (see docs/security.md): `DJANGO_SECRET_KEY`, `DJANGO_ALLOWED_HOSTS`,
`DJANGO_CSRF_TRUSTED_ORIGINS` when the site is reached through another origin,
`DJANGO_BEHIND_PROXY=1` behind a TLS-terminating proxy that sets X-Forwarded-Proto.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
import django
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _flag(name: str, default: bool) -> bool:
    return os.environ.get(name, "1" if default else "0").strip().lower() in ("1", "true", "yes")


def _list(name: str, default: str = "") -> list[str]:
    return [v.strip() for v in os.environ.get(name, default).split(",") if v.strip()]


DEBUG = _flag("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set. Set it to a long random value, e.g. the output of "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`, kept secret and "
            "stable across restarts (sessions and tokens shown once depend on it). "
            "For local development only, DJANGO_DEBUG=1 runs with a throw-away key."
        )
    SECRET_KEY = "django-insecure-debug-only-" + "x" * 40
ALLOWED_HOSTS = _list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1")
CSRF_TRUSTED_ORIGINS = _list("DJANGO_CSRF_TRUSTED_ORIGINS")

HTTPS = _flag("DJANGO_HTTPS", not DEBUG)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "31536000")) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = _flag("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = _flag("DJANGO_HSTS_PRELOAD", False)
if _flag("DJANGO_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
# Scripts only from this site, and inline ones only with the page's nonce; no plugins, no
# framing, forms post back here only. Django 6.0 brought CSP; on 5.2 the pages go without.
HAS_CSP = django.VERSION >= (6, 0)
if HAS_CSP:
    from django.utils.csp import CSP

    SECURE_CSP = {
        "default-src": [CSP.SELF],
        "script-src": [CSP.SELF, CSP.NONCE],
        "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],  # the admin sets inline style attributes
        "img-src": [CSP.SELF, "data:"],
        "connect-src": [CSP.SELF],
        "object-src": [CSP.NONE],
        "base-uri": [CSP.NONE],
        "frame-ancestors": [CSP.NONE],
        "form-action": [CSP.SELF],
    }
# Secrets in Redis and channel-layer URLs never reach an error report.
DEFAULT_EXCEPTION_REPORTER_FILTER = "jobsite.jobs.debug.RedactingFilter"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",  # Swagger UI's files, served from here (never from a CDN)
    # Before "channels", so that our runworker command wins over Channels' own.
    "jobsite.jobs",
    "channels",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    *(["django.middleware.csp.ContentSecurityPolicyMiddleware"] if HAS_CSP else []),
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                *(["django.template.context_processors.csp"] if HAS_CSP else []),
            ],
        },
    },
]
# After a login (and for a login whose `next` is refused): the dashboard, not /accounts/profile/.
LOGIN_REDIRECT_URL = "jobsite:dashboard"

WSGI_APPLICATION = "demo.wsgi.application"
ASGI_APPLICATION = "demo.asgi.application"

# SQLite by default (its folder made here, so migrate and check work on a fresh clone);
# PostgreSQL (or any database) through DATABASE_URL.
SQLITE_PATH = Path(os.environ.get("SQLITE_PATH", str(BASE_DIR / "var" / "jobsite.sqlite3")))
if "DATABASE_URL" not in os.environ:
    SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
DATABASES = {"default": dj_database_url.config(default=f"sqlite:///{SQLITE_PATH}", conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # One writer at a time: take the write lock up front (no deadlock on upgrade), wait for it
    # up to 20 s, and let readers run beside the writer (WAL).
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# `manage.py collectstatic` gathers them here; WhiteNoise serves them, compressed.
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# The engine's settings (any EngineSettings field, upper case), turned into
# engine.EngineSettings in one place: jobsite.jobs.conf. TASK_MODULES lists the modules whose
# @engine.task and @django.tasks.task functions workers may run; QUEUES the queues to mirror.
JOBSITE = {
    "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    "PREFIX": os.environ.get("JOBSITE_PREFIX", "jobsite"),
    # The demo's tasks only when the demo runs (bin/run sets JOBSITE_TASK_MODULES).
    "TASK_MODULES": _list("JOBSITE_TASK_MODULES"),
    "QUEUES": _list("JOBSITE_QUEUES", "default"),
    # What reconciliation does with a live row whose job exists nowhere in Redis.
    "RECONCILE": os.environ.get("JOBSITE_RECONCILE", "lost"),  # or "resubmit"
    # Jobs a bulk action changes while its request waits; more run in the background.
    "BULK_MAX": int(os.environ.get("JOBSITE_BULK_MAX", "10000")),
}

# Channels: the dashboard's live updates go through Redis (the same server as the engine, by
# default; a separate database number keeps the keys apart). Each socket waits for news with a
# 5 s BZPOPMIN: its reads must be allowed longer than that (redis-py gives up after 5 s).
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": os.environ.get("CHANNELS_REDIS_URL", JOBSITE["REDIS_URL"]),
                    "socket_timeout": 10,
                }
            ]
        },
    }
}

TASKS = {"default": {"BACKEND": "jobsite.jobs.tasks.backend.JobsiteBackend", "QUEUES": []}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "engine": {"handlers": ["console"], "level": "INFO"},
        "jobsite": {"handlers": ["console"], "level": "INFO"},
    },
}
