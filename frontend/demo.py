"""``cacheplane demo``: demo tenants with people, keys, budgets and caches on both
providers, plus a small bounded traffic generator through the gateway, so a first run
shows a console that moves within a minute.

Everything is created through the same services the API and the console call (audited,
as the platform admin at the command line) and is idempotent: running it again reuses
what exists. The demo keys' secrets are kept in ``<data dir>/demo-keys.json`` (mode
0600) so a restart can generate traffic again; they are demo credentials only.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from django.db import OperationalError

from tenants.actor import Actor
from tenants.models import Principal, RoleBinding, Tenant

if TYPE_CHECKING:
    from caches.services.lifecycle import CacheSpec

logger = logging.getLogger(__name__)

VERTEX_DEMO_MODEL = "gemini-2.5-flash"
DEMO_POOL = "demo"
# Stable prefixes (a policy manual, a support playbook) so repeated requests reuse them.
PREFIXES = {
    "acme-legal": "You are Acme Legal's contracts assistant. Cite the clause you rely on. "
    + "Clause {n}: the supplier indemnifies the customer against third-party claims. " * 60,
    "globex-support": "You are Globex's support agent. Follow the playbook exactly. "
    + "Step {n}: confirm the customer's account, then restate the problem in one line. " * 60,
}
QUESTIONS = (
    "Summarise the indemnity obligations.",
    "What happens if the supplier is late?",
    "Draft a two-line reply to the customer.",
    "Which clause covers termination?",
)


@dataclass
class DemoSeed:
    """What the demo created or found: per tenant slug, its key secret and people."""

    keys: dict[str, str] = field(default_factory=dict)
    people: dict[str, list[str]] = field(default_factory=dict)
    created_people: list[str] = field(default_factory=list)
    caches: int = 0


def _admin() -> Principal:
    binding = (
        RoleBinding.objects.filter(tenant__isnull=True, role__name="platform.admin")
        .select_related("principal")
        .order_by("principal__date_joined")
        .first()
    )
    if binding is None:
        raise RuntimeError("No platform admin yet: run `cacheplane bootstrap` first.")
    return binding.principal


def _prices(actor: Actor) -> None:
    from billing.models import ModelPrice, PoolPrice
    from billing.services.prices import model_price_create, pool_price_create

    if not ModelPrice.objects.filter(provider="vertex", model=VERTEX_DEMO_MODEL).exists():
        model_price_create(
            actor=actor,
            provider="vertex",
            model=VERTEX_DEMO_MODEL,
            rates={
                "input_per_mtok": Decimal("0.30"),
                "cached_input_per_mtok": Decimal("0.03"),
                "output_per_mtok": Decimal("2.50"),
                "storage_per_mtok_hour": Decimal("1.00"),
            },
            source="demo: Vertex AI list price (cloud.google.com/vertex-ai/generative-ai/pricing)",
        )
    if not PoolPrice.objects.filter(pool=DEMO_POOL).exists():
        pool_price_create(
            actor=actor,
            pool=DEMO_POOL,
            rates={
                "gpu_hour_usd": Decimal("2.50"),
                "prefill_tokens_per_gpu_second": Decimal("5000"),
                "decode_tokens_per_gpu_second": Decimal("80"),
                "kv_blocks_per_gpu": 4096,
            },
            source="demo: an assumed GPU-hour price for the reference pool",
        )


def _person(actor: Actor, username: str, password: str) -> tuple[Principal, bool]:
    """The demo person (created with ``password`` when missing) and whether it was new:
    an existing person keeps the password it was created with."""
    from tenants.services.tenants import human_principal_create

    existing = Principal.objects.filter(username=username).first()
    if existing is not None:
        return existing, False
    return human_principal_create(actor=actor, username=username, password=password), True


def _bind(actor: Actor, tenant: Tenant, principal: Principal, role: str) -> None:
    from tenants.services import iam

    tenant.refresh_from_db(fields=["policy_version"])  # policy_get reads the etag from it
    policy = iam.policy_get(tenant=tenant)
    if any(b.principal_id == principal.pk for b in policy.bindings):
        return
    specs = [
        iam.BindingSpec(role=b.role.name, principal_id=str(b.principal_id), expires_at=b.expires_at)
        for b in policy.bindings
    ]
    specs.append(iam.BindingSpec(role=role, principal_id=str(principal.pk)))
    iam.policy_set(actor=actor, tenant=tenant, etag=policy.etag, bindings=specs)


def _keyfile(data_dir: Path) -> dict[str, str]:
    path = data_dir / "demo-keys.json"
    try:
        keys: dict[str, str] = json.loads(path.read_text())  # written by _save_keys
    except (OSError, ValueError):
        return {}
    return keys


def _save_keys(data_dir: Path, keys: dict[str, str]) -> None:
    path = data_dir / "demo-keys.json"
    path.write_text(json.dumps(keys, indent=2))
    path.chmod(0o600)


def _key(actor: Actor, tenant: Tenant, account: Principal, known: str | None) -> str:
    from tenants.errors import ApiKeyRejected
    from tenants.services.keys import api_key_authenticate, api_key_create

    if known:
        try:
            api_key_authenticate(known)
            return known
        except ApiKeyRejected:
            pass
    return api_key_create(actor=actor, tenant=tenant, name="demo-app", principal=account).plaintext


def _cache_specs(tenant: Tenant, worker_model: str | None) -> list[CacheSpec]:
    from caches.services import lifecycle

    specs = [("playbook-vertex", "vertex", VERTEX_DEMO_MODEL)]
    if worker_model:
        specs.append(("playbook-vllm", "vllm", worker_model))
    text = PREFIXES.get(tenant.slug, PREFIXES["acme-legal"]).format(n=1)
    return [
        lifecycle.CacheSpec(
            name=name,
            provider=provider,
            model=model,
            content={"system_instruction": text, "tools": [], "documents": []},
            ttl_seconds=4 * 3600,
            ttl_policy="sliding",
            replication_factor=1,
            prewarm_cron="",
        )
        for name, provider, model in specs
    ]


def _caches(actor: Actor, tenant: Tenant, worker_model: str | None) -> int:
    from caches.services import lifecycle
    from controlplane.errors import DomainError

    made = 0
    for spec in _cache_specs(tenant, worker_model):
        name = spec.name
        for attempt in range(3):
            try:
                lifecycle.cache_create(tenant=tenant, actor=actor, spec=spec, idempotency_key=None)
                made += 1
                break
            except DomainError as exc:  # e.g. a live cache of that name already exists
                logger.info("demo: cache %s on %s skipped: %s", name, tenant.slug, exc.message)
                break
            except OperationalError:
                # Seen once on a first start: a deadlock between cache_create and the Celery
                # task of the cache created just before (both touch the tenant row); the
                # database rolled this one back, so trying again is safe.
                if attempt == 2:
                    raise
    return made


def demo_seed(*, data_dir: Path, password: str, worker_model: str | None) -> DemoSeed:
    """Give each demo tenant an admin, a developer, a service account with a key, a budget,
    a tenant-wide rate limit and caches on both providers (vLLM only when ``worker_model``
    is served)."""
    from billing.selectors.budgets import budget_list
    from billing.services.budget_crud import budget_create
    from gateway.selectors import rate_limit_list
    from gateway.services import rate_limit_create
    from tenants.selectors import service_account_list
    from tenants.services.bootstrap import DEMO_TENANTS, demo_tenants_ensure
    from tenants.services.iam import service_account_create

    actor = Actor.cli(principal=_admin())
    demo_tenants_ensure()
    _prices(actor)
    known = _keyfile(data_dir)
    seed = DemoSeed()
    for slug, _name in DEMO_TENANTS:
        tenant = Tenant.objects.get(slug=slug)
        people = []
        for suffix, role in (("admin", "tenant.admin"), ("dev", "tenant.developer")):
            person, created = _person(actor, f"{slug}-{suffix}", password)
            if created:
                seed.created_people.append(person.username)
            _bind(actor, tenant, person, role)
            people.append(person.username)
        seed.people[slug] = people
        account = service_account_list(tenant=tenant).filter(username=f"sa.{slug}.demo-app").first()
        if account is None:
            account = service_account_create(actor=actor, tenant=tenant, name="demo-app")
        _bind(actor, tenant, account, "tenant.developer")
        seed.keys[slug] = _key(actor, tenant, account, known.get(slug))
        if not budget_list(tenant=tenant).exists():
            budget_create(
                actor=actor, tenant=tenant, name="monthly", period="month", limit_micros=25_000_000
            )
        if not rate_limit_list(tenant=tenant).exists():
            rate_limit_create(
                tenant=tenant,
                actor=actor,
                api_key_id=None,
                values={"requests_per_minute": 600, "tokens_per_minute": 500_000},
            )
        seed.caches += _caches(actor, tenant, worker_model)
    _save_keys(data_dir, seed.keys)
    return seed


DEMO_CACHE_RETRIES = 2


def demo_caches_settle(
    *, worker_model: str | None, timeout: float = 120.0, poll: float = 2.0
) -> dict[str, str]:
    """Follow the demo caches until each is active; re-create one that failed.

    A first start races its providers (the Vertex emulator or the reference worker may
    still be starting when the first creation runs out of retries), so a failed demo cache
    is created again, up to ``DEMO_CACHE_RETRIES`` times, through the same service. Bounded
    by ``timeout``; returns ``"<tenant>/<cache>" -> state`` as last seen.
    """
    from caches.models import CacheObject, CacheState
    from caches.services import lifecycle
    from controlplane.errors import DomainError
    from tenants.services.bootstrap import DEMO_TENANTS

    actor = Actor.cli(principal=_admin())
    retries: dict[str, int] = {}
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while True:
        pending = False
        for slug, _name in DEMO_TENANTS:
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                continue
            for spec in _cache_specs(tenant, worker_model):
                label = f"{slug}/{spec.name}"
                latest = (
                    CacheObject.objects.filter(tenant=tenant, name=spec.name)
                    .order_by("-created_at")
                    .first()
                )
                state = latest.state if latest else "missing"
                seen[label] = state
                if state in (CacheState.FAILED, "missing"):
                    if retries.get(label, 0) >= DEMO_CACHE_RETRIES:
                        continue  # given up on: the log says why
                    retries[label] = retries.get(label, 0) + 1
                    logger.warning("demo: cache %s is %s; creating it again", label, state)
                    try:
                        lifecycle.cache_create(
                            tenant=tenant, actor=actor, spec=spec, idempotency_key=None
                        )
                    except DomainError as exc:
                        logger.warning("demo: cache %s not re-created: %s", label, exc.message)
                elif state not in (CacheState.PENDING, CacheState.CREATING):
                    continue  # active, or moved on by someone (refreshing, evicted...)
                pending = True
        if not pending or time.monotonic() >= deadline:
            return seen
        time.sleep(poll)  # polling the cache rows the Celery worker moves along


def _demo_request(n: int, slug: str, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Request ``n`` of the demo: through the tenant's demo cache (three in four on the
    vLLM cache, one in four on the Vertex one), and the same prompt without a cache for
    when that cache is not live yet (the dashboard moves from the first minute anyway)."""
    question = {"role": "user", "content": QUESTIONS[n % len(QUESTIONS)]}
    system = {"role": "system", "content": PREFIXES[slug].format(n=1)}
    if n % 4 == 3:
        cached = {"model": VERTEX_DEMO_MODEL, "cache": "playbook-vertex", "messages": [question]}
        plain = {"model": VERTEX_DEMO_MODEL, "messages": [system, question]}
    else:
        cached = {"model": model, "cache": "playbook-vllm", "messages": [question]}
        plain = {"model": model, "messages": [system, question]}
    return {**cached, "max_tokens": 8}, {**plain, "max_tokens": 8}


def demo_traffic(
    *, base_url: str, keys: dict[str, str], model: str, requests: int, interval: float
) -> int:
    """Send ``requests`` chat completions through the gateway, one every ``interval``
    seconds, alternating tenants; returns how many succeeded. Bounded by design."""
    ok = 0
    slugs = sorted(keys)
    if not slugs:
        return 0
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for n in range(requests):
            slug = slugs[n % len(slugs)]
            cached, plain = _demo_request(n // len(slugs), slug, model)
            headers = {"Authorization": f"Bearer {keys[slug]}"}
            try:
                r = client.post("/v1/chat/completions", json=cached, headers=headers)
                if r.status_code in (400, 404):  # the cache is not live (yet), or no worker
                    r = client.post("/v1/chat/completions", json=plain, headers=headers)
                ok += r.status_code == 200
            except httpx.HTTPError as exc:
                logger.info("demo traffic: %s", exc)
            time.sleep(interval)  # pacing of a bounded demo load, not waiting for work
    return ok


TRAFFIC_MARKER = "demo-traffic-sent"


def demo_traffic_due(*, data_dir: Path) -> bool:
    """True until the demo's first traffic burst was started from ``data_dir``; marks it.

    ``cacheplane up`` sends the demo burst on the first start only: a restart of the same
    data directory would otherwise book another 600 requests on the demo budgets."""
    marker = data_dir / TRAFFIC_MARKER
    if marker.exists():
        return False
    marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
    return True


def demo_caches_settle_start(*, worker_model: str | None) -> threading.Thread:
    """Run ``demo_caches_settle`` in a daemon thread (it dies with ``cacheplane up``)."""

    def run() -> None:
        from django.db import connection

        try:
            states = demo_caches_settle(worker_model=worker_model)
            logger.info("demo caches: %s", states)
        except Exception:
            logger.exception("demo: following the demo caches failed")
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="cacheplane-demo-caches", daemon=True)
    thread.start()
    return thread


def demo_traffic_start(
    *, base_url: str, keys: dict[str, str], model: str, requests: int = 600, interval: float = 1.0
) -> threading.Thread:
    """Run ``demo_traffic`` in a daemon thread (it dies with ``cacheplane up``)."""
    thread = threading.Thread(
        target=demo_traffic,
        kwargs={
            "base_url": base_url,
            "keys": keys,
            "model": model,
            "requests": requests,
            "interval": interval,
        },
        name="cacheplane-demo-traffic",
        daemon=True,
    )
    thread.start()
    return thread
