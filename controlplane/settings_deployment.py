"""Which deployment this is: the repository root, and development or production.

Every other settings module branches on ``PRODUCTION``, so it is decided once, here.
"""

from __future__ import annotations

from pathlib import Path

from controlplane.env import env_choice

BASE_DIR = Path(__file__).resolve().parent.parent

CACHEPLANE_ENV = env_choice("CACHEPLANE_ENV", "development", ("development", "production"))
PRODUCTION = CACHEPLANE_ENV == "production"
