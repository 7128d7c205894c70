"""Settings of the runworker processes of the history fault runs: demo.settings, plus
engine settings read as JSON from JOBSITE_ENGINE (e.g. {"EVENTS_MAXLEN": 3000})."""

import os

import orjson

from demo.settings import *  # noqa: F403
from demo.settings import JOBSITE

JOBSITE = {**JOBSITE, **orjson.loads(os.environ.get("JOBSITE_ENGINE", "{}"))}
