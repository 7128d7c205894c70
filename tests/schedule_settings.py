"""Settings of the runworker processes the schedule tests start: tests.settings, plus
JOBSITE["SCHEDULES"] read as JSON from the environment variable JOBSITE_SCHEDULES.
"""

import os

import orjson

from tests.settings import *  # noqa: F403
from tests.settings import JOBSITE

JOBSITE = {**JOBSITE, "SCHEDULES": orjson.loads(os.environ.get("JOBSITE_SCHEDULES", "[]"))}

# A project of its own sets no LOGGING for our loggers (JOBSITE_PLAIN_LOGGING=1): as a team's
# first settings.py has none.
if os.environ.get("JOBSITE_PLAIN_LOGGING"):
    LOGGING = {"version": 1, "disable_existing_loggers": False}
