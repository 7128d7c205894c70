"""Django settings for Jobsite: SQLite by default, the engine configured from ENGINE."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-insecure-key-change-me")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Before "channels", so that our runworker command wins over Channels' own.
    "jobsite.jobs",
    "channels",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "jobsite.urls"
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
            ],
        },
    },
]
WSGI_APPLICATION = "jobsite.wsgi.application"
ASGI_APPLICATION = "jobsite.asgi.application"

# SQLite by default (its folder made here, so migrate and check work on a fresh clone);
# PostgreSQL (or any database) through DATABASE_URL.
SQLITE_PATH = Path(os.environ.get("SQLITE_PATH", str(BASE_DIR / "var" / "jobsite.sqlite3")))
if "DATABASE_URL" not in os.environ:
    SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
DATABASES = {"default": dj_database_url.config(default=f"sqlite:///{SQLITE_PATH}", conn_max_age=60)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]

# The engine's settings (any EngineSettings field, upper case), turned into
# engine.EngineSettings in one place: jobsite.jobs.conf. TASK_MODULES lists the modules whose
# @engine.task and @django.tasks.task functions workers may run; QUEUES the queues to mirror.
ENGINE = {
    "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    "PREFIX": os.environ.get("JOBSITE_PREFIX", "jobsite"),
    "TASK_MODULES": ["jobsite.demo_tasks"],
    "QUEUES": ["default"],
}
# What reconciliation does with a live row whose job exists nowhere in Redis: "lost" or "resubmit".
JOBSITE_RECONCILE = os.environ.get("JOBSITE_RECONCILE", "lost")

# Channels: the dashboard's live updates go through Redis (the same server as the engine, by
# default; a separate database number keeps the keys apart).
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [os.environ.get("CHANNELS_REDIS_URL", ENGINE["REDIS_URL"])]},
    }
}

TASKS = {"default": {"BACKEND": "jobsite.jobs.backends.JobsiteBackend", "QUEUES": []}}

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
