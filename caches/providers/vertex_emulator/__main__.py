"""Entry point for ``python -m caches.providers.vertex_emulator``."""

import sys

from .cli import main

sys.exit(main())
