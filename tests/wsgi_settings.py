"""The demo's settings without Daphne in INSTALLED_APPS: `manage.py runserver` then serves WSGI
and no websocket, as in a project that never added Daphne (tests/serving.py's WSGI variant).
"""

from demo.settings import *  # noqa: F403
from demo.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "daphne"]
