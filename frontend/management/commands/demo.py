"""``cacheplane demo``: seed the demo tenants and send a bounded burst of traffic."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from frontend.demo import (
    demo_caches_settle,
    demo_caches_settle_start,
    demo_seed,
    demo_traffic,
    demo_traffic_due,
    demo_traffic_start,
)


class Command(BaseCommand):
    help = (
        "Give the demo tenants people, keys, a budget and caches on both providers, then "
        "send --requests chat completions through the gateway at --url (0: seed only)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--requests", type=int, default=120)
        parser.add_argument("--interval", type=float, default=1.0)
        parser.add_argument("--model", default="cacheplane/ref-tiny")
        parser.add_argument(
            "--first-start",
            action="store_true",
            help="send the traffic only if this data directory never sent it (`cacheplane up`)",
        )
        parser.add_argument(
            "--background",
            action="store_true",
            help="send the traffic from a daemon thread and return (used by `cacheplane up`)",
        )

    def handle(self, *args: str, **options: Any) -> None:
        data_dir = Path(os.environ.get("CACHEPLANE_DATA_DIR", ".cacheplane"))
        data_dir.mkdir(parents=True, exist_ok=True)
        password = os.environ.get("CACHEPLANE_DEMO_PASSWORD") or secrets.token_urlsafe(12)
        from caches.catalog import vllm_models

        served = options["model"] if options["model"] in vllm_models() else None
        seed = demo_seed(data_dir=data_dir, password=password, worker_model=served)
        for slug, people in seed.people.items():
            self.stdout.write(f"{slug}: people {', '.join(people)}; key {seed.keys[slug][:12]}…")
        if seed.created_people:
            # Only for people created now: existing ones keep the password they were
            # created with (printing a fresh one on every restart showed one that fails).
            shown = (
                "(from CACHEPLANE_DEMO_PASSWORD)"
                if os.environ.get("CACHEPLANE_DEMO_PASSWORD")
                else password
            )
            self.stdout.write(
                f"Created demo people {', '.join(seed.created_people)} with password: {shown}"
            )
        else:
            self.stdout.write(
                "Demo people exist already and keep the password printed when they were "
                "created (or CACHEPLANE_DEMO_PASSWORD's value then)."
            )
        self.stdout.write(f"Demo keys in {data_dir / 'demo-keys.json'} (mode 0600).")
        if options["background"]:
            demo_caches_settle_start(worker_model=served)  # re-creates a failed demo cache
        else:
            for label, state in demo_caches_settle(worker_model=served, timeout=60).items():
                self.stdout.write(f"Demo cache {label}: {state}")
        if options["first_start"] and not demo_traffic_due(data_dir=data_dir):
            self.stdout.write(
                "Demo traffic was sent on this data directory's first start; "
                "`cacheplane demo --requests N` sends more."
            )
            options["requests"] = 0
        if options["requests"] > 0 and options["background"]:
            demo_traffic_start(
                base_url=options["url"],
                keys=seed.keys,
                model=options["model"],
                requests=options["requests"],
                interval=options["interval"],
            )
            self.stdout.write(
                f"Demo traffic: {options['requests']} requests, one per {options['interval']} s."
            )
        elif options["requests"] > 0:
            ok = demo_traffic(
                base_url=options["url"],
                keys=seed.keys,
                model=options["model"],
                requests=options["requests"],
                interval=options["interval"],
            )
            self.stdout.write(f"Sent {options['requests']} requests, {ok} succeeded.")
