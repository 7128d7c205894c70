"""Error pages and reports give nothing away: secrets in URLs hidden, no debug pages, JSON 500s."""

from __future__ import annotations

import sys
from unittest import mock

import pytest
from django.conf import settings
from django.test import Client as HttpClient
from django.test import RequestFactory, override_settings
from django.views.debug import ExceptionReporter

from engine import EngineSettings
from jobsite.jobs import conf

from .conftest import make_token, staff_user

SECRETS = ("s3cret", "s3cret2", "s3cret3")
REDIS_URL = "redis://:s3cret@redis-one.internal:6379/0?sentinel_password=s3cret2"
CHANNELS_URL = "rediss://u:s3cret3@redis-two.internal:1/0"
LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [CHANNELS_URL, {"address": CHANNELS_URL}]},
    }
}


def reports(exc_info: tuple) -> tuple[str, str]:  # type: ignore[type-arg]
    request = RequestFactory().get("/dashboard/", HTTP_X_UPSTREAM=REDIS_URL)
    reporter = ExceptionReporter(request, *exc_info)
    return reporter.get_traceback_text(), reporter.get_traceback_html()


def assert_redacted(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text
    # still useful: the hosts show, with the secrets replaced
    assert "redis-one.internal:6379" in text
    assert "redis-two.internal:1" in text
    assert "***" in text


@override_settings(DEBUG=True, JOBSITE={"REDIS_URL": REDIS_URL}, CHANNEL_LAYERS=LAYERS)
def test_technical_500_report_hides_secrets_in_settings() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        text, html = reports(sys.exc_info())
    assert "RuntimeError" in text and "boom" in text
    assert "JOBSITE" in text and "CHANNEL_LAYERS" in text  # the settings are in the report
    assert_redacted(text)
    assert_redacted(html)
    # a request header holding a URL (request.META) is redacted too
    assert "HTTP_X_UPSTREAM" in text


@override_settings(
    DEBUG=True,
    JOBSITE={"REDIS_URL": REDIS_URL, "PREFX": "typo"},
    CHANNEL_LAYERS=LAYERS,
)
def test_technical_500_report_hides_secrets_in_frame_variables() -> None:
    """A bad JOBSITE setting fails where the URL sits in local variables of the frames."""
    conf.engine_settings.cache_clear()
    try:
        try:
            conf.engine_settings()
        except Exception:
            text, html = reports(sys.exc_info())
        else:
            pytest.fail("the unknown JOBSITE key was accepted")
    finally:
        conf.engine_settings.cache_clear()
    assert "unknown engine settings: prefx" in text
    assert "from_mapping" in text  # the frame whose locals hold the URL is in the report
    assert_redacted(text)
    assert_redacted(html)


def test_unknown_url_is_a_plain_404() -> None:
    assert settings.DEBUG is False
    response = HttpClient().get("/no/such/page/")
    assert response.status_code == 404
    body = response.content.decode()
    assert "URLconf" not in body and "demo.urls" not in body
    assert "Traceback" not in body


@pytest.mark.django_db
def test_api_unexpected_error_is_json_500(engine: EngineSettings) -> None:
    client = HttpClient()  # (the `client` fixture is the engine's)
    key = make_token(staff_user("root", is_superuser=True))
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    assert client.get("/api/v1/stats", **auth).status_code == 200  # the token works
    with mock.patch("jobsite.jobs.api.stats.throughput", side_effect=RuntimeError("s3cret detail")):
        response = client.get("/api/v1/stats", **auth)
    assert response.status_code == 500
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": "internal server error"}
    body = response.content.decode()
    assert "Traceback" not in body and "s3cret" not in body
