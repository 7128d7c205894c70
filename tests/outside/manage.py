#!/usr/bin/env python
"""A stranger's project that installs Jobsite from its wheel (see tests/test_outside_install.py)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
