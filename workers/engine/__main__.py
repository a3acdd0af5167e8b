"""``python -m workers.engine``: the same as ``cacheplane worker``."""

from workers.engine.cli import main

raise SystemExit(main())
