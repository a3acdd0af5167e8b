"""Denial audit: every refusal is recorded in its own transaction, so it survives rollback.

A refusal changes nothing, so its audit row must not share the fate of the caller's
transaction: a cache-create refused by a budget raises inside ``cache_create``'s
``atomic()``, which rolls back everything written there, the denial included, if it
were written on the same connection. ``audit_denial`` therefore writes

* on the caller's connection in its own short transaction when no transaction is open
  (the common case: REST, console, WebSocket and gateway gates run before any write);
* otherwise on a second connection (a worker thread: Django connections are per
  thread), which commits on its own.

Hazard (self-deadlock): ``audit_record`` holds the chain's head row lock until the
caller's transaction ends. If that transaction already appended to the same chain, the
second connection would wait for a lock that our own thread holds while our thread
waits for it. We detect that case by comparing the head as the caller sees it (its own
uncommitted append included) with the committed head the second connection sees: if
they differ, the caller holds the lock, and we do not wait; the second connection
queues on the lock and appends the denial as soon as the caller commits *or rolls
back*. Any other lock wait (another transaction on the chain, a lock the caller holds
on a row the insert's foreign-key check needs) is bounded by ``DENIAL_WAIT_SECONDS``,
after which the write completes on its own once that lock is released.

Under Django's ``TestCase`` wrapper (every row is uncommitted test data a second
connection cannot see) denials are written in-line; tests of rollback survival use
``transaction=True``, and call ``audit_denials_wait()`` before reading.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from django.db import connection, connections, transaction

from audit.models import AuditChainHead, Outcome
from audit.services import audit_record, chain_for
from tenants.actor import Actor
from tenants.models import Tenant

logger = logging.getLogger(__name__)

#: How long a caller inside a transaction waits for its denial to commit elsewhere.
DENIAL_WAIT_SECONDS = 1.0

# Reads of the committed head never wait on a lock, so a small pool serves them. Each
# append runs on a thread of its own: an append may wait (on purpose) until the caller's
# transaction ends, and must never hold up the reads or another caller's append.
_reader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="audit-denial-read")
_pending: set[Future[Any]] = set()
_pending_lock = threading.Lock()


def audit_denial(
    *,
    actor: Actor,
    action: str,
    tenant: Tenant | None,
    target_type: str = "",
    target_id: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Record one denial (outcome ``denied``) so that no rollback can erase it.

    Never raises for the second-connection path (a failure is logged and the event is
    written in-line instead, best effort); in-line writes raise like ``audit_record``.
    """
    event: dict[str, Any] = {
        "actor": actor,
        "action": action,
        "tenant": tenant,
        "outcome": Outcome.DENIED,
        "target_type": target_type,
        "target_id": str(target_id),
        "details": details or {},
    }
    if not _inside_caller_transaction() or _inside_test_case():
        audit_record(**event)
        return
    chain = chain_for(tenant)
    caller_seq = _head_seq(chain)
    committed_seq = _reader.submit(_on_own_connection, _committed_head_seq, chain).result()
    future = _spawn(_append_on_own_connection, event)
    if caller_seq != committed_seq:
        # Our transaction holds the head lock: the append waits for it to end.
        return
    try:
        written = future.result(timeout=DENIAL_WAIT_SECONDS)
    except FutureTimeout:
        return  # queued on someone's lock; it commits as soon as that is released
    if not written:
        audit_record(**event)


def audit_denials_wait(timeout: float = 10.0) -> None:
    """Block until every denial queued on the second connection is written (tests)."""
    with _pending_lock:
        pending = list(_pending)
    for future in pending:
        try:
            future.result(timeout=timeout)
        except FutureTimeout:
            logger.warning("audit denial still pending after %.1fs", timeout)


def _inside_caller_transaction() -> bool:
    return connection.in_atomic_block


def _inside_test_case() -> bool:
    return any(getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)


def _head_seq(chain: str) -> int | None:
    return AuditChainHead.objects.filter(chain=chain).values_list("seq", flat=True).first()


_T = TypeVar("_T")


def _spawn(fn: Callable[..., _T], *args: object) -> Future[_T]:
    """Run ``fn`` on a new daemon thread (its own connection); track it until done."""
    future: Future[_T] = Future()

    def run() -> None:
        try:
            future.set_result(_on_own_connection(fn, *args))
        except BaseException as error:  # delivered to whoever waits on the future
            future.set_exception(error)

    with _pending_lock:
        _pending.add(future)
    future.add_done_callback(_forget)
    threading.Thread(target=run, name="audit-denial-append", daemon=True).start()
    return future


def _forget(future: Future[Any]) -> None:
    with _pending_lock:
        _pending.discard(future)


def _on_own_connection(fn: Callable[..., _T], *args: object) -> _T:
    # A worker thread has its own Django connection; close it so none leaks.
    try:
        return fn(*args)
    finally:
        connections.close_all()


def _committed_head_seq(chain: str) -> int | None:
    return _head_seq(chain)


def _append_on_own_connection(event: dict[str, Any]) -> bool:
    try:
        with transaction.atomic():
            audit_record(**event)
    except Exception:
        logger.exception("audit denial could not be written on its own connection")
        return False
    return True
