"""What the history benchmark fills: queues, tasks, errors, and the SQL that makes the rows.

One statement per chunk of job numbers `n` in [a, b) makes the job rows (each with its state
changes in `transitions`, as the mirror keeps them) and their search texts on the server
(`generate_series`, a materialized CTE, a data-modifying CTE per table), so nothing crosses the
wire but the statement. Job `n` is submitted at about
`start_ms + n * step_ms`: ids sort by time (UUIDv7s in 32 hex digits as
engine.keys.new_job_id makes them: 12 hex digits of the submit time in ms, version 7,
pseudo-random bits), and the newest `live` jobs are still live (submitted, started, scheduled).
"""

from __future__ import annotations

QUEUES = ("default", "emails", "payments", "reports", "media")
_TASKS_BY_QUEUE = {
    "default": (
        "shop.tasks.sync_inventory",
        "shop.tasks.update_search_index",
        "shop.tasks.recalculate_cart",
        "shop.tasks.expire_coupons",
        "shop.tasks.import_catalog",
        "shop.tasks.notify_webhook",
        "shop.tasks.refresh_prices",
        "shop.tasks.cleanup_sessions",
    ),
    "emails": (
        "mail.tasks.send_receipt",
        "mail.tasks.send_welcome",
        "mail.tasks.send_password_reset",
        "mail.tasks.send_shipping_update",
        "mail.tasks.send_newsletter",
        "mail.tasks.send_invoice",
        "mail.tasks.send_review_request",
        "mail.tasks.send_cart_reminder",
    ),
    "payments": (
        "billing.tasks.charge_card",
        "billing.tasks.refund_order",
        "billing.tasks.capture_payment",
        "billing.tasks.sync_payouts",
        "billing.tasks.renew_subscription",
        "billing.tasks.retry_dunning",
        "billing.tasks.issue_credit",
        "billing.tasks.reconcile_ledger",
    ),
    "reports": (
        "reports.tasks.daily_sales",
        "reports.tasks.export_orders_csv",
        "reports.tasks.stock_forecast",
        "reports.tasks.tax_summary",
        "reports.tasks.customer_cohorts",
        "reports.tasks.funnel_stats",
        "reports.tasks.vendor_statement",
        "reports.tasks.audit_trail",
    ),
    "media": (
        "media.tasks.resize_image",
        "media.tasks.transcode_video",
        "media.tasks.generate_thumbnail",
        "media.tasks.scan_upload",
        "media.tasks.extract_colors",
        "media.tasks.watermark",
        "media.tasks.purge_cdn",
        "media.tasks.optimize_pdf",
    ),
}
# Task t runs on queue t % 5; tasks are skewed (task 0 is the busiest: floor(40 * r^2)).
TASKS = tuple(_TASKS_BY_QUEUE[QUEUES[t % 5]][t // 5] for t in range(40))
# (exception, message); {a} a 4-digit number, {b} an order number.
ERRORS = (
    ("shop.errors.PaymentDeclined", "card {a} declined for order {b}"),
    ("httpx.ReadTimeout", "timed out reading https://api.partner.example/v2/orders/{b}"),
    ("shop.errors.OutOfStock", "sku SKU-{a} out of stock for order {b}"),
    ("smtplib.SMTPServerDisconnected", "connection unexpectedly closed after {a} ms"),
)
WORKERS = tuple(f"worker-{h}:{1000 + p}:{h:02x}{p:02x}cafe" for h in range(1, 5) for p in (1, 2))
_FRAME = (
    '  File "/srv/app/{mod}.py", line {line}, in {fn}\n'
    "    result = await self.{fn}(order_id={{b}}, attempt=attempt, timeout=timeout_s)\n"
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        _FRAME.format(mod=m, line=40 + 17 * i, fn=f)
        for i, (m, f) in enumerate(
            [
                ("engine/running/runner", "run_task"),
                ("shop/tasks", "charge_card"),
                ("shop/payments/gateway", "charge"),
                ("shop/payments/client", "post"),
                ("shop/payments/retry", "with_retries"),
                ("shop/payments/client", "send"),
                ("httpx/_client", "send_single_request"),
                ("shop/payments/gateway", "check_response"),
                ("shop/payments/errors", "raise_for_code"),
                ("shop/payments/errors", "declined"),
            ]
        )
    )
    + "shop.errors.PaymentDeclined: card declined for order {b} (code 05, do not honor)\n"
)
# A user value in the arguments (about 1 job in 10,000 has it) and text that occurs nowhere.
ARGS_HIT = "user-4567"
NO_MATCH = "zzqx-no-such-thing"
LIVE_FRACTION = 1 / 5000

_MS = "to_timestamp(({0}) / 1000.0)"

_SERIES = """
s AS MATERIALIZED (
  SELECT n,
    (%(start_ms)s + floor(n * %(step_ms)s + random() * %(step_ms)s))::bigint AS sub_ms,
    random() AS r,
    floor(40 * power(random(), 2))::int AS t,
    floor(random() * 10000)::int AS u,
    (5 + floor(power(random(), 3) * 2000))::bigint AS wait_ms,
    (20 + floor(power(random(), 2) * 5000))::bigint AS run_ms
  FROM generate_series(%(a)s::bigint, %(b)s::bigint - 1) AS n
)"""

_STATE = """CASE
      WHEN n >= %(live_from)s THEN (ARRAY['submitted', 'started', 'scheduled'])[mod(n, 3) + 1]
      WHEN r < 0.92 THEN 'completed' WHEN r < 0.96 THEN 'failed'
      WHEN r < 0.975 THEN 'cancelled' WHEN r < 0.985 THEN 'expired'
      WHEN r < 0.993 THEN 'stalled' ELSE 'dropped' END"""

_JOBS = f"""
j0 AS (
  SELECT s.*,
    lpad(to_hex(sub_ms), 12, '0') || '7' || substr(md5(n::text), 1, 3)
      || substr('89ab', mod(n, 4)::int + 1, 1) || substr(md5(n::text), 4, 15) AS id,
    (%(tasks)s::text[])[t + 1] AS task,
    (%(queues)s::text[])[mod(t, 5) + 1] AS queue,
    {_STATE} AS state,
    '[' || mod(n, 100000) || ',"user-' || u || '",{{"sku":"SKU-'
      || lpad(mod(n * 7, 1000000)::text, 6, '0') || '"}}]' AS args_t,
    '{{"source":"' || (ARRAY['api', 'web', 'cron', 'import'])[mod(n, 4) + 1]
      || '","priority":"' || (ARRAY['normal', 'high'])[mod(n, 2) + 1] || '"}}' AS kwargs_t,
    (%(excs)s::text[])[mod(n, 4) + 1] AS exc,
    replace(replace((%(msgs)s::text[])[mod(n, 4) + 1], '{{a}}', (1000 + mod(n * 13, 9000))::text),
      '{{b}}', mod(n, 1000000)::text) AS msg,
    (%(workers)s::text[])[mod(n, 8) + 1] AS wk
  FROM s
),
j AS (
  SELECT j0.*,
    CASE WHEN state IN ('submitted', 'scheduled', 'cancelled', 'expired') THEN NULL
      ELSE sub_ms + wait_ms END AS start_ms,
    CASE WHEN state IN ('submitted', 'scheduled', 'started') THEN NULL
      WHEN state IN ('cancelled', 'expired') THEN sub_ms + wait_ms
      ELSE sub_ms + wait_ms + run_ms END AS done_ms,
    CASE state WHEN 'failed' THEN left('error: ' || msg, 200)
      WHEN 'cancelled' THEN 'cancelled by user' WHEN 'expired' THEN 'deadline passed'
      WHEN 'stalled' THEN 'Shutdown: stopped on shutdown'
      WHEN 'dropped' THEN 'Dropped: task no longer registered' ELSE '' END AS err
  FROM j0
),
jobs AS MATERIALIZED (
  SELECT j.*,
    (CASE WHEN start_ms IS NULL THEN 0 ELSE 1 END) + (CASE WHEN done_ms IS NULL THEN 0 ELSE 1 END)
      AS last_k,
    CASE WHEN start_ms IS NULL THEN '' ELSE wk END AS worker
  FROM j
)"""

_ERRORS_JSON = """CASE WHEN state = 'failed' THEN jsonb_build_array(jsonb_build_object(
      'attempt', 1, 'type', 'error', 'exception', exc, 'message', msg, 'at_ms', done_ms,
      'traceback', replace(%(traceback)s, '{b}', mod(n, 1000000)::text)))
    ELSE '[]'::jsonb END"""

# As jobsite.jobs.history.rows.search_text makes it from the hash's JSON text (compact).
_SEARCH = """lower(left(task || ' ' || args_t || ' ' || kwargs_t
      || CASE WHEN state = 'failed' THEN ' ' || exc || ': ' || msg ELSE '' END, 2000))"""

_EVENT_ID = "lpad(({ms})::text, 15, '0') || '-' || lpad((n * 3 + {k})::text, 8, '0')"

# The state changes of a job as jobsite.jobs.history.rows.transition records them, oldest first.
_TRANSITIONS = f"""(
    SELECT jsonb_agg(jsonb_build_object('id', {_EVENT_ID.format(ms="e.ms", k="e.k")},
        'from', e.f, 'to', e.t, 'at_ms', e.ms, 'attempt', e.att, 'worker', e.w,
        'error', e.err) ORDER BY e.k)
    FROM (VALUES
      (0, 'unsubmitted', CASE WHEN state = 'scheduled' THEN 'scheduled' ELSE 'submitted' END,
        sub_ms, 0, '', ''),
      (1, 'submitted', CASE WHEN start_ms IS NULL THEN state ELSE 'started' END,
        coalesce(start_ms, done_ms), CASE WHEN start_ms IS NULL THEN 0 ELSE 1 END, worker,
        CASE WHEN start_ms IS NULL THEN err ELSE '' END),
      (2, 'started', state, done_ms, 1, worker, err)
    ) AS e(k, f, t, ms, att, w, err)
    WHERE e.ms IS NOT NULL AND (e.k < 2 OR start_ms IS NOT NULL))"""

_INSERT_JOBS = f"""
ins AS (
  INSERT INTO jobsite_jobrecord (id, queue, task, version, state, priority, attempt, args,
    kwargs, result, errors, progress, progress_message, worker, sent_at, submitted_at,
    claimed_at, started_at, retried_at, heartbeat_at, completed_at, run_at, last_event_id,
    updated_at, transitions)
  SELECT id, queue, task, 1, state, CASE WHEN mod(n, 20) = 0 THEN 10 ELSE 0 END,
    CASE WHEN start_ms IS NULL THEN 0 ELSE 1 END, args_t::jsonb, kwargs_t::jsonb,
    CASE WHEN state = 'completed'
      THEN jsonb_build_object('ok', true, 'items', mod(n, 50)) END,
    {_ERRORS_JSON}, NULL, '', worker, {_MS.format("sub_ms")}, {_MS.format("sub_ms")},
    {_MS.format("start_ms")}, {_MS.format("start_ms")}, NULL, {_MS.format("start_ms")},
    {_MS.format("done_ms")},
    CASE WHEN state = 'scheduled' THEN {_MS.format("sub_ms + 3600000")} END,
    {_EVENT_ID.format(ms="coalesce(done_ms, start_ms, sub_ms)", k="last_k")},
    {_MS.format("coalesce(done_ms, start_ms, sub_ms)")}, {_TRANSITIONS}
  FROM jobs
),
found AS (
  INSERT INTO jobsite_jobsearch (job_id, text) SELECT id, {_SEARCH} FROM jobs
)"""

# One statement a chunk; it returns how many state changes (events) it made.
CHUNK_SQL = (
    "WITH "
    + ",".join([_SERIES, _JOBS, _INSERT_JOBS])
    + "\nSELECT coalesce(sum(last_k + 1), 0) FROM jobs"
)

# Per queue and task, and the totals rows (queue and task ""), as the mirror keeps them.
MINUTES_SQL = """
INSERT INTO jobsite_rollupcount (span_s, start, queue, task, series, bucket, count)
SELECT span_s, start, coalesce(queue, ''), coalesce(task, ''), series, 0, count(*)
FROM (
  SELECT s.span_s, to_timestamp((t ->> 'at_ms')::bigint / 1000 / s.span_s * s.span_s) AS start,
    queue, task, t ->> 'to' AS series
  FROM jobsite_jobrecord CROSS JOIN LATERAL jsonb_array_elements(transitions) AS t
  CROSS JOIN (VALUES (60), (900), (3600)) AS s (span_s)
) AS e
GROUP BY GROUPING SETS ((span_s, start, queue, task, series), (span_s, start, series))"""


def chunk_params(a: int, b: int, rows: int, start_ms: int, span_ms: int) -> dict[str, object]:
    """Return the parameters of CHUNK_SQL for job numbers [a, b) of `rows` over `span_ms`."""
    return {
        "a": a,
        "b": b,
        "start_ms": start_ms,
        "step_ms": span_ms / rows,
        "live_from": rows - max(3, int(rows * LIVE_FRACTION)),
        "tasks": list(TASKS),
        "queues": list(QUEUES),
        "excs": [e for e, _ in ERRORS],
        "msgs": [m for _, m in ERRORS],
        "workers": list(WORKERS),
        "traceback": TRACEBACK,
    }
