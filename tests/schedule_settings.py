"""Settings of the runworker processes the schedule tests start: tests.settings, plus
JOBSITE["SCHEDULES"] read as JSON from the environment variable JOBSITE_SCHEDULES.
"""

import os

import orjson

from tests.settings import *  # noqa: F403
from tests.settings import JOBSITE

JOBSITE = {**JOBSITE, "SCHEDULES": orjson.loads(os.environ.get("JOBSITE_SCHEDULES", "[]"))}
