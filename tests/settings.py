"""The test run's settings: the project's own defaults, with a secret key of its own.

Everything else is what users run (DEBUG off, HTTPS cookies...); tests that need plain HTTP
(the test client) get it from the `DJANGO_HTTPS=0` set here, as `bin/run` does.
"""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-" + "k" * 50)
os.environ.setdefault("DJANGO_HTTPS", "0")

from demo.settings import *  # noqa: F403

# Static files straight from the app folders (no collectstatic before in-process tests; the
# browser tests run `bin/run`'s server, which collects them).
WHITENOISE_AUTOREFRESH = True
WHITENOISE_USE_FINDERS = True
