#!/usr/bin/env python
"""Django's command-line utility (``cacheplane manage`` wraps it with embedded services)."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from controlplane.cli import run_django_command

    sys.exit(run_django_command(sys.argv))


if __name__ == "__main__":
    main()
