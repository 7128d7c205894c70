"""Alerts: each change of a queue verdict or schedule state, mailed and POSTed to a webhook.

Both are optional (JOBSITE["HEALTH"]: MAIL_ADMINS, WEBHOOK_URL with WEBHOOK_SECRET) and run in
the background of the process that noticed the change (runworker's `health` loop): `deliver`
returns at once, never waiting for a mail server or a receiver, so no worker ever waits on them.

The webhook gets the alert as a JSON body holding an `event_id` (the same on every attempt of
one alert: receivers drop the repeats of an id they took), with the headers
`X-Jobsite-Event-Id` (that id), `X-Jobsite-Timestamp` (epoch seconds) and
`X-Jobsite-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the secret>`; a
receiver checks it with `verify`. Redirects are never followed (the signed body and its headers
go to the configured URL only). A failed delivery (connection refused, a timeout, a status other
than 2xx, a redirect among them) is logged and tried again after WEBHOOK_BACKOFF_S, doubling
each time, up to WEBHOOK_ATTEMPTS attempts; then it is logged and dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.core.mail import mail_admins

log = logging.getLogger("jobsite.alerts")

# Deliveries under way: kept so that none is collected before it ends.
_PENDING: set[asyncio.Task[Any]] = set()


def sign(body: bytes, secret: str, timestamp: int) -> str:
    """Return the signature header value of `body` sent at `timestamp`."""
    message = f"{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(
    body: bytes, secret: str, timestamp: str, signature: str, max_age_s: float = 300
) -> bool:
    """Tell whether a webhook request is genuine and recent (for receivers)."""
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(time.time() - sent) > max_age_s:
        return False
    return hmac.compare_digest(sign(body, secret, sent), signature)


def _subject(alert: dict[str, Any]) -> str:
    what = alert.get("queue") if alert["kind"] == "queue" else f"{alert['queue']}/{alert['name']}"
    return f"{alert['kind']} {what} is {alert['state']} (was {alert['previous']})"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: the 3xx comes back as an HTTPError, a failed delivery."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# urllib's usual handlers (proxies from the environment, HTTPS with verification), less redirects.
_OPENER = urllib.request.build_opener(_NoRedirects)
SCHEMES = ("http", "https")


def _send(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> int:
    """POST `body` (in a thread: urllib blocks); return the status, a redirect's included."""
    if urllib.parse.urlsplit(url).scheme not in SCHEMES:
        raise ValueError(f"the webhook URL must be http or https, not {url!r}")
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)


async def post(
    url: str,
    secret: str,
    alert: dict[str, Any],
    attempts: int,
    backoff_s: float,
    timeout_s: float,
) -> bool:
    """POST `alert` with an event id (the alert's `event_id`, else a new one), signed, retrying
    with backoff; return whether a receiver took it."""
    event_id = str(alert.get("event_id") or uuid.uuid4().hex)
    body = orjson.dumps({**alert, "event_id": event_id})
    delay_s = backoff_s
    for attempt in range(1, attempts + 1):
        now = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "X-Jobsite-Event-Id": event_id,
            "X-Jobsite-Timestamp": str(now),
            "X-Jobsite-Signature": sign(body, secret, now),
        }
        try:
            status = await asyncio.to_thread(_send, url, body, headers, timeout_s)
            if 200 <= status < 300:
                return True
            redirect = " (a redirect, not followed)" if 300 <= status < 400 else ""
            error = f"status {status}{redirect}"
        except (OSError, ValueError) as exc:  # refused, timed out, unreachable, a bad URL
            error = repr(exc)
        log.warning(
            "webhook delivery failed event_id=%s attempt=%d of=%d error=%r",
            event_id,
            attempt,
            attempts,
            error,
        )
        if attempt < attempts:
            await asyncio.sleep(delay_s)
            delay_s *= 2
    log.error("webhook alert dropped event_id=%s subject=%r", event_id, _subject(alert))
    return False


def _spawn(coro: Any) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(coro)
    _PENDING.add(task)
    task.add_done_callback(_PENDING.discard)
    return task


def deliver(alert: dict[str, Any], conf: dict[str, Any]) -> list[asyncio.Task[Any]]:
    """Start the deliveries of one alert in the background (call it on an event loop), as the
    health settings `conf` say; return their tasks (nobody needs to wait for them)."""
    tasks = []
    if conf["MAIL_ADMINS"]:
        text = "\n".join([_subject(alert), "", *alert.get("reasons", [])])
        send = sync_to_async(mail_admins, thread_sensitive=False)
        tasks.append(_spawn(send(f"Jobsite: {_subject(alert)}", text, fail_silently=True)))
    if conf["WEBHOOK_URL"]:
        tasks.append(
            _spawn(
                post(
                    conf["WEBHOOK_URL"],
                    str(conf["WEBHOOK_SECRET"]),
                    alert,
                    int(conf["WEBHOOK_ATTEMPTS"]),
                    float(conf["WEBHOOK_BACKOFF_S"]),
                    float(conf["WEBHOOK_TIMEOUT_S"]),
                )
            )
        )
    return tasks
