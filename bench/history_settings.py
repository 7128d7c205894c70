"""Settings of the runworker processes of the history fault runs: jobsite.settings, plus
engine settings read as JSON from JOBSITE_ENGINE (e.g. {"EVENTS_MAXLEN": 3000})."""

import os

import orjson

from jobsite.settings import *  # noqa: F403
from jobsite.settings import JOBSITE

JOBSITE = {**JOBSITE, **orjson.loads(os.environ.get("JOBSITE_ENGINE", "{}"))}
